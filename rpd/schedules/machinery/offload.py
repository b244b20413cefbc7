"""Activation offload over a host link per rank (PipeOffload, ICML 2025; docs/schedules.md#activation-offload).

The rule (read for meaning from ``sail-sg/zero-bubble-pipeline-parallelism:
megatron/core/pipeline_parallel/zerobubble/scheduler/offloading.py``: activations go to host memory
during the gap between their forward and their backward and come back before the backward),
for any order and any schedule, set by ``CostModel.host`` (:class:`~rpd.schedules.machinery.costs.HostLink`):

* an op's activation is offloaded when at least ``min_gap`` ops of its rank run between its F
  and its backward (B, or I when split);
* D2H (device to host) runs on the rank's outbound link after its F ends, in the order of the
  F's; H2D (back) on the rank's inbound link, in the order of the backwards, once its D2H has
  ended and the op before the one just before the backward has ended (the prefetch overlaps
  the op just before it; a fused F&B pair counts as one op); the backward waits for its H2D;
* each transfer takes ``latency + d2h`` (``h2d``) ticks; each link moves one at a time.

Transfers are ops on the timeline (``Timeline.transfers``), timed by the one timer with the
compute ops (the links are sequences of their own); an offloaded activation leaves the device
from the end of its D2H to the start of its H2D (:func:`rpd.schedules.machinery.memory.peak_activations`).
The step grows only where a link cannot keep up.
"""

from __future__ import annotations

import numpy as np

from rpd.schedules.machinery.costs import HostLink
from rpd.schedules.machinery.ir import BWD, BWD_I, FWD
from rpd.schedules.machinery.timeline import OpTable
from rpd.schedules.machinery.timer import FlatOrder, time_order

D2H, H2D = 5, 6  # kinds of the transfer ops in Timeline.transfers


def chosen(flat: FlatOrder, link: HostLink) -> list[tuple[int, int]]:
    """(forward op, backward op) index pairs of the offloaded activations: at least
    ``link.min_gap`` ops of the rank between them."""
    n_stages = int(flat.stage.max()) + 1
    N = int(flat.mb.max()) + 1
    back = np.full((n_stages, N), -1, np.int64)
    is_b = (flat.kind == BWD) | (flat.kind == BWD_I)
    back[flat.stage[is_b], flat.mb[is_b]] = np.nonzero(is_b)[0]
    f = np.nonzero(flat.kind == FWD)[0]
    b = back[flat.stage[f], flat.mb[f]]
    keep = (b - f - 1 >= link.min_gap) & (trigger(flat, b) > f)  # F and its backward: one rank, in order
    return list(zip(f[keep].tolist(), b[keep].tolist()))


def trigger(flat: FlatOrder, b: np.ndarray) -> np.ndarray:
    """int [len(b)]: the op whose end lets the H2D of backward op ``b`` start: the op before
    the one that runs just before the backward (a fused pair counts as one op)."""
    lead = np.where(flat.fused[b], b - 1, b)  # the first op of the backward's pair
    prev = lead - 1
    prev = np.where(flat.fused[np.maximum(prev, 0)], prev - 1, prev)  # the first op of the pair before
    return prev - 1


def time_with_transfers(
    flat: FlatOrder, dur: np.ndarray, p2p: int | np.ndarray, flush, gap, link: HostLink
) -> tuple[np.ndarray, np.ndarray, OpTable]:
    """Start and end ticks of the compute ops of ``flat`` with the transfers of the module doc,
    and the transfers' own table (rank = the compute rank whose link runs them)."""
    S = len(flat.rank_ptr) - 1
    n = len(dur)
    pairs = chosen(flat, link)
    rank = flat.rank
    d2h = sorted(pairs, key=lambda p: (rank[p[0]], p[0]))  # per rank, in the order of the F's
    h2d = sorted(pairs, key=lambda p: (rank[p[1]], p[1]))  # per rank, in the order of the backwards
    k = len(pairs)
    idx_d2h = {f: n + i for i, (f, _) in enumerate(d2h)}
    extra = np.full((n + 2 * k, 2), -1, np.int64)
    for i, (f, _) in enumerate(d2h):
        extra[n + i, 0] = f
    for i, (f, b) in enumerate(h2d):
        extra[n + k + i] = (idx_d2h[f], trigger(flat, np.array([b]))[0])
        extra[b, 0] = n + k + i
    src = [f for f, _ in d2h] + [b for _, b in h2d]
    x_rank = np.concatenate([rank[[f for f, _ in d2h]], rank[[b for _, b in h2d]]]).astype(np.int32)
    lanes = np.concatenate([x_rank[:k] + S, x_rank[k:] + 2 * S]) if k else np.zeros(0, np.int32)
    counts = [np.bincount(lanes[lanes // S == q] - q * S, minlength=S) for q in (1, 2)] if k else [np.zeros(S, int)] * 2
    ext = FlatOrder(
        kind=np.concatenate([flat.kind, np.full(k, D2H, np.int8), np.full(k, H2D, np.int8)]),
        stage=np.concatenate([flat.stage, flat.stage[src]]).astype(np.int32),
        mb=np.concatenate([flat.mb, flat.mb[src]]).astype(np.int32),
        rank=np.concatenate([rank, lanes]).astype(np.int32),
        fused=np.concatenate([flat.fused, np.zeros(2 * k, bool)]),
        rank_ptr=np.concatenate([flat.rank_ptr, n + np.cumsum(np.concatenate(counts))]),
        dep=np.concatenate([flat.dep, np.full((2 * k, 2), -1, np.int64)]),
    )
    x_dur = np.concatenate([dur, np.full(k, link.latency + link.d2h), np.full(k, link.latency + link.h2d)])
    x_flush = None if flush is None else np.concatenate([flush, flush[src]])
    if np.ndim(p2p):  # per-edge latencies (p2p jitter): the transfers have no p2p edges
        p2p = np.concatenate([np.asarray(p2p, np.int64), np.zeros((2 * k, 2), np.int64)])
    start, end = time_order(ext, x_dur, p2p, x_flush, gap, extra=(extra, np.zeros_like(extra)))
    table = OpTable(
        kind=ext.kind[n:],
        stage=ext.stage[n:],
        mb=ext.mb[n:],
        rank=x_rank,
        start=start[n:],
        end=end[n:],
        fused=np.zeros(2 * k, bool),
    )
    return start[:n], end[:n], table
