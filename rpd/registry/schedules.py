"""Schedules by name (the schedule half of :mod:`rpd.registry`): :class:`ScheduleParams`, the
registered :class:`ScheduleEntry` of every schedule, and the timeline of a name and its
parameters under a cost model (:func:`build`), checked before any work (:func:`check_schedule`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rpd.analysis import simtime
from rpd.schedules import Timeline, family
from rpd.schedules.costs import CostModel
from rpd.schedules.data_parallel import data_parallel
from rpd.validation import check_choice, check_int, qualify


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
    D: int | None = None  # data-parallel pipelines around a synchronous schedule (default 1; issue 29)
    overlap_allreduce: bool | None = None  # with D > 1: the all-reduce starts during the drain
    local_steps: int | None = None  # with D > 1: flushes between parameter averagings (default 1: DDP)
    cut: str | None = None  # with T: "end" (the point after T ticks, the default) or "authors"
    # (after T - 1: the authors' curve[:T]; rpd.analysis.simtime.cut_to)


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
NOT_INT = (
    "overlapped",
    "post_validation",
    "clip",
    "rollback_p",
    "rollback_trace",
    "replicas",
    "advance",
    "elastic",
    "concat",
)  # checked by the constructor


@dataclasses.dataclass(frozen=True)
class ScheduleEntry:
    """One schedule: ``build(S, N, costs=..., **{f: params.f for f in fields})`` -> Timeline.

    ``flush``: N is a whole number of flushes (minibatches) of M microbatches. ``allreduce``:
    ``build`` also takes ``values=`` (numbers averaged / all-reduced per stage, for its
    ``CostModel.allreduce`` cost). ``defaults`` override :data:`DEFAULTS`; ``aliases`` map the
    names the constructor's errors use to fields (Chimera calls S "D")."""

    name: str
    build: Callable[..., Timeline]
    fields: tuple[str, ...] = ()
    flush: bool = False
    allreduce: bool = False
    defaults: Mapping[str, Callable[[int], Any]] = dataclasses.field(default_factory=dict)
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    doc: str = ""
    blocks: Callable[[int], int] | None = None  # objective blocks it trains, from S (None: S)


SCHEDULES: dict[str, ScheduleEntry] = {}


def register_schedule(entry: ScheduleEntry) -> ScheduleEntry:
    unknown = set(entry.fields) - set(DEFAULTS)
    if unknown:
        raise ValueError(
            f"schedule {entry.name!r}: unknown fields {sorted(unknown)} (ScheduleParams has {sorted(DEFAULTS)})"
        )
    if entry.flush and "M" not in entry.fields:
        raise ValueError(f"schedule {entry.name!r}: a flush schedule needs the field M")
    SCHEDULES[entry.name] = entry
    return entry


for _entry in (
    ScheduleEntry("pipedream", family.pipedream, ("noam",), doc="PipeDream async 1F1B, weight stashing"),
    ScheduleEntry("local_sgd", family.local_sgd, ("R", "H"), allreduce=True, doc="LocalSGD rounds"),
    ScheduleEntry("gpipe", family.gpipe, ("M",), flush=True, doc="GPipe fill-drain"),
    ScheduleEntry("1f1b", family.one_f_one_b, ("M",), flush=True, doc="1F1B with flush"),
    ScheduleEntry(
        "interleaved", family.interleaved, ("M", "v", "group"), flush=True, doc="interleaved 1F1B, v chunks per rank"
    ),
    ScheduleEntry("zb_h1", family.zb_h1, ("M",), flush=True, doc="zero bubble H1"),
    ScheduleEntry(
        "zb_h2",
        family.zb_h2,
        ("M", "overlapped", "post_validation", "clip", "rollback_p", "rollback_trace"),
        flush=True,
        doc="zero bubble H2 (greedy); post_validation: sail-sg's eager steps and rollbacks",
    ),
    ScheduleEntry(
        "searched",
        family.searched,
        ("M", "overlapped"),
        flush=True,
        doc="found by search under a 2S cap (rpd.schedules.search, heuristic)",
    ),
    ScheduleEntry("zb_v", family.zb_v, ("M", "overlapped"), flush=True, doc="zero bubble V"),
    ScheduleEntry(
        "dualpipe_v", family.dualpipe_v, ("M",), flush=True, defaults={"M": lambda S: 2 * S}, doc="DualPipeV"
    ),
    ScheduleEntry(
        "chimera",
        family.chimera,
        ("M", "concat"),
        flush=True,
        allreduce=True,
        aliases={"D": "S"},
        doc="Chimera, two pipelines",
    ),
    ScheduleEntry("pipedream_2bw", family.pipedream_2bw, ("M",), flush=True, doc="PipeDream-2BW"),
    ScheduleEntry("pipemare", family.pipemare, (), doc="PipeMare: PD's order, no stashing"),
):
    register_schedule(_entry)


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
    kept = {
        "S": params.S,
        "N": params.N if params.T is None else None,
        "T": params.T,
        "cut": None if params.T is None else (params.cut or "end"),
    }
    for f in entry.fields:
        value = getattr(params, f)
        kept[f] = entry.defaults.get(f, DEFAULTS[f])(params.S) if value is None else value
    if params.D not in (None, 1):  # D pipelines (rpd.schedules.data_parallel); D = 1 keeps old keys
        kept.update(D=params.D, overlap_allreduce=bool(params.overlap_allreduce))
        if params.local_steps not in (None, 1):  # local_steps = 1 keeps old keys too
            kept.update(local_steps=params.local_steps)
    return ScheduleParams(**kept)


