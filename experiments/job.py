"""The running hydra job as a plain :class:`rpd.cli.job.Job` (its output directory, group choices,
overrides, multirun and sweep directory): what the entry points read from hydra and pass down
(docs/architecture.md#where-hydra-stops); and a refusal inside the job (:func:`refuse`), which
takes back the run folder hydra made for it, so a refused command leaves nothing behind."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import NoReturn

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from rpd.cli import checks
from rpd.cli.job import NONE, Job

SAVED = ("config.yaml", "hydra.yaml", "overrides.yaml")  # hydra's copies in <run dir>/<output_subdir>/


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


def discard() -> None:
    """Take back what hydra wrote for this single run before its task began: the saved config
    (``.hydra/config.yaml``, ``hydra.yaml``, ``overrides.yaml``), the job's log file (its handler
    closed first), then the run folder and its parents up to the working directory while each is
    empty (``outputs/plan/<date>/<time>``, ``outputs/plan``, ``outputs``).

    Only empty folders are removed, never the working directory or anything above it, so a file
    this run did not write (another run's in the same folder) keeps its folder. A multirun's job
    keeps its folder: the sweep records the failure there and goes on."""
    if not HydraConfig.initialized():
        return
    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN:
        return
    out = Path(hc.runtime.output_dir).resolve()
    cwd = Path(hc.runtime.cwd).resolve()
    root = logging.getLogger()
    files = [out / hc.output_subdir / name for name in SAVED] if hc.output_subdir is not None else []
    for handler in list(root.handlers):  # hydra's job log (hydra/job_logging: <run dir>/<job>.log)
        if isinstance(handler, logging.FileHandler) and out in Path(handler.baseFilename).resolve().parents:
            root.removeHandler(handler)
            handler.close()
            files.append(Path(handler.baseFilename))
    for path in files:
        path.unlink(missing_ok=True)
    folders = [out / hc.output_subdir] if hc.output_subdir is not None else []
    folders += [p for p in (out, *out.parents) if p != cwd and cwd in p.parents] or [out]
    for folder in folders:
        if folder == cwd or folder in cwd.parents:
            break
        try:
            folder.rmdir()
        except OSError:  # not empty (or not there): what is left is not this run's to remove
            if folder.exists():
                break


def refuse(exc: BaseException) -> NoReturn:
    """A refusal inside a hydra job: :func:`discard` this run's folder, then
    :func:`rpd.cli.checks.refuse` (one line on stderr, exit status 2)."""
    discard()
    checks.refuse(exc)
