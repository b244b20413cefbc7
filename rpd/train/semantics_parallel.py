"""Training semantics of data parallelism around and inside a pipeline (docs/schedules.md#d-data-parallel-pipelines,
# pipedream-1f1b-rr):

- **1F1B-RR** (:mod:`rpd.schedules.family.pipedream_rr`): stage g, replicated r_g times, takes one
  step per group j of r_g consecutive microbatches, the mean of their gradients all-reduced,
  at learning rate γ·r_g/r_0 (PipeDream's ``get_adjusted_learning_rate``), landing at
  ``tl.land[g][j]``. Weight stashing: microbatch m's gradient is the whole model's at the
  versions its forwards read. In the plan a step of r_g microbatches is r_g *pieces*, one per
  microbatch, each adding γ/r_0 · ∇_g f_m(z_m) to block g and landing at the group's tick (as
  :mod:`rpd.train.semantics_async` does for AMPNet), so block g's plan version after j whole
  steps is j·r_g and every read is a whole step. A microbatch's gradient is computed once, at its
  first piece, into a gradient slot it holds until its last piece. A trailing partial group of a
  replicated stage never lands (:mod:`rpd.schedules.family.pipedream_rr`).
- **D synchronous pipelines** (:mod:`rpd.schedules.machinery.data_parallel`): per flush q, D·M microbatch
  gradients at W_q, averaged (minibatch SGD with batch D·M·b); block s's update lands at the end
  of stage s's all-reduce (``tl.dp_land[q, s]``). The pipelines' microbatches of flush q are the
  D·M consecutive batches q·D·M .. q·D·M + D·M - 1 (pipeline d takes d·M .. d·M + M - 1).
- **D pipelines with local steps** (``tl.local_steps`` = H > 1, or DiLoCo's optimizers): LocalSGD
  with D replicas, one per pipeline, run by :mod:`rpd.train.localsgd`. A local step is a flush:
  replica d's step f is the mean gradient of the same batches f·D·M + d·M + j (j < M) at the
  replica's own iterate; block s's increment lands at ``tl.dp_land[f, s]``; after every H flushes
  (and the last) the replicas are averaged (or DiLoCo's outer step), ending at ``tl.dp_sync``.
  :func:`dp_rounds_plan` is LocalSGD's round plan read off the D-pipeline timeline.
"""

from __future__ import annotations

import heapq

import numpy as np

from rpd.schedules import Timeline
from rpd.schedules.family.pipedream_rr import RoundRobinTimeline, forward_groups
from rpd.schedules.machinery.data_parallel import DataParallelTimeline
from rpd.train.plans import UpdatePlan
from rpd.validation import required


