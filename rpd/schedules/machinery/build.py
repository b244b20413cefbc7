"""Orders + a cost model -> a :class:`Timeline`: the one path every schedule is timed on."""

from __future__ import annotations

import numpy as np

from rpd.schedules.machinery.costs import CostModel, HostLink
from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, FWD, Order
from rpd.schedules.machinery.jitter import Jitter, barrier_gaps
from rpd.schedules.machinery.offload import time_with_transfers
from rpd.schedules.machinery.timeline import OpTable, Timeline
from rpd.schedules.machinery.timer import edge_latency, flatten, op_durations, time_order


def timed(
    kind: str,
    order: Order,
    *,
    S: int,
    N: int,
    costs: CostModel | None,
    n_stages: int | None = None,
    split: bool = False,
    M: int | None = None,
    v: int = 1,
    barrier_every: int | None = None,
    gap: int | np.ndarray = 0,
    averaging: bool = False,
    **fields,
) -> Timeline:
    """Time ``order`` (one op list per rank) under ``costs`` and package the result.

    ``barrier_every``: a global barrier after every that many microbatches (a flush, or a
    LocalSGD round), followed by ``gap`` ticks (one number, or one per group) (an all-reduce / averaging) before the next
    group's first op; ``None``: no barrier; ``averaging``: the barriers are LocalSGD's averagings
    (``sync_time``), not flushes. Extra ``fields`` go to the Timeline (noam, R, H, sync)."""
    costs = CostModel() if costs is None else costs
    G = S if n_stages is None else n_stages
    flat = flatten(order, G, N)
    dur = op_durations(flat, costs, G, N, split)
    p2p = edge_latency(flat, costs, G, N)
    if barrier_every is None:
        flush = gaps = None
    else:
        flush = flat.mb // barrier_every
        jitter = costs.jitter if isinstance(costs.jitter, Jitter) else None  # (CostModel made a tuple a Jitter)
        gaps = barrier_gaps(jitter, np.full(-(-N // barrier_every), gap, np.int64), costs.seed)
    transfers = None
    if isinstance(costs.host, HostLink):  # activation offload: transfers on each rank's host link
        start, end, transfers = time_with_transfers(flat, dur, p2p, flush, gaps, costs.host)
    else:  # (a tuple was made a HostLink by CostModel; None: no offload)
        start, end = time_order(flat, dur, p2p, flush, gaps)
    f_time = np.empty((N, G), np.int64)
    b_time = np.empty((N, G), np.int64)
    is_f = flat.kind == FWD
    f_time[flat.mb[is_f], flat.stage[is_f]] = start[is_f]
    done = (flat.kind == BWD) | (flat.kind == BWD_W)
    b_time[flat.mb[done], flat.stage[done]] = end[done] - 1
    i_time = None
    if np.any(flat.kind == BWD_I):
        i_time = np.full((N, G), -1, np.int64)
        is_i = flat.kind == BWD_I
        i_time[flat.mb[is_i], flat.stage[is_i]] = end[is_i] - 1
    table = OpTable(
        kind=flat.kind, stage=flat.stage, mb=flat.mb, rank=flat.rank, start=start, end=end, fused=flat.fused
    )
    group_end = None
    if flush is not None and gaps is not None:  # set together above
        ends = np.full(len(gaps), -1, np.int64)
        np.maximum.at(ends, flush, end)
        group_end = ends + gaps - 1  # the tick at whose end the barrier (and its gap) is over
    return Timeline(
        kind=kind,
        S=S,
        N=N,
        f_time=f_time,
        b_time=b_time,
        M=M,
        v=v,
        n_stages_=n_stages,
        table_=table,
        costs=costs,
        i_time=i_time,
        transfers=transfers,
        **_barrier_fields(averaging, group_end),
        **fields,
    )


def merge_pieces(tl: Timeline, pieces: int, costs: CostModel | None, **fields) -> Timeline:
    """``tl``, timed on microbatches split into ``pieces`` consecutive pieces (piece p is part
    p % pieces of microbatch p // pieces), reported per microbatch: F(m, g) starts with its first
    piece, its gradient is complete with its last; the table keeps every piece's op (labelled
    with its microbatch; ``pieces`` says each holds 1/pieces of a microbatch's activations).
    ``costs``: the per-microbatch cost model the pieces' halves were derived from."""
    N, G = tl.N // pieces, tl.n_stages
    if N * pieces != tl.N or tl.split:
        raise ValueError(f"cannot merge {tl.N} pieces of an unsplit timeline into groups of {pieces}")
    t = tl.table
    return Timeline(
        kind=tl.kind,
        S=tl.S,
        N=N,
        f_time=tl.f_time.reshape(N, pieces, G).min(axis=1),
        b_time=tl.b_time.reshape(N, pieces, G).max(axis=1),
        M=None if tl.M is None else tl.M // pieces,
        v=tl.v,
        n_stages_=tl.n_stages_,
        table_=t._replace(mb=(t.mb // pieces).astype(t.mb.dtype)),
        costs=costs,
        flush_time=tl.flush_time,
        sync=tl.sync,
        copies=tl.copies,
        overlapped=tl.overlapped,
        pieces=pieces,
        **fields,
    )


def _barrier_fields(averaging: bool, group_end) -> dict:
    """A barrier's ends: LocalSGD's averagings (``sync_time``) or flushes (``flush_time``)."""
    if group_end is None:
        return {}
    return dict(sync_time=group_end) if averaging else dict(flush_time=group_end)


def order_of(tl: Timeline) -> Order:
    """The per-rank op order of a one-stage-per-rank timeline (PD, LocalSGD, a searched one):
    each rank's ops in the order its table holds them, the tick they run at."""
    t = tl.table
    return [
        np.stack(
            [
                t.kind[t.rank == r],
                t.stage[t.rank == r],
                t.mb[t.rank == r],
                np.zeros(int(np.sum(t.rank == r)), np.int32),
            ],
            axis=1,
        ).astype(np.int32)
        for r in range(tl.S)
    ]
