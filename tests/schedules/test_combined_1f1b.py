"""Megatron's combined 1F1B (rpd.schedules.family.combined_1f1b; docs/schedules.md#combined-1f1b): warm-up
counts equal Megatron's ``get_pp_rank_microbatches`` with ``overlap_moe_expert_parallel_comm``
(written out below from ``NVIDIA/Megatron-LM: megatron/core/pipeline_parallel/schedules.py``),
the order is interleaved 1F1B's with every steady-state pair fused and independent, and the
measured closed forms hold over a grid."""

from __future__ import annotations

import numpy as np
import pytest

from rpd import registry, schedules
from rpd.schedules.family import orders
from rpd.schedules.family.combined_1f1b import combined_1f1b, combined_1f1b_order
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import BWD, FWD, Col


def megatron_get_pp_rank_microbatches(
    num_microbatches,
    num_model_chunks,
    microbatch_group_size_per_vp_stage,
    pipeline_parallel_size,
    pipeline_parallel_rank,
    virtual_pipeline_parallel_size,
    forward_only=False,
    overlap_moe_expert_parallel_comm=False,
):
    """Megatron's function with the parallel state passed in (its body as written there)."""
    total_num_microbatches = num_microbatches * num_model_chunks
    are_all_microbatches_in_warmup = False
    if forward_only:
        num_warmup_microbatches = total_num_microbatches
    elif pipeline_parallel_size > 1:
        if virtual_pipeline_parallel_size is None:
            num_warmup_microbatches = pipeline_parallel_size - pipeline_parallel_rank - 1
        else:
            num_warmup_microbatches = (pipeline_parallel_size - pipeline_parallel_rank - 1) * 2
            num_warmup_microbatches += (num_model_chunks - 1) * microbatch_group_size_per_vp_stage
            if overlap_moe_expert_parallel_comm:
                num_warmup_microbatches = num_warmup_microbatches + 1
    else:
        num_warmup_microbatches = 0
    if num_warmup_microbatches >= total_num_microbatches:
        num_warmup_microbatches = total_num_microbatches
        are_all_microbatches_in_warmup = True
    num_microbatches_remaining = total_num_microbatches - num_warmup_microbatches
    return total_num_microbatches, are_all_microbatches_in_warmup, num_warmup_microbatches, num_microbatches_remaining


CASES = [
    (2, 2, 2, 2),
    (2, 4, 2, 2),
    (4, 4, 2, 4),
    (4, 8, 2, 4),
    (4, 8, 3, 4),
    (4, 12, 2, 6),
    (8, 16, 2, 8),
    (3, 9, 2, 3),
]


@pytest.mark.parametrize("S,M,v,group", CASES)
def test_warmup_counts_equal_megatrons(S, M, v, group):
    """Per rank: the forwards before the first backward, and the fused pairs, are Megatron's
    warm-up and remaining counts (one more warm-up forward than interleaved 1F1B's, which the same
    function gives without the flag); the order is otherwise interleaved 1F1B's."""
    order = combined_1f1b_order(S, M, v, group)
    plain = orders.interleaved_order(S, M, v, group)
    for r, a in enumerate(order):
        total, _, warm, remaining = megatron_get_pp_rank_microbatches(
            M, v, group, S, r, v, overlap_moe_expert_parallel_comm=True
        )
        first_b = int(np.argmax(a[:, Col.KIND] == BWD))  # a steady state starts with its pair's F
        assert first_b == warm + (warm < total) and int(a[:, Col.FUSED].sum()) == remaining and len(a) == 2 * total
        plain_warm = megatron_get_pp_rank_microbatches(M, v, group, S, r, v)[2]
        assert int(np.argmax(plain[r][:, Col.KIND] == BWD)) == plain_warm + (plain_warm < total) and warm == min(
            plain_warm + 1, total
        )
        np.testing.assert_array_equal(a[a[:, Col.KIND] == FWD, :3], plain[r][plain[r][:, Col.KIND] == FWD, :3])
        np.testing.assert_array_equal(a[a[:, Col.KIND] == BWD, :3], plain[r][plain[r][:, Col.KIND] == BWD, :3])
        fused = np.nonzero(a[:, Col.FUSED])[0]
        assert np.all(a[fused, Col.KIND] == BWD) and np.all(a[fused - 1, Col.KIND] == FWD)
        # independent: the pair's backward is of another (stage, microbatch) than its forward
        assert not np.any(np.all(a[fused, 1:3] == a[fused - 1, 1:3], axis=1))


@pytest.mark.parametrize("S,M,v,group", CASES)
def test_makespan_and_memory_over_a_grid(S, M, v, group):
    """Measured closed forms (no source states one): at FB = F + B the flush takes interleaved
    1F1B's time; each tick the fused pair saves shortens the flush by the last rank's pair
    count, vM - (v - 1)·group - 1; every rank holds one chunk more than interleaved 1F1B where
    its warm-up is not capped at vM."""
    for F, B in ((1, 2), (2, 3), (1, 1)):
        il = schedules.interleaved(S, 2 * M, M, v, costs=CostModel(F=F, B=B), group=group)
        for FB in range(max(F, B), F + B + 1):
            tl = combined_1f1b(S, 2 * M, M, v, costs=CostModel(F=F, B=B, FB=FB), group=group)
            pairs_last = v * M - min((v - 1) * group + 1, v * M)
            assert tl.T == il.T - 2 * pairs_last * (F + B - FB), (F, B, FB)
    warm = np.array([min(2 * (S - 1 - r) + (v - 1) * group + 1, v * M) for r in range(S)])
    extra = np.where(warm == v * M, 0, 1)  # in chunks
    np.testing.assert_array_equal(
        np.rint(memory.peak_activations(tl) * v), np.minimum(np.rint(memory.peak_activations(il) * v) + extra, v * M)
    )


def test_combined_needs_virtual_pipelining_and_megatrons_groups():
    with pytest.raises(ValueError, match="v must be >= 2"):
        combined_1f1b(4, 8, 8, 1)
    with pytest.raises(ValueError, match="M mod group"):
        combined_1f1b(4, 12, 12, 2, group=10)


def test_registry_builds_it_with_the_fused_cost():
    tl = registry.build("combined_1f1b", registry.ScheduleParams(S=4, N=16, M=8), costs=CostModel(F=1, B=2, FB=2))
    pairs = sum(
        megatron_get_pp_rank_microbatches(8, 2, 4, 4, r, 2, overlap_moe_expert_parallel_comm=True)[3] for r in range(4)
    )
    assert tl.kind == "combined_1f1b" and tl.v == 2 and tl.synchronous and tl.table.fused.sum() == 2 * pairs
