"""One schedule, drawn: its Gantt chart and its numbers (:func:`rpd.cli.chart.chart`).

python -m experiments.schedule schedule=zb_h2 schedule.S=4 schedule.M=8 costs=b2f_latency out=zb_h2.png
python -m experiments.schedule schedule=dualpipe_v schedule.S=4 schedule.M=8 schedule.N=8
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from experiments import compose_check, job
from rpd.cli.chart import chart
from rpd.runtime.interrupt import run_main


@hydra.main(version_base="1.3", config_path="../configs", config_name="chart")
def main(cfg: DictConfig) -> None:
    try:
        numbers = chart(cfg)
    except (ValueError, TypeError) as exc:
        job.refuse(exc)  # nothing left behind: hydra's run folder too
    v = f", v = {numbers['v']}" if numbers["v"] > 1 else ""
    print(
        f"{numbers['schedule']}: S = {numbers['S']}, N = {numbers['N']}, M = {numbers['M']}{v}; "
        f"makespan {numbers['makespan']:g}, period {numbers['period']:g} (units of {numbers['units']}), "
        f"bubble {numbers['bubble_total']:.3f} of the time ({numbers['bubble_ideal']:.3f} of the ideal)"
    )
    for r, (a, w) in enumerate(zip(numbers["peak_activations"], numbers["weights"])):
        print(f"  rank {r}: peak activations {a:g} A, weights {w:g} W")
    print(f"chart: {numbers['path']}")


if __name__ == "__main__":
    run_main(compose_check.one_line(main, "chart"))  # Ctrl-C: a clean message and exit 130
