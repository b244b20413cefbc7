"""A study as independent units of work, so its runs can fan out as jobs
(docs/running.md#figures-on-a-cluster-fan-out).

A study module that splits offers

- ``units(cfg) -> list[dict]``: one JSON-able spec per unit, each with a unique ``"key"`` (a
  readable name, e.g. ``"nesterov_quadratic/S4"``); it checks ``cfg`` before any work;
- ``prepare(cfg) -> shared`` (optional): what the units share within one process (objectives,
  timelines), built once there;
- ``run_unit(cfg, unit, shared) -> payload``: one unit's result (``rpd.io.payload``: builtins
  and NumPy, stored exactly);
- ``assemble(cfg, payloads) -> StudyOutput``: the study's output from every unit's payload, in
  the order of ``units``.

Its ``run(cfg, progress)`` is :func:`run_all`: every unit here, each payload passed through
the store's encoding (:func:`rpd.io.payload.roundtrip`), then ``assemble``; a fanned-out figure
assembles from the stored payloads, so the two paths cannot differ. A study without ``units``
is one unit, the whole study (:func:`of`).
"""

from __future__ import annotations

import functools
from types import ModuleType, SimpleNamespace
from typing import Any, Callable

from rpd.io import payload
from rpd.results import StudyOutput
from rpd.runtime.concurrency import run_concurrently

WHOLE = "whole study"  # the one unit's key of a study that does not split


def splits(module: ModuleType) -> bool:
    return all(hasattr(module, f) for f in ("units", "run_unit", "assemble"))


def _whole_unit(run: Callable, cfg, unit: dict, shared: Any) -> dict:
    out = run(cfg)
    return {"arrays": out.arrays, "summary": out.summary, "table": out.table}


def _whole_assemble(cfg, payloads: list) -> StudyOutput:
    (p,) = payloads
    return StudyOutput(arrays=p["arrays"], summary=p["summary"], table=p["table"])


def of(module: ModuleType, run: Callable | None = None) -> SimpleNamespace:
    """The unit protocol of a study module: its own, or one unit running ``run`` (the module's
    ``run`` unless given: a module serving several figures names the figure's own; a figure
    whose ``run`` is not the module's plain one is one unit too)."""
    if splits(module) and (run is None or run is getattr(module, "run", None)):
        return SimpleNamespace(
            units=module.units,
            prepare=getattr(module, "prepare", lambda cfg: None),
            run_unit=module.run_unit,
            assemble=module.assemble,
            concurrent=getattr(module, "CONCURRENT_UNITS", False),
        )
    whole = run or module.run
    return SimpleNamespace(
        units=lambda cfg: [{"key": WHOLE}],
        prepare=lambda cfg: None,
        run_unit=functools.partial(_whole_unit, whole),
        assemble=_whole_assemble,
        concurrent=False,
    )


def run_all(module: ModuleType, cfg, progress: Callable[[str], None] | None = None) -> StudyOutput:
    """A splitting study's ``run``: every unit in this process (side by side on host threads
    where the module sets ``CONCURRENT_UNITS``; the numbers do not depend on it), then
    ``assemble`` over their payloads as the store gives them back."""
    study = of(module)
    specs = study.units(cfg)
    shared = study.prepare(cfg)
    report = progress or (lambda msg: None)
    tasks = [functools.partial(study.run_unit, cfg, u, shared) for u in specs]
    results: list[Any] = [None] * len(specs)
    if study.concurrent:
        for i, res in run_concurrently(tasks, first_alone=False):
            results[i] = payload.roundtrip(res)
            report(specs[i]["key"])
    else:
        for i, task in enumerate(tasks):
            results[i] = payload.roundtrip(task())
            report(specs[i]["key"])
    return study.assemble(cfg, results)
