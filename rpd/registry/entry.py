"""A schedule is one object: :class:`ScheduleEntry`, the only per-schedule table in rpd.

An entry holds every fact about one schedule that code outside its own module reads: how to build
its timeline (one signature for all, :meth:`ScheduleEntry.make`), which parameters it takes and
their defaults, whether it has a flush, splits the backward, how many model chunks a rank holds,
its training semantics (an :class:`rpd.train.semantics.Semantics` value handed to
:func:`rpd.train.methods.train`), how it is drawn (label, colour, marker) and where it comes
from (paper, public code, whether rpd's order is a labelled reconstruction). Studies, plotting,
the plan and the entry points read entries; none of them compares a schedule's name.

Adding a schedule is one module (its order and constructor), one :func:`register_schedule` call
and one ``configs/schedule/<name>.yaml`` (docs/architecture.md#adding-a-schedule).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from rpd.schedules import Timeline
from rpd.schedules.costs import CostModel
from rpd.train.semantics import SYNCHRONOUS, Semantics


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
DEFAULTS: Mapping[str, Callable[[int], Any]] = {"M": lambda S: S}  # shared field -> its default as a function of S


def own_fields(params_type: type | None) -> tuple[dataclasses.Field, ...]:
    """The fields of a schedule's own parameters (none without a ``params_type``)."""
    return () if params_type is None else dataclasses.fields(params_type)


@dataclasses.dataclass(frozen=True)
class Source:
    """Where a schedule comes from: the paper and the public code its order was read from."""

    paper: str
    code: str = ""  # "owner/repo: path" of the public implementation read for meaning; "" if none


@dataclasses.dataclass(frozen=True)
class ScheduleEntry:
    """One schedule. ``build(S, N, costs=..., M=..., **own)`` -> Timeline (and ``values=``
    when ``allreduce``); :meth:`make` is the one signature every caller uses.

    ``fields``: the shared fields it reads besides S and N (``("M",)`` or none).
    ``params_type``: a frozen dataclass of the schedule's own parameters (interleaved's v and
    group, ZB-H2's post-validation knobs, ...), each with its default; ``build`` receives them as
    keywords, its config is ``schedule.<field>`` (``experiments`` derives the schema from it). A
    ``resolve(S)`` method fills defaults that depend on S; int fields are checked >= 1 (>= the
    field's ``metadata["minimum"]``) and bool fields as bools before any work, the rest by the
    constructor. ``flush``: N is a whole number of flushes (minibatches) of M microbatches.
    ``allreduce``: ``build`` also takes ``values=`` (numbers averaged / all-reduced per stage,
    for the cost model's all-reduce). ``defaults`` override :data:`DEFAULTS` (M's);
    ``aliases`` map the names the constructor's errors use to fields (Chimera calls S "D").
    ``blocks(S)``: the objective blocks it trains (None: S). ``semantics``: how it trains
    (:mod:`rpd.train.semantics`). ``chunks_per_rank``: model chunks a rank holds, a number or
    the own field that sets it ("v")."""

    name: str
    build: Callable[..., Timeline]
    fields: tuple[str, ...] = ()
    flush: bool = False
    allreduce: bool = False
    defaults: Mapping[str, Callable[[int], Any]] = dataclasses.field(default_factory=dict)
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    doc: str = ""
    blocks: Callable[[int], int] | None = None
    # what it is
    synchronous: bool = True  # every flush's gradients at one weight version (minibatch SGD)
    split_backward: bool = False  # B split into I (input) and W (weights)
    chunks_per_rank: int | str = 1
    semantics: Semantics = SYNCHRONOUS
    params_type: type | None = None
    # how it is drawn and where it comes from
    label: str = ""  # display name in figures and tables ("" : the name)
    short: str = ""  # compact label for dense legends ("" : the label)
    colour: str = "0.4"
    marker: str = "o"
    source: Source | None = None
    reconstruction: bool = False  # rpd's order is a reconstruction, not read from the source

    @property
    def title(self) -> str:
        """The display label, marked "(reconstruction)" where rpd reconstructed the order."""
        base = self.label or self.name
        return f"{base} (reconstruction)" if self.reconstruction else base

    @property
    def compact(self) -> str:
        return self.short or self.label or self.name

    def default(self, field: str, S: int) -> Any:
        """The default of a shared field (M) or of one of its own parameters, on S ranks."""
        if field in self.own_names:
            return self.own({}, S)[field]
        return self.defaults.get(field, DEFAULTS[field])(S)

    @property
    def own_names(self) -> tuple[str, ...]:
        """The names of the schedule's own parameters."""
        return tuple(f.name for f in own_fields(self.params_type))

    def own(self, given: Mapping[str, Any], S: int) -> dict[str, Any]:
        """The schedule's own parameters on S ranks: ``given`` over the defaults of
        :attr:`params_type` (those that depend on S filled in); a name it does not have is a
        TypeError naming it and the schedules that have it."""
        for k in given:
            if k not in self.own_names:
                owners = owners_of(k)
                where = f"a parameter of {', '.join(owners)}" if owners else "no schedule's parameter"
                own = ", ".join(self.own_names) or "none"
                raise TypeError(f"{k}: schedule {self.name} has no such parameter ({where}; {self.name}'s own: {own})")
        if self.params_type is None:
            return {}
        value = self.params_type(**given)
        if hasattr(value, "resolve"):
            value = value.resolve(S)
        return {f: getattr(value, f) for f in self.own_names}

    def make(self, S: int, N: int, M: int | None, costs: CostModel | None, params: Mapping[str, Any] = {}) -> Timeline:
        """The timeline of N microbatches on S ranks (M per flush where the schedule reads M),
        the schedule's own parameters from ``params`` or their defaults (other keys ignored)."""
        kw = {f: (M if f == "M" else params.get(f)) for f in self.fields}
        kw = {f: self.default(f, S) if v is None else v for f, v in kw.items()}
        kw.update(self.own({k: v for k, v in params.items() if k in self.own_names}, S))
        if self.allreduce:
            kw["values"] = params.get("values", 0)
        return self.build(S, N, costs=costs, **kw)


@dataclasses.dataclass(frozen=True)
class Variant:
    """A registered schedule with some fields fixed, named and drawn as a schedule of its own
    (accepted wherever a list of schedules is given by name: the plan's ``schedules=``, E9, E10)."""

    name: str
    base: str
    fixed: Mapping[str, Any]
    label: str
    short: str
    colour: str
    marker: str
    reconstruction: bool = False

    @property
    def title(self) -> str:
        return f"{self.label} (reconstruction)" if self.reconstruction else self.label

    @property
    def compact(self) -> str:
        return self.short


SCHEDULES: dict[str, ScheduleEntry] = {}
VARIANTS: dict[str, Variant] = {}


def register_schedule(entry: ScheduleEntry) -> ScheduleEntry:
    """Add ``entry`` to the registry (a later entry of the same name replaces it)."""
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
