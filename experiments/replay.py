"""A measured trace replayed (:func:`rpd.cli.replay.run`, docs/replay.md): measured, replayed and
ideal step times, the slowdown S, the top stages / dp ranks / op types, and the what-if table.

python -m experiments.replay trace=tests/data/trace_st/trace-ST.parquet meta=tests/data/trace_st/meta-ST.yaml out=r.json figure=r.png
"""

from __future__ import annotations

import hydra

from experiments import compose_check, job
from rpd.cli.replay import lines, run
from rpd.runtime.interrupt import run_main


@hydra.main(version_base="1.3", config_path="../configs", config_name="replay")
def main(cfg) -> None:
    try:
        numbers = run(cfg)
    except (ValueError, TypeError, OSError) as exc:  # bad input (a missing file too): one line, exit 2
        job.refuse(exc)  # nothing left behind: hydra's run folder too
    for line in lines(numbers, int(cfg.top)):
        print(line)


if __name__ == "__main__":
    run_main(compose_check.one_line(main, "replay"))  # Ctrl-C: a clean message and exit 130