def _slots(mb_K: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(fresh [K], slot [K], n_slots): each microbatch's gradient computed at its first piece into
    the lowest free slot, which it holds until its last piece (interval colouring)."""
    K = len(mb_K)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for k, m in enumerate(mb_K.tolist()):
        first.setdefault(m, k)
        last[m] = k
    fresh = np.zeros(K, bool)
    slot = np.zeros(K, np.int32)
    free: list[int] = []
    n = 0
    held: dict[int, int] = {}
    for k, m in enumerate(mb_K.tolist()):
        if first[m] == k:
            fresh[k] = True
            if free:
                s = heapq.heappop(free)
            else:
                s, n = n, n + 1
            held[m] = s
        slot[k] = held[m]
        if last[m] == k:
            heapq.heappush(free, held.pop(m))
    return fresh, slot, n


def rr_plan(tl: Timeline, S_obj: int, n_batches: int) -> tuple[UpdatePlan, int]:
    """1F1B-RR's plan and its gradient slots (module doc)."""
    if not isinstance(tl, RoundRobinTimeline):
        raise ValueError(f"expected a pipedream_rr timeline, got kind={tl.kind!r}")
    G = tl.n_stages
    if S_obj != G:
        raise ValueError(f"the objective has S={S_obj} blocks; the pipedream_rr timeline has {G} stages")
    reps = np.asarray(tl.replicas, np.int64)
    mb_g, block_g, time_g = [], [], []
    for g in range(G):
        whole = len(tl.land[g]) * int(reps[g])  # a trailing partial group never lands
        mb_g.append(np.arange(whole))
        block_g.append(np.full(whole, g))
        time_g.append(np.repeat(tl.land[g], reps[g]))  # microbatch m is in group m // r_g
    mb, block, time = (np.concatenate(a) for a in (mb_g, block_g, time_g))
    o = np.lexsort((mb, block, time))
    mb, block, time = mb[o], block[o].astype(np.int32), time[o].astype(np.int64)
    fresh, slot, n_slots = _slots(mb)
    read = forward_groups(tl)[mb] * reps[None, :]
    plan = UpdatePlan(
        block=block,
        batch=(mb % n_batches).astype(np.int32),
        read=read.astype(np.int32),
        fresh=fresh,
        slot=slot,
        time=time,
        scale=np.full(len(mb), 1.0 / reps[0]),
    )
    return plan, n_slots


def data_parallel_timeline(tl: Timeline) -> DataParallelTimeline:
    """``tl`` as one of D pipelines (its ``dp_land``, ``dp_sync``, ``D``, ``local_steps``); a
    one-line ValueError for any other timeline."""
    if not isinstance(tl, DataParallelTimeline):
        raise ValueError(
            f"expected a D-pipeline timeline (rpd.schedules.machinery.data_parallel), got kind={tl.kind!r}"
        )
    return tl


def _block_land(tl: DataParallelTimeline, S_obj: int) -> np.ndarray:
    """int [n_flush, S_obj]: the tick block s's update of flush q lands (``tl.dp_land``; a chunked
    schedule on one block per rank: the last of the rank's stages)."""
    per_stage = np.asarray(tl.dp_land, np.int64)  # [Q, n_stages]
    if S_obj == tl.n_stages:
        block = np.arange(tl.n_stages)
    elif S_obj == tl.S:  # chunked schedules on an objective with one block per rank
        block = np.zeros(tl.n_stages, np.int64)
        block[tl.table.stage] = tl.table.rank
    else:
        raise ValueError(f"the objective has S={S_obj} blocks; the timeline has {tl.S} ranks, {tl.n_stages} stages")
    land = np.full((per_stage.shape[0], S_obj), -1, np.int64)
    for g in range(tl.n_stages):
        land[:, block[g]] = np.maximum(land[:, block[g]], per_stage[:, g])
    return land


def dp_plan(tl: Timeline, S_obj: int, n_batches: int) -> tuple[UpdatePlan, None]:
    """D synchronous pipelines (module doc): one update per block per flush, the mean of D·M
    microbatch gradients at W_q, landing at ``tl.dp_land[q, s]``."""
    tl = data_parallel_timeline(tl)
    if tl.local_steps > 1:  # not one minibatch step per flush: replicas (dp_rounds_plan)
        raise ValueError(f"local_steps={tl.local_steps}: D pipelines with local steps train as LocalSGD replicas")
    land = _block_land(tl, S_obj)
    Q = land.shape[0]
    q = np.repeat(np.arange(Q, dtype=np.int32), S_obj)
    s = np.tile(np.arange(S_obj, dtype=np.int32), Q)
    o = np.lexsort((s, land.ravel()))
    q, s, t = q[o], s[o], land.ravel()[o].astype(np.int64)
    if np.any(np.diff(q) < 0):
        raise ValueError("a flush's update lands before the previous flush's last one")
    DM = int(tl.D) * required("M", tl.M)
    first = np.zeros(len(q), bool)
    first[np.unique(q, return_index=True)[1]] = True
    return (
        UpdatePlan(
            block=s,
            batch=((q.astype(np.int64) * DM) % n_batches).astype(np.int32),
            read=np.repeat(q[:, None], S_obj, axis=1).astype(np.int32),
            fresh=first,
            slot=np.zeros(len(q), np.int32),
            time=t,
            n_micro=DM,
        ),
        None,
    )


def local_rounds(tl: Timeline, diloco: bool = False) -> bool:
    """Whether D pipelines train as LocalSGD replicas (:func:`dp_rounds_plan`): D > 1 and local
    steps, or DiLoCo's optimizers (``diloco``: an outer optimizer or an inner-state rule given)."""
    if not isinstance(tl, DataParallelTimeline) or tl.dp_sync is None:
        return False
    return tl.D > 1 and (tl.local_steps > 1 or diloco)


def dp_rounds_plan(tl: Timeline, S_obj: int, n_batches: int) -> dict:
    """D pipelines with local steps (module doc) as :func:`rpd.train.rounds.localsgd_plan`'s
    round plan, shaped [rounds, H local steps, D replicas, ...]; a local step is a flush of
    ``n_micro`` = M microbatches, ``batch`` the first of them. ``update_time`` [Q·S_obj]: the
    tick of every (flush, block) update, in landing order."""
    tl = data_parallel_timeline(tl)
    if tl.dp_sync is None:
        raise ValueError(
            f"expected a D-pipeline timeline (rpd.schedules.machinery.data_parallel), got kind={tl.kind!r}"
        )
    land = _block_land(tl, S_obj)  # [Q, S_obj]
    Q, H, D, M = land.shape[0], int(tl.local_steps), int(tl.D), required("M", tl.M)
    rounds = -(-Q // H)
    f = np.arange(rounds * H).reshape(rounds, H)  # flush of (round, local step)
    fc = np.minimum(f, Q - 1)
    sync = np.asarray(tl.dp_sync, np.int64)
    start = np.concatenate([[0], sync[:-1] + 1])  # first tick of each round
    t_rel = np.where((f < Q)[..., None], land[fc] - start[:, None, None], 0)  # [rounds, H, S_obj]
    step = f[..., None] * D + np.arange(D)  # local step id, (flush, replica) order: [rounds, H, D]
    loss_tick = tl.f_time[:, tl.n_stages - 1].reshape(Q, M).max(axis=1)  # a flush's last loss
    return dict(
        batch=((step * M) % n_batches).astype(np.int32),
        valid=np.broadcast_to((f < Q)[..., None], step.shape),
        t_rel=np.broadcast_to(t_rel[:, :, None, :], step.shape + (S_obj,)).astype(np.int64),
        mb=step.astype(np.int32),
        start=start,
        length=sync - start + 1,
        T_round=int((sync - start + 1).max()),
        loss_time=np.repeat(loss_tick, D),
        R=D,
        n_micro=M,
        sync=sync,
        n_steps=Q * D,
        update_time=np.sort(land.ravel()),
    )
