"""Registries of pipeline schedules and training methods: the entry points' one dispatch.

A run is (method, schedule, costs). The schedule registry turns plain values
(:class:`ScheduleParams`) and a :class:`~rpd.costs.CostModel` into a timed
:class:`~rpd.schedules.Timeline`; the method registry trains an objective on it for a whole
step-size grid and one seed and returns a :class:`MethodRun` (the Result, both time axes and the
run's summary numbers). Adding a schedule is one :func:`register_schedule` call (plus its config
file ``configs/schedule/<name>.yaml``); adding a method is one :func:`register_method` call.

:func:`prepare` checks a (method, schedule, options, costs) choice before any work and returns
it resolved (defaults filled in, fields the run does not read set to None, which is what a
results-store key wants). Errors name the config field through ``prefix`` (``schedule.M``)
and reuse the library's own ValueErrors: the schedule's smallest instance (one flush) is built
under the run's costs, and the parameter names in whatever its constructor raised are qualified.

Only plain values cross this module; nothing here imports hydra.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rpd import delays, simtime
from rpd.costs import CostModel
from rpd.objectives.base import Objective
from rpd.results import Result
from rpd.schedules import Timeline, family
from rpd.validation import check_choice, check_int, check_real, qualify

__all__ = [
    "METHODS", "SCHEDULES", "MethodEntry", "MethodOptions", "MethodRun", "Pipeline", "RunSpec",
    "ScheduleEntry", "ScheduleParams", "build", "prepare", "register_method", "register_schedule",
    "run",
]


# ================================================================== schedules


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


DEFAULTS: Mapping[str, Callable[[int], Any]] = {  # field -> its default as a function of S
    "M": lambda S: S, "v": lambda S: 2, "group": lambda S: S, "overlapped": lambda S: False,
    "noam": lambda S: S, "R": lambda S: S, "H": lambda S: 1,
}


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


SCHEDULES: dict[str, ScheduleEntry] = {}


def register_schedule(entry: ScheduleEntry) -> ScheduleEntry:
    unknown = set(entry.fields) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"schedule {entry.name!r}: unknown fields {sorted(unknown)} (ScheduleParams has "
                         f"{sorted(DEFAULTS)})")
    if entry.flush and "M" not in entry.fields:
        raise ValueError(f"schedule {entry.name!r}: a flush schedule needs the field M")
    SCHEDULES[entry.name] = entry
    return entry


for _entry in (
    ScheduleEntry("pipedream", family.pipedream, ("noam",), doc="PipeDream async 1F1B, weight stashing"),
    ScheduleEntry("local_sgd", family.local_sgd, ("R", "H"), allreduce=True, doc="LocalSGD rounds"),
    ScheduleEntry("gpipe", family.gpipe, ("M",), flush=True, doc="GPipe fill-drain"),
    ScheduleEntry("1f1b", family.one_f_one_b, ("M",), flush=True, doc="1F1B with flush"),
    ScheduleEntry("interleaved", family.interleaved, ("M", "v", "group"), flush=True,
                  doc="interleaved 1F1B, v chunks per rank"),
    ScheduleEntry("zb_h1", family.zb_h1, ("M",), flush=True, doc="zero bubble H1"),
    ScheduleEntry("zb_h2", family.zb_h2, ("M", "overlapped"), flush=True, doc="zero bubble H2 (greedy)"),
    ScheduleEntry("zb_v", family.zb_v, ("M", "overlapped"), flush=True, doc="zero bubble V"),
    ScheduleEntry("dualpipe_v", family.dualpipe_v, ("M",), flush=True, defaults={"M": lambda S: 2 * S},
                  doc="DualPipeV"),
    ScheduleEntry("chimera", family.chimera, ("M",), flush=True, allreduce=True, aliases={"D": "S"},
                  doc="Chimera, two pipelines"),
    ScheduleEntry("pipedream_2bw", family.pipedream_2bw, ("M",), flush=True, doc="PipeDream-2BW"),
    ScheduleEntry("pipemare", family.pipemare, (), doc="PipeMare: PD's order, no stashing"),
):
    register_schedule(_entry)


def _entry_of(name: str, prefix: str = "") -> ScheduleEntry:
    check_choice(f"{prefix}name", name, SCHEDULES)
    return SCHEDULES[name]


def resolve(name: str, params: ScheduleParams) -> ScheduleParams:
    """``params`` as schedule ``name`` runs them: its fields' defaults filled in, every field it
    does not read None (N too when T is set)."""
    entry = SCHEDULES[name]
    kept = {"S": params.S, "N": params.N if params.T is None else None, "T": params.T}
    for f in entry.fields:
        value = getattr(params, f)
        kept[f] = entry.defaults.get(f, DEFAULTS[f])(params.S) if value is None else value
    return ScheduleParams(**kept)


def _make(entry: ScheduleEntry, p: ScheduleParams, N: int, costs: CostModel | None, values: int) -> Timeline:
    kw = {f: getattr(p, f) for f in entry.fields}
    if entry.allreduce:
        kw["values"] = values
    return entry.build(p.S, N, costs=costs, **kw)


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


def check_schedule(name: str, params: ScheduleParams, costs: CostModel | None = None, values: int = 0,
                   prefix: str = "") -> Timeline:
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
        if f == "overlapped":
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{prefix}overlapped must be a bool, got {value!r}")
        else:
            check_int(f"{prefix}{f}", value)
    if entry.flush and p.T is None and p.N % p.M:
        raise ValueError(f"{prefix}N must be a whole number of flushes of {prefix}M microbatches, "
                         f"got N={p.N}, M={p.M}")
    try:
        return _make(entry, p, p.M if entry.flush else 1, costs, values)
    except (ValueError, TypeError) as exc:
        message = _qualify(str(exc), entry, prefix)
        raise type(exc)(message if message.startswith(name) else f"schedule {name}: {message}") from exc


# ================================================================== methods


@dataclasses.dataclass(frozen=True)
class MethodOptions:
    """A method's options; each method reads ``stride`` and its own ``options`` fields."""

    stride: int = 1  # record every `stride` time steps (ticks) or block updates
    delta: int | None = None  # RPD: delay bound (default PD's floor(S^2 - S/2))
    delays: Any = "uniform"  # RPD: uniform | max | zero | pd, or a [K, S] table
    block_order: Any = "uniform"  # RPD: uniform | cyclic | pd, or an array
    batch_order: Any = "uniform"  # RPD: uniform | cyclic | pd, or an array
    predict: bool = False  # pipeline (PipeDream, PipeMare): forward at predicted weights
    ema: float | None = None  # pipeline: velocity EMA factor (None: the library's 0.9)
    t1: bool = False  # pipeline (PipeMare): step-size warm-up by delay
    t1_window: int | None = None  # pipeline (PipeMare): T1's window in updates
    t2: bool = False  # pipeline (PipeMare): backward weights extrapolated by the velocity


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """A resolved schedule choice, ready to build: name, parameters, costs, and the number of
    values averaged / all-reduced per stage (None: the objective's largest block)."""

    name: str
    params: ScheduleParams
    costs: CostModel | None = None
    values: int | None = None

    def timeline(self, obj: Objective | None = None) -> Timeline:
        values = self.values if self.values is not None else (max(obj.layout.sizes) if obj is not None else 0)
        return build(self.name, self.params, self.costs, values)


