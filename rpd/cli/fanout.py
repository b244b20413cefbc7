"""A figure's study fanned out as jobs on a hydra launcher (``fanout=true``;
docs/running.md#figures-on-a-cluster-fan-out).

:func:`compute` plans the study's units (``rpd.studies.units``), submits those the store does
not hold as one multirun of ``experiments.figure_job`` on ``launcher`` (local, joblib, slurm,
submitit_local: configs/launcher/), waits for it, then assembles the study's output from the
stored units and stores it where the in-process study would (``rpd.cli.figure.compute``).
A unit that is not stored after the launch (its job died, was killed or timed out, or raised)
is listed and the figure is not made (:class:`JobsIncomplete`); the same command again submits
exactly those units. A second call once everything is stored only assembles, or only draws.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Sequence

from rpd.cli import slurm
from rpd.cli.job import Job
from rpd.io import store
from rpd.studies import fanout
from rpd.studies import units as U

LAUNCHERS = ("local", "joblib", "slurm", "submitit_local")  # configs/launcher/<name>.yaml


class JobsIncomplete(RuntimeError):
    """Some units are not stored after the launch: listed, resubmitted by the next call."""


class LaunchRefused(ValueError):
    """The launch ended with status 2, a refusal it said in one line (launcher=slurm: a request
    no node can meet, a task that will never start); nothing of it is left queued."""


def _quoted(value: str | Path) -> str:
    text = str(value)
    if "'" in text:
        raise ValueError(f"results_root: a path with a quote cannot be passed to the jobs: {text}")
    return f"'{text}'"


def launcher_of(job: Job) -> dict:
    """The hydra job's launcher choice and its ``hydra.launcher.*`` command-line overrides, as
    :func:`compute` takes them (``launcher``, ``launcher_overrides``); {} outside hydra."""
    if not job.in_hydra:
        return {}
    overrides = [o for o in job.hydra_overrides if o.startswith("hydra.launcher.")]
    return {"launcher": job.choices.get("launcher") or "local", "launcher_overrides": overrides}


# What one job asks SLURM for, by the figure's size, unless hydra.launcher.<field>= says otherwise:
# (CPUs per task, memory in GB). quick: an E3 unit peaks at 0.30 GB RSS (/usr/bin/time, units 0 and
# 3 of the quick plan), a whole quick study well under 4 GB (the quick script runs 4 at once on a
# laptop); full: a paper-size study holds several GB, E5's 13.7 GB at most
# (docs/benchmarks-history.md, "Peak RSS 13.7 GB"), and runs long enough to use more cores.
SLURM_REQUEST = {"quick": (1, 4), "full": (4, 16)}


def slurm_overrides(size: str, overrides: Sequence[str] = ()) -> list[str]:
    """The ``hydra.launcher.cpus_per_task`` and ``mem_gb`` overrides of a ``size`` figure's jobs
    (:data:`SLURM_REQUEST`), each only where ``overrides`` does not set it."""
    cpus, mem_gb = SLURM_REQUEST[size]
    given = {o.split("=", 1)[0] for o in overrides}
    wanted = {"hydra.launcher.cpus_per_task": cpus, "hydra.launcher.mem_gb": mem_gb}
    return [f"{k}={v}" for k, v in wanted.items() if k not in given]


def launch(
    plan: Path, todo: Sequence[int], launcher: str, overrides: Sequence[str] = (), *, force: bool = False
) -> int:
    """Run units ``todo`` of ``plan`` as one multirun of ``experiments.figure_job`` on
    ``launcher`` (``overrides``: ``hydra.launcher.*=...``), waiting for it; its exit status.
    Its logs (submitit's too) are under ``<plan dir>/launches/<time>/``. On SLURM, a launch that
    failed returns once none of its tasks is queued, so none is resubmitted while it runs."""
    where = plan.parent / "launches" / time.strftime("%Y-%m-%d_%H-%M-%S")
    cmd = [
        sys.executable,
        "-m",
        "experiments.figure_job",
        "-m",
        f"plan={_quoted(plan.resolve())}",
        "unit=" + ",".join(str(i) for i in todo),
        f"launcher={launcher}",
        f"force={str(force).lower()}",
        f"hydra.sweep.dir={_quoted(where.resolve())}",
        *overrides,
    ]
    rc = subprocess.run(cmd, env=_threads_env(launcher)).returncode
    if rc and launcher == "slurm":  # submitit gave up early: the array's other tasks may still run
        slurm.wait_gone(where / ".submitit")
    return rc


# What joblib's workers get limited to (cores / n_jobs) unless set: a float's last bits can depend
# on the BLAS thread count, so a job computes with this host's, as the in-process study does.
THREAD_VARS: tuple[str, ...] = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
THREAD_VARS += ("VECLIB_MAXIMUM_THREADS", "NUMBA_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def _threads_env(launcher: str) -> dict:
    env = dict(os.environ)
    if launcher == "joblib":
        cores = str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        env |= {v: cores for v in THREAD_VARS if v not in env}
    return env


def compute(
    study: SimpleNamespace,
    cfg,
    key: dict,
    path: Path,
    *,
    size: str,
    overrides: dict,
    results_root: str | Path,
    force: bool = False,
    launcher: str = "local",
    launcher_overrides: Sequence[str] = (),
    echo: Callable[[str], None] = print,
    force_units: bool | None = None,
) -> tuple[Path, bool]:
    """The stored output at ``path`` of ``study`` at ``cfg`` (its ``key``), made from its units
    run as jobs on ``launcher``; returns (run dir, reused). Raises :class:`JobsIncomplete`
    naming the units that are not stored after the launch. ``force_units`` (None: ``force``):
    stored units are computed again too (False: the figure script's workers just computed them,
    ``rpd.cli.spread``)."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {list(LAUNCHERS)}, got {launcher!r}")
    bad = [o for o in launcher_overrides if not o.startswith("hydra.launcher.")]
    if bad:
        raise ValueError(f"launcher overrides must set hydra.launcher.<field>, got {bad}")
    units = U.of(study.module, study.run)
    name = study.name
    with store.run_lock(path, wait_message=f"{name}: waiting, another process is computing {path}"):
        if not force and store.should_skip(path, key):
            return path, True
        specs = units.units(cfg)  # the study's own checks, before any job
        root = fanout.jobs_root(results_root, name, key)
        plan = fanout.write_plan(root, name, size, overrides, key, specs)
        before = fanout.states(root, key, specs)
        redo_all = force if force_units is None else force_units
        todo = [i for i, s in enumerate(before) if redo_all or s.status != "ok"]
        if todo:
            redo = [f"{s.key} ({s.status})" for s in before if s.status != "ok"]
            stored = len(specs) - len(redo)
            echo(f"{name}: {len(todo)} of {len(specs)} jobs on launcher={launcher} ({stored} stored); plan {plan}")
            if redo and stored:  # a rerun: these died, failed or never ran before
                echo(f"{name}: resubmitting {', '.join(redo)}")
            sized = slurm_overrides(size, launcher_overrides) if launcher == "slurm" else []
            rc = launch(plan, todo, launcher, [*sized, *launcher_overrides], force=force)
            if rc == 2:  # a refusal, said by the launch (rpd.cli.slurm), not a job that died
                raise LaunchRefused(f"{name}: launcher={launcher} refused the launch (the line above)")
            if rc:
                echo(f"{name}: the launch exited with status {rc}")
        missing = [s for s in fanout.states(root, key, specs) if s.status != "ok"]
        if missing:
            lines = [f"  {s.key}: {s.error or 'not stored (the job died or never ran)'}" for s in missing]
            raise JobsIncomplete(
                f"{name}: {len(missing)} of {len(specs)} jobs did not finish; rerun the same command to "
                f"resubmit them (the {len(specs) - len(missing)} stored are kept):\n" + "\n".join(lines)
            )
        out, runtime, programs = fanout.assemble(units, cfg, root, key, specs)
        summary = {"summary": out.summary, "table": out.table, "runtime_s": runtime, "programs": programs}
        store.save_run(path, key, curves=out.arrays, summary=summary)
        return path, False
