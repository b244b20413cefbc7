"""A figure's units spread over the figure script's worker processes (docs/running.md#figures-on-a-cluster-fan-out).

``experiments.reproduce_paper_figures`` makes its figures in a pool of worker processes. A study
that splits into units (``rpd.studies.units``: E10, E3, E4) would hold one worker for its whole
run while the other workers finish and idle; here its units become tasks of that same pool, the
fan-out's units run in process rather than on a launcher (``rpd.cli.fanout``). :func:`plan` writes
the fan-out's plan (``rpd.studies.fanout.write_plan``) and lists the units the store lacks;
:func:`run_unit` computes one in a worker and stores it as a launched job would
(``rpd.studies.fanout.run_job``); once every unit is stored, :func:`assemble` makes the figure
from them (``rpd.cli.figure.make_figure`` with ``fanout``: nothing left to launch, it assembles
and draws). A splitting study's in-process ``run`` assembles from payloads passed through the
store's encoding too (``rpd.studies.units.run_all``), so the numbers are those of making the
figure in one process.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rpd import studies
from rpd.cli import checks
from rpd.cli import config as C
from rpd.cli import figure as F
from rpd.cli.manifest import FigureOutcome, Report
from rpd.io import store
from rpd.studies import fanout
from rpd.studies import units as U


@dataclasses.dataclass(frozen=True)
class Spread:
    """A figure made from its units: the fan-out's plan and the units the store lacks."""

    name: str
    plan: Path  # <results_root>/figure_jobs/<name>/<study hash>/plan.json
    todo: tuple[int, ...]  # indices into the plan's units, each one task of the pool
    n_units: int = 0  # the plan's units, stored or not
    keys: tuple[str, ...] = ()  # every unit's key, in the plan's order


def plan(cfg) -> Spread | None:
    """The units of the figure of a composed ``FigureConfig`` to run as tasks, or None where the
    figure is made whole: its study does not split (one unit), is not a registered study, or its
    output is stored already (and ``force`` is off). ``force``: every unit is recomputed."""
    cfg = checks.typed(cfg, C.FigureConfig)
    name, size = cfg.study.name, C._value(cfg.size)
    if name not in studies.REGISTRY:
        return None
    overrides = C.study_fields(cfg.study)
    study, scfg, key, path = F.target(name, size, overrides, cfg.results_root)
    if not U.splits(study.module) or study.run is not getattr(study.module, "run", None):
        return None
    if not cfg.force and store.should_skip(path, key):
        return None
    specs = U.of(study.module, study.run).units(scfg)
    if len(specs) < 2:
        return None
    root = fanout.jobs_root(cfg.results_root, name, key)
    plan_path = fanout.write_plan(root, name, size, overrides, key, specs)
    states = fanout.states(root, key, specs)
    todo = tuple(i for i, s in enumerate(states) if cfg.force or s.status != "ok")
    return Spread(name, plan_path, todo, len(specs), tuple(s["key"] for s in specs))


# What a worker process's units of one plan share (the study's ``prepare``: objectives built once
# per process, as ``run_all`` shares them in one), by plan path.
_PREPARED: dict[str, tuple[SimpleNamespace, Any, Any]] = {}


def run_unit(plan_path: str, index: int, force: bool = False) -> str:
    """Unit ``index`` of the plan at ``plan_path``, computed and stored here (a pool's task):
    "ok", "failed" (its error stored: the figure then fails naming it) or "reused"."""
    p = fanout.read_plan(plan_path)
    if plan_path not in _PREPARED:
        study = F.resolve(p["study"])
        cfg = F.study_config(study, p["size"], p["overrides"])
        units = U.of(study.module, study.run)
        _PREPARED[plan_path] = (units, cfg, units.prepare(cfg))
    units, cfg, shared = _PREPARED[plan_path]
    one = SimpleNamespace(**{**vars(units), "prepare": lambda _cfg: shared})
    return fanout.run_job(one, cfg, Path(plan_path).parent, p["key"], p["units"][index], force=force)


def assemble(cfg, git_commit: str | None = None) -> FigureOutcome:
    """The figure of a composed ``FigureConfig`` from its stored units (after its :func:`plan`'s
    tasks): assembled, stored and drawn; a unit that is not stored fails it, named
    (``rpd.cli.fanout.JobsIncomplete``), and no unit is recomputed, ``force`` or not."""
    typed = checks.typed(cfg, C.FigureConfig)
    typed.fanout = True
    return F.make_figure(typed, git_commit=git_commit, force_units=False)


def plans(names: Sequence[str], config_of: Callable[[str], Any]) -> dict[str, Spread]:
    """The figures of ``names`` (composed by ``config_of``) made from units run as tasks
    (:func:`plan`). A figure whose plan cannot be made (a bad config) is left whole: its own
    task reports the error."""
    out = {}
    for name in names:
        try:
            sp = plan(config_of(name))
        except Exception:  # made whole, where the error is reported
            sp = None
        if sp is not None:
            out[name] = sp
    return out


def report(name: str, cfg, git_commit: str | None, t0: float, died: str | None = None) -> Report:
    """A spread figure's report once its units' tasks ended (``t0``: when they were queued, by
    ``time.time``): :func:`assemble` d, or failed (``died``: a unit's worker process died)."""
    if died is not None:
        return Report(name, "failed", None, died, time.time() - t0)
    try:
        return Report(name, "ok", assemble(cfg, git_commit), None, time.time() - t0)
    except Exception as err:  # a unit failed (stored with its error) or the assembly did
        return Report(name, "failed", None, f"{type(err).__name__}: {err}", time.time() - t0)


def longest_first(
    names: Sequence[str], spreads: Mapping[str, Spread], cost: Mapping[str, float]
) -> list[tuple[str, int | None]]:
    """The pool's tasks, the most expensive first: ``(name, None)`` makes a figure whole,
    ``(name, i)`` computes unit ``i`` of a spread figure. A whole figure costs ``cost[name]``;
    a unit ``cost["<name>/<unit key>"]`` where recorded, else ``cost[name]`` over its plan's
    units; a figure without a recorded cost goes first (it may be the longest). Ties keep the
    order of ``names``.

    Longest processing time first (Graham, "Bounds on multiprocessing timing anomalies", SIAM
    J. Appl. Math. 17, 1969): handing each free worker the longest task left ends within 4/3 −
    1/(3m) of the best schedule on m workers, where a cheap task queued first can leave the
    longest for last."""
    tasks: list[tuple[float, int, str, int | None]] = []
    for order, name in enumerate(names):
        total = cost.get(name, math.inf)
        sp = spreads.get(name)
        if sp is None:
            tasks.append((total, order, name, None))
        else:
            share = total / max(sp.n_units, 1)
            keys = sp.keys or ("",) * sp.n_units
            tasks += [(cost.get(f"{name}/{keys[i]}", share), order, name, i) for i in sp.todo]
    tasks.sort(key=lambda t: (-t[0], t[1]))
    return [(name, i) for _, _, name, i in tasks]
