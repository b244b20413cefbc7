"""Hydra glue for sweeps of ``experiments.train``: each job's output directory linked to the run
it stored, and a summary at the end of a multirun.

- :func:`link` writes ``<job output dir>/result.json`` (and a ``result`` symlink) naming the
  run directory in the results store, its status and whether it was skipped
  (``rpd.io.sweeps.link_job``);
- :class:`SweepSummary` (``hydra.callbacks.sweep_summary`` in configs/train.yaml) prints the
  sweep as a table at the end of a multirun (``rpd.io.sweeps.load_sweep``), with the count of done,
  skipped and failed jobs, and exits non-zero when a job failed (after every job ran).

    python -m experiments.train -m method=pd,localsgd schedule.S=2,4
    python -m rpd.io.sweeps ls multirun/train/<date>/<time>     # the same table later
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import hydra
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rpd.cli import checks, compose_check, specs
from rpd.cli import config as C
from rpd.cli import objectives as objective_of
from rpd.io import sweeps
from rpd.io.atomic import atomic_write
from rpd.io.sweep_table import unequal_time
from rpd.results import unit_name

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


def job_dir() -> Path | None:
    """This hydra job's output directory (None outside hydra)."""
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else None


def link(
    result, *, status: str, skipped: bool = False, error: str | None = None, wandb_id: str | None = None
) -> Path | None:
    """Link this hydra job's output directory to its stored run (no-op outside hydra)."""
    where = job_dir()
    if where is None:
        return None
    return sweeps.link_job(where, result, status=status, skipped=skipped, error=error, wandb_id=wandb_id)


def summary_text(sweep_dir: str | Path) -> tuple[str, dict]:
    """The table and the counts line of a finished sweep."""
    df = sweeps.load_sweep(sweep_dir)
    c = sweeps.sweep_counts(df)
    varied = [c for c in df.columns if c not in sweeps.SWEEP_COLUMNS]  # the swept overrides
    flagged = ["gamma_flag"] if df["gamma_flag"].notna().any() else []
    shown = df.assign(overrides=sweeps.swept(df["overrides"]))[SHOWN[:2] + varied + SHOWN[2:] + flagged]
    table = shown.to_string(index=False) if len(df) else "(no jobs)"
    line = (
        f"sweep {sweep_dir}: {c['total']} jobs, {c['done']} done, {c['skipped']} skipped "
        f"(already stored), {c['failed']} failed"
    )
    failed = df[~df["status"].isin(["ok", "diverged"])]
    errors = [f"  job {r.job}: {r.overrides}: {r.error}" for r in failed.itertuples()]
    note = unequal_time(df) if len(df) else None
    return "\n".join([table, *([note] if note else []), line, *errors]), c


class SweepSummary(Callback):
    """At the start of a multirun: write every job's overrides (``rpd.io.sweeps.write_jobs``, so
    a sweep stopped early lists the jobs it never ran). At the end: print the sweep's table and
    counts; exit 1 if a job failed."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        sweeps.write_jobs(config.hydra.sweep.dir, job_overrides(config))

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.exists():  # e.g. a sweep whose jobs all ran elsewhere
            return
        text, counts = summary_text(sweep_dir)
        print(text, flush=True)
        if counts["failed"]:
            raise SystemExit(
                f"{counts['failed']} of {counts['total']} jobs failed (recorded in the "
                f"results store; rerun the sweep to retry them, complete jobs are skipped)"
            )


def job_overrides(config: DictConfig) -> list[list[str]]:
    """The override lists of every job of a multirun, as hydra's basic sweeper expands them
    (the command line's and ``hydra.sweeper.params``)."""
    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
    parsed = OverridesParser.create().parse_overrides(arguments)
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


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
    """The sweep's ``{"T", "rule"}`` written by :class:`EqualTime`, None when there is none."""
    path = Path(sweep_dir) / EQUAL_TIME
    return json.loads(path.read_text()) if path.exists() else None


class EqualTime(Callback):
    """Before a multirun of ``experiments.train`` (``compare=equal_time``, the default) with no
    ``schedule.T``: compose every job with the run's own search path (:func:`compose_jobs`: a
    schedule added through ``hydra.searchpath`` too), take :func:`sweep_time` and write it to
    ``<sweep dir>/equal_time.json``, which each job reads (``experiments.train``'s main), so
    every row ends at the same simulated time. Printed with the rule that chose it. A job that
    cannot be composed or timed refuses the whole sweep before any job runs (one line, exit 2):
    no table at unequal T."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        if C._value(config.get("compare")) != "equal_time":
            return
        try:
            cfgs = compose_jobs(config)
            T = sweep_time(cfgs) if len(cfgs) >= 2 else None
        except ValueError as exc:
            checks.refuse(ValueError(f"compare=equal_time: {exc} (no job was run)"))
        if T is None or not math.isfinite(T):
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(sweep_dir / EQUAL_TIME, json.dumps({"T": T, "rule": T_RULE}).encode())
        unit = unit_name(C._value(checks.typed(cfgs[0], C.TrainConfig).costs.unit))
        print(
            f"comparing the {len(cfgs)} rows at one simulated time T = {T} {unit} ({T_RULE}); "
            f"compare_T=<time> sets another, compare=equal_n compares after N microbatches",
            flush=True,
        )


def compose_jobs(config: DictConfig) -> list[DictConfig]:
    """Every job of the multirun ``config`` composed as its run composes it: with the command
    line's ``hydra.searchpath`` (hydra applies it only while loading a run's config, so a
    plain ``hydra.compose`` would not find a schedule added there). Raises ValueError naming
    the job that does not compose."""
    search = [o for o in config.hydra.overrides.hydra if o.lstrip("+~").split("=", 1)[0] == "hydra.searchpath"]
    out = []
    for i, job in enumerate(job_overrides(config)):
        try:
            out.append(hydra.compose(config.hydra.job.config_name, overrides=[*search, *job]))
        except (HydraException, OmegaConfBaseException) as exc:
            raise ValueError(f"job {i} ({' '.join(job)}): {compose_check.message(exc, job)}") from None
    return out
