"""Methods by name (the method half of :mod:`rpd.registry`): :class:`MethodOptions`, the
registered :class:`MethodEntry` of every method (each trains an objective on a schedule's
timeline for a whole step-size grid and one seed and returns a :class:`MethodRun`), and a whole
run: :func:`prepare` checks and resolves a (method, schedule, options, costs) choice into a
:class:`RunSpec`, :func:`run` trains it."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from rpd.analysis import simtime
from rpd.analysis.theory import pd_delta
from rpd.objectives.base import Objective
from rpd.objectives.entry import entry_of
from rpd.registry.entry import ScheduleParams
from rpd.registry.schedules import _entry_of, build, check_schedule, resolve
from rpd.results import Result
from rpd.schedules import Timeline
from rpd.schedules.machinery import delays, memory
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import ScheduleEntry
from rpd.train import diloco, methods, optimizers, semantics, semantics_parallel, streaming_diloco
from rpd.validation import check_choice, check_int, required


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
    # None / "sgd" (plain SGD), a name of rpd.train.optimizers.OPTIMIZERS, a dict {"name": ...,
    # hyper-parameters...}, an rpd.train.optimizers.Optimizer or an optax transformation; LocalSGD:
    # every replica's inner optimizer (DiLoCo's inner AdamW)
    optimizer: Any = None
    # LocalSGD (rpd.train.diloco): the outer optimizer on the pseudo-gradient (None / "sgd": plain
    # averaging; "nesterov": DiLoCo's) and the inner state at a sync (keep | average | reset)
    outer_optimizer: Any = None
    inner_state: str | None = None
    # LocalSGD (rpd.train.streaming_diloco): Streaming DiLoCo's P fragments synced in turn, each
    # outer update landing ``overlap`` (τ) local steps late, mixed by ``mixing`` (α); 1, 0, 0: DiLoCo
    fragments: int | None = None
    overlap: int | None = None
    mixing: float | None = None


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """A resolved schedule choice, ready to build: name, parameters, costs, and the number of
    values averaged / all-reduced per stage (None: the objective's largest block)."""

    name: str
    params: ScheduleParams
    costs: CostModel | None = None
    values: int | None = None

    @property
    def entry(self) -> ScheduleEntry:
        return _entry_of(self.name)

    def timeline(self, obj: Objective | None = None) -> Timeline:
        """The timeline, built once per (pipeline, values) however often a job asks for it."""
        values = self.values if self.values is not None else (max(obj.layout.sizes) if obj is not None else 0)
        return _built(self.name, self.params, self.costs, int(values))


@functools.lru_cache(maxsize=4)  # a job's timelines; frozen values, so a hit is the same timeline
def _built(name: str, params: ScheduleParams, costs: CostModel | None, values: int) -> Timeline:
    return build(name, params, costs, values)


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
        raise ValueError(
            f"method {entry.name!r}: unknown options {sorted(unknown)} (MethodOptions has {sorted(fields)})"
        )
    METHODS[entry.name] = entry
    return entry


def _cut(res: Result, params) -> Result:
    """The curve cut at the schedule's T (protocol (ii)) by its cut rule; unchanged without T."""
    return res if params.T is None else simtime.cut_to(res, params.T, params.cut or "end")


def _pd(obj, pipe: Pipeline, gammas, seed: int, o: MethodOptions) -> MethodRun:

    tl = pipe.timeline(obj)
    res = _cut(methods.pipedream(obj, tl, gammas, seed=seed, stride=o.stride, optimizer=o.optimizer), pipe.params)
    extra = dict(N=tl.N, K=tl.K, T=tl.T, noam=tl.noam, **delays.table_summary(delays.delay_table(tl)))
    return MethodRun(res, res.axis, simtime.block_updates_at(tl.update_time, res.axis), extra)


def _local_sgd(obj, pipe: Pipeline, gammas, seed: int, o: MethodOptions) -> MethodRun:

    tl = pipe.timeline(obj)
    if _streaming(o):  # Streaming DiLoCo: fragments in turn, updates τ steps late
        res = streaming_diloco.on_timeline(
            obj,
            tl,
            gammas,
            P=o.fragments or 1,
            tau=o.overlap or 0,
            alpha=o.mixing or 0.0,
            optimizer=o.optimizer,
            outer_optimizer=o.outer_optimizer if o.outer_optimizer is not None else "sgd",
        )
        res = methods.every(_cut(res, pipe.params), o.stride)
        extra: dict[str, Any] = dict(N=tl.N, K=len(tl.update_time), T=tl.T, R=tl.R, H=tl.H, P=o.fragments or 1)
        extra["tau"] = o.overlap or 0
        return MethodRun(res, res.axis, simtime.block_updates_at(tl.update_time, res.axis), extra)
    round_ends = entry_of(obj.name).evaluated == "round_ends"  # the objective's cadence (the LM's)
    diloco_kw = dict(optimizer=o.optimizer, outer_optimizer=o.outer_optimizer, inner_state=o.inner_state or "keep")
    res = methods.local_sgd(obj, tl, gammas, seed=seed, track_time=not round_ends, **diloco_kw)
    if not round_ends:
        res = methods.every(_cut(res, pipe.params), o.stride)
    # D pipelines: the tick of every (flush, block) update; LocalSGD: of every block step
    times = res.traces.pop("update_time", tl.update_time)
    R, H = res.meta["R"], res.meta["H"]
    extra = dict(N=tl.N, K=len(times), T=tl.T, R=R, H=H, **delays.table_summary(np.zeros(1)))
    return MethodRun(res, res.axis, simtime.block_updates_at(times, res.axis), extra)


def _streaming(o: MethodOptions) -> bool:
    """Streaming DiLoCo's options set (more than one fragment, an overlap or a mixing)."""
    return (o.fragments or 1) > 1 or (o.overlap or 0) > 0 or (o.mixing or 0.0) > 0


def _sgd(obj, pipe: Pipeline, gammas, seed: int, o: MethodOptions) -> MethodRun:

    N = required("N", pipe.params.N) if pipe.params.T is None else pipe.timeline(obj).N  # (ii): the schedule's N at T
    res = methods.sgd(obj, N, gammas, seed=seed, stride=o.stride, optimizer=o.optimizer)
    return MethodRun(res, None, res.axis, {"N": int(res.meta["N"]), "K": int(res.meta["K"])})


def _rpd(obj, pipe: Pipeline, gammas, seed: int, o: MethodOptions) -> MethodRun:
    """RPD with PipeDream's K (and PD's time of update k, to place RPD on the time axis);
    ``"pd"`` as delays / block_order / batch_order takes PD's table / order."""

    tl = pipe.timeline(obj)
    K = simtime.block_updates_in(tl)
    pd_values = {
        "delays": lambda: delays.delay_table(tl),
        "block_order": lambda: tl.update_stage,
        "batch_order": lambda: tl.update_mb % obj.n_batches,
    }
    opts = {f: pd_values[f]() if _is(getattr(o, f), "pd") else getattr(o, f) for f in pd_values}
    delta = required("delta", o.delta)  # filled in by the method's resolve
    res = methods.rpd(obj, K, gammas, delta, seed=seed, stride=o.stride, optimizer=o.optimizer, **opts)
    extra: dict[str, float] = {"N": tl.N, "K": K, "T": tl.T, "delta": int(delta)}
    if _is(o.delays, "pd"):
        extra.update(delays.table_summary(opts["delays"]))
    return MethodRun(res, simtime.sim_time_at(tl.update_time, res.axis), res.axis, extra)


def _is(value, name: str) -> bool:
    return isinstance(value, str) and value == name


def _rpd_defaults(o: MethodOptions, S: int) -> MethodOptions:

    return o if o.delta is not None else dataclasses.replace(o, delta=pd_delta(S))


def timeline_summary(tl: Timeline) -> dict:
    """A timeline's scalars (docs/schedules.md#what-a-timeline-reports) for a run's summary (maxima over ranks)."""
    return {
        "bubble/f_total": tl.bubble_ratio(),
        "bubble/r_ideal": tl.bubble_overhead(),
        "period": tl.period(),
        "activations/peak": float(np.max(memory.peak_activations(tl))),
        "weights/peak": float(np.max(memory.weight_memory(tl))),
    }


def _pipeline(obj, pipe: Pipeline, gammas, seed: int, o: MethodOptions) -> MethodRun:
    """Any schedule with its own semantics (``rpd.train.methods.train``), curves against ticks."""

    tl = pipe.timeline(obj)
    sem = pipe.entry.semantics
    diloco_set = diloco.resolve_outer(o.outer_optimizer) is not None or (o.inner_state or "keep") != "keep"
    if sem.runner == "replicas" or semantics_parallel.local_rounds(tl, diloco_set):
        # train() hands LocalSGD (and D pipelines' local rounds) to methods.local_sgd; keep its stride rule
        out = _local_sgd(obj, pipe, gammas, seed, o)
        return dataclasses.replace(out, extra=dict(out.extra, schedule=pipe.name, **timeline_summary(tl)))
    res = methods.train(
        obj,
        tl,
        gammas,
        seed=seed,
        stride=o.stride,
        axis="sim_time",
        predict=o.predict,
        ema=o.ema,
        t1=o.t1,
        t1_window=o.t1_window,
        t2=o.t2,
        optimizer=o.optimizer,
        semantics=sem,
    )
    times = res.traces.pop("update_time")  # the tick each update lands, per the schedule's semantics
    res = _cut(res, pipe.params)
    extra = dict(schedule=pipe.name, N=tl.N, K=len(times), T=tl.T, M=tl.M, v=tl.v, **timeline_summary(tl))
    return MethodRun(res, res.axis, simtime.block_updates_at(times, res.axis), extra)


for _method in (
    MethodEntry("pd", _pd, ("pipedream",), doc="PipeDream from its timeline"),
    MethodEntry(
        "rpd",
        _rpd,
        ("pipedream",),
        ("delta", "delays", "block_order", "batch_order"),
        resolve=_rpd_defaults,
        doc="Randomized PipeDream with PD's K",
    ),
    MethodEntry("sgd", _sgd, ("pipedream",), doc="minibatch SGD (N, or PD's N at T)"),
    MethodEntry(
        "localsgd",
        _local_sgd,
        ("local_sgd",),
        ("outer_optimizer", "inner_state", "fragments", "overlap", "mixing"),
        doc="LocalSGD (DiLoCo with an outer optimizer; Streaming DiLoCo with fragments) from its timeline",
    ),
    MethodEntry(
        "pipeline",
        _pipeline,
        None,
        ("predict", "ema", "t1", "t1_window", "t2", "outer_optimizer", "inner_state"),
        doc="any registered schedule, its own semantics",
    ),
):
    register_method(_method)


# ================================================================== a whole run


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """A checked, resolved (method, schedule, options, costs) choice."""

    method: str
    pipeline: Pipeline
    options: MethodOptions


def _check_options(entry: MethodEntry, o: MethodOptions, tl: Timeline, sem: semantics.Semantics, prefix: str) -> None:
    check_int(f"{prefix}stride", o.stride)
    try:
        optimizer = optimizers.resolve(o.optimizer)
    except (TypeError, ValueError) as err:
        raise type(err)(str(err) if str(err).startswith("optimizer") else f"optimizer: {err}") from None
    correction = None if optimizer is None or optimizer.correction is None else optimizer.correction.name
    if correction == "dc_asgd" and sem.two_point:
        raise ValueError("optimizer.correction=dc_asgd: PipeMare's gradient reads two points; DC-ASGD needs one")
    try:
        outer = diloco.resolve_outer(o.outer_optimizer)
        inner_state = diloco.check_inner_state(o.inner_state or "keep")
    except (TypeError, ValueError) as err:
        raise type(err)(str(err)) from None
    uses_diloco = outer is not None or inner_state != "keep"
    replicas = sem.runner == "replicas"
    if uses_diloco and not replicas and not semantics_parallel.local_rounds(tl, diloco=True):
        what = f"outer_optimizer={outer.name}" if outer is not None else f"inner_state={inner_state}"
        raise ValueError(f"{what}: applies to LocalSGD (DiLoCo) and D > 1 pipelines only, not to schedule {tl.kind}")
    if correction is not None and (replicas or semantics_parallel.local_rounds(tl, uses_diloco)):
        raise ValueError(f"optimizer.correction={correction}: LocalSGD's replicas apply fresh gradients (no staleness)")
    if "delta" in entry.options:
        check_int(f"{prefix}delta", o.delta, 0)
    used = {f: getattr(o, f) for f in entry.options if f in semantics.OPTION_NAMES}
    allowed = sem.options if entry.name == "pipeline" else tuple(used)
    semantics.check_options(tl.kind, allowed, used, prefix)


def schedule_of(method: str, schedule: str | None) -> str | None:
    """The schedule a run of ``method`` uses, as :func:`prepare` picks it: ``schedule``, or for
    None the method's own (None for a method that is not registered: prepare refuses it)."""
    if schedule is not None or method not in METHODS:
        return schedule
    entry = METHODS[method]
    return (entry.schedules or (entry.default_schedule,))[0]


def _check_diloco_read(entry: MethodEntry, o: MethodOptions) -> None:
    """DiLoCo's options (an outer optimizer other than plain averaging, an inner state other than
    keep) are refused for a method that does not read them, not dropped like its other options."""
    if "fragments" not in entry.options and _streaming(o):
        raise ValueError(
            f"method.fragments / overlap / mixing (Streaming DiLoCo): apply to method=localsgd only, not to method={entry.name}"
        )
    if "outer_optimizer" in entry.options:
        return
    outer, inner_state = diloco.resolve_outer(o.outer_optimizer), o.inner_state or "keep"
    if outer is not None or inner_state != "keep":
        what = f"outer_optimizer={outer.name}" if outer is not None else f"inner_state={inner_state}"
        raise ValueError(f"{what}: applies to method=localsgd (DiLoCo) only, not to method={entry.name}")


def prepare(
    method: str,
    schedule: str | None,
    params: ScheduleParams,
    options: MethodOptions = MethodOptions(),
    costs: CostModel | None = None,
    values: int | None = None,
    *,
    method_prefix: str = "",
    schedule_prefix: str = "",
) -> RunSpec:
    """Check a run's choice before any work (errors name ``method_prefix + field`` and
    ``schedule_prefix + field``) and resolve it: ``schedule=None`` is the method's own schedule;
    defaults are filled in and what the run does not read is None."""
    check_choice(f"{method_prefix}name", method, METHODS)
    entry = METHODS[method]
    _check_diloco_read(entry, options)
    name = schedule if schedule is not None else (entry.schedules or (entry.default_schedule,))[0]
    schedule_entry = _entry_of(name, schedule_prefix)
    if entry.schedules is not None and name not in entry.schedules:
        raise ValueError(
            f"{schedule_prefix}name={name!r}: method {method} runs {list(entry.schedules)} only "
            f"(method=pipeline trains every registered schedule)"
        )
    if values is not None:
        values = check_int("values", values, 0)
    smallest = check_schedule(name, params, costs, values or 0, prefix=schedule_prefix)
    keep = {"stride", "optimizer", *entry.options}
    kept: dict[str, Any] = {  # MethodOptions' fields by name
        f.name: getattr(options, f.name) if f.name in keep else None for f in dataclasses.fields(MethodOptions)
    }
    resolved = MethodOptions(**kept)
    if entry.resolve is not None:
        resolved = entry.resolve(resolved, params.S)
    _check_options(entry, resolved, smallest, schedule_entry.semantics, method_prefix)
    return RunSpec(method, Pipeline(name, resolve(name, params), costs, values), resolved)


def run(spec: RunSpec, obj: Objective, gammas, seed: int = 0) -> MethodRun:
    """Train ``obj`` as ``spec`` says for the whole γ grid and one seed."""
    return METHODS[spec.method].run(obj, spec.pipeline, gammas, seed, spec.options)
