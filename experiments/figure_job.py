"""One unit of a fanned-out figure: computed and stored in the results store (``rpd.studies.fanout``).
``rpd.cli.fanout`` launches it as a hydra multirun on the chosen launcher
(docs/running.md#figures-on-a-cluster-fan-out):

    python -m experiments.figure_job -m plan=<results>/figure_jobs/<name>/<hash>/plan.json unit=0,3,7 launcher=joblib

The study's Config is rebuilt from the plan at this commit and must hash to the plan's key, which
names the code too (``code_identity``): a job run by other code than planned it is refused. A stored unit is skipped; a failing one is stored
with its error and the job ends normally, so the other jobs go on and the driver lists it.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from experiments import schemas
from rpd.cli import figure as F
from rpd.io import store
from rpd.runtime import compile_cache
from rpd.runtime.interrupt import run_main
from rpd.studies import fanout
from rpd.studies import units as U

schemas.register_studies()  # hydra's ConfigStore as experiments.figure has it (--help lists the same)


def run(plan_path: str | Path, index: int, *, force: bool = False) -> str:
    """Unit ``index`` of the plan at ``plan_path``: "reused", "ok" or "failed" (stored)."""
    plan = fanout.read_plan(plan_path)
    study = F.resolve(plan["study"])
    cfg = F.study_config(study, plan["size"], plan["overrides"])
    key = F.study_key(plan["study"], plan["size"], cfg, study.corpus_identity(cfg) if study.corpus_identity else None)
    if store.config_hash(key) != store.config_hash(plan["key"]):
        raise ValueError(
            f"plan={plan_path}: this job's {plan['study']} config or code (rpd, jax, numpy) differs from the planned one"
        )
    specs = plan["units"]
    if not 0 <= index < len(specs):
        raise ValueError(f"unit must be in 0..{len(specs) - 1} ({plan_path}), got {index}")
    units = U.of(study.module, study.run)
    return fanout.run_job(units, cfg, Path(plan_path).parent, plan["key"], specs[index], force=force)


@hydra.main(version_base="1.3", config_path="../configs", config_name="figure_job")
def main(cfg: DictConfig) -> None:
    compile_cache.enable()  # ~/.cache/rpd/jax ($RPD_CACHE, $RPD_JAX_CACHE): shared by the jobs of a host
    status = run(cfg.plan, int(cfg.unit), force=bool(cfg.force))
    print(f"unit {cfg.unit} of {cfg.plan}: {status}", flush=True)


if __name__ == "__main__":
    run_main(main)
