"""Every schedule's weight-version semantics as an update plan (docs/schedules.md#training-semantics).

A timeline says when each op runs; its semantics say which weights each gradient sees. Both
meet in an :class:`~rpd.train.plans.UpdatePlan` for the one core, whose ``time`` is the tick each
update lands, so every schedule trains on the same simulated-time axis:

- synchronous (GPipe, 1F1B, interleaved, ZB-H1/H2, ZB-V, DualPipeV, Chimera): per flush q the
  M microbatch gradients at W_q, averaged; block s's update lands at the last tick of its
  stage's last backward (B, or W when split) of the flush (Chimera: after the all-reduce).
  The iterates are minibatch SGD with batch M·B whatever the schedule; only the times differ.
- PipeDream-2BW: minibatch q (M microbatches) at W_{max(q-1, 0)} on every stage, averaged;
  block s's update lands at its rank's M-th backward of the minibatch (docs/schedules.md#pipedream-2bw).
- PipeDream: weight stashing (``rpd.train.plans.pipedream_plan``); with ``predict`` the forward reads
  predicted weights ŵ_r = w_r - s·u_r, s = the updates block r receives between F(m, r) and
  B(m, r) (S - 1 - r in steady state), u_r an EMA of block r's steps, and stashes them.
- PipeMare: PipeDream's order with one weight version. Forward of stage r at the version
  current at F(m, r); the VJP through stage q >= a at the version current at B(m, q), on the
  forward-time activations (a two-point chain gradient). Like a pipeline, the plan runs it
  stage-wise (``rpd.train.plans.stage_wise``): B(m, S-1), m's first update (every F(m, r) precedes
  it), runs the forward into slot m mod NOAM, and each B(m, a) one stage's backward.
  Options (docs/schedules.md#pipemare; the PipeMare paper was not available, so these follow a
  recollection of it and are documented as such):
  T1 scales block a's step by τ^-(1 - min(i / window, 1)) (τ = that update's delay, at least 1,
  i = the block's update count), T2 moves the backward weights back along the velocity,
  ŵ_q = w_q + τ_q·u_q, toward the forward-time ones; ``predict`` as for PipeDream.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from rpd.schedules import family
from rpd.schedules.family.post_validation import ValidatedTimeline
from rpd.schedules.machinery.delays import forward_versions, read_versions
from rpd.schedules.machinery.timeline import Timeline
from rpd.train import semantics_async, semantics_parallel
from rpd.train.plans import UpdatePlan, pipedream_plan, versions_before
from rpd.validation import check_choice, check_int, check_real, required


def _landing_order(land_QxS: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Updates (q, s) of a per-flush landing table in iteration order: by tick, then block.
    Returns (flush q [K], block s [K], tick [K]); raises if a later flush's update would land
    before an earlier flush's (the order would then not be the schedule's)."""
    Q, S = land_QxS.shape
    q = np.repeat(np.arange(Q, dtype=np.int32), S)
    s = np.tile(np.arange(S, dtype=np.int32), Q)
    t = land_QxS.ravel()
    o = np.lexsort((s, t))
    if np.any(np.diff(q[o]) < 0):
        raise ValueError(f"{kind}: a flush's update lands before the previous flush's last one")
    return q[o], s[o], t[o].astype(np.int64)  # ticks: int64 (µs, ns costs pass 2³¹)


def _stage_blocks(tl: Timeline, S_obj: int) -> np.ndarray:
    """int [n_stages]: the objective block each global stage's weights belong to."""
    G = tl.n_stages
    if S_obj == G:
        return np.arange(G)
    if S_obj == tl.S:  # chunked schedules on an objective with one block per rank
        rank = np.zeros(G, np.int64)
        rank[tl.table.stage] = tl.table.rank
        return rank
    raise ValueError(
        f"the objective has S={S_obj} blocks; the {tl.kind} timeline has {tl.S} ranks "
        f"and {G} stages (give it one block per stage or per rank)"
    )


def synchronous_plan(tl: Timeline, S_obj: int, n_batches: int, after_allreduce: bool = False) -> UpdatePlan:
    """One flush of M microbatches = one minibatch SGD step with batch M·B (module doc).
    ``after_allreduce``: replicated stages (Chimera) land no earlier than the flush's end, after
    the all-reduce of the replicas' gradients."""
    if not tl.synchronous:
        raise ValueError(f"expected a synchronous schedule, got kind={tl.kind!r}")
    M = required("M", tl.M)
    Q = tl.N // M
    if Q * M != tl.N:
        raise ValueError(f"N={tl.N} is not a whole number of flushes of M={M}")
    per_stage = tl.b_time.reshape(Q, M, tl.n_stages).max(axis=1)  # [Q, n_stages]
    block = _stage_blocks(tl, S_obj)
    land = np.full((Q, S_obj), -1, np.int64)
    for g in range(tl.n_stages):
        land[:, block[g]] = np.maximum(land[:, block[g]], per_stage[:, g])
    if after_allreduce and tl.flush_time is not None:
        land = np.maximum(land, np.asarray(tl.flush_time)[:, None])
    q, s, t = _landing_order(land, tl.kind)
    return _minibatch_plan(q, s, t, q, M, S_obj, n_batches, n_slots=1)


