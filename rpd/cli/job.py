"""What a running hydra job knows of itself, as a plain value: the entry point reads it from
hydra (``experiments.job.current``) and passes it down, so that rpd never imports hydra
(docs/architecture.md#where-hydra-stops). Outside hydra (a test, a script) it is :data:`NONE`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Mapping, Optional


@dataclasses.dataclass(frozen=True)
class Job:
    """``output_dir``: the job's output directory (None: not a hydra job); ``choices``: the
    config group choices (``costs``, ``launcher``, ...); ``task_overrides`` / ``hydra_overrides``:
    the command line's overrides of the config and of ``hydra.*``; ``multirun``: one job of a
    ``-m`` sweep, whose directory is ``sweep_dir``."""

    output_dir: Optional[Path] = None
    choices: Mapping[str, Optional[str]] = dataclasses.field(default_factory=dict)
    task_overrides: tuple[str, ...] = ()
    hydra_overrides: tuple[str, ...] = ()
    multirun: bool = False
    sweep_dir: Optional[Path] = None

    @property
    def in_hydra(self) -> bool:
        return self.output_dir is not None


NONE = Job()  # outside hydra
