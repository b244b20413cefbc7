"""A figure's units as jobs in the results store (docs/running.md#figures-on-a-cluster-fan-out).

The units of a study (``rpd.studies.units``) at one (name, size, study config) are stored under
``<results_root>/figure_jobs/<name>/<study hash>/``: ``plan.json`` (the study, its size and
overrides, every unit's spec) and one run directory per unit, keyed by the study's key and the
unit's spec (``rpd.io.store``: atomic, checksummed, complete only when marked). A job
(:func:`run_job`) computes one unit unless it is stored; while it works, ``running.json`` in its
directory names its process. :func:`states` tells per unit what the store holds: "ok",
"failed" (the error stored) or "missing" (never ran, or died: nothing of it is stored), so the
driver resubmits exactly the units that are not "ok"; :func:`assemble` builds the study's output
from the stored payloads.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Mapping, NamedTuple

from rpd.io import payload, store
from rpd.io.atomic import atomic_write
from rpd.results import StudyOutput
from rpd.runtime import compile_cache

JOBS = "figure_jobs"  # under the results root
PLAN = "plan.json"
RUNNING = "running.json"


def jobs_root(results_root: str | os.PathLike, name: str, study_key: Mapping) -> Path:
    return Path(results_root) / JOBS / name / store.config_hash(study_key)


def unit_key(study_key: Mapping, unit: Mapping) -> dict:
    return {**study_key, "unit": dict(unit)}


def unit_dir(root: Path, study_key: Mapping, unit: Mapping) -> Path:
    return store.run_dir(root, unit_key(study_key, unit))


def write_plan(root: Path, name: str, size: str, overrides: Mapping, study_key: Mapping, specs: list) -> Path:
    """``root/plan.json``: what a job needs to rebuild the study's Config and find its unit."""
    root.mkdir(parents=True, exist_ok=True)
    plan = {"study": name, "size": size, "overrides": dict(overrides), "key": study_key, "units": specs}
    atomic_write(root / PLAN, json.dumps(store.to_jsonable(plan), indent=1, sort_keys=True).encode())
    return root / PLAN


def read_plan(path: str | os.PathLike) -> dict:
    return json.loads(Path(path).read_text())


class UnitState(NamedTuple):
    key: str  # the unit's readable key
    status: str  # "ok", "failed" or "missing"
    error: str | None
    path: Path


def states(root: Path, study_key: Mapping, specs: list) -> list[UnitState]:
    """What the store holds for each unit: complete and ok, failed (with its error), or missing."""
    out = []
    for spec in specs:
        path = unit_dir(root, study_key, spec)
        status, error = "missing", None
        if store.should_skip(path, unit_key(study_key, spec)):
            status = "ok"
        elif store.entry_status(path) == "failed":
            status, error = "failed", store.load_run(path).error
        out.append(UnitState(spec["key"], status, error, path))
    return out


def run_job(study: SimpleNamespace, cfg, root: Path, study_key: Mapping, spec: Mapping, *, force: bool = False) -> str:
    """Compute one unit and store it, unless stored (``force``: anyway); returns "reused",
    "ok" or "failed" (``study``: the figure's ``rpd.studies.units.of``; the error stored, not raised: the other jobs go on, the driver lists it).
    One writer per unit (``store.run_lock``): a resubmitted job waits for a live one."""
    path, key = unit_dir(root, study_key, spec), unit_key(study_key, spec)
    with store.run_lock(path, wait_message=f"{spec['key']}: waiting, another job is computing {path}"):
        if not force and store.should_skip(path, key):
            return "reused"
        running = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        atomic_write(path / RUNNING, json.dumps(running).encode())
        t0 = time.perf_counter()
        try:
            with compile_cache.count_programs() as programs:
                value = study.run_unit(cfg, dict(spec), study.prepare(cfg))
            payload.save(path, key, value, runtime_s=time.perf_counter() - t0, programs=programs)
            return "ok"
        except Exception as exc:
            store.save_failure(path, key, exc)
            return "failed"
        finally:
            (path / RUNNING).unlink(missing_ok=True)


def assemble(
    study: SimpleNamespace, cfg, root: Path, study_key: Mapping, specs: list
) -> tuple[StudyOutput, float, dict]:
    """The study's output from every stored unit, with the units' summed runtime and programs."""
    values: list[Any] = []
    runtime, programs = 0.0, {"compiled": 0, "from_cache": 0, "seconds": 0.0}
    for spec in specs:
        value, extra = payload.load(unit_dir(root, study_key, spec))
        values.append(value)
        runtime += float(extra.get("runtime_s", 0.0))
        for k in programs:
            programs[k] += (extra.get("programs") or {}).get(k, 0)
    programs["seconds"] = round(programs["seconds"], 3)
    return study.assemble(cfg, values), runtime, programs
