"""BitPipe (rpd.schedules.family.bitpipe; docs/schedules.md#bitpipe): the order equals
``wuhouming/BitPipe: megatron/core/pipeline_parallel/bitpipe_schedule.py`` action for action (its
id lists and compute loops written out below), the placement is two opposite Vs, and the
measured closed forms hold over a grid; it trains as minibatch SGD."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from rpd import objectives, registry
from rpd.schedules.family.bitpipe import bitpipe, bitpipe_order
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import BWD, FWD
from rpd.train import methods


def source_compute(pipeline_parallel_size, num_microbatches, pipeline_parallel_rank):
    """``forward_backward_pipelining_with_BitPipe``'s compute calls on one rank, as ("F" | "B",
    model chunk, virtual id): ``get_model_chunk_id``, ``get_microbatch``, ``get_microbatch_idx``,
    ``get_bkmicrobatch_idx`` and the warm-up, loop, last-1F1B and cool-down loops with their
    indices (communication left out; a -1 id is an eager gradient sync, no compute)."""
    num_model_chunks = 4
    total_num_microbatches = num_microbatches * (num_model_chunks // 2)
    n_loop = total_num_microbatches // pipeline_parallel_size // 2 - 1
    if total_num_microbatches == pipeline_parallel_size:
        num_warmup_microbatches = total_num_microbatches
    else:
        num_warmup_microbatches = pipeline_parallel_size + pipeline_parallel_size // 2
    num_warmup_microbatches += (
        pipeline_parallel_rank
        if pipeline_parallel_rank < pipeline_parallel_size // 2
        else pipeline_parallel_size - 1 - pipeline_parallel_rank
    )
    unit_remaining = 2 * pipeline_parallel_size - num_warmup_microbatches
    num_microbatches_mid = n_loop * pipeline_parallel_size * 2

    def get_model_chunk_id(microbatch_id):
        microbatch_id_in_group = microbatch_id % (pipeline_parallel_size)
        chunk_offset = 0 if microbatch_id < (total_num_microbatches // 2) else 2
        model_chunk_id = microbatch_id_in_group // (pipeline_parallel_size // 2)
        model_chunk_id += chunk_offset
        if microbatch_id == -1:
            model_chunk_id = -1
        return model_chunk_id

    def get_microbatch(total_num_microbatches):
        microbatch_id01 = [[] for _ in range(num_model_chunks)]
        for i in range(total_num_microbatches):
            microbatch_id01[get_model_chunk_id(i)].append(i)
        return microbatch_id01

    def get_microbatch_idx(total_num_microbatches, pipeline_parallel_rank, shift=0):
        # shift 2 reads each chunk c as c + 2 mod 4: get_bkmicrobatch_idx's loop, the same one
        microbatch_idx = []
        by_chunk = get_microbatch(total_num_microbatches)
        microbatch_id01 = [by_chunk[(c + shift) % num_model_chunks] for c in range(num_model_chunks)]
        i_loop = total_num_microbatches // pipeline_parallel_size // 2
        num_unit = pipeline_parallel_size // 2
        i_half = pipeline_parallel_rank // num_unit
        num_initial = (
            num_unit - pipeline_parallel_rank
            if pipeline_parallel_rank < num_unit
            else pipeline_parallel_rank - num_unit + 1
        )
        for j in range(i_loop):
            for i in range(num_initial):
                microbatch_idx.append(microbatch_id01[i_half][j * num_unit + i])
            for i in range(num_unit - num_initial):
                microbatch_idx.append(microbatch_id01[1 - i_half][j * num_unit + i])
                microbatch_idx.append(microbatch_id01[i_half][j * num_unit + i + num_initial])
            for i in range(num_initial):
                microbatch_idx.append(microbatch_id01[1 - i_half][j * num_unit + i + (num_unit - num_initial)])
                microbatch_idx.append(microbatch_id01[3 - i_half][j * num_unit + i])
            for i in range(num_unit - num_initial):
                microbatch_idx.append(microbatch_id01[2 + i_half][j * num_unit + i])
                microbatch_idx.append(microbatch_id01[3 - i_half][j * num_unit + i + num_initial])
            for i in range(num_initial):
                microbatch_idx.append(microbatch_id01[2 + i_half][j * num_unit + i + (num_unit - num_initial)])
        return microbatch_idx

    def get_bkmicrobatch_idx(total_num_microbatches, pipeline_parallel_rank):
        microbatch_idx = get_microbatch_idx(total_num_microbatches, pipeline_parallel_rank, shift=2)
        if (
            pipeline_parallel_rank == pipeline_parallel_size // 2
            or pipeline_parallel_rank == pipeline_parallel_size // 2 - 1
        ):
            microbatch_idx.append(-1)
        else:
            microbatch_idx.insert(-1, -1)
        microbatch_idx.append(-1)
        return microbatch_idx

    microbatch_idx = get_microbatch_idx(total_num_microbatches, pipeline_parallel_rank)
    microbatch_idx_b = get_bkmicrobatch_idx(total_num_microbatches, pipeline_parallel_rank)
    calls = []

    def fwd(v):
        calls.append(("F", get_model_chunk_id(v), v))

    def bwd(v):
        calls.append(("B", get_model_chunk_id(v), v))

    def one_f_one_b(n, forward_0, backward_0):
        # the source's alternating loops: forward_k = k // 2 + forward_0, backward_k likewise
        for k in range(n):
            if k % 2 == 0:
                fwd(microbatch_idx[k // 2 + forward_0])
            else:
                bwd(microbatch_idx_b[k // 2 + backward_0])

    for k in range(num_warmup_microbatches):
        fwd(microbatch_idx[k])
    for j in range(n_loop):
        offset = j * pipeline_parallel_size * 2
        one_f_one_b(unit_remaining * 2, num_warmup_microbatches + offset, offset)
        for k in range(num_warmup_microbatches - unit_remaining + 1):
            bwd(microbatch_idx_b[k + offset + unit_remaining])
        one_f_one_b(2 * (unit_remaining - 1), 2 * pipeline_parallel_size + offset, num_warmup_microbatches + 1 + offset)
        for k in range(num_warmup_microbatches - unit_remaining + 1):
            fwd(microbatch_idx[k + 2 * pipeline_parallel_size + offset + unit_remaining - 1])
    one_f_one_b(2 * unit_remaining, num_warmup_microbatches + num_microbatches_mid, num_microbatches_mid)
    for k in range(2 * pipeline_parallel_size - unit_remaining + 2):
        backward_k = k + num_microbatches_mid + unit_remaining
        if get_model_chunk_id(microbatch_idx_b[backward_k]) != -1:
            bwd(microbatch_idx_b[backward_k])
    return calls, get_microbatch(total_num_microbatches)


def source_rows(S, M, r):
    """The calls above as (kind, stage, microbatch): chunk c's k-th id is microbatch k of
    replica c mod 2 (M/2 + k for the up replica); chunks 0 and 2 are the down V's stages r and
    2S-1-r, chunks 1 and 3 the up V's stages S-1-r and S+r (the source passes chunk 0's output
    to chunk 2 in place on the last rank and chunk 1's to chunk 3 on the first)."""
    calls, by_chunk = source_compute(S, M, r)
    stage = (r, S - 1 - r, 2 * S - 1 - r, S + r)
    return [({"F": FWD, "B": BWD}[t], stage[c], by_chunk[c].index(v) + (M // 2 if c % 2 else 0)) for t, c, v in calls]


@pytest.mark.parametrize("S,M", [(2, 2), (2, 6), (4, 4), (4, 8), (4, 12), (6, 6), (6, 12), (8, 8), (8, 16)])
def test_order_equals_the_sources_action_for_action(S, M):
    order = bitpipe_order(S, M)
    for r in range(S):
        assert [tuple(x[:3]) for x in order[r].tolist()] == source_rows(S, M, r)


def test_placement_is_two_opposite_vs_with_twice_the_parameters():
    S = 4
    tl = bitpipe(S, 8, 8)
    down = tl.table.mb < 4
    for sel, rank_of in (
        (down, lambda g: g if g < S else 2 * S - 1 - g),
        (~down, lambda g: S - 1 - g if g < S else g - S),
    ):
        np.testing.assert_array_equal(tl.table.rank[sel], [rank_of(g) for g in tl.table.stage[sel]])
    np.testing.assert_array_equal(memory.weight_memory(tl), np.full(S, 2.0))  # 4 chunks of 1/2S: 2 replicas
    # the embedding (stage 0) and the LM head (stage 2S-1): rank 0 (down) and rank S-1 (up)
    assert set(tl.table.rank[tl.table.stage == 0]) == set(tl.table.rank[tl.table.stage == 2 * S - 1]) == {0, S - 1}


@pytest.mark.parametrize("S", [2, 4, 6, 8])
def test_bubble_and_memory_over_a_grid(S):
    """Measured (no source states a number): at F = B = c per chunk every rank idles
    (S/2 - 1)(F + B) per flush whatever M, the flush takes 2M(F + B) + (S/2 - 1)(F + B); rank r
    holds S - (S/2 - 1 - h)/2 activations (h = min(r, S-1-r)), S·A on the middle ranks (1F1B's
    rank 0). With B != F the fixed order idles more as M grows."""
    h = np.minimum(np.arange(S), S - 1 - np.arange(S))
    for M in (S, 2 * S, 3 * S):
        for c in (1, 2):
            tl = bitpipe(S, 2 * M, M, costs=CostModel(F=c, B=c))
            np.testing.assert_array_equal(tl.idle() // 2, np.full(S, (S // 2 - 1) * 2 * c))
            assert tl.flush_time[0] + 1 == 2 * M * 2 * c + (S // 2 - 1) * 2 * c
        np.testing.assert_array_equal(memory.peak_activations(tl), S - (S // 2 - 1 - h) / 2)
    if S > 2:
        idle = [bitpipe(S, M, M, costs=CostModel(F=1, B=2)).idle()[0] for M in (S, 2 * S)]
        assert idle[1] > idle[0] > (S // 2 - 1) * 3


def test_checks_and_training():
    with pytest.raises(ValueError, match="even number of ranks S"):
        bitpipe(3, 6, 6)
    with pytest.raises(ValueError, match="M a multiple of S"):
        bitpipe(4, 12, 6)
    S, M, N, gamma = 4, 8, 32, 0.05
    obj = objectives.random_quadratic(n=240, d=24, S=2 * S, batch_size=5, seed=0)  # one block per chunk stage
    vg = jax.jit(lambda x, b: obj.value_and_grad(obj.data, x, b)[1])
    x = np.asarray(obj.x0)
    for q in range(N // M):
        x = x - gamma * np.mean([np.asarray(vg(x, (q * M + j) % obj.n_batches)) for j in range(M)], axis=0)
    entry = registry.SCHEDULES["bitpipe"]
    tl = entry.make(S, N, M, CostModel(F=1, B=2, p2p=1, allreduce=(3, 0.01)), {"values": 100})
    res = methods.train(obj, tl, [gamma], semantics=entry.semantics)
    np.testing.assert_allclose(res.x_final[0], x, rtol=0, atol=1e-13)
    plan, _ = entry.semantics.plan(tl, 2 * S, obj.n_batches)
    np.testing.assert_array_equal(plan.time, tl.flush_time[plan.read[:, 0]])
    assert np.all(tl.flush_time > tl.b_time.reshape(-1, M, 2 * S).max(axis=(1, 2)))
