"""Method front-ends: PipeDream (PD), Randomized PipeDream (RPD), minibatch SGD, LocalSGD,
and :func:`train`, which trains any timeline of the schedule family with its own semantics.

Each builds an update plan (``rpd.train.plans``, ``rpd.train.semantics``) and runs it through the one stale
block-SGD core (``rpd.train.core``) for a whole step-size grid in one compiled scan; LocalSGD runs
replicas sharded over a device mesh (``rpd.train.localsgd``). All return a :class:`rpd.results.Result`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.objectives.base import Objective
from rpd.results import EVENTS, Result, assemble_curve, grid_points, record_rows, time_unit, value_at
from rpd.schedules import Timeline
from rpd.train import core, corrections, diloco, optimizers, plans, semantics_parallel
from rpd.train import semantics as semantics_
from rpd.train.avgpipe import train_avgpipe
from rpd.train.localsgd import local_sgd
from rpd.validation import check_choice, check_gammas, check_int

__all__ = ["Result", "local_sgd", "pipedream", "rpd", "run_plan", "sgd", "train"]


def _points(n_events_axis: int, stride: int) -> np.ndarray:
    """Recorded positions 0-based: after events stride-1, 2*stride-1, ..., and the last one."""
    pts = np.arange(stride - 1, n_events_axis, stride)
    if pts.size == 0 or pts[-1] != n_events_axis - 1:
        pts = np.append(pts, n_events_axis - 1)
    return pts.astype(np.int64)


def _event_points(event_time: np.ndarray, n_axis: int) -> np.ndarray:
    """Recorded positions 0-based: every tick in which an update lands, and the last one; or,
    where the clock (ticks of the gcd of every event's end and the axis' end) has at most four
    ticks per event, every clock tick (a superset of the events: under unit costs the snapshots
    runs recorded per tick before, so f is evaluated in batches of the same shape, bit for bit).
    Both follow the events, and scaling every cost by c gives the same positions, times c."""
    ev = np.asarray(event_time, np.int64)
    ev = np.unique(ev[ev < n_axis])
    res = int(np.gcd.reduce(np.append(ev + 1, n_axis))) or 1
    if n_axis // res <= 4 * (len(ev) + 1):
        return _points(n_axis, res)
    return np.union1d(ev, [n_axis - 1])


def _explicit_points(at, n_axis: int) -> np.ndarray:
    a = np.asarray(at)
    if a.ndim != 1 or a.size == 0 or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"at must be a non-empty 1-d int array, got {a.dtype} {a.shape}")
    if a[0] < 1 or a[-1] > n_axis or np.any(np.diff(a) <= 0):
        raise ValueError(f"at must increase strictly within 1..{n_axis}, got {a[0]}..{a[-1]}")
    return (a - 1).astype(np.int64)


def run_plan(
    obj: Objective,
    plan: plans.UpdatePlan,
    gamma,
    *,
    seed: int = 0,
    axis: str = "block_update",
    stride: int = 1,
    ring_size: int | None = None,
    n_slots: int | None = None,
    diag_stride: int = 0,
    T: int | None = None,
    method: str = "plan",
    meta: dict | None = None,
    ema: float = 0.9,
    at=None,
    optimizer=None,
) -> Result:
    """Execute any update plan on a gamma grid.

    ``axis="block_update"`` records f after every ``stride`` block updates;
    ``axis="sim_time"`` at the plan's update events: after every tick of ``time`` (0..T-1) in
    which an update lands, and at T (``meta["time_axis"] == "events"``; the value at any t is
    the last point at or before it, ``rpd.results.value_at``), or with ``stride`` > 1 after
    every ``stride`` ticks.
    ``at`` (increasing ints in 1..T or 1..K) records exactly there instead: the axis values of
    the curve, so runs of different lengths share one compiled program. ``n_slots`` (gradient
    slots) defaults to the plan's, ``ring_size`` to what it needs (``plans.ring_size``).
    ``optimizer``: None / ``"sgd"`` (plain SGD), a name of ``rpd.train.optimizers.OPTIMIZERS``, an
    ``optimizers.Optimizer`` (``optimizers.make("adam", b1=0.99)``) or an
    ``optax.GradientTransformation`` (its updates times γ); each block keeps its own state."""
    check_choice("axis", axis, ("block_update", "sim_time"))
    stride = check_int("stride", stride)
    gammas = check_gammas(gamma)
    K = len(plan.block)
    event = np.arange(K) if axis == "block_update" else np.asarray(plan.time)
    n_axis = K if axis == "block_update" else int(T if T is not None else plan.time[-1] + 1)
    if at is not None:
        points = _explicit_points(at, n_axis)
    elif axis == "sim_time" and stride == 1:  # at the update events (and the end): nothing moves between
        points = _event_points(event, n_axis)
    else:
        points = _points(n_axis, stride)
    rows = record_rows(event, points)
    C = plans.ring_size(plan, obj.S, diag_stride) if ring_size is None else check_int("ring_size", ring_size)
    n_slots = int(np.max(plan.slot)) + 1 if n_slots is None else check_int("n_slots", n_slots)
    opt = optimizers.bind_plan(optimizers.resolve(optimizer), plan, obj.S)  # a correction's τ_s
    if opt is not None and opt.needs_stale:  # DC-ASGD reads block a's stale version at every update
        C = max(C, corrections.stale_ring(plan, obj.S))
    raw, f0, per_update, x_final = core.execute(
        obj,
        plan,
        rows,
        len(points),
        gammas,
        check_int("seed", seed, 0),
        ring_size=C,
        n_slots=n_slots,
        diag_stride=diag_stride,
        ema=ema,
        optimizer=opt,
    )
    curve, axis_vals = assemble_curve(raw, rows, f0, points)
    traces = {k: np.asarray(v) for k, v in per_update.items()}
    return Result(
        method=method,
        gammas=gammas,
        axis=axis_vals,
        axis_name=axis,
        curve=curve,
        traces=traces,
        x_final=np.asarray(x_final),
        meta=dict(
            meta or {},
            S=obj.S,
            K=K,
            ring_size=C,
            seed=seed,
            objective=obj.name,
            optimizer=optimizers.describe(opt),
            **({"time_axis": EVENTS} if axis == "sim_time" and at is None and stride == 1 else {}),
        ),
    )


def _run_timeline(obj: Objective, tl: Timeline, planned, gamma, *, method: str, meta: dict, **kw) -> Result:
    """``planned`` (an update plan made from ``tl`` and its gradient slots) run by :func:`run_plan`
    on ``tl``'s ticks: T, and N, T and the time unit in the meta before the method's own."""
    plan, n_slots = planned
    meta = {"N": tl.N, "T": tl.T, **meta, "time_unit": time_unit(tl)}
    return run_plan(obj, plan, gamma, n_slots=n_slots, T=tl.T, method=method, meta=meta, **kw)


def pipedream(
    obj: Objective,
    tl: Timeline,
    gamma,
    *,
    seed: int = 0,
    axis: str = "sim_time",
    stride: int = 1,
    diag_stride: int = 0,
    optimizer=None,
) -> Result:
    """PipeDream (1F1B, weight stashing) driven by its timeline: iteration k is the k-th
    backward op B(m, a) in (time, stage) order and applies

        x_a <- x_a - gamma * grad_a f(z_m; xi_m),   z_m's block r = block r when F(m, r) ran.

    The history ring holds at most NOAM + 1 versions of each block."""
    if tl.S != obj.S:
        raise ValueError(f"timeline has S={tl.S} stages but the objective has S={obj.S} blocks")
    return _run_timeline(
        obj,
        tl,
        plans.pipedream_plan(tl, obj.n_batches),
        gamma,
        method="pd",
        meta={"noam": tl.noam},
        seed=seed,
        axis=axis,
        stride=stride,
        diag_stride=diag_stride,
        optimizer=optimizer,
    )


def rpd(
    obj: Objective,
    K: int,
    gamma,
    delta: int,
    seed: int = 0,
    *,
    delays="uniform",
    block_order="uniform",
    batch_order="uniform",
    stride: int = 1,
    diag_stride: int = 0,
    optimizer=None,
) -> Result:
    """Randomized PipeDream: for k < K, draw a_k ~ U{0..S-1}, a batch uniformly with
    replacement, and d_k^(r) ~ U{0..min(delta, k)} per block; then

        x_a <- x_a - gamma * grad_a f(z^k; xi_k),   z^k's block r = block r of x^{k - d_k^(r)}.

    ``delays`` / ``block_order`` / ``batch_order`` also take PD's arrays (see
    ``rpd.train.plans.rpd_plan``), with which RPD reproduces PD exactly."""
    plan = plans.rpd_plan(
        check_int("seed", seed, 0),
        K,
        obj.S,
        obj.n_batches,
        delta,
        delays=delays,
        block_order=block_order,
        batch_order=batch_order,
    )
    return run_plan(
        obj,
        plan,
        gamma,
        seed=seed,
        axis="block_update",
        stride=stride,
        diag_stride=diag_stride,
        method="rpd",
        meta={"delta": delta},
        optimizer=optimizer,
    )


def sgd(
    obj: Objective,
    N: int,
    gamma,
    *,
    seed: int = 0,
    stride: int = 1,
    optimizer=None,
    ring_size: int | None = None,
    n_slots: int | None = None,
) -> Result:
    """Minibatch SGD, the staleness-free reference: x <- x - gamma * grad f(x; xi_n), batch
    n mod n_batches, for n < N. Recorded against block updates (S per step). ``ring_size`` and
    ``n_slots`` (at least the plan's, 1 each) let it share the compiled program of a stale run
    of the same N block updates (PipeDream's ring and slots): a larger ring or more slots hold
    versions and gradients no update reads, so the numbers are the same bit for bit (as in :func:`train`)."""
    plan = plans.sgd_plan(check_int("N", N), obj.S, obj.n_batches)
    return run_plan(
        obj,
        plan,
        gamma,
        seed=seed,
        axis="block_update",
        stride=stride,
        method="sgd",
        meta={"N": N},
        optimizer=optimizer,
        ring_size=ring_size,
        n_slots=n_slots,
    )


def train(
    obj: Objective,
    tl: Timeline,
    gamma,
    *,
    seed: int = 0,
    stride: int = 1,
    axis: str = "sim_time",
    diag_stride: int = 0,
    at=None,
    ring_size: int | None = None,
    optimizer=None,
    outer_optimizer=None,
    inner_state: str = "keep",
    semantics: semantics_.Semantics | None = None,
    n_slots: int | None = None,
    **options,
) -> Result:
    """Train on any timeline with its schedule's ``semantics`` (the registry entry's; None: a bare
    built-in timeline's, :func:`rpd.train.semantics.of`); the curve is on
    the timeline's tick axis (``axis="sim_time"``) or against block updates, every ``stride``
    or exactly ``at`` (see :func:`run_plan`). ``ring_size`` and ``n_slots`` (the gradient slots;
    each raised to what the plan needs) let runs of several timelines share one compiled program:
    a larger ring or more slots hold versions and gradients no update reads, so the numbers are
    the same bit for bit (tests/studies/test_studies_kappa_scale.py).

    Options: ``predict`` (PipeDream, PipeMare: forward at predicted weights), ``ema`` (the
    velocity's EMA factor, default 0.9), ``t1`` / ``t1_window`` / ``t2`` (PipeMare). An option
    the schedule does not have raises a ValueError naming it. LocalSGD timelines go to
    :func:`local_sgd` (with ``optimizer`` as every replica's inner optimizer and DiLoCo's
    ``outer_optimizer`` / ``inner_state``, see :mod:`rpd.train.diloco`); so do D pipelines with
    local steps, or with DiLoCo's options (``semantics_parallel.local_rounds``: LocalSGD across
    the pipelines, recorded every ``stride`` ticks); synchronous schedules, PipeDream-2BW and
    PipeMare to their plans."""
    kind = tl.kind
    sem = semantics_.of(tl) if semantics is None else semantics_.lifted(semantics, tl)
    active = semantics_.check_options(kind, sem.options, options)
    ema = float(active.get("ema", 0.9))
    dl = dict(optimizer=optimizer, outer_optimizer=outer_optimizer, inner_state=inner_state)
    uses_diloco = diloco.resolve_outer(outer_optimizer) is not None or inner_state != "keep"
    replicas = sem.runner == "replicas"
    if replicas or semantics_parallel.local_rounds(tl, uses_diloco):
        if at is None:
            res = local_sgd(obj, tl, gamma, seed=seed, **dl)
            return res if replicas else every(res, stride)  # LocalSGD: every tick, as before
        # The model LocalSGD trains is the replicas' average, which exists at round ends:
        # record those and read each asked tick off the last round end at or before it.
        res = local_sgd(obj, tl, gamma, seed=seed, track_time=False, **dl)
        keep = _explicit_points(at, tl.T) + 1
        idx = np.concatenate([[0], np.searchsorted(res.axis, keep, side="right") - 1])
        return dataclasses.replace(
            res, axis=np.concatenate([[0], keep]), curve=res.curve[:, idx], meta=dict(res.meta, recorded="round ends")
        )
    if sem.runner == "elastic":  # replicas and a centre: its own scan (rpd.train.avgpipe)
        return train_avgpipe(obj, tl, gamma, seed=seed, optimizer=optimizer, at=at)
    if uses_diloco:
        raise ValueError(
            f"outer_optimizer / inner_state: apply to LocalSGD (DiLoCo) and D > 1 pipelines only, not to schedule {kind}"
        )
    if tl.S != obj.S and tl.n_stages != obj.S and not tl.synchronous:  # replicated stages: S ranks > stages
        raise ValueError(f"timeline has S={tl.S} stages but the objective has S={obj.S} blocks")
    assert sem.plan is not None
    plan, own_slots = sem.plan(tl, obj.S, obj.n_batches, **active)
    if ring_size is not None:  # at least what the plan needs
        ring_size = max(check_int("ring_size", ring_size), plans.ring_size(plan, obj.S, diag_stride))
    if n_slots is not None:  # at least what the plan uses (None: the plan's slot indices say)
        n_slots = max(check_int("n_slots", n_slots), own_slots or int(np.max(plan.slot, initial=0)) + 1)
    else:
        n_slots = own_slots
    res = _run_timeline(
        obj,
        tl,
        (plan, n_slots),
        gamma,
        method=kind,
        meta=dict(M=tl.M, schedule=kind, **active),
        seed=seed,
        axis=axis,
        stride=stride,
        diag_stride=diag_stride,
        ema=ema,
        at=at,
        ring_size=ring_size,
        optimizer=optimizer,
    )
    res.traces["update_time"] = np.asarray(plan.time)  # [K]: the tick each update lands
    return res


def every(res: Result, stride: int) -> Result:
    """``res`` recorded every ``stride`` ticks of its axis (and at its last point)."""
    if check_int("stride", stride) == 1:
        return res
    axis = grid_points(int(res.axis[-1]), 1, stride)  # read off the events: the last at or before each
    return dataclasses.replace(
        res, axis=axis, curve=value_at(res.axis, res.curve, axis), meta=dict(res.meta, time_axis="grid")
    )
