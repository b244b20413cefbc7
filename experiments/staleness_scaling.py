"""The S⁴ staleness study (SPEC §8) as its own entry point: ``experiments.figure`` with
``experiment=staleness_scaling`` preselected.

    python -m experiments.staleness_scaling               # quick: S = 2..16, 3 seeds
    python -m experiments.staleness_scaling size=full     # S = 2..256, 4 seeds
    python -m experiments.staleness_scaling +study.overrides.N=32 out_dir=/tmp/s4

For S = 2..256 at one γ stable for every S, on PD and RPD, over several seeds: the bound's
stale-read term, the measured ‖x^k − z^k‖² and ‖∇f(x^k) − ∇f(z^k)‖², log-log exponents (the
global fit, the local slopes between consecutive S, the large-S fit) with 95% CIs across seeds,
and the figure ``paper_figures/[quick/]staleness_scaling.png``; the measured exponents are
printed next to the bound's 4 (``rpd.studies.staleness``). Every option of ``experiments.figure``
applies.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from experiments.figure import run_and_report

EXPERIMENT = "staleness_scaling"


@hydra.main(version_base="1.3", config_path="../configs", config_name="figure")
def main(cfg: DictConfig) -> None:
    if cfg.experiment_name != EXPERIMENT:
        raise ValueError(f"experiments.staleness_scaling runs experiment={EXPERIMENT}, "
                         f"got experiment_name={cfg.experiment_name!r}; use experiments.figure")
    from rpd.runtime import compile_cache

    compile_cache.enable(cfg.results_root)  # as experiments.figure: <results_root>/jax_cache
    run_and_report(cfg)


def with_experiment(argv: list[str]) -> list[str]:
    """``argv`` with ``experiment=staleness_scaling`` added unless an experiment is given."""
    given = any(a.split("=", 1)[0].lstrip("+~") == "experiment" for a in argv[1:])
    return argv if given else [argv[0], f"experiment={EXPERIMENT}", *argv[1:]]


if __name__ == "__main__":
    from rpd.runtime.interrupt import run_main

    sys.argv = with_experiment(sys.argv)
    run_main(main)  # Ctrl-C: a clean message and exit 130