def pipedream_2bw_plan(tl: Timeline, n_batches: int) -> UpdatePlan:
    """W_{q+1} = W_q - γ (1/M) Σ_{j in q} ∇f_j(W_{q-1}) (W_{-1} = W_0); docs/schedules.md#pipedream-2bw."""
    if tl.versions != 2 or tl.M is None:
        raise ValueError(f"2BW's plan reads a double-buffered timeline with minibatches (2BW's), got kind={tl.kind!r}")
    M, S = tl.M, tl.S
    Q = tl.N // M
    land = tl.b_time[M - 1 : Q * M : M]  # [Q, S]: each rank's M-th backward of minibatch q
    q, s, t = _landing_order(land, tl.kind)
    return _minibatch_plan(q, s, t, np.maximum(q - 1, 0), M, S, n_batches, n_slots=2)


def _minibatch_plan(q, s, t, version, M, S, n_batches, n_slots) -> UpdatePlan:
    first = np.zeros(len(q), bool)
    first[np.unique(q, return_index=True)[1]] = True
    return UpdatePlan(
        block=s,
        batch=((q.astype(np.int64) * M) % n_batches).astype(np.int32),
        read=np.repeat(version.astype(np.int32)[:, None], S, axis=1),
        fresh=first,
        slot=(q % n_slots).astype(np.int32),
        time=t,
        n_micro=int(M),
    )


def _version_tables(tl: Timeline):
    """(vF [N, S], vB [N, S], current [K, S]): versions block r had when F(m, r) read it, when
    B(m, r) ran, and at every update."""
    current = versions_before(tl.update_stage, tl.S)[:-1]
    vB = np.empty((tl.N, tl.S), np.int32)
    vB[tl.update_mb, tl.update_stage] = current[np.arange(tl.K), tl.update_stage]
    return forward_versions(tl), vB, current


def pipedream_prediction_plan(tl: Timeline, n_batches: int) -> tuple[UpdatePlan, int]:
    """PipeDream's stashed plan whose forward (and stashed) weights are predicted."""
    plan, n_slots = pipedream_plan(tl, n_batches)
    vF, vB, _ = _version_tables(tl)
    return plan._replace(horizon=(vB - vF)[tl.update_mb].astype(np.float64)), n_slots


