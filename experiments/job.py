"""The running hydra job as a plain :class:`rpd.cli.job.Job` (its output directory, group choices,
overrides, multirun and sweep directory): what the entry points read from hydra and pass down
(docs/architecture.md#where-hydra-stops)."""

from __future__ import annotations

from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from rpd.cli.job import NONE, Job


def current() -> Job:
    """This hydra job (:data:`rpd.cli.job.NONE` outside hydra)."""
    if not HydraConfig.initialized():
        return NONE
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    return Job(
        output_dir=Path(hc.runtime.output_dir),
        choices=dict(hc.runtime.choices),
        task_overrides=tuple(hc.overrides.task),
        hydra_overrides=tuple(hc.overrides.hydra),
        multirun=multirun,
        sweep_dir=Path(hc.sweep.dir) if multirun else None,
    )
