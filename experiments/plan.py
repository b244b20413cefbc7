"""Which schedule for this model on this device: the plan over every registered schedule
(docs/plan.md; :func:`rpd.cli.plan.run`, its schema :class:`rpd.cli.plan_config.PlanConfig`).

    python -m experiments.plan model=gpt2_medium hardware=a100_80g pipeline.S=4 pipeline.M=8
    python -m experiments.plan model=gpt3_1.3b pipeline.S=8 "pipeline.M=[8,16,32,64]" optimizer=sgd
    python -m experiments.plan model=llama_7b hardware=h100_80g recompute=full out=llama.json figure=llama.png
    python -m experiments.plan pipeline.S=4 pipeline.D=2 pipeline.partition=pipedream schedules=[1f1b,zb_h1]
"""

from __future__ import annotations

import hydra

from experiments import compose_check, job
from rpd.cli.plan import run
from rpd.runtime.interrupt import run_main


@hydra.main(version_base="1.3", config_path="../configs", config_name="plan")
def main(cfg) -> None:
    try:
        run(cfg, job.current().output_dir)  # cfg.out, else plan.json in the hydra run directory
    except (ValueError, TypeError, OSError) as exc:  # bad input (a missing file too): one line, exit 2
        job.refuse(exc)  # nothing left behind: hydra's run folder too


if __name__ == "__main__":
    run_main(compose_check.one_line(main, "plan"))  # Ctrl-C: a clean message and exit 130