def pipemare_plan(
    tl: Timeline,
    n_batches: int,
    *,
    predict: bool = False,
    t1: bool = False,
    t1_window: int | None = None,
    t2: bool = False,
) -> UpdatePlan:
    """PipeMare (module doc): microbatch m's two-point gradient, one stage per update, in
    gradient slot m mod NOAM. Update k of block a reads the forward versions of m, and the
    backward version of block q >= a current at B(m, q) (q < a: the current one, unused)."""
    if tl.synchronous or tl.noam is None or tl.M is not None:
        raise ValueError(
            f"PipeMare's plan reads one asynchronous stream (PipeMare's or PipeDream's), got kind={tl.kind!r}"
        )
    vF, vB, current = _version_tables(tl)
    m, a = tl.update_mb, tl.update_stage
    later = np.arange(tl.S)[None, :] >= a[:, None]  # stages the backward of update k has passed
    read_bwd = np.where(later, vB[m], current)  # stages < a do not enter block a's gradient
    tau = (vB - vF)[m]  # [K, S] updates between F(m, r) and B(m, r)
    first = np.zeros(tl.K, bool)
    first[np.unique(m, return_index=True)[1]] = True
    plan = UpdatePlan(
        block=a,
        batch=(m % n_batches).astype(np.int32),
        read=read_versions(tl),
        fresh=first,
        slot=(m % tl.noam).astype(np.int32),
        time=tl.update_time,
        read_bwd=read_bwd.astype(np.int32),
    )
    if predict:
        plan = plan._replace(horizon=tau.astype(np.float64))
    if t2:
        plan = plan._replace(horizon_bwd=-np.where(later, tau, 0).astype(np.float64))
    if t1:
        window = check_int("t1_window", t1_window if t1_window is not None else max(1, tl.N // 4))
        delay = np.maximum(tau[np.arange(tl.K), a], 1).astype(np.float64)
        progress = np.minimum(current[np.arange(tl.K), a] / window, 1.0)
        plan = plan._replace(scale=delay ** -(1.0 - progress))
    return plan


# ---------------------------------------------------------------- one table: kind -> semantics

OPTION_NAMES = ("predict", "ema", "t1", "t1_window", "t2")  # every option any semantics has


class Semantics(NamedTuple):
    """How a schedule trains: ``plan(tl, S_obj, n_batches, **options)`` returns its update plan
    and the gradient slots it needs (None: the plan's own), and the options it has. ``runner``:
    ``"plan"`` (the one core runs the plan), ``"replicas"`` (LocalSGD's rounds,
    :mod:`rpd.train.localsgd`) or ``"elastic"`` (AvgPipe's replicas and centre,
    :mod:`rpd.train.avgpipe`). A schedule's registry entry holds its semantics and the registry
    hands it to :func:`rpd.train.methods.train`."""

    plan: Callable[..., tuple[UpdatePlan, int | None]] | None
    options: tuple[str, ...] = ()
    runner: str = "plan"
    two_point: bool = False  # the gradient reads two weight versions (PipeMare's forward and backward)


def _pipedream(tl, S_obj, n_batches, predict=False, **_):
    return pipedream_prediction_plan(tl, n_batches) if predict else pipedream_plan(tl, n_batches)


def _pipemare(tl, S_obj, n_batches, predict=False, t1=False, t1_window=None, t2=False, **_):
    return pipemare_plan(tl, n_batches, predict=bool(predict), t1=bool(t1), t1_window=t1_window, t2=bool(t2)), None


PIPEDREAM = Semantics(_pipedream, ("predict", "ema"))
PIPEMARE = Semantics(_pipemare, ("predict", "ema", "t1", "t1_window", "t2"), two_point=True)
TWO_BW = Semantics(lambda tl, S_obj, n_batches, **_: (pipedream_2bw_plan(tl, n_batches), 2))
SYNCHRONOUS = Semantics(lambda tl, S_obj, n_batches, **_: (synchronous_plan(tl, S_obj, n_batches), None))
REPLICATED = Semantics(lambda tl, S_obj, n_batches, **_: (synchronous_plan(tl, S_obj, n_batches, True), None))
REPLICAS = Semantics(None, runner="replicas")  # LocalSGD: no options
ELASTIC = Semantics(None, runner="elastic")  # AvgPipe


def check_options(kind: str, allowed: tuple[str, ...], options: dict, prefix: str = "") -> dict:
    """The options that are set (not None/False), checked once: a name no semantics has is a
    TypeError, one this kind does not have a ValueError; ``ema`` in [0, 1), ``t1_window`` >= 1,
    the switches bools. Errors name the field as ``prefix`` + name (``method.predict``)."""
    for name, value in options.items():
        if name not in OPTION_NAMES:
            raise TypeError(f"unknown option {prefix}{name!r} (options: {list(OPTION_NAMES)})")
        if name not in allowed and _set(value):
            raise ValueError(
                f"{prefix}{name}={value!r} does not apply to schedule {kind} (its options: {list(allowed) or 'none'})"
            )
    for name in ("predict", "t1", "t2"):
        if not isinstance(options.get(name, False) or False, (bool, np.bool_)):
            raise TypeError(f"{prefix}{name} must be a bool, got {options[name]!r}")
    if options.get("t1_window") is not None:
        check_int(f"{prefix}t1_window", options["t1_window"])
    if options.get("ema") is not None and not 0.0 <= check_real(f"{prefix}ema", options["ema"], allow_zero=True) < 1.0:
        raise ValueError(f"{prefix}ema must lie in [0, 1), got {options['ema']}")
    return {k: v for k, v in options.items() if _set(v)}


def _set(value) -> bool:
    return value is not None and not (isinstance(value, (bool, np.bool_)) and not value)


# ---------------------------------------------------------------- the survey's remaining rows


def replicated_plan(tl: Timeline, S_obj: int, n_batches: int) -> UpdatePlan:
    """GEMS: a synchronous flush whose two replicas of every stage are all-reduced at its end, so
    every block's update of flush q lands at ``flush_time[q]`` (minibatch SGD with batch M·B)."""
    if tl.copies != 2 or tl.flush_time is None:
        raise ValueError(f"GEMS's plan reads two replicas all-reduced at each flush, got kind={tl.kind!r}")
    if S_obj != tl.n_stages:
        raise ValueError(f"the objective has S={S_obj} blocks; the gems timeline has {tl.n_stages} stages")
    flush = np.asarray(tl.flush_time, np.int64)
    q, s, t = _landing_order(np.repeat(flush[:, None], S_obj, axis=1), tl.kind)
    return _minibatch_plan(q, s, t, q, tl.M, S_obj, n_batches, n_slots=1)


GEMS = Semantics(lambda tl, S_obj, n_batches, **_: (replicated_plan(tl, S_obj, n_batches), None))
AMPNET = Semantics(lambda tl, S_obj, n_batches, **_: (semantics_async.ampnet_plan(tl, S_obj, n_batches), 1))
WPIPE = Semantics(lambda tl, S_obj, n_batches, **_: (semantics_async.wpipe_plan(tl, S_obj, n_batches), 1))


def validated_plan(tl: Timeline, S_obj: int, n_batches: int) -> UpdatePlan:
    """ZB-H2 with optimizer post-validation (:mod:`rpd.schedules.family.post_validation`): exactly
    synchronous, the update of flush q on block s landing when its step is final (the eager
    step, or the redone one after a rollback); with ``tl.clip`` the clipped mean gradient
    g · min(1, clip / ||g||), as the validated step applies it."""
    if not isinstance(tl, ValidatedTimeline) or tl.step_end is None:
        raise ValueError(
            f"the validated plan reads each step's final tick (ZB-H2 post-validation), got kind={tl.kind!r}"
        )
    if S_obj != tl.S:
        raise ValueError(f"the objective has S={S_obj} blocks; the zb_h2 timeline has {tl.S} stages")
    q, s, t = _landing_order(np.asarray(tl.step_end, np.int64), tl.kind)
    plan = _minibatch_plan(q, s, t, q, tl.M, S_obj, n_batches, n_slots=1)
    return plan._replace(clip=tl.clip)


def _zb_h2(tl, S_obj, n_batches, **_):
    """ZB-H2: synchronous, or with post-validation timed (``tl.step_end``) the validated steps."""
    if getattr(tl, "step_end", None) is not None:
        return validated_plan(tl, S_obj, n_batches), None
    return synchronous_plan(tl, S_obj, n_batches), None


ZB_H2 = Semantics(_zb_h2)
ROUND_ROBIN = Semantics(lambda tl, S_obj, n_batches, **_: semantics_parallel.rr_plan(tl, S_obj, n_batches))
DATA_PARALLEL = Semantics(lambda tl, S_obj, n_batches, **_: semantics_parallel.dp_plan(tl, S_obj, n_batches))


def lifted(sem: Semantics, tl: Timeline) -> Semantics:
    """``sem`` as it trains ``tl``: D data-parallel pipelines around a synchronous schedule
    (``tl.dp_land``, :mod:`rpd.schedules.machinery.data_parallel`) train with :data:`DATA_PARALLEL`."""
    return DATA_PARALLEL if getattr(tl, "dp_land", None) is not None else sem


# The rules by name: a schedule's entry (rpd/schedules/family/<name>.py) names its rule, the
# registry hands the value to rpd.train.methods.train. Keyed by rule, not by schedule.
RULES: dict[str, Semantics] = {
    "synchronous": SYNCHRONOUS,
    "replicated": REPLICATED,
    "pipedream": PIPEDREAM,
    "pipemare": PIPEMARE,
    "two_bw": TWO_BW,
    "gems": GEMS,
    "ampnet": AMPNET,
    "wpipe": WPIPE,
    "zb_h2": ZB_H2,
    "round_robin": ROUND_ROBIN,
    "replicas": REPLICAS,
    "elastic": ELASTIC,
}


def rule(value) -> Semantics:
    """The :class:`Semantics` of a schedule entry's ``semantics``: a rule of :data:`RULES` by
    name, or a Semantics value of its own (a user's schedule), as given."""
    if isinstance(value, Semantics):
        return value
    return RULES[check_choice("semantics", value, RULES)]


def of(tl: Timeline) -> Semantics:
    """The semantics of a bare timeline of a schedule of rpd's family (one its constructor
    returned, in tests and notebooks): its entry's rule (a variant's kind: its base's), else the
    synchronous one for every schedule with a flush. Pass a registry entry's ``semantics``
    instead where you have one."""
    base = family.VARIANTS[tl.kind].base if tl.kind in family.VARIANTS else tl.kind
    entry = family.ENTRIES.get(base)
    if entry is None and not tl.synchronous:
        raise ValueError(f"no training semantics for a bare timeline of kind {tl.kind!r}: pass semantics=")
    return lifted(SYNCHRONOUS if entry is None else rule(entry.semantics), tl)
