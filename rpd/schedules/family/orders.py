"""Op orders of the one-direction schedules, one flush of M microbatches (docs/schedules.md#gpipe to #zb-h2).

Each generator returns an :data:`rpd.schedules.machinery.ir.Order` for microbatches 0..M-1; the public
constructors (:mod:`rpd.schedules.family`) repeat it per flush and time it.
"""

from __future__ import annotations

import functools
from typing import Callable, ParamSpec

import numpy as np

from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, FWD, Order, ops

P = ParamSpec("P")


def memoised(build: Callable[P, Order]) -> Callable[P, Order]:
    """``build`` computed once per (hashable) arguments, each call given its own copy of the
    rank arrays: an order depends on (S, M, ...) alone, never on the costs it is timed under, and
    a sweep over costs (the plan's fits, the tables' cost columns) asked for the same order at
    every point (a quarter of ``plan_accuracy``'s profile). The copies keep a caller that edits
    its order in place from changing another's."""
    cached: Callable[..., Order] = functools.lru_cache(maxsize=256)(build)  # hashable arguments: ints

    @functools.wraps(build)
    def fresh(*args: P.args, **kwargs: P.kwargs) -> Order:
        return [a.copy() for a in cached(*args, **kwargs)]

    return fresh


@memoised
def gpipe_order(S: int, M: int) -> Order:
    """torch ``ScheduleGPipe._get_pipeline_order``: every rank F(0..M-1), then B(0..M-1)."""
    return [ops([(FWD, r, j) for j in range(M)] + [(BWD, r, j) for j in range(M)]) for r in range(S)]


@memoised
def one_f_one_b_order(S: int, M: int, advance: int = 0) -> Order:
    """1F1B with flush (Megatron ``forward_backward_pipelining_without_interleaving``, torch
    ``Schedule1F1B``): rank r runs w = min(S-1-r, M) warm-up F's, M - w pairs (F(w+i), B(i)),
    then w cool-down B's. ``advance`` more warm-up F's is AvgPipe's advance forward
    (:mod:`rpd.schedules.family.avgpipe`): w = min(S-1-r+advance, M), GPipe's order at M."""
    out = []
    for r in range(S):
        w = min(S - 1 - r + advance, M)
        rows = [(FWD, r, j) for j in range(w)]
        for i in range(M - w):
            rows += [(FWD, r, w + i), (BWD, r, i)]
        rows += [(BWD, r, j) for j in range(M - w, M)]
        out.append(ops(rows))
    return out


def megatron_table(M: int, v: int, group: int) -> list[tuple[int, int]]:
    """Megatron ``get_schedule_table``: (microbatch, chunk) per virtual microbatch id. Groups of
    ``group`` consecutive microbatches run chunk 0..v-1 in turn; the last group takes every
    remaining microbatch."""
    table = []
    for lo in range(0, M, group):
        hi = M if lo + group >= M else lo + group
        table += [(j, c) for c in range(v) for j in range(lo, hi)]
        if hi == M:
            break
    return table


def check_interleaved(S: int, M: int, v: int, group: int) -> None:
    """Megatron's constraints on the interleaved schedule (docs/schedules.md#interleaved-1f1b)."""
    if not S <= group <= M:
        raise ValueError(
            f"interleaved: the group size must satisfy S <= group <= M (Megatron), got group={group}, S={S}, M={M}"
        )
    rest = M % group
    if rest != 0 and rest < S:
        raise ValueError(
            f"interleaved: M mod group must be 0 or >= S (Megatron's dependency-bubble "
            f"check), got M={M}, group={group}, S={S}"
        )


@memoised
def interleaved_order(S: int, M: int, v: int, group: int | None = None) -> Order:
    """Interleaved 1F1B (Megatron ``get_pp_rank_microbatches`` + ``get_schedule_table``).

    Rank r holds global stages c*S + r for chunks c = 0..v-1 (looped placement). With the table
    above, warm = min(2(S-1-r) + (v-1)*group, v*M); the rank runs F(table[k]) for k < warm,
    then pairs (F(table[k + warm]), B(table'[k])), then the remaining B(table'[k]), where
    table'[k] is table[k] with chunk v-1-c (backward walks the chunks in reverse)."""
    group = S if group is None else group
    table = megatron_table(M, v, group)
    n = v * M
    out = []
    for r in range(S):
        warm = min(2 * (S - 1 - r) + (v - 1) * group, n)
        fwd = [(FWD, c * S + r, j) for j, c in table]
        bwd = [(BWD, (v - 1 - c) * S + r, j) for j, c in table]
        rows = fwd[:warm]
        for k in range(n - warm):
            rows += [fwd[k + warm], bwd[k]]
        rows += bwd[n - warm :]
        out.append(ops(rows))
    return out


