"""One timer: op orders + a cost model -> op start/end ticks (docs/schedules.md#time-costs-and-the-one-timer).

Each rank runs its order in sequence. An op starts at

    max(its rank is free, end(dep) + c * [dep ran on another rank])   over its dependencies,

and, in a schedule with flushes, not before the previous flush has ended everywhere plus that
flush's gap (an all-reduce or averaging). A fused pair (torch OVERLAP_F_B) starts once both ops
are ready and occupies the rank for the pair's FB cost. This is the edge model of sail-sg's
``Graph.manual_order.put`` and Victarry's emulator; it reproduces sail-sg's ``best_time``.

The inner loop is compiled with numba (one pass per op, round-robin over ranks; a full round in
which no rank advances means the order deadlocks). :func:`time_order_reference` is the same rule
as a plain dependency-driven Python event loop, kept as the test oracle and the benchmark's
baseline.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from rpd.schedules.machinery import jitter
from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, FWD, Col, Order, describe, grid


@dataclasses.dataclass(frozen=True)
class FlatOrder:
    """An order flattened rank-major, with its dependencies resolved to op indices."""

    kind: np.ndarray  # int8 [n]
    stage: np.ndarray  # int32 [n] global stage
    mb: np.ndarray  # int32 [n]
    rank: np.ndarray  # int32 [n]
    fused: np.ndarray  # bool [n]: overlapped with the previous op of its rank
    rank_ptr: np.ndarray  # int64 [S + 1]: rank r's ops are rank_ptr[r]:rank_ptr[r+1]
    dep: np.ndarray  # int64 [n, 2]: op indices this op waits for (-1: none)


def flatten(order: Order, n_stages: int, N: int) -> FlatOrder:
    """Resolve the dependencies (docs/schedules.md#dependencies-and-placement): F(g, j) <- F(g-1, j); B/I(g, j) <-
    B/I(g+1, j) (F(g, j) at the last stage) and its own F(g, j); W(g, j) <- I(g, j)."""
    sizes = np.array([len(a) for a in order], np.int64)
    rows = np.concatenate([np.asarray(a, np.int32).reshape(-1, 4) for a in order])
    kind, stage, mb = rows[:, Col.KIND].astype(np.int8), rows[:, Col.STAGE], rows[:, Col.MB]
    rank = np.repeat(np.arange(len(order), dtype=np.int32), sizes)
    n = len(rows)
    idx = np.arange(n, dtype=np.int64)
    at_f = np.full((n_stages, N), -1, np.int64)
    at_b = np.full((n_stages, N), -1, np.int64)  # B or I: the op that sends the gradient back
    is_f = kind == FWD
    is_b = (kind == BWD) | (kind == BWD_I)
    at_f[stage[is_f], mb[is_f]] = idx[is_f]
    at_b[stage[is_b], mb[is_b]] = idx[is_b]
    dep = np.full((n, 2), -1, np.int64)
    up = is_f & (stage > 0)
    dep[up, 0] = at_f[stage[up] - 1, mb[up]]
    last = is_b & (stage == n_stages - 1)
    dep[last, 0] = at_f[stage[last], mb[last]]
    inner = is_b & (stage < n_stages - 1)
    dep[inner, 0] = at_b[stage[inner] + 1, mb[inner]]
    dep[inner, 1] = at_f[stage[inner], mb[inner]]
    w = kind == BWD_W
    dep[w, 0] = at_b[stage[w], mb[w]]
    return FlatOrder(
        kind=kind,
        stage=stage.astype(np.int32),
        mb=mb.astype(np.int32),
        rank=rank,
        fused=rows[:, Col.FUSED].astype(bool),
        rank_ptr=np.concatenate([[0], np.cumsum(sizes)]),
        dep=dep,
    )


def op_durations(flat: FlatOrder, costs, n_stages: int, N: int, split: bool) -> np.ndarray:
    """int64 [n] ticks of every op; a fused pair's FB cost is carried by its second op.

    An op's ticks are round(cost · slow(rank) · X) + straggler ticks, X its lognormal jitter factor
    (:mod:`rpd.schedules.machinery.jitter`); without jitter and slow ranks, cost + straggler ticks."""
    c = costs.resolve(n_stages, split)
    table = np.stack([np.zeros(n_stages, np.int64), c.F, c.B, c.I, c.W])
    base = table[flat.kind, flat.stage]
    second = np.nonzero(flat.fused)[0]
    if second.size:
        base[second] = c.FB[flat.stage[second]]
    if getattr(costs, "jitter", None) is not None or getattr(costs, "slow", None) is not None:
        if costs.slow is not None:
            costs.slow.check(len(flat.rank_ptr) - 1)
        f = jitter.op_factors(
            costs.jitter, costs.slow, flat.kind, flat.stage, flat.mb, flat.rank, n_stages, N, costs.seed
        )
        base = jitter.scale(base, f)
    return base + costs.extra_ticks(flat.kind, flat.stage, flat.mb, n_stages, N)


def edge_latency(flat: FlatOrder, costs, n_stages: int, N: int) -> int | np.ndarray:
    """The p2p latency :func:`time_order` adds to each of ``flat``'s cross-rank dependencies:
    ``costs.p2p``, or per dependency slot under p2p jitter (int64 [n, 2])."""
    return jitter.edge_latency(
        getattr(costs, "jitter", None), costs.p2p, flat.kind, flat.stage, flat.mb, n_stages, N, costs.seed
    )


def time_order(
    flat: FlatOrder,
    dur: np.ndarray,
    p2p: int | np.ndarray,
    flush: np.ndarray | None = None,
    gap: np.ndarray | None = None,
    extra: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """int64 [n] start and end tick of every op of ``flat`` under durations ``dur``; ``p2p``: the
    latency of a cross-rank dependency, one number or one per dependency slot (int [n, 2]).

    ``flush`` (int [n], optional): flush index of each op; an op of flush q > 0 starts no
    earlier than the last end of flush q-1 plus ``gap[q-1]`` ticks. ``None``: no barriers.
    ``extra`` (optional): (dep int [n, k], lat int [n, k]), more dependencies with their own
    latencies (op i starts no earlier than end(dep[i, j]) + lat[i, j]; -1: none), such as the
    optimizer post-validation's round trip (:mod:`rpd.schedules.family.post_validation`)."""
    n = len(dur)
    lat = np.where(flat.dep >= 0, p2p * (flat.rank[np.maximum(flat.dep, 0)] != flat.rank[:, None]), 0)
    dep = flat.dep
    if extra is not None:
        dep = np.concatenate([dep, np.asarray(extra[0], np.int64)], axis=1)
        lat = np.concatenate([lat, np.where(extra[0] >= 0, extra[1], 0)], axis=1)
    if flush is None:
        flush = np.zeros(n, np.int64)
        gap = np.zeros(1, np.int64)
    flush = np.asarray(flush, np.int64)
    n_flush = int(flush.max(initial=0)) + 1
    gap = np.zeros(n_flush, np.int64) if gap is None else np.asarray(gap, np.int64)
    start = np.full(n, -1, np.int64)  # -1: not timed (names the op a deadlock stops at)
    end = np.empty(n, np.int64)
    stuck = _compiled_kernel()(
        flat.rank_ptr,
        np.asarray(dur, np.int64),
        np.ascontiguousarray(dep, np.int64),
        lat.astype(np.int64),
        flat.fused,
        flush,
        gap,
        n_flush,
        start,
        end,
    )
    if stuck >= 0:
        raise ValueError(_deadlock(flat, start, stuck))
    return start, end


def _deadlock(flat: FlatOrder, start: np.ndarray, r: int) -> str:
    """The op rank ``r`` is stuck at and its row of the grid, torch's way (``>>`` marks it)."""
    lo, hi = int(flat.rank_ptr[r]), int(flat.rank_ptr[r + 1])
    row = np.stack([flat.kind[lo:hi], flat.stage[lo:hi], flat.mb[lo:hi], flat.fused[lo:hi]], axis=1)
    at = int(np.argmax(start[lo:hi] < 0))
    op = describe(row[at, Col.KIND], row[at, Col.STAGE], row[at, Col.MB])
    return (
        f"the order deadlocks at {op} on rank {r}: it waits for an op that can never run "
        f"(an op ordered before its dependency)\n{grid([row], 0, at).replace('rank 0', f'rank {r}', 1)}"
    )


@functools.cache
def _compiled_kernel():
    """numba-compiled :func:`_time_kernel`, built on first use (unit-cost PD and LocalSGD never
    import numba); ``cache=True`` keeps the machine code on disk across processes. Where numba
    is not installed (rpd depends on it; a bare accelerator image may lack it) the same loop
    runs as plain Python: the same ticks, much slower at large S and N."""
    try:
        import numba
    except ImportError:
        return _time_kernel
    return numba.njit(cache=True, nogil=True)(_time_kernel)


def _time_kernel(rank_ptr, dur, dep, lat, fused, flush, gap, n_flush, start, end):  # pragma: no cover
    S = len(rank_ptr) - 1
    n = len(dur)
    nxt = rank_ptr[:-1].copy()
    free = np.zeros(S, np.int64)
    done = np.zeros(n, np.bool_)
    left = np.zeros(n_flush, np.int64)  # ops of each flush not yet timed
    for i in range(n):
        left[flush[i]] += 1
    flush_end = np.zeros(n_flush, np.int64)
    n_done = 0
    while n_done < n:
        progress = False
        for r in range(S):
            while nxt[r] < rank_ptr[r + 1]:
                i = nxt[r]
                j = i + 1 if (i + 1 < rank_ptr[r + 1] and fused[i + 1]) else -1
                t = free[r]
                ok = True
                for o in (i, j):
                    if o < 0:
                        continue
                    for k in range(dep.shape[1]):
                        d = dep[o, k]
                        if d < 0 or d == i or d == j:
                            continue
                        if not done[d]:
                            ok = False
                            break
                        t = max(t, end[d] + lat[o, k])
                    q = flush[o]
                    if q > 0:
                        if left[q - 1] > 0:
                            ok = False
                        else:
                            t = max(t, flush_end[q - 1] + gap[q - 1])
                    if not ok:
                        break
                if not ok:
                    break
                last = i if j < 0 else j
                e = t + (dur[i] if j < 0 else dur[j])
                for o in (i, j):
                    if o < 0:
                        continue
                    start[o] = t
                    end[o] = e
                    done[o] = True
                    left[flush[o]] -= 1
                    flush_end[flush[o]] = max(flush_end[flush[o]], e)
                    n_done += 1
                free[r] = e
                nxt[r] = last + 1
                progress = True
        if not progress:
            for r in range(S):
                if nxt[r] < rank_ptr[r + 1]:
                    return r
            return 0
    return -1


def time_order_reference(order: Order, dur_of, p2p: int, n_stages: int) -> dict:
    """The timing rule as a straightforward dependency-driven Python event loop (the shape of
    torch's ``_simulate_comms_compute``): repeatedly run, on every rank, the next op whose
    dependencies have ended. ``dur_of(kind, stage, mb, fused)`` gives an op's ticks (for a fused
    pair, the pair's). Returns {(kind, stage, mb): (start, end)}; no flushes, no fused deps.
    Slow by design: the test oracle and the benchmark baseline of :func:`time_order`."""
    where: dict = {}
    end: dict = {}
    for r, a in enumerate(order):
        for kind, g, m, _ in a.tolist():
            where[(kind, g, m)] = r
    back = {(g, m) for (k, g, m) in where if k == BWD_I}

    def deps(kind, g, m):
        if kind == FWD:
            return [(FWD, g - 1, m)] if g > 0 else []
        if kind == BWD_W:
            return [(BWD_I, g, m)]
        if g == n_stages - 1:
            return [(FWD, g, m)]
        down = BWD_I if (g + 1, m) in back else BWD
        return [(down, g + 1, m), (FWD, g, m)]

    lists = [a.tolist() for a in order]
    pos = [0] * len(order)
    free = [0] * len(order)
    out = {}
    remaining = sum(len(a) for a in lists)
    while remaining:
        progress = False
        for r, a in enumerate(lists):
            while pos[r] < len(a):
                group = [a[pos[r]]]
                if pos[r] + 1 < len(a) and a[pos[r] + 1][3]:
                    group.append(a[pos[r] + 1])
                t = free[r]
                ready = True
                for kind, g, m, _ in group:
                    for d in deps(kind, g, m):
                        if d in [tuple(x[:3]) for x in group]:
                            continue
                        if d not in end:
                            ready = False
                            break
                        t = max(t, end[d] + (p2p if where[d] != r else 0))
                    if not ready:
                        break
                if not ready:
                    break
                e = t + dur_of(*group[-1]) if len(group) == 2 else t + dur_of(*group[0])
                for kind, g, m, _ in group:
                    out[(kind, g, m)] = (t, e)
                    end[(kind, g, m)] = e
                free[r] = e
                pos[r] += len(group)
                remaining -= len(group)
                progress = True
        if not progress:
            raise ValueError("the order deadlocks")
    return out
