"""Op orders of the V-placed schedules, one flush of M microbatches (docs/schedules.md#zb-v, #dualpipev).

Both schedules run 2S global stages on S ranks in a V (torch
``_utils.generate_stage_to_rank_mapping(style="v")``): rank r holds stage ``c0 = r`` (the down
leg) and stage ``c1 = 2S-1-r`` (the up leg), so stages S-1 and S share rank S-1.

* :func:`zbv_order` is torch ``ScheduleZBVZeroBubble._calculate_single_rank_operations``
  (``torch/distributed/pipelining/schedules.py``, pytorch/pytorch @00722e648b74).
* :func:`dualpipe_v_order` is torch ``ScheduleDualPipeV._calculate_single_rank_operations``
  (same file and commit); docs/schedules.md#dualpipev reports it equal to deepseek ``dualpipev.py`` and
  Victarry's generator (not re-checked here).

Both were re-implemented from the anchor's text, not copied. Verification: DualPipeV equals,
op for op, torch's test artifact ``test/distributed/pipelining/artifacts/dualpipev_4rank_10mb.csv``
(@a2af973f; S = 4, M = 10) and, timed, Victarry's T = 95.5 (docs/schedules.md#dualpipev). ZB-V has no torch
artifact: it is checked only through its counts and the timed closed form of docs/schedules.md#zb-v (every
rank's span 6M, T_flush = 6M + S - 1 at F = I = W, M >= 2S - 1).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, FWD, Order, ops
from rpd.validation import check_int


def v_stage_to_rank(S: int) -> np.ndarray:
    """int [2S]: the rank of global stage g in the V placement, g for g < S, 2S-1-g after."""
    S = check_int("S", S)
    g = np.arange(2 * S)
    return np.where(g < S, g, 2 * S - 1 - g)


def zbv_order(S: int, M: int) -> Order:
    """ZB-V (torch ``ScheduleZBVZeroBubble``): the order rank r runs, with c0 = r, c1 = 2S-1-r
    and n = max(2S-1, M) microbatches per chunk, each chunk's F, I, W counting its microbatches
    0, 1, ... in turn:

    1. F(c0) x (2(S-r) - 1)
    2. [F(c1), F(c0)] x r
    3. [F(c1), I(c1), W(c1)] x (S-r)
    4. while F(c1) lags F(c0) or F(c0) has microbatches left:
       [F(c0) if any left], I(c0), W(c0), F(c1), I(c1), W(c1)
    5. [I(c0), I(c1)] x r
    6. [I(c0), W(c0)] x (S-r)   (W(c0) from its own counter, which lags I(c0))
    7. the remaining W(c1), then the remaining W(c0)

    torch pads with microbatches up to 2S-1 and then blanks every op of a microbatch >= M;
    here those ops are dropped (no None padding in the IR). The zero-bubble property (every
    rank busy 6M chunk ticks in a row) holds at F = I = W (torch's docstring).
    """
    S, M = check_int("S", S), check_int("M", M)
    n = max(2 * S - 1, M)
    out = []
    for r in range(S):
        c0, c1 = r, 2 * S - 1 - r
        nxt = {(k, c): 0 for k in (FWD, BWD_I, BWD_W) for c in (c0, c1)}
        rows: list[tuple[int, int, int]] = []

        def emit(times, *pattern):  # the docstring's [op, op, ...] x times
            for _ in range(times):
                for kind, stage in pattern:
                    rows.append((kind, stage, nxt[kind, stage]))
                    nxt[kind, stage] += 1

        emit(2 * (S - r) - 1, (FWD, c0))
        emit(r, (FWD, c1), (FWD, c0))
        emit(S - r, (FWD, c1), (BWD_I, c1), (BWD_W, c1))
        while nxt[FWD, c1] < nxt[FWD, c0] or nxt[FWD, c0] < n:
            emit(int(nxt[FWD, c0] < n), (FWD, c0))
            emit(1, (BWD_I, c0), (BWD_W, c0), (FWD, c1), (BWD_I, c1), (BWD_W, c1))
        emit(r, (BWD_I, c0), (BWD_I, c1))
        emit(S - r, (BWD_I, c0), (BWD_W, c0))
        for c in (c1, c0):
            emit(nxt[BWD_I, c] - nxt[BWD_W, c], (BWD_W, c))
        for c in (c0, c1):
            if not nxt[FWD, c] == nxt[BWD_I, c] == nxt[BWD_W, c] == n:
                raise AssertionError(f"zbv_order: chunk {c} of rank {r} is incomplete")
        out.append(ops([row for row in rows if row[2] < M]))
    return out


def dualpipe_v_order(S: int, M: int) -> Order:
    """DualPipeV (torch ``ScheduleDualPipeV``): the order rank r runs, with s0 = r,
    s1 = 2S-1-r. ``O(a, b)`` is an overlapped pair (torch ``OVERLAP_F_B``): F of stage a and a
    full B of stage b, written as two rows, the B row with ``fused = 1``. F, and I-or-B, count
    each stage's microbatches in turn; each I queues its W, and ``W`` below runs the oldest
    queued one (nothing when the queue is empty).

    1. F(s0) x 2(S-r-1)
    2. [F(s0), F(s1)] x (r+1)
    3. [I(s1), W, F(s1)] x (S-r-1)
    4. for i < M - 2S + r + 1: O(s0, s1) (at i = 0 on the last rank: F(s0), then B(s1), not
       overlapped), then O(s1, s0)
    5. [B(s1), O(s1, s0)] x (S-r-1)
    6. for i <= r, with h = (r+1) // 2: X(s1), X(s0), where X is B until the split backward
       switches on and I after; it switches on at i = h, before X(s1) on odd ranks and between
       X(s1) and X(s0) on even ranks
    7. [W, I(s0)] x (S-r-1)
    8. W x (r+1)

    Per rank: 2M F, 2S-r-1 I and as many W, 2M-2S+r+1 B. torch requires M >= 2S (its check
    is ``n_microbatches < num_stages``).
    """
    S, M = check_int("S", S), check_int("M", M)
    if M < 2 * S:
        raise ValueError(f"dualpipe_v needs M >= 2S microbatches (torch ScheduleDualPipeV), got M={M}, S={S}")
    out = []
    for r in range(S):
        s0, s1 = r, 2 * S - 1 - r
        n_f = {s0: 0, s1: 0}
        n_b = {s0: 0, s1: 0}  # the next microbatch to run I or B on (torch's shared counter)
        w_queue: deque[tuple[int, int]] = deque()
        rows: list[tuple[int, int, int, int]] = []

        def fwd(stage, fused=0):
            rows.append((FWD, stage, n_f[stage], fused))
            n_f[stage] += 1

        def back(stage, kind, fused=0):
            rows.append((kind, stage, n_b[stage], fused))
            if kind == BWD_I:
                w_queue.append((stage, n_b[stage]))
            n_b[stage] += 1

        def pending_w():
            if w_queue:
                stage, mb = w_queue.popleft()
                rows.append((BWD_W, stage, mb, 0))

        def overlap(f_stage, b_stage):
            fwd(f_stage)
            back(b_stage, BWD, fused=1)

        for _ in range(2 * (S - r - 1)):
            fwd(s0)
        for _ in range(r + 1):
            fwd(s0)
            fwd(s1)
        for _ in range(S - r - 1):
            back(s1, BWD_I)
            pending_w()
            fwd(s1)
        for i in range(M - 2 * S + r + 1):
            if i == 0 and r == S - 1:
                fwd(s0)
                back(s1, BWD)
            else:
                overlap(s0, s1)
            overlap(s1, s0)
        for _ in range(S - r - 1):
            back(s1, BWD)
            overlap(s1, s0)
        split = False
        h = (r + 1) // 2
        for i in range(r + 1):
            if i == h and r % 2 == 1:
                split = True
            back(s1, BWD_I if split else BWD)
            if i == h and r % 2 == 0:
                split = True
            back(s0, BWD_I if split else BWD)
        for _ in range(S - r - 1):
            pending_w()
            back(s0, BWD_I if split else BWD)
        for _ in range(r + 1):
            pending_w()
        if w_queue or any(n_f[s] != M or n_b[s] != M for s in (s0, s1)):
            raise AssertionError(f"dualpipe_v_order: rank {r} is incomplete")
        out.append(ops(rows))
    return out