def _make(entry: ScheduleEntry, p: ScheduleParams, N: int, costs: CostModel | None, values: int) -> Timeline:
    kw = {f: getattr(p, f) for f in entry.fields}
    if entry.allreduce:
        kw["values"] = values
    tl = entry.build(p.S, N, costs=costs, **kw)
    if p.D not in (None, 1):
        tl = data_parallel(tl, p.D, costs, values, bool(p.overlap_allreduce), p.local_steps or 1)
    return tl


# Named variants: a registered schedule with some of its fields fixed, accepted wherever a list of
# schedules is given by name (the plan's ``schedules=``, E9's and E10's rows).
VARIANTS: dict[str, tuple[str, dict]] = {
    "zb_h2_pv": ("zb_h2", {"post_validation": True}),  # sail-sg's optimizer post-validation
    "chimera_fd": ("chimera", {"concat": "forward_doubling"}),  # M > S (rpd.schedules.bidirectional)
    "chimera_bh": ("chimera", {"concat": "backward_halving"}),  # even costs.F, costs.B
}


def variant(name: str) -> tuple[str, dict]:
    """(registered schedule, fixed fields) of a schedule or variant name."""
    return VARIANTS.get(name, (name, {}))


def timeline(name: str, S: int, N: int, M: int, costs: CostModel | None = None, values: int = 0) -> Timeline:
    """``build`` with the schedule's defaults for every field but S, N and M (and a variant's
    fixed fields, :data:`VARIANTS`): the plan's schedule maker (``rpd.model.plan.Maker``)."""
    base, fixed = variant(name)
    return build(base, ScheduleParams(S=S, N=N, M=M, **fixed), costs, values)


def build(name: str, params: ScheduleParams, costs: CostModel | None = None, values: int = 0) -> Timeline:
    """The timeline of schedule ``name``: N microbatches, or under ``params.T`` the smallest N
    (whole flushes for flush schedules) whose timeline reaches T ticks."""
    entry = SCHEDULES[name]
    p = resolve(name, params)
    if p.T is None:
        return _make(entry, p, p.N, costs, values)
    step = p.M if entry.flush else 1
    return simtime.smallest_n_reaching(p.T, lambda q: _make(entry, p, q * step, costs, values))


def _qualify(message: str, entry: ScheduleEntry, prefix: str) -> str:
    """The library names its arguments (``M must be >= 1``); give them their config path."""
    return qualify(message, {f: f for f in ("S", "N", "T", *entry.fields)} | dict(entry.aliases), prefix)


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
    p = resolve(name, params)
    for f in entry.fields:
        value = getattr(p, f)
        if f in ("overlapped", "post_validation"):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{prefix}{f} must be a bool, got {value!r}")
        elif f in NOT_INT:
            pass
        else:
            check_int(f"{prefix}{f}", value)
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
    if entry.flush and p.T is None and p.N % p.M:
        raise ValueError(f"{prefix}N must be a whole number of flushes of {prefix}M microbatches, got N={p.N}, M={p.M}")
    n = p.M if entry.flush else 1
    try:
        return _make(entry, p, n, costs, values)
    except (ValueError, TypeError) as exc:
        message = _qualify(str(exc), entry, prefix)
        if n != params.N:  # the smallest instance's N is not the user's: say what it means
            message = message.replace(f", {prefix}N={n}", f" with only {n} microbatch{'es' if n > 1 else ''}")
        raise type(exc)(message if message.startswith(name) else f"schedule {name}: {message}") from exc


for _entry in (  # the survey's remaining rows (issue 33; rpd.schedules.frontier)
    ScheduleEntry(
        "gems",
        family.gems,
        ("M",),
        flush=True,
        allreduce=True,
        aliases={"D": "S"},
        defaults={"M": lambda S: S + S % 2},
        doc="GEMS, two replicas in opposite directions",
    ),
    ScheduleEntry(
        "ampnet", family.ampnet, ("M",), flush=True, doc="AMPNet: async 1F1B, no stashing, a step every M backwards"
    ),
    ScheduleEntry(
        "wpipe",
        family.wpipe,
        ("M",),
        flush=True,
        doc="WPipe (reconstruction): two interleaved groups, 2BW delay on the input side",
        blocks=lambda S: 2 * S,
    ),
    ScheduleEntry(
        "avgpipe",
        family.avgpipe,
        ("M", "pipelines", "advance", "elastic"),
        flush=True,
        defaults={"M": lambda S: S + S % 2},
        doc="AvgPipe (reconstruction): parallel pipelines, elastic averaging, advance forward",
    ),
):
    register_schedule(_entry)


register_schedule(  # issue 29: PipeDream's replicated stages (rpd.schedules.round_robin)
    ScheduleEntry(
        "pipedream_rr",
        family.pipedream_rr,
        ("replicas",),
        allreduce=True,
        doc="PipeDream 1F1B-RR: stage g on replicas[g] workers, microbatches round-robin, weights all-reduced",
    )
)
