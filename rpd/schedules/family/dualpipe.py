"""DualPipe (DeepSeek-V3; docs/schedules.md#dualpipe): two mirrored copies of an S-stage model in
opposite directions on S ranks.

Read for meaning from ``deepseek-ai/DualPipe: dualpipe/dualpipe.py`` (``DualPipe.step``, @3da1bbe)
and its README, and written anew. The *down* copy runs stage g on rank g, the *up* copy stage g
on rank S-1-g (Chimera's placement, :mod:`rpd.schedules.family.bidirectional`): rank r holds stage r of
one copy and stage S-1-r of the other, twice the parameters of a one-direction pipeline, and the
two copies of each stage have their gradients all-reduced before the step (the repository
leaves the all-reduce to its user; rpd times it as the flush's gap). A flush of M microbatches
sends microbatches 0..M/2-1 down and M/2..M-1 up; S and M even, M >= 2S (its asserts).

The order: with ``h = min(r, S-1-r)`` (its ``half_rank``), rank r runs the 8 steps of DualPipeV
(:func:`rpd.schedules.family.v_shape.dualpipe_v_order`) of rank h on S/2 ranks and M/2 microbatches
(its ``num_half_ranks`` and ``half_num_chunks``; the middle ranks S/2-1 and S/2 play the last
rank of DualPipeV). DualPipeV's chunk ``s0 = h`` is model stage h of the copy that starts on
this half of the ranks (down on ranks < S/2, up on the others: its ``phase ^=
is_in_second_half``), and ``s1 = 2(S/2)-1-h = S-1-h`` model stage S-1-h of the other copy, so
the V order's stage numbers are the model's; only its microbatches are renamed (j of the up
copy is M/2 + j). Overlapped F&B pairs cost ``costs.FB``; a partly split backward (I, W).
Tested action for action against ``DualPipe.step`` written out in the tests.
"""

from __future__ import annotations

import numpy as np

from rpd.schedules.family.flushes import allreduce_gap, flush_entry, flushes, whole_flushes
from rpd.schedules.family.v_shape import dualpipe_v_order
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, Source
from rpd.schedules.machinery.ir import Col, Order
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_int

KIND = "dualpipe"


def check(S: int, M: int) -> None:
    """DualPipe's asserts, as ValueErrors naming S and M."""
    if S % 2:
        raise ValueError(f"dualpipe needs an even number of ranks S (two halves), got S={S}")
    if M % 2 or M < 2 * S:
        raise ValueError(f"dualpipe needs an even M >= 2S (M/2 microbatches each way), got M={M}, S={S}")


def direction(S: int, M: int) -> np.ndarray:
    """int [M]: 0 for a microbatch of the down copy (stage g on rank g), 1 for the up copy."""
    return (np.arange(M) >= M // 2).astype(np.int32)


def dualpipe_order(S: int, M: int) -> Order:
    """One flush of M microbatches on S ranks (module doc)."""
    S, M = check_int("S", S), check_int("M", M)
    check(S, M)
    half = dualpipe_v_order(S // 2, M // 2)
    out = []
    for r in range(S):
        h = min(r, S - 1 - r)
        a = half[h].copy()
        own_copy_is_up = r >= S // 2  # s0 = stage h runs the up copy on the second half of the ranks
        s0 = a[:, Col.STAGE] == h
        up = s0 if own_copy_is_up else ~s0
        a[up, Col.MB] += M // 2
        out.append(a)
    return out


def dualpipe(S: int, N: int, M: int, costs: CostModel | None = None, values: int = 0) -> Timeline:
    """DualPipe on S ranks, N microbatches in flushes of M; each flush ends with the all-reduce
    of the two copies of every stage, ``costs.allreduce_ticks(values)`` ticks (``values`` per
    stage)."""
    S, N, M = check_int("S", S, minimum=2), check_int("N", N), check_int("M", M)
    gap = allreduce_gap(costs, values)
    whole_flushes(N, M)
    return flushes(KIND, dualpipe_order(S, M), S, N, M, costs, gap=gap, split=True)


ENTRY = flush_entry(
    "dualpipe",
    dualpipe,
    allreduce=True,
    split_backward=True,
    semantics="replicated",
    defaults={"M": lambda S: 2 * S},
    doc="DualPipe: two mirrored copies in opposite directions, copies' gradients all-reduced",
    look=Look("DualPipe", "#6A3D9A", "P"),
    source=Source("DeepSeek-AI, DeepSeek-V3 technical report, 2024", "deepseek-ai/DualPipe: dualpipe/dualpipe.py"),
)