@dataclasses.dataclass(frozen=True)
class MethodRun:
    """One method call on a whole γ grid for one seed."""

    result: Result
    sim_time: np.ndarray | None  # int [P]: ticks completed at each recorded point; None: no timeline
    block_update: np.ndarray  # int [P]: block updates completed at each recorded point
    extra: dict  # summary numbers: N, K, T, delay statistics, bubbles, ...


@dataclasses.dataclass(frozen=True)
class MethodEntry:
    """One method: ``run(obj, pipeline, gammas, seed, options) -> MethodRun``.

    ``schedules``: the schedules it runs, the first being its default (None: every registered
    schedule, default ``default_schedule``). ``options``: the :class:`MethodOptions` fields it
    reads besides ``stride``. ``resolve(options, S)`` fills option defaults that depend on S."""

    name: str
    run: Callable[[Objective, Pipeline, list, int, MethodOptions], MethodRun]
    schedules: tuple[str, ...] | None = None
    options: tuple[str, ...] = ()
    resolve: Callable[[MethodOptions, int], MethodOptions] | None = None
    default_schedule: str = "pipedream"
    doc: str = ""


METHODS: dict[str, MethodEntry] = {}


def register_method(entry: MethodEntry) -> MethodEntry:
    fields = {f.name for f in dataclasses.fields(MethodOptions)}
    unknown = set(entry.options) - fields
    if unknown:
        raise ValueError(f"method {entry.name!r}: unknown options {sorted(unknown)} "
                         f"(MethodOptions has {sorted(fields)})")
    METHODS[entry.name] = entry
    return entry