@memoised
def zb_h1_order(S: int, M: int) -> Order:
    """ZB-H1 (torch ``ScheduleInterleavedZeroBubble`` with one stage per rank; Victarry
    ``generate_zero_bubble_1p_schedule``): rank r runs w = min(S-1-r, M) warm-up F's, then
    steps i = 0.. of (F(w+i) while any is left, I(i)), each followed by the oldest pending W
    once i >= r (W is delayed by r microbatches on rank r), then the remaining W's in order."""
    out = []
    for r in range(S):
        w = min(S - 1 - r, M)
        rows = [(FWD, r, j) for j in range(w)]
        nw = 0
        for i in range(M):
            if w + i < M:
                rows.append((FWD, r, w + i))
            rows.append((BWD_I, r, i))
            if i >= r:
                rows.append((BWD_W, r, nw))
                nw += 1
        rows += [(BWD_W, r, j) for j in range(nw, M)]
        out.append(ops(rows))
    return out


def zb_h2_order(S: int, M: int, max_pending: np.ndarray | None = None, max_held: int | None = None) -> Order:
    """ZB-H2 by the greedy rule of docs/schedules.md#zb-h2 at unit costs (F = I = W = 1): at every tick each rank
    runs, from the state at the tick's start,
      1. I of its oldest un-I'd microbatch if ready; else
      2. F of its next microbatch if ready, fewer than ``max_pending[r]`` microbatches are
         F-not-I (default 2(S-1-r) + 1, the warm-up of sail-sg's heuristic) and fewer than
         ``max_held`` are F-not-W (default 2S: sail-sg's ``max_mem = 2p·mem_f`` counts an
         activation until its W frees it, so W residues count too); else
      3. W of its oldest pending microbatch; else idle.
    This is the deterministic form of sail-sg ``zb.py Graph.manual_order`` with max pending
    backward 2S (equal to it on ranks 1..S-1 and on rank 0 up to an I/W tie). Without
    the F-not-W cap (``max_held=M``) the W's drift to the end of the flush and a rank holds
    all M microbatches at large M (the cap the schedule review found missing)."""
    cap = (2 * (S - 1 - np.arange(S)) + 1) if max_pending is None else np.asarray(max_pending)
    held = 2 * S if max_held is None else int(max_held)
    never = np.iinfo(np.int64).max
    f_done = np.full((S, M), never, np.int64)  # tick at which F(j) ran on rank r
    i_done = np.full((S, M), never, np.int64)
    nf = np.zeros(S, np.int64)
    ni = np.zeros(S, np.int64)
    nw = np.zeros(S, np.int64)
    ranks = np.arange(S)
    rows: list[list[tuple[int, int, int]]] = [[] for _ in range(S)]
    t = 0
    while nw.min() < M:
        jf, ji = np.minimum(nf, M - 1), np.minimum(ni, M - 1)
        # I(ni, r): own F done, and I(ni, r+1) done (the last stage: its own F)
        down = np.where(ranks == S - 1, f_done[ranks, ji], i_done[np.minimum(ranks + 1, S - 1), ji])
        i_ok = (ni < nf) & (f_done[ranks, ji] < t) & (down < t)
        up = np.where(ranks == 0, -1, f_done[np.maximum(ranks - 1, 0), jf])
        f_ok = (nf < M) & (up < t) & (nf - ni < cap) & (nf - nw < held)
        w_ok = nw < ni
        do_i = i_ok
        do_f = f_ok & ~do_i
        do_w = w_ok & ~do_i & ~do_f
        for r in np.nonzero(do_i | do_f | do_w)[0].tolist():
            if do_i[r]:
                rows[r].append((BWD_I, r, int(ni[r])))
            elif do_f[r]:
                rows[r].append((FWD, r, int(nf[r])))
            else:
                rows[r].append((BWD_W, r, int(nw[r])))
        i_done[ranks[do_i], ni[do_i]] = t
        f_done[ranks[do_f], nf[do_f]] = t
        ni += do_i
        nf += do_f
        nw += do_w
        t += 1
        if t > 4 * S * M + 4 * S:
            raise RuntimeError("zb_h2 greedy rule did not terminate")
    return [ops(r) for r in rows]
