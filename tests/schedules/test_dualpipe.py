"""DualPipe (rpd.schedules.family.dualpipe; docs/schedules.md#dualpipe): the order equals
``deepseek-ai/DualPipe: dualpipe/dualpipe.py DualPipe.step`` action for action, the README's
bubble, parameters and activations hold over a grid, and it trains as minibatch SGD."""

from __future__ import annotations

import itertools
from collections import deque

import jax
import numpy as np
import pytest

from rpd import objectives, registry
from rpd.schedules.family.dualpipe import dualpipe, dualpipe_order
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, FWD
from rpd.train import methods


def deepseek_step(num_ranks: int, num_chunks: int, rank: int) -> list[tuple[int, int, int, int]]:
    """``DualPipe.step``'s compute calls on ``rank``, as (kind, stage, microbatch, fused) rows:
    its 8 steps written out with its counters (``current_f_chunk_id``, ``current_b_chunk_id``
    per phase, ``phase ^= is_in_second_half``) and its FIFO ``WeightGradStore``. Phase 0 is the
    forward direction (stage g on rank g, microbatches 0..M/2-1), phase 1 the reverse one (stage
    g on rank num_ranks-1-g, microbatches M/2..M-1)."""
    is_in_second_half = rank >= num_ranks // 2
    is_middle_rank = rank in (num_ranks // 2 - 1, num_ranks // 2)
    num_half_ranks = num_ranks // 2
    half_rank = min(rank, num_ranks - 1 - rank)
    half_num_chunks = num_chunks // 2
    f_id, b_id = [0, 0], [0, 0]
    wgrad: deque = deque()
    rows: list[tuple[int, int, int, int]] = []

    def stage(phase):
        return rank if phase == 0 else num_ranks - 1 - rank

    def forward(phase):
        phase ^= is_in_second_half
        rows.append((FWD, stage(phase), f_id[phase] + phase * half_num_chunks, 0))
        f_id[phase] += 1

    def backward(phase, enable_zb=False, fused=0):
        phase ^= is_in_second_half
        mb = b_id[phase] + phase * half_num_chunks
        b_id[phase] += 1
        rows.append((BWD_I if enable_zb else BWD, stage(phase), mb, fused))
        if enable_zb:
            wgrad.append((BWD_W, stage(phase), mb, 0))

    def forward_backward(phase0, phase1):
        forward(phase0)
        backward(phase1, fused=1)

    def weight():
        rows.append(wgrad.popleft())

    for _ in range((num_half_ranks - half_rank - 1) * 2):  # step 1: nF0
        forward(0)
    for _ in range(half_rank + 1):  # step 2: nF0F1
        forward(0)
        forward(1)
    for _ in range(num_half_ranks - half_rank - 1):  # step 3: nB1W1F1
        backward(1, enable_zb=True)
        weight()
        forward(1)
    for i in range(half_num_chunks - num_ranks + half_rank + 1):  # step 4: nF0B1F1B0
        if i == 0 and is_middle_rank:
            forward(0)
            backward(1)
        else:
            forward_backward(0, 1)
        forward_backward(1, 0)
    for _ in range(num_half_ranks - half_rank - 1):  # step 5: nB1F1B0
        backward(1)
        forward_backward(1, 0)
    step_6 = half_rank + 1  # step 6: nB1B0
    enable_zb = False
    for i in range(step_6):
        if i == step_6 // 2 and half_rank % 2 == 1:
            enable_zb = True
        backward(1, enable_zb=enable_zb)
        if i == step_6 // 2 and half_rank % 2 == 0:
            enable_zb = True
        backward(0, enable_zb=enable_zb)
    for _ in range(num_half_ranks - half_rank - 1):  # step 7: nWB0
        weight()
        backward(0, enable_zb=True)
    for _ in range(half_rank + 1):  # step 8: nW
        weight()
    assert not wgrad
    return rows


@pytest.mark.parametrize("S,M", [(2, 4), (2, 6), (4, 8), (4, 10), (4, 16), (6, 12), (6, 14), (8, 16), (8, 20)])
def test_order_equals_deepseeks_step_action_for_action(S, M):
    order = dualpipe_order(S, M)
    for r in range(S):
        assert [tuple(x) for x in order[r].tolist()] == deepseek_step(S, M, r)


def _grid():
    for S in (2, 4, 6, 8):
        for M in (2 * S, 2 * S + 2, 4 * S):
            for F, W in itertools.product((1, 2, 3), (1, 2, 3)):
                if W > F:
                    continue
                B = F + W  # I = F: the input half of the backward costs a forward
                for FB in range(max(F, B), F + B + 1):
                    yield S, M, CostModel(F=F, B=B, I=F, W=W, FB=FB)


def test_readme_bubble_over_a_grid():
    """README: bubble (PP/2 - 1)(F&B + B - 3W). Measured against the makespan the README's
    accounting implies (DualPipeV's on PP/2 ranks and M/2 microbatches, Victarry's formula.py):
    per rank 2(m - p) - 1 overlapped pairs and 2p + 1 forward-backward pairs run apart, m = M/2,
    p = S/2. Exact wherever I = F >= W and max(F, B) <= F&B <= F + B (it fails for W > F); at F&B = F + B it is every
    rank's idle time."""
    n = 0
    for S, M, c in _grid():
        tl = dualpipe(S, M, M, costs=c)
        m, p = M // 2, S // 2
        bubble = (p - 1) * (c.FB + c.B - 3 * c.W)
        assert tl.T - ((2 * (m - p) - 1) * c.FB + (2 * p + 1) * (c.F + c.B)) == bubble, (S, M, c)
        if c.FB == c.F + c.B:
            np.testing.assert_array_equal(tl.idle(), np.full(S, bubble))
        n += 1
    assert n > 150


@pytest.mark.parametrize("S", [2, 4, 6, 8])
def test_readme_parameters_and_activations(S):
    """README: 2x parameters and PP + 1 activations per device (PP = S stages; one activation is
    one microbatch on one stage), on every rank; one weight version (the copies are all-reduced)."""
    for M in (2 * S, 3 * S + S % 4, 4 * S):
        for c in (None, CostModel(F=1, B=2, I=1, W=1, FB=2), CostModel(F=2, B=3, I=2, W=1, p2p=1)):
            tl = dualpipe(S, 2 * M, M, costs=c)
            np.testing.assert_array_equal(memory.peak_activations(tl), np.full(S, S + 1))
            np.testing.assert_array_equal(memory.weight_memory(tl), np.full(S, 2.0))
            np.testing.assert_array_equal(memory.weight_versions(tl), np.ones(S))
    held = np.zeros((S, S), bool)  # rank r: stage r (down copy) and S-1-r (up copy)
    held[tl.table.rank, tl.table.stage] = True
    np.testing.assert_array_equal(held, np.eye(S, dtype=bool) | np.eye(S, dtype=bool)[::-1])


def test_dualpipe_checks_its_asserts():
    with pytest.raises(ValueError, match="even number of ranks S"):
        dualpipe(3, 12, 12)
    with pytest.raises(ValueError, match="even M >= 2S"):
        dualpipe(4, 12, 6)
    with pytest.raises(ValueError, match="even M >= 2S"):
        dualpipe(4, 18, 9)


def test_trains_as_minibatch_sgd_after_the_copies_allreduce():
    """The entry's semantics: one step per flush of M at W_q, averaged over the M microbatches of
    both directions, landing after the all-reduce of the two copies (the flush's gap)."""
    S, M, N, gamma = 4, 8, 32, 0.05
    obj = objectives.random_quadratic(n=240, d=24, S=S, batch_size=5, seed=0)
    vg = jax.jit(lambda x, b: obj.value_and_grad(obj.data, x, b)[1])
    x = np.asarray(obj.x0)
    for q in range(N // M):
        x = x - gamma * np.mean([np.asarray(vg(x, (q * M + j) % obj.n_batches)) for j in range(M)], axis=0)
    entry = registry.SCHEDULES["dualpipe"]
    c = CostModel(F=1, B=2, I=1, W=1, FB=2, p2p=1, allreduce=(3, 0.01))
    tl = entry.make(S, N, M, c, {"values": 100})
    assert np.all(tl.flush_time > tl.b_time.reshape(-1, M, S).max(axis=(1, 2)))  # the all-reduce's gap
    res = methods.train(obj, tl, [gamma], semantics=entry.semantics)
    np.testing.assert_allclose(res.x_final[0], x, rtol=0, atol=1e-13)
    plan, _ = entry.semantics.plan(tl, S, obj.n_batches)
    np.testing.assert_array_equal(plan.time, tl.flush_time[plan.read[:, 0]])
