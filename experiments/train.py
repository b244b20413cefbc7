"""One training job: an (objective, method, schedule) cell with its whole γ grid vmapped
(:func:`rpd.cli.train.run`, which tests call too).

    python -m experiments.train method=rpd schedule.S=16
    python -m experiments.train -m method=pd,rpd,localsgd schedule.S=2,4,8,16
    python -m experiments.train -m launcher=joblib experiment=e3_nesterov method=localsgd schedule.H=2,5,30
    python -m experiments.train -m method=pipeline schedule=gpipe,1f1b,zb_h1,pipemare costs=unit,b2f_latency
"""

from __future__ import annotations

import logging
import math

import hydra
from omegaconf import DictConfig

from experiments import compose_check, job
from rpd.cli import objectives as objective_of
from rpd.cli import sweep
from rpd.cli.config import _value as _v
from rpd.cli.job import Job
from rpd.cli.train import run
from rpd.io import sweeps
from rpd.runtime import compile_cache
from rpd.runtime.interrupt import run_main

log = logging.getLogger(__name__)


@hydra.main(version_base="1.3", config_path="../configs", config_name="train")
def main(cfg: DictConfig) -> float:
    """Compose (hydra), run, link the job's output directory to the stored run
    (``rpd.io.sweeps.link_job``: ``result.json`` and a ``result`` symlink), and exit non-zero on failure unless in a multirun (which goes
    on with the other jobs; ``experiments.sweep.SweepSummary`` counts the failures at the end
    and exits non-zero then). Returns the selected metric (the final value at the chosen γ, NaN
    when none) for hydra's optimising sweepers (Optuna, Ax)."""

    compile_cache.enable()  # ~/.cache/rpd/jax ($RPD_CACHE, $RPD_JAX_CACHE); RPD_JAX_CACHE=0: off
    this = job.current()  # the hydra job's facts, passed down as a plain value
    if cfg.objective._target_ and cfg.objective.args is None:  # a user's factory: the keys given
        cfg.objective.args = objective_of.given_args(this.task_overrides)
    sweep_dir = this.sweep_dir  # a multirun's
    if sweep_dir is not None and cfg.schedule.T is None and cfg.compare_T is None and _v(cfg.compare) == "equal_time":
        shared = sweep.equal_time(sweep_dir)
        if shared is not None:  # the sweep's one T (experiments.sweep.EqualTime)
            cfg.compare_T, cfg.T_rule = shared["T"], shared["rule"]
    try:
        out = run(cfg, this)
    except (ValueError, TypeError, OSError) as exc:  # bad input, refused before any work
        if not this.multirun:
            job.refuse(exc)  # one line, exit 2, hydra's run folder taken back: nothing written
        _link(this, None, status="failed", error=f"{type(exc).__name__}: {exc}")  # the sweep counts it
        log.error("job refused, nothing stored: %s: %s", type(exc).__name__, exc)
        return math.nan
    _link(this, out.path, status=out.status, skipped=out.skipped, error=out.error, wandb_id=out.summary.get("wandb_id"))
    if out.status == "failed" and not this.multirun:
        raise SystemExit(f"run failed ({out.error}); recorded in {out.path}")
    return float(out.summary.get("final/selected", math.nan))


def _link(this: Job, result, **how) -> None:
    """The hydra job's output directory linked to its stored run (none outside hydra)."""
    if this.output_dir is not None:
        sweeps.link_job(this.output_dir, result, **how)


if __name__ == "__main__":
    run_main(compose_check.one_line(main, "train"))  # Ctrl-C: a clean message and exit 130
