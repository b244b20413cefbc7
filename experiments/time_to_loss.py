"""Hours to a loss per method on n workers over sites (docs/time_to_loss.md;
:func:`rpd.cli.time_to_loss.run`, its schema :class:`rpd.cli.time_to_loss_config.TimeToLossConfig`).

    python -m experiments.time_to_loss model=llama3_8b hardware=h100_80g n_workers=256 \\
        hardware.sites=2 hardware.site_bandwidth=100e9 target_loss=2.3 \\
        "methods=[1f1b,pipedream_2bw,diloco,streaming_diloco]" diloco.M=2 diloco.H=30
"""

from __future__ import annotations

import hydra

from experiments import compose_check, job
from rpd.cli.time_to_loss import run
from rpd.runtime.interrupt import run_main


@hydra.main(version_base="1.3", config_path="../configs", config_name="time_to_loss")
def main(cfg) -> None:
    try:
        run(cfg, job.current().output_dir)  # cfg.out / cfg.figure, else the hydra run directory
    except (ValueError, TypeError, OSError) as exc:  # bad input: one line, exit 2
        job.refuse(exc)  # nothing left behind: hydra's run folder too


if __name__ == "__main__":
    run_main(compose_check.one_line(main, "time_to_loss"))  # Ctrl-C: a clean message and exit 130
