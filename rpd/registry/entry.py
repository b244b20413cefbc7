"""The registry's schedule table: every schedule's :class:`~rpd.schedules.machinery.entry.ScheduleEntry`
by name (:data:`SCHEDULES`, the only per-schedule table in rpd; the entries are defined in their
own modules, ``rpd/schedules/family/<name>.py``, and collected by :mod:`rpd.registry`), the
variants (:data:`VARIANTS`), and what every run of a schedule reads (:class:`ScheduleParams`).

Adding a schedule is one module (its order, constructor, parameters and ``ENTRY``) and one
``configs/schedule/<name>.yaml`` (docs/architecture.md#adding-a-schedule).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from rpd.schedules.machinery.entry import DEFAULTS, ScheduleEntry, Variant
from rpd.train import semantics


@dataclasses.dataclass(frozen=True)
class ScheduleParams:
    """What every schedule reads: S, N (or T), M where it has one, and the data-parallel fields
    around it; the schedule's own parameters (its :attr:`ScheduleEntry.params_type`) in
    ``params``, by name.

    ``T`` set: protocol (ii), the smallest N whose timeline reaches T ticks (in whole flushes
    for flush schedules); N is then ignored. ``None`` elsewhere: the schedule's default.
    ``params`` may be given as a mapping or as the schedule's own dataclass; it is kept as
    sorted (name, value) pairs, so a ScheduleParams is hashable."""

    S: int
    N: int | None = None  # microbatches
    T: int | None = None  # target simulated time (ticks)
    M: int | None = None  # microbatches per flush / minibatch (default S; DualPipeV 2S)
    D: int | None = None  # data-parallel pipelines around a synchronous schedule (default 1)
    overlap_allreduce: bool | None = None  # with D > 1: the all-reduce starts during the drain
    local_steps: int | None = None  # with D > 1: flushes between parameter averagings (default 1: DDP)
    cut: str | None = None  # with T: "end" (the point after T ticks, the default) or "authors"
    # (after T - 1: the authors' curve[:T]; rpd.analysis.simtime.cut_to)
    params: Any = ()  # the schedule's own parameters: a mapping, its dataclass, or (name, value) pairs

    def __post_init__(self):
        own = self.params
        if dataclasses.is_dataclass(own) and not isinstance(own, type):
            own = {f.name: getattr(own, f.name) for f in dataclasses.fields(own)}
        pairs = own.items() if isinstance(own, Mapping) else own
        object.__setattr__(self, "params", tuple(sorted((str(k), _frozen(v)) for k, v in pairs)))

    def get(self, name: str, default: Any = None) -> Any:
        """A shared field or a parameter of the schedule's own by name (``default`` if neither)."""
        if name != "params" and name in _SHARED:
            return getattr(self, name)
        return dict(self.params).get(name, default)


def _frozen(value: Any) -> Any:
    """Lists as tuples (a config's ``[2, 1, 1, 1]``), so the parameters stay hashable."""
    return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


_SHARED = frozenset(f.name for f in dataclasses.fields(ScheduleParams))
SCHEDULES: dict[str, ScheduleEntry] = {}
VARIANTS: dict[str, Variant] = {}


def register_schedule(entry: ScheduleEntry) -> ScheduleEntry:
    """Add ``entry`` to the registry (a later entry of the same name replaces it), its
    ``semantics`` as the :class:`rpd.train.semantics.Semantics` value its rule names."""
    unknown = set(entry.fields) - set(DEFAULTS)
    if unknown:
        raise ValueError(
            f"schedule {entry.name!r}: unknown shared fields {sorted(unknown)} (its own go in params_type: "
            f"a frozen dataclass)"
        )
    if entry.params_type is not None and not dataclasses.is_dataclass(entry.params_type):
        raise ValueError(f"schedule {entry.name!r}: params_type must be a dataclass, got {entry.params_type!r}")
    if entry.flush and "M" not in entry.fields:
        raise ValueError(f"schedule {entry.name!r}: a flush schedule needs the field M")
    if isinstance(entry.chunks_per_rank, str) and entry.chunks_per_rank not in entry.own_names:
        raise ValueError(
            f"schedule {entry.name!r}: chunks_per_rank names {entry.chunks_per_rank!r}, not one of its parameters"
        )
    entry = dataclasses.replace(entry, semantics=semantics.rule(entry.semantics))
    SCHEDULES[entry.name] = entry
    return entry


def register_variant(variant: Variant) -> Variant:
    if variant.base not in SCHEDULES:
        raise ValueError(f"variant {variant.name!r}: unknown base schedule {variant.base!r}")
    VARIANTS[variant.name] = variant
    return variant


def owners_of(field: str) -> list[str]:
    """The registered schedules that have a parameter of their own named ``field``."""
    return [name for name, e in SCHEDULES.items() if field in e.own_names]


def style(name: str) -> ScheduleEntry | Variant:
    """The entry (or variant) that says how schedule ``name`` is labelled and drawn."""
    if name in VARIANTS:
        return VARIANTS[name]
    return SCHEDULES[name]


def label_of(name: str, params: ScheduleParams) -> str:
    """The name a run of schedule ``name`` with ``params`` is tabled under: the variant of ``name``
    whose fixed fields it has (PipeDream with ``noam = 1`` is ``naive``), else ``name``."""
    for v in VARIANTS.values():
        if v.base == name and all(params.get(k) == x for k, x in v.fixed.items()):
            return v.name
    return name


def entry_of(name: str) -> ScheduleEntry:
    """The registered entry of a schedule or of a variant's base."""
    return SCHEDULES[VARIANTS[name].base if name in VARIANTS else name]
