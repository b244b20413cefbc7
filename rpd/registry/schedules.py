"""Schedules by name (the schedule half of :mod:`rpd.registry`): the timeline of a registered
schedule (:mod:`rpd.registry.entry`) and its parameters under a cost model (:func:`build`),
checked before any work (:func:`check_schedule`)."""

from __future__ import annotations

import typing
from collections.abc import Iterable
from typing import Any

import numpy as np

from rpd.analysis import simtime
from rpd.model.search3d import Searched
from rpd.registry.entry import SCHEDULES, VARIANTS, ScheduleParams, owners_of
from rpd.schedules import Timeline
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.data_parallel import data_parallel
from rpd.schedules.machinery.entry import ScheduleEntry, own_fields
from rpd.validation import check_choice, check_int, qualify, required


def objective_blocks(name: str, S: int) -> int:
    """How many blocks the objective of schedule ``name`` on S ranks needs: S, or what the
    schedule's ``blocks`` says (WPipe's two groups split each rank's weights: 2S)."""
    entry = SCHEDULES[name]
    return int(S) if entry.blocks is None else int(entry.blocks(int(S)))


def _entry_of(name: str, prefix: str = "") -> ScheduleEntry:
    check_choice(f"{prefix}name", name, SCHEDULES)
    return SCHEDULES[name]


def resolve(name: str, params: ScheduleParams) -> ScheduleParams:
    """``params`` as schedule ``name`` runs them: its fields' defaults filled in, every field it
    does not read None (N too when T is set)."""
    entry = SCHEDULES[name]
    kept: dict[str, Any] = {  # ScheduleParams' fields by name
        "S": params.S,
        "N": params.N if params.T is None else None,
        "T": params.T,
        "cut": None if params.T is None else (params.cut or "end"),
    }
    for f in entry.fields:
        value = getattr(params, f)
        kept[f] = entry.default(f, params.S) if value is None else value
    kept["params"] = _own(entry, dict(params.params), params.S)  # its own parameters, defaults filled in
    if params.D not in (None, 1):  # D pipelines (rpd.schedules.machinery.data_parallel); D = 1 keeps old keys
        kept.update(D=params.D, overlap_allreduce=bool(params.overlap_allreduce))
        if params.local_steps not in (None, 1):  # local_steps = 1 keeps old keys too
            kept.update(local_steps=params.local_steps)
    return ScheduleParams(**kept)


def _own(entry: ScheduleEntry, given: dict, S: int) -> dict:
    """``entry.own``, a name it does not have refused naming the schedules that have it."""
    for k in given:
        if k not in entry.own_names:
            owners = owners_of(k)
            where = f"a parameter of {', '.join(owners)}" if owners else "no schedule's parameter"
            own = ", ".join(entry.own_names) or "none"
            raise TypeError(f"{k}: schedule {entry.name} has no such parameter ({where}; {entry.name}'s own: {own})")
    return entry.own(given, S)


def _make(entry: ScheduleEntry, p: ScheduleParams, N: int, costs: CostModel | None, values: int) -> Timeline:
    kw = {f: getattr(p, f) for f in entry.fields} | dict(p.params)
    if entry.allreduce:
        kw["values"] = values
    tl = entry.build(p.S, N, costs=costs, **kw)
    if p.D not in (None, 1):
        tl = data_parallel(tl, p.D, costs, values, bool(p.overlap_allreduce), p.local_steps or 1)
    return tl


def variant(name: str) -> tuple[str, dict]:
    """(registered schedule, fixed fields) of a schedule or variant name."""
    v = VARIANTS.get(name)
    return (name, {}) if v is None else (v.base, dict(v.fixed))


def make(name: str, S: int, N: int, M: int | None = None, costs: CostModel | None = None, **params) -> Timeline:
    """The timeline of schedule or variant ``name`` with one signature for all: N microbatches
    on S ranks, M per flush where the schedule reads M, the other fields from ``params`` or the
    schedule's defaults (:meth:`rpd.registry.entry.ScheduleEntry.make`); no D wrapping, no T."""
    base, fixed = variant(name)
    return SCHEDULES[base].make(S, N, M, costs, fixed | params)


def timeline(
    name: str, S: int, N: int, M: int, costs: CostModel | None = None, values: int = 0, chunks: int | None = None
) -> Timeline:
    """``build`` with the schedule's defaults for every field but S, N and M (and a variant's
    fixed fields, :data:`VARIANTS`): the plan's schedule maker (``rpd.model.plan.Maker``).
    ``chunks`` sets the chunks per rank of a schedule whose entry makes them a parameter
    (``chunks_per_rank="v"``: interleaved) and is ignored by the others."""
    base, fixed = variant(name)
    per_rank = SCHEDULES[base].chunks_per_rank
    if chunks is not None and isinstance(per_rank, str):
        fixed[per_rank] = chunks
    return build(base, ScheduleParams(S=S, N=N, M=M, params=fixed), costs, values)


