"""The hydra callbacks of a multirun of ``experiments.train`` (``hydra.callbacks`` in
configs/train.yaml); what they compute is :mod:`rpd.cli.sweep`.

- :class:`SweepSummary` writes every job's overrides at the start (``rpd.io.sweeps.write_jobs``)
  and prints the sweep as a table at the end (:func:`rpd.cli.sweep.summary_text`), with the count
  of done, skipped and failed jobs, and exits non-zero when a job failed (after every job ran);
- :class:`EqualTime` writes the one simulated time T of the sweep's rows before any job runs
  (:func:`rpd.cli.sweep.sweep_time`).

    python -m experiments.train -m method=pd,localsgd schedule.S=2,4
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import hydra
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from experiments import compose_check
from rpd.cli import checks
from rpd.cli import config as C
from rpd.cli.sweep import EQUAL_TIME, T_RULE, summary_text, sweep_time
from rpd.io import sweeps
from rpd.io.atomic import atomic_write
from rpd.results import unit_name


class SweepSummary(Callback):
    """At the start of a multirun: write every job's overrides (``rpd.io.sweeps.write_jobs``, so
    a sweep stopped early lists the jobs it never ran). At the end: print the sweep's table and
    counts; exit 1 if a job failed."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        sweeps.write_jobs(config.hydra.sweep.dir, job_overrides(config))

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.exists():  # e.g. a sweep whose jobs all ran elsewhere
            return
        text, counts = summary_text(sweep_dir)
        print(text, flush=True)
        if counts["failed"]:
            raise SystemExit(
                f"{counts['failed']} of {counts['total']} jobs failed (recorded in the "
                f"results store; rerun the sweep to retry them, complete jobs are skipped)"
            )


def job_overrides(config: DictConfig) -> list[list[str]]:
    """The override lists of every job of a multirun, as hydra's basic sweeper expands them
    (the command line's and ``hydra.sweeper.params``)."""
    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
    parsed = OverridesParser.create().parse_overrides(arguments)
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


class EqualTime(Callback):
    """Before a multirun of ``experiments.train`` (``compare=equal_time``, the default) with no
    ``schedule.T``: compose every job with the run's own search path (:func:`compose_jobs`: a
    schedule added through ``hydra.searchpath`` too), take :func:`sweep_time` and write it to
    ``<sweep dir>/equal_time.json``, which each job reads (``experiments.train``'s main), so
    every row ends at the same simulated time. Printed with the rule that chose it. A job that
    cannot be composed or timed refuses the whole sweep before any job runs (one line, exit 2):
    no table at unequal T."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        if C._value(config.get("compare")) != "equal_time":
            return
        try:
            cfgs = compose_jobs(config)
            T = sweep_time(cfgs) if len(cfgs) >= 2 else None
        except ValueError as exc:
            checks.refuse(ValueError(f"compare=equal_time: {exc} (no job was run)"))
        if T is None or not math.isfinite(T):
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(sweep_dir / EQUAL_TIME, json.dumps({"T": T, "rule": T_RULE}).encode())
        unit = unit_name(C._value(checks.typed(cfgs[0], C.TrainConfig).costs.unit))
        print(
            f"comparing the {len(cfgs)} rows at one simulated time T = {T} {unit} ({T_RULE}); "
            f"compare_T=<time> sets another, compare=equal_n compares after N microbatches",
            flush=True,
        )


def compose_jobs(config: DictConfig) -> list[DictConfig]:
    """Every job of the multirun ``config`` composed as its run composes it: with the command
    line's ``hydra.searchpath`` (hydra applies it only while loading a run's config, so a
    plain ``hydra.compose`` would not find a schedule added there). Raises ValueError naming
    the job that does not compose."""
    search = [o for o in config.hydra.overrides.hydra if o.lstrip("+~").split("=", 1)[0] == "hydra.searchpath"]
    out = []
    for i, job in enumerate(job_overrides(config)):
        try:
            out.append(hydra.compose(config.hydra.job.config_name, overrides=[*search, *job]))
        except (HydraException, OmegaConfBaseException) as exc:
            raise ValueError(f"job {i} ({' '.join(job)}): {compose_check.message(exc, job)}") from None
    return out
