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
    """Plain schedule parameters; a schedule reads S, N (or T) and its own ``fields``.

    ``T`` set: protocol (ii), the smallest N whose timeline reaches T ticks (in whole flushes
    for flush schedules); N is then ignored. ``None`` elsewhere: the schedule's default."""

    S: int
    N: int | None = None  # microbatches
    T: int | None = None  # target simulated time (ticks)
    M: int | None = None  # microbatches per flush / minibatch (default S; DualPipeV 2S)
    v: int | None = None  # interleaved: model chunks per rank (default 2)
    group: int | None = None  # interleaved: Megatron's microbatch group (default S)
    overlapped: bool | None = None  # ZB-H2, ZB-V: no barrier between flushes (default False)
    noam: int | None = None  # PipeDream: max microbatches in flight (default S)
    R: int | None = None  # LocalSGD: replicas (default S)
    H: int | None = None  # LocalSGD: local steps per round (default 1)
    post_validation: bool | None = None  # ZB-H2: time sail-sg's optimizer post-validation (default False)
    clip: float | None = None  # ZB-H2 post-validation: global-norm clip threshold of the semantics
    rollback_p: float | None = None  # ZB-H2 post-validation: per-flush rollback probability (default 0)
    rollback_trace: tuple | None = None  # ZB-H2 post-validation: the flushes rolled back (overrides p)
    pipelines: int | None = None  # AvgPipe: pipelines sharing the devices (default 2)
    advance: int | None = None  # AvgPipe: advance-forward depth in [0, M / pipelines] (default 0: 1F1B)
    elastic: float | None = None  # AvgPipe: EASGD's moving rate α (default 0.9 / pipelines)
    replicas: tuple | None = None  # pipedream_rr: replicas of each stage (default one each)
    concat: str | None = None  # Chimera with M > S: direct | forward_doubling | backward_halving
    D: int | None = None  # data-parallel pipelines around a synchronous schedule (default 1)
    overlap_allreduce: bool | None = None  # with D > 1: the all-reduce starts during the drain
    local_steps: int | None = None  # with D > 1: flushes between parameter averagings (default 1: DDP)
    cut: str | None = None  # with T: "end" (the point after T ticks, the default) or "authors"
    # (after T - 1: the authors' curve[:T]; rpd.analysis.simtime.cut_to)
    params: tuple[tuple[str, Any], ...] = ()  # the schedule's own parameters (ScheduleEntry.params_type), sorted


DEFAULTS: Mapping[str, Callable[[int], Any]] = {  # field -> its default as a function of S
    "M": lambda S: S,
    "v": lambda S: 2,
    "group": lambda S: S,
    "overlapped": lambda S: False,
    "noam": lambda S: S,
    "R": lambda S: S,
    "H": lambda S: 1,
    "post_validation": lambda S: False,
    "clip": lambda S: None,
    "rollback_p": lambda S: 0.0,
    "rollback_trace": lambda S: None,
    "pipelines": lambda S: 2,
    "advance": lambda S: 0,
    "elastic": lambda S: None,
    "replicas": lambda S: None,
    "concat": lambda S: "direct",
}
BOOLS = ("overlapped", "post_validation")  # checked as bools before any work
NOT_INT = ("clip", "rollback_p", "rollback_trace", "replicas", "advance", "elastic", "concat")  # the constructor checks


@dataclasses.dataclass(frozen=True)
class Source:
    """Where a schedule comes from: the paper and the public code its order was read from."""

    paper: str
    code: str = ""  # "owner/repo: path" of the public implementation read for meaning; "" if none


@dataclasses.dataclass(frozen=True)
class ScheduleEntry:
    """One schedule. ``build(S, N, costs=..., **{f: params.f for f in fields})`` -> Timeline
    (and ``values=`` when ``allreduce``); :meth:`make` is the one signature every caller uses.

    ``flush``: N is a whole number of flushes (minibatches) of M microbatches. ``allreduce``:
    ``build`` also takes ``values=`` (numbers averaged / all-reduced per stage, for the cost
    model's all-reduce). ``defaults`` override :data:`DEFAULTS`; ``aliases`` map the names the
    constructor's errors use to fields (Chimera calls S "D"). ``blocks(S)``: the objective blocks
    it trains (None: S). ``semantics``: how it trains (:mod:`rpd.train.semantics`).
    ``chunks_per_rank``: model chunks a rank holds, a number or the field that sets it ("v").
    ``params_type``: a frozen dataclass of the schedule's own parameters beyond the shared
    :class:`ScheduleParams` fields (config: ``schedule.params.<name>``), each with its default;
    ``build`` receives them as keywords."""

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
        return self.defaults.get(field, DEFAULTS[field])(S)

    def own(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The schedule's own parameters: ``given`` over the defaults of :attr:`params_type`; a
        name it does not have is a TypeError naming it."""
        if self.params_type is None:
            if given:
                raise TypeError(f"params.{sorted(given)[0]}: schedule {self.name} has no parameters of its own")
            return {}
        names = {f.name for f in dataclasses.fields(self.params_type)}
        for k in given:
            if k not in names:
                raise TypeError(
                    f"params.{k}: schedule {self.name} has no such parameter (its parameters: {sorted(names)})"
                )
        return dataclasses.asdict(self.params_type(**given))

    def make(self, S: int, N: int, M: int | None, costs: CostModel | None, params: Mapping[str, Any] = {}) -> Timeline:
        """The timeline of N microbatches on S ranks (M per flush where the schedule reads M),
        every other field (and the schedule's own parameters) from ``params`` or the defaults."""
        kw = {f: (M if f == "M" else params.get(f)) for f in self.fields}
        kw = {f: self.default(f, S) if v is None else v for f, v in kw.items()}
        own_names = () if self.params_type is None else {f.name for f in dataclasses.fields(self.params_type)}
        kw.update(self.own({k: v for k, v in params.items() if k in own_names}))
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
            f"schedule {entry.name!r}: unknown fields {sorted(unknown)} (ScheduleParams has {sorted(DEFAULTS)})"
        )
    if entry.flush and "M" not in entry.fields:
        raise ValueError(f"schedule {entry.name!r}: a flush schedule needs the field M")
    if isinstance(entry.chunks_per_rank, str) and entry.chunks_per_rank not in entry.fields:
        raise ValueError(f"schedule {entry.name!r}: chunks_per_rank names {entry.chunks_per_rank!r}, not a field")
    SCHEDULES[entry.name] = entry
    return entry


def register_variant(variant: Variant) -> Variant:
    if variant.base not in SCHEDULES:
        raise ValueError(f"variant {variant.name!r}: unknown base schedule {variant.base!r}")
    VARIANTS[variant.name] = variant
    return variant


def style(name: str) -> ScheduleEntry | Variant:
    """The entry (or variant) that says how schedule ``name`` is labelled and drawn."""
    if name in VARIANTS:
        return VARIANTS[name]
    return SCHEDULES[name]


def label_of(name: str, params: ScheduleParams) -> str:
    """The name a run of schedule ``name`` with ``params`` is tabled under: the variant of ``name``
    whose fixed fields it has (PipeDream with ``noam = 1`` is ``naive``), else ``name``."""
    own = dict(params.params)
    for v in VARIANTS.values():
        if v.base == name and all(own.get(k, getattr(params, k, None)) == x for k, x in v.fixed.items()):
            return v.name
    return name


def entry_of(name: str) -> ScheduleEntry:
    """The registered entry of a schedule or of a variant's base."""
    return SCHEDULES[VARIANTS[name].base if name in VARIANTS else name]