def searched(names: Iterable[str]) -> list[Searched]:
    """The facts the N-workers search (:mod:`rpd.model.search3d`) reads of each schedule."""
    out = []
    for name in names:
        base, _ = variant(name)
        e = SCHEDULES[base]
        out.append(Searched(name, synchronous=e.synchronous, chunked=isinstance(e.chunks_per_rank, str)))
    return out


def build(name: str, params: ScheduleParams, costs: CostModel | None = None, values: int = 0) -> Timeline:
    """The timeline of schedule ``name``: N microbatches, or under ``params.T`` the smallest N
    (whole flushes for flush schedules) whose timeline reaches T ticks."""
    entry = SCHEDULES[name]
    p = resolve(name, params)
    if p.T is None:
        return _make(entry, p, required("N", p.N), costs, values)
    step = required("M", p.M) if entry.flush else 1
    return simtime.smallest_n_reaching(p.T, lambda q: _make(entry, p, q * step, costs, values))


def _qualify(message: str, entry: ScheduleEntry, prefix: str) -> str:
    """The library names its arguments (``M must be >= 1``); give them their config path."""
    names = ("S", "N", "T", *entry.fields, *entry.own_names)
    return qualify(message, {f: f for f in names} | dict(entry.aliases), prefix)


def _check_own(entry: ScheduleEntry, own: tuple, prefix: str) -> None:
    """The schedule's own int and bool parameters, by their annotations (the rest are its
    constructor's to check): an int >= 1 (or the field's ``metadata["minimum"]``), a bool."""
    if entry.params_type is None:
        return
    hints = typing.get_type_hints(entry.params_type)
    values = dict(own)
    for f in own_fields(entry.params_type):
        value, kinds = values[f.name], set(typing.get_args(hints[f.name])) or {hints[f.name]}
        if value is None and type(None) in kinds:
            continue
        if kinds - {type(None)} == {bool}:
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{prefix}{f.name} must be a bool, got {value!r}")
        elif kinds - {type(None)} == {int}:
            check_int(f"{prefix}{f.name}", value, f.metadata.get("minimum", 1))


def check_schedule(
    name: str, params: ScheduleParams, costs: CostModel | None = None, values: int = 0, prefix: str = ""
) -> Timeline:
    """Every check of schedule ``name`` with ``params`` under ``costs``, before any work: the
    integer fields, N in whole flushes, and the constructor's own constraints (M >= S - 1 for
    2BW, even S for Chimera, Megatron's rules for interleaved, costs that cannot be split, ...)
    on its smallest instance, which is returned. Errors name fields as ``prefix + field``."""
    entry = _entry_of(name, prefix)
    check_int(f"{prefix}S", params.S)
    if params.T is None:
        check_int(f"{prefix}N", params.N)
    else:
        check_int(f"{prefix}T", params.T)
    try:
        p = resolve(name, params)
    except TypeError as exc:  # a parameter of its own it does not have
        raise TypeError(f"{prefix}{exc}") from None
    for f in entry.fields:
        check_int(f"{prefix}{f}", getattr(p, f))
    _check_own(entry, p.params, prefix)
    if params.D is not None:
        check_int(f"{prefix}D", params.D)
        if params.D > 1 and not entry.flush:
            raise ValueError(f"{prefix}D > 1 needs a schedule with a flush, got {name}")
    if params.local_steps is not None:
        check_int(f"{prefix}local_steps", params.local_steps)
        if params.local_steps > 1 and not entry.flush:
            raise ValueError(f"{prefix}local_steps > 1 needs a schedule with a flush, got {name}")
        if params.local_steps > 1 and params.D in (None, 1):
            raise ValueError(f"{prefix}local_steps > 1 needs {prefix}D > 1 pipelines to average, got D=1")
    if entry.flush and p.T is None and required("N", p.N) % required("M", p.M):
        raise ValueError(f"{prefix}N must be a whole number of flushes of {prefix}M microbatches, got N={p.N}, M={p.M}")
    n = required("M", p.M) if entry.flush else 1
    try:
        return _make(entry, p, n, costs, values)
    except (ValueError, TypeError) as exc:
        message = _qualify(str(exc), entry, prefix)
        if n != params.N:  # the smallest instance's N is not the user's: say what it means
            message = message.replace(f", {prefix}N={n}", f" with only {n} microbatch{'es' if n > 1 else ''}")
        raise type(exc)(message if message.startswith(name) else f"schedule {name}: {message}") from exc
