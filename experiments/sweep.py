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

from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from rpd.io import sweeps

SHOWN = ["job", "overrides", "status", "skipped", "gamma", "final_selected", "final_best"]


def job_dir() -> Path | None:
    """This hydra job's output directory (None outside hydra)."""
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else None


def link(result, *, status: str, skipped: bool = False, error: str | None = None,
         wandb_id: str | None = None) -> Path | None:
    """Link this hydra job's output directory to its stored run (no-op outside hydra)."""
    where = job_dir()
    if where is None:
        return None
    return sweeps.link_job(where, result, status=status, skipped=skipped, error=error, wandb_id=wandb_id)


def summary_text(sweep_dir: str | Path) -> tuple[str, dict]:
    """The table and the counts line of a finished sweep."""
    df = sweeps.load_sweep(sweep_dir)
    c = sweeps.sweep_counts(df)
    shown = df.assign(overrides=sweeps.swept(df["overrides"]))[SHOWN]
    table = shown.to_string(index=False) if len(df) else "(no jobs)"
    line = (f"sweep {sweep_dir}: {c['total']} jobs, {c['done']} done, {c['skipped']} skipped "
            f"(already stored), {c['failed']} failed")
    failed = df[~df["status"].isin(["ok", "diverged"])]
    errors = [f"  job {r.job}: {r.overrides}: {r.error}" for r in failed.itertuples()]
    return "\n".join([table, line, *errors]), c


class SweepSummary(Callback):
    """At the end of a multirun: print the sweep's table and counts; exit 1 if a job failed."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.exists():  # e.g. a sweep whose jobs all ran elsewhere
            return
        text, counts = summary_text(sweep_dir)
        print(text, flush=True)
        if counts["failed"]:
            raise SystemExit(f"{counts['failed']} of {counts['total']} jobs failed (recorded in the "
                             f"results store; rerun the sweep to retry them, complete jobs are skipped)")
