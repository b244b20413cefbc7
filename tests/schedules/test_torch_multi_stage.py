"""Looped BFS and interleaved zero bubble (rpd.schedules.family.looped_bfs, rpd.schedules.family.interleaved_zb;
docs/schedules.md#looped-bfs-and-interleaved-zero-bubble): the orders equal torch's, action for
action, and the closed forms hold over a grid.

The references below are torch's ``ScheduleLoopedBFS._calculate_single_rank_operations`` and
``ScheduleInterleavedZeroBubble._calculate_single_rank_operations`` with ``_get_1f1b_rank_ops``
(``pytorch/pytorch: torch/distributed/pipelining/schedules.py``) written out line by line as
torch runs them (its backward and weight steps, which torch repeats in two branches, once each as
local functions), ``None`` padding included, on (stage, kind, microbatch) tuples; the test drops
the ``None``s, as the IR does."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from rpd import registry
from rpd.schedules.family.interleaved_zb import interleaved_zb, interleaved_zb_order
from rpd.schedules.family.looped_bfs import looped_bfs, looped_bfs_order
from rpd.schedules.family.orders import zb_h1_order
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import Op

F, B, I, W = "F", "B", "I", "W"  # noqa: E741


def torch_looped_bfs(pp_group_size, n_local_stages, n_microbatches, rank):
    stage_indices = range(rank, pp_group_size * n_local_stages, pp_group_size)
    rank_ops = [None for _ in range(rank)]
    for stage_index in stage_indices:
        rank_ops.extend((stage_index, F, mb_index) for mb_index in range(n_microbatches))
    post_warmup_ops = 2 * (pp_group_size - 1 - rank)
    rank_ops.extend([None] * post_warmup_ops)
    for stage_index in reversed(stage_indices):
        rank_ops.extend((stage_index, B, mb_index) for mb_index in reversed(range(n_microbatches)))
    return rank_ops


def torch_get_1f1b_rank_ops(
    n_local_stages,
    pp_group_size,
    warmup_ops,
    fwd_bwd_ops,
    cooldown_ops,
    rank,
    forward_stage_index,
    backward_stage_index,
    num_1f1b_microbatches=0,
    enable_zero_bubble=False,
):
    fwd_stage_mb_index = defaultdict(int)
    bwd_stage_mb_index = defaultdict(int)
    weight_stage_mb_index = defaultdict(int)
    rank_ops = [None for _ in range(rank)]
    post_warmup_ops = (n_local_stages * pp_group_size + 2 * (pp_group_size - 1 - rank)) - (warmup_ops + rank)
    if enable_zero_bubble:
        post_warmup_ops = pp_group_size - rank - 1
    total_ops = warmup_ops + fwd_bwd_ops + cooldown_ops
    backward_op_ids = []
    weight_op_count = 0
    FULL_BACKWARD_OR_BACKWARD_INPUT = I if enable_zero_bubble else B

    def weight():  # torch's W step, written once here
        nonlocal weight_op_count
        weight_stage_index = backward_stage_index(backward_op_ids[weight_op_count])
        weight_stage_mb_index[weight_stage_index] = (weight_mb_index := weight_stage_mb_index[weight_stage_index]) + 1
        rank_ops.append((weight_stage_index, W, weight_mb_index))
        weight_op_count += 1

    def backward(op):  # torch's B (or I) step and the W it may be followed by, in both phases
        bwd_stage_index = backward_stage_index(op)
        bwd_stage_mb_index[bwd_stage_index] = (bwd_mb_index := bwd_stage_mb_index[bwd_stage_index]) + 1
        rank_ops.append((bwd_stage_index, FULL_BACKWARD_OR_BACKWARD_INPUT, bwd_mb_index))
        backward_op_ids.append(op)
        if enable_zero_bubble and op - warmup_ops >= num_1f1b_microbatches:
            weight()

    for op in range(total_ops):
        if op < warmup_ops:
            fwd_stage_index = forward_stage_index(op)
            fwd_stage_mb_index[fwd_stage_index] = (mb_index := fwd_stage_mb_index[fwd_stage_index]) + 1
            rank_ops.append((fwd_stage_index, F, mb_index))
            if op == warmup_ops - 1:
                rank_ops.extend([None] * post_warmup_ops)
        elif warmup_ops <= op < warmup_ops + fwd_bwd_ops:
            fwd_stage_index = forward_stage_index(op)
            fwd_stage_mb_index[fwd_stage_index] = (fwd_mb_index := fwd_stage_mb_index[fwd_stage_index]) + 1
            rank_ops.append((fwd_stage_index, F, fwd_mb_index))
            backward(op)
        else:
            if not enable_zero_bubble:
                rank_ops.append(None)
            backward(op)
    while enable_zero_bubble and weight_op_count < len(backward_op_ids):
        weight()
    return rank_ops


def torch_interleaved_zb(pp_group_size, n_local_stages, n_microbatches, rank):
    number_of_rounds = max(1, n_microbatches // pp_group_size)
    microbatches_per_round = n_microbatches // number_of_rounds
    warmups_ops_last_stage = (n_local_stages - 1) * microbatches_per_round
    multiply_factor = 1
    warmup_ops = warmups_ops_last_stage + multiply_factor * ((pp_group_size - 1) - rank)
    warmup_ops = min(warmup_ops, n_microbatches * n_local_stages)
    microbatch_ops = n_local_stages * n_microbatches
    fwd_bwd_ops = microbatch_ops - warmup_ops
    cooldown_ops = microbatch_ops - fwd_bwd_ops

    def forward_stage_index(step):
        local_index = (step // microbatches_per_round) % n_local_stages
        return (local_index * pp_group_size) + rank

    def backward_stage_index(step):
        local_index = n_local_stages - 1 - ((step - warmup_ops) // microbatches_per_round) % n_local_stages
        return (local_index * pp_group_size) + rank

    return torch_get_1f1b_rank_ops(
        n_local_stages,
        pp_group_size,
        warmup_ops,
        fwd_bwd_ops,
        cooldown_ops,
        rank,
        forward_stage_index,
        backward_stage_index,
        rank,
        enable_zero_bubble=True,
    )


def _actions(order_rank) -> list[tuple[int, str, int]]:
    return [(int(g), str(Op(int(k))), int(j)) for k, g, j, _ in order_rank.tolist()]


CASES = [(2, 2, 2), (2, 3, 4), (4, 2, 4), (4, 2, 8), (4, 3, 8), (4, 2, 10), (3, 2, 6), (8, 2, 16), (4, 2, 12)]


@pytest.mark.parametrize("S,v,M", CASES)
def test_orders_equal_torchs_action_for_action(S, v, M):
    bfs, zb = looped_bfs_order(S, M, v), interleaved_zb_order(S, M, v)
    for r in range(S):
        assert _actions(bfs[r]) == [a for a in torch_looped_bfs(S, v, M, r) if a is not None]
        assert _actions(zb[r]) == [a for a in torch_interleaved_zb(S, v, M, r) if a is not None]


@pytest.mark.parametrize("S", [2, 3, 4, 6, 8])
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("v", [1, 2, 3])
def test_looped_bfs_bubble_and_memory(S, k, v):
    """At equal chunk costs (F = B = c, any c) and M = kS >= S: f_total = (S - 1)/(vM + S - 1);
    every rank holds all vM chunk activations = M·A, as GPipe; one weight version, v chunks."""
    M = k * S
    for c in (1, 3):
        tl = looped_bfs(S, 2 * M, M, v, costs=CostModel(F=c, B=c))
        assert tl.bubble_ratio() == pytest.approx((S - 1) / (v * M + S - 1), abs=1e-12)
        assert tl.T == 2 * 2 * c * (v * M + S - 1)
    np.testing.assert_array_equal(memory.peak_activations(tl), np.full(S, M))
    np.testing.assert_array_equal(memory.weight_memory(tl), np.ones(S))
    if v == 1:  # one chunk per rank: GPipe's order, backwards from the last microbatch
        gp = registry.SCHEDULES["gpipe"].build(S, 2 * M, M, costs=CostModel(F=3, B=3))
        assert tl.T == gp.T


@pytest.mark.parametrize("S", [2, 3, 4, 6, 8])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_interleaved_zb_spans_and_memory(S, k):
    """v = 2, chunk costs F = I = W = 1, M = kS: rank r's span is 6M + (S - 1 - r) (rank 0 idles
    S - 1 chunk ticks, a third of interleaved 1F1B's 3(S - 1)); F-not-I = 2S - r chunks and
    F-not-W = 2S chunks on every rank."""
    M = k * S
    tl = interleaved_zb(S, 2 * M, M, 2)
    np.testing.assert_array_equal(tl.spans(), np.tile(6 * M + S - 1 - np.arange(S), (2, 1)))
    il = registry.SCHEDULES["interleaved"].build(S, 2 * M, M, v=2, costs=CostModel(F=1, B=2))  # B = I + W
    assert il.spans()[0, 0] - 6 * M == 3 * (tl.spans()[0, 0] - 6 * M) == 3 * (S - 1)
    np.testing.assert_array_equal(memory.peak_activations(tl) * 2, 2 * S - np.arange(S))
    np.testing.assert_array_equal(memory.peak_activations(tl, until="W") * 2, np.full(S, 2 * S))


def test_interleaved_zb_needs_whole_rounds():
    with pytest.raises(ValueError, match=r"M must be a multiple of max\(1, M // S\) = 2"):
        interleaved_zb(4, 9, 9)
    interleaved_zb(4, 3, 3)  # M < S: one round of 3


@pytest.mark.parametrize("S,M", [(4, 8), (4, 4), (3, 6), (8, 16)])
def test_interleaved_zb_with_one_chunk_is_zb_h1(S, M):
    """torch's interleaved zero bubble with one stage per rank is ZB-H1 (W delayed r backwards)."""
    for a, b in zip(interleaved_zb_order(S, M, 1), zb_h1_order(S, M)):
        np.testing.assert_array_equal(a, b)
