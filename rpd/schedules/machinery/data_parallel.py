"""D data-parallel pipelines around a synchronous schedule (docs/schedules.md#d-data-parallel-pipelines).

D identical pipelines run the same flush schedule on D·M microbatches per step (pipeline d takes
the step's microbatches d·M .. d·M + M - 1); every rank's gradients meet their D - 1 peers' in a
ring all-reduce of ``costs.allreduce_ticks(2(D-1)/D · values)`` ticks, ``values`` the numbers the
rank holds (the sum over its stages). The pipelines' ops run at the same ticks, so one pipeline's
timeline stands for all D, and the all-reduce is placed in it:

- not overlapped (default): it starts when the flush is over on every rank; the next flush
  starts when the slowest rank's all-reduce is over, and block s's update lands at the end of its
  rank's all-reduce;
- ``overlap=True``: a rank starts its all-reduce as soon as its own last backward (B or W) of the
  flush has ended, during the drain; the next flush waits for the last all-reduce to end.

LocalSGD across the pipelines (``local_steps = H > 1``): each pipeline runs H flushes on its own
replica with no communication, then the D replicas average their *parameters* (a ring all-reduce
of the same ``values`` and cost, overlapped or not in the same way) in place of the per-flush
gradient all-reduce. The gap follows every H-th flush and the last (a partial round) only; a
block's update of an inner flush lands at the end of its stage's last backward of the flush,
that of a round's last flush at the end of its rank's averaging (as with H = 1, whose timeline
is the gradient all-reduce's, unchanged). ``dp_sync[i]`` is the tick at whose end round i's
averaging is over everywhere.

Each flush starts after a barrier, so a flush's ops keep their offsets from the flush's start
whatever the gaps: the order is timed once without all-reduce, the per-flush gap read off it,
and timed again with those gaps by the one timer (exact, stragglers included).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.schedules.machinery.build import timed
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import BWD, BWD_W
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_int, required


@dataclasses.dataclass(frozen=True, eq=False)
class DataParallelTimeline(Timeline):
    """One of D pipelines. ``dp_allreduce`` (int [S]): ticks of each rank's all-reduce;
    ``dp_land`` (int [n_flush, n_stages]): the tick at whose end stage g's update of flush q lands;
    ``local_steps``: flushes per averaging round; ``dp_sync`` (int [n_rounds]): the tick at whose
    end round i's all-reduce is over (with one local step, ``flush_time``)."""

    D: int = 1
    overlap: bool = False
    dp_allreduce: np.ndarray | None = None
    dp_land: np.ndarray | None = None
    local_steps: int = 1
    dp_sync: np.ndarray | None = None


def _order(tl: Timeline) -> list[np.ndarray]:
    t = tl.table
    return [
        np.stack([t.kind[t.rank == r], t.stage[t.rank == r], t.mb[t.rank == r], t.fused[t.rank == r]], axis=1).astype(
            np.int32
        )
        for r in range(tl.S)
    ]


def _flush_ends(tl: Timeline) -> tuple[np.ndarray, np.ndarray]:
    """(end [Q]: first tick after flush q's last op, last_bwd [Q, S]: first tick after rank r's
    last backward of flush q)."""
    t = tl.table
    M = required("M", tl.M)
    Q = tl.N // M
    q = t.mb // M
    end = np.zeros(Q, np.int64)
    np.maximum.at(end, q, t.end)
    last = np.zeros((Q, tl.S), np.int64)
    bwd = np.isin(t.kind, (BWD, BWD_W))
    np.maximum.at(last, (q[bwd], t.rank[bwd]), t.end[bwd])
    return end, last


def round_ends(n_flush: int, local_steps: int) -> np.ndarray:
    """bool [n_flush]: the flushes after which the replicas average (every H-th and the last)."""
    q = np.arange(n_flush)
    return ((q + 1) % local_steps == 0) | (q == n_flush - 1)


def data_parallel(
    tl: Timeline,
    D: int,
    costs: CostModel | None = None,
    values=0,
    overlap: bool = False,
    local_steps: int = 1,
):
    """``tl`` (a synchronous schedule with a barrier per flush, timed under ``costs``) as one of D
    data-parallel pipelines (module doc). ``values``: numbers per global stage (int or per stage);
    ``local_steps``: flushes between parameter averagings (1: a gradient all-reduce per flush)."""
    D = check_int("D", D)
    H = check_int("local_steps", local_steps)
    if H > 1 and D == 1:
        raise ValueError(f"local_steps > 1 needs D > 1 pipelines to average, got local_steps={H}, D=1")
    if not tl.synchronous or tl.M is None or tl.overlapped:
        raise ValueError(f"D > 1 pipelines need a flush (a synchronous schedule with a barrier), got {tl.kind!r}")
    if tl.copies > 1:  # Chimera, GEMS
        raise ValueError(f"{tl.kind} all-reduces its own replicas at the flush; D > 1 is not modelled for it")
    if not isinstance(overlap, (bool, np.bool_)):
        raise TypeError(f"overlap must be a bool, got {overlap!r}")
    costs = CostModel() if costs is None else costs
    G = tl.n_stages
    vals = np.broadcast_to(np.asarray(values, np.int64), (G,)).astype(float)
    if np.any(vals < 0):
        raise ValueError(f"values must be >= 0, got {values!r}")
    rank_of = np.zeros(G, np.int64)
    rank_of[tl.table.stage] = tl.table.rank
    per_rank = np.bincount(rank_of, weights=vals, minlength=tl.S)
    ticks = np.array([costs.allreduce_ticks(2 * (D - 1) / D * v) if D > 1 else 0 for v in per_rank.tolist()], np.int64)
    end, last = _flush_ends(tl)
    sync = round_ends(len(end), H)  # [Q]: flushes followed by an all-reduce
    finish = (last if overlap else end[:, None]) + ticks[None, :]  # [Q, S]: all-reduce over
    gap = np.where(sync, np.maximum(finish.max(axis=1) - end, 0), 0)  # [Q]
    order = _order(tl)
    base = timed(
        tl.kind,
        order,
        S=tl.S,
        N=tl.N,
        M=tl.M,
        costs=costs,
        n_stages=tl.n_stages_,
        split=tl.split,
        v=tl.v,
        barrier_every=tl.M,
        sync=True,
        gap=gap,  # np.full broadcasts the per-flush gaps
    )
    end2, last2 = _flush_ends(base)
    finish2 = (last2 if overlap else end2[:, None]) + ticks[None, :]
    land = finish2[:, rank_of] - 1  # [Q, G]
    if H > 1:  # an inner flush's step is local: it lands with its stage's last backward
        local = base.b_time.reshape(len(end2), tl.M, G).max(axis=1)
        land = np.where(sync[:, None], land, local)
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(Timeline)}
    return DataParallelTimeline(
        **fields,
        D=D,
        overlap=bool(overlap),
        dp_allreduce=ticks,
        dp_land=land,
        local_steps=H,
        dp_sync=np.asarray(base.flush_time)[sync],
    )