def _cut(res: Result, T: int | None) -> Result:
    return res if T is None else simtime.cut_to(res, T)


def _pd(obj, pipe: Pipeline, gammas, seed: int, o: MethodOptions) -> MethodRun:
    from rpd import methods

    tl = pipe.timeline(obj)
    res = _cut(methods.pipedream(obj, tl, gammas, seed=seed, stride=o.stride), pipe.params.T)
    extra = dict(N=tl.N, K=tl.K, T=tl.T, noam=tl.noam, **delays.table_summary(delays.delay_table(tl)))
    return MethodRun(res, res.axis, simtime.block_updates_at(tl.update_time, res.axis), extra)


def _local_sgd(obj, pipe: Pipeline, gammas, seed: int, o: MethodOptions) -> MethodRun:
    from rpd import methods

    tl = pipe.timeline(obj)
    lm = obj.name == "nanochat"  # the LM is evaluated at round ends only
    res = methods.local_sgd(obj, tl, gammas, seed=seed, track_time=not lm)
    if not lm:
        res = _cut(res, pipe.params.T)
        if o.stride > 1:
            keep = (res.axis % o.stride == 0) | (res.axis == res.axis[-1])
            res = dataclasses.replace(res, axis=res.axis[keep], curve=res.curve[:, keep])
    extra = dict(N=tl.N, K=tl.K, T=tl.T, R=tl.R, H=tl.H, **delays.table_summary(np.zeros(1)))
    return MethodRun(res, res.axis, simtime.block_updates_at(tl.update_time, res.axis), extra)


def _sgd(obj, pipe: Pipeline, gammas, seed: int, o: MethodOptions) -> MethodRun:
    from rpd import methods

    N = pipe.params.N if pipe.params.T is None else pipe.timeline(obj).N  # (ii): the schedule's N at T
    res = methods.sgd(obj, N, gammas, seed=seed, stride=o.stride)
    return MethodRun(res, None, res.axis, {"N": int(res.meta["N"]), "K": int(res.meta["K"])})


def _rpd(obj, pipe: Pipeline, gammas, seed: int, o: MethodOptions) -> MethodRun:
    """RPD with PipeDream's K (and PD's time of update k, to place RPD on the time axis);
    ``"pd"`` as delays / block_order / batch_order takes PD's table / order."""
    from rpd import methods

    tl = pipe.timeline(obj)
    K = simtime.block_updates_in(tl)
    pd_values = {"delays": lambda: delays.delay_table(tl), "block_order": lambda: tl.update_stage,
                 "batch_order": lambda: tl.update_mb % obj.n_batches}
    opts = {f: pd_values[f]() if _is(getattr(o, f), "pd") else getattr(o, f) for f in pd_values}
    res = methods.rpd(obj, K, gammas, o.delta, seed=seed, stride=o.stride, **opts)
    extra = {"N": tl.N, "K": K, "T": tl.T, "delta": int(o.delta)}
    if _is(o.delays, "pd"):
        extra.update(delays.table_summary(opts["delays"]))
    return MethodRun(res, simtime.sim_time_at(tl.update_time, res.axis), res.axis, extra)


def _is(value, name: str) -> bool:
    return isinstance(value, str) and value == name


def _rpd_defaults(o: MethodOptions, S: int) -> MethodOptions:
    from rpd.theory import pd_delta

    return o if o.delta is not None else dataclasses.replace(o, delta=pd_delta(S))


def timeline_summary(tl: Timeline) -> dict:
    """A timeline's SPEC §10.3 scalars for a run's summary (maxima over ranks)."""
    return {"bubble/f_total": tl.bubble_ratio(), "bubble/r_ideal": tl.bubble_overhead(),
            "period": tl.period(), "activations/peak": float(np.max(tl.peak_activations())),
            "weights/peak": float(np.max(tl.weight_memory()))}


def _pipeline(obj, pipe: Pipeline, gammas, seed: int, o: MethodOptions) -> MethodRun:
    """Any schedule with its own semantics (``rpd.methods.train``), curves against ticks."""
    from rpd import methods

    tl = pipe.timeline(obj)
    if tl.kind == "local_sgd":  # train() hands LocalSGD to methods.local_sgd; keep its stride rule
        out = _local_sgd(obj, pipe, gammas, seed, o)
        return dataclasses.replace(out, extra=dict(out.extra, schedule=pipe.name, **timeline_summary(tl)))
    res = methods.train(obj, tl, gammas, seed=seed, stride=o.stride, axis="sim_time", predict=o.predict,
                        ema=o.ema, t1=o.t1, t1_window=o.t1_window, t2=o.t2)
    times = res.traces.pop("update_time")  # the tick each update lands, per the schedule's semantics
    res = _cut(res, pipe.params.T)
    extra = dict(schedule=pipe.name, N=tl.N, K=len(times), T=tl.T, M=tl.M, v=tl.v, **timeline_summary(tl))
    return MethodRun(res, res.axis, simtime.block_updates_at(times, res.axis), extra)


