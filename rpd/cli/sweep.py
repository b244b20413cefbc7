"""Sweeps of ``experiments.train``: the table at the end of a multirun and the one simulated time
its rows are compared at. The hydra callbacks that call these are ``experiments.sweep``
(configs/train.yaml); each job links its output directory to the run it stored itself
(``experiments.train``: ``rpd.io.sweeps.link_job`` writes ``result.json`` and a ``result`` symlink).

- :func:`summary_text` is the sweep as a table (``rpd.io.sweeps.load_sweep``), with the count of
  done, skipped and failed jobs (``experiments.sweep.SweepSummary`` prints it at the end of a
  multirun and exits non-zero when a job failed, after every job ran);
- :func:`sweep_time` is the one simulated time T of a sweep's rows (``experiments.sweep.EqualTime``
  writes it to :data:`EQUAL_TIME`, each job reads it with :func:`equal_time`).

    python -m experiments.train -m method=pd,localsgd schedule.S=2,4
    python -m rpd.io.sweeps ls multirun/train/<date>/<time>     # the same table later
"""

from __future__ import annotations

import json
from pathlib import Path

from rpd.cli import checks, footprint, specs
from rpd.cli import config as C
from rpd.cli import objectives as objective_of
from rpd.io import sweeps
from rpd.io.sweep_table import as_text, unequal_time

EQUAL_TIME = "equal_time.json"  # in a sweep directory: the one simulated time T of its rows
T_RULE = "the shortest time any row of the sweep needs for its schedule.N microbatches (protocol (i))"

SHOWN = [
    "job",
    "overrides",
    "schedule",
    "costs",
    "T",
    "time_unit",
    "status",
    "skipped",
    "gamma",
    "rule",
    "final_selected",
    "final_best",
]


def summary_text(sweep_dir: str | Path) -> tuple[str, dict]:
    """The table and the counts line of a finished sweep."""
    df = sweeps.load_sweep(sweep_dir)
    c = sweeps.sweep_counts(df)
    varied = [c for c in df.columns if c not in sweeps.SWEEP_COLUMNS]  # the swept overrides
    flagged = ["gamma_flag"] if df["gamma_flag"].notna().any() else []
    shown = df.assign(overrides=sweeps.swept(df["overrides"]))[SHOWN[:2] + varied + SHOWN[2:] + flagged]
    table = as_text(shown) if len(df) else "(no jobs)"
    line = (
        f"sweep {sweep_dir}: {c['total']} jobs, {c['done']} done, {c['skipped']} skipped "
        f"(already stored), {c['failed']} failed"
    )
    failed = df[~df["status"].isin(["ok", "diverged"])]
    errors = [f"  job {r.job}: {r.overrides}: {r.error}" for r in failed.itertuples()]
    note = unequal_time(df) if len(df) else None
    return "\n".join([table, *([note] if note else []), line, *errors]), c


def sweep_time(cfgs) -> int | None:
    """The simulated time T at which a sweep's rows are compared (``compare_T``): None when
    any row sets ``schedule.T`` or ``compare_T`` itself (the user's), else :data:`T_RULE`: the
    smallest makespan of the rows' timelines for ``schedule.N`` microbatches. Every row runs
    its N microbatches and is read at T (the paper's protocol (i): every curve cut to the
    shortest), so every row has a point at T. Raises ValueError naming the job (its index in
    ``cfgs``) whose config is invalid."""
    typed = [_job(i, checks.typed, c, C.TrainConfig) for i, c in enumerate(cfgs)]
    if any(c.schedule.T is not None or c.compare_T is not None for c in typed):
        return None
    units = sorted({C._value(c.costs.unit) for c in typed})
    if len(units) > 1:
        raise ValueError(
            f"costs.unit: the rows' costs are in different units ({', '.join(units)}), so no one T "
            "compares them: give every row one costs.unit"
        )
    return min((_job(i, _makespan, c) for i, c in enumerate(typed)), default=None)


def _makespan(c) -> int:
    spec = checks.validate(c)
    if not c.objective._target_:  # rpd's objective (a user's is estimated once built, by its job)
        footprint.check_config(c, spec)
    averaging = c.costs.allreduce_alpha or c.costs.allreduce_beta
    obj = objective_of.build_objective(c.objective, specs.objective_blocks(spec)) if averaging else None
    pipeline = spec.pipeline
    return int(pipeline.timeline(obj).T)


def _job(i: int, f, *args):
    try:
        return f(*args)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"job {i}: {exc}") from None


def equal_time(sweep_dir: Path) -> dict | None:
    """The sweep's ``{"T", "rule"}`` written by ``experiments.sweep.EqualTime``, None when there is none."""
    path = Path(sweep_dir) / EQUAL_TIME
    return json.loads(path.read_text()) if path.exists() else None
