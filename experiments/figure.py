"""One paper figure: run its study, save the output, draw the figure from what was saved
(:mod:`rpd.cli.figure`: how a study is resolved, computed once, stored and drawn).

    python -m experiments.figure experiment=e3_nesterov            # quick (laptop) size
    python -m experiments.figure experiment=e3_nesterov size=full  # the paper's size
    python -m experiments.figure experiment=e1_pd_vs_rpd force=true study.N=100
    python -m experiments.figure experiment=e10_frontier fanout=true launcher=joblib  # its runs as jobs
"""

from __future__ import annotations

from typing import cast

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from experiments import compose_check, job, schemas, slurm_watch
from rpd.cli import config as C
from rpd.cli import fanout
from rpd.cli.figure import experiments, run_and_report
from rpd.io import store
from rpd.runtime import compile_cache
from rpd.runtime.interrupt import run_main

schemas.register_studies()  # study.<field>= typed at compose time (configs/figure.yaml)


@hydra.main(version_base="1.3", config_path="../configs", config_name="figure")
def main(cfg: DictConfig) -> None:
    compile_cache.enable()  # ~/.cache/rpd/jax ($RPD_CACHE, $RPD_JAX_CACHE); RPD_JAX_CACHE=0: off
    try:
        store.check_root(cfg.results_root)
        here = job.current()
        if cfg.fanout and here.choices.get("launcher") == "slurm":  # before the plan is written
            sized = fanout.slurm_overrides(C._value(cfg.size), fanout.launcher_of(here)["launcher_overrides"])
            node = [o.removeprefix("hydra.launcher.") for o in sized]
            merged = OmegaConf.merge(HydraConfig.get().launcher, OmegaConf.from_dotlist(node))
            slurm_watch.check(cast(DictConfig, merged))  # a DictConfig merged onto one
        run_and_report(cfg, here)
    except (ValueError, TypeError) as exc:  # bad input (or a launch refused: fanout.LaunchRefused)
        job.refuse(exc)  # nothing left behind: hydra's run folder too
    except fanout.JobsIncomplete as exc:  # listed; the same command resubmits them
        raise SystemExit(str(exc)) from None


if __name__ == "__main__":
    needs = {"study.name": f"experiment: experiments.figure needs experiment=<name>, one of {', '.join(experiments())}"}
    run_main(compose_check.one_line(main, "figure", needs))  # Ctrl-C: a clean message and exit 130