for _method in (
    MethodEntry("pd", _pd, ("pipedream",), doc="PipeDream from its timeline"),
    MethodEntry("rpd", _rpd, ("pipedream",), ("delta", "delays", "block_order", "batch_order"),
                resolve=_rpd_defaults, doc="Randomized PipeDream with PD's K"),
    MethodEntry("sgd", _sgd, ("pipedream",), doc="minibatch SGD (N, or PD's N at T)"),
    MethodEntry("localsgd", _local_sgd, ("local_sgd",), doc="LocalSGD from its timeline"),
    MethodEntry("pipeline", _pipeline, None, ("predict", "ema", "t1", "t1_window", "t2"),
                doc="any registered schedule, its own semantics"),
):
    register_method(_method)


# ================================================================== a whole run


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """A checked, resolved (method, schedule, options, costs) choice."""

    method: str
    pipeline: Pipeline
    options: MethodOptions


def _check_options(entry: MethodEntry, o: MethodOptions, tl: Timeline, prefix: str) -> None:
    check_int(f"{prefix}stride", o.stride)
    used = set(entry.options)
    if "delta" in used:
        check_int(f"{prefix}delta", o.delta, 0)
    for f in ("predict", "t1", "t2"):
        if f in used and not isinstance(getattr(o, f), (bool, np.bool_)):
            raise TypeError(f"{prefix}{f} must be a bool, got {getattr(o, f)!r}")
    if "t1_window" in used and o.t1_window is not None:
        check_int(f"{prefix}t1_window", o.t1_window)
    if "ema" in used and o.ema is not None and not 0.0 <= check_real(f"{prefix}ema", o.ema, allow_zero=True) < 1.0:
        raise ValueError(f"{prefix}ema must lie in [0, 1), got {o.ema}")
    if entry.name == "pipeline":  # which options the timeline's semantics has (rpd.methods.train)
        from rpd.methods import OPTIONS

        allowed = OPTIONS.get(tl.kind, ())
        for f in entry.options:
            value = getattr(o, f)
            if f not in allowed and value not in (None, False):
                raise ValueError(f"{prefix}{f}={value!r} does not apply to schedule {tl.kind} "
                                 f"(its options: {list(allowed) or 'none'})")


def prepare(method: str, schedule: str | None, params: ScheduleParams, options: MethodOptions = MethodOptions(),
            costs: CostModel | None = None, values: int | None = None, *, method_prefix: str = "",
            schedule_prefix: str = "") -> RunSpec:
    """Check a run's choice before any work (errors name ``method_prefix + field`` and
    ``schedule_prefix + field``) and resolve it: ``schedule=None`` is the method's own schedule;
    defaults are filled in and what the run does not read is None."""
    check_choice(f"{method_prefix}name", method, METHODS)
    entry = METHODS[method]
    name = schedule if schedule is not None else (entry.schedules or (entry.default_schedule,))[0]
    _entry_of(name, schedule_prefix)
    if entry.schedules is not None and name not in entry.schedules:
        raise ValueError(f"{schedule_prefix}name={name!r}: method {method} runs {list(entry.schedules)} only "
                         f"(method=pipeline trains every registered schedule)")
    if values is not None:
        values = check_int("values", values, 0)
    smallest = check_schedule(name, params, costs, values or 0, prefix=schedule_prefix)
    keep = {"stride", *entry.options}
    resolved = MethodOptions(**{f.name: getattr(options, f.name) if f.name in keep else None
                                for f in dataclasses.fields(MethodOptions)})
    if entry.resolve is not None:
        resolved = entry.resolve(resolved, params.S)
    _check_options(entry, resolved, smallest, method_prefix)
    return RunSpec(method, Pipeline(name, resolve(name, params), costs, values), resolved)


def run(spec: RunSpec, obj: Objective, gammas, seed: int = 0) -> MethodRun:
    """Train ``obj`` as ``spec`` says for the whole γ grid and one seed."""
    return METHODS[spec.method].run(obj, spec.pipeline, gammas, seed, spec.options)
