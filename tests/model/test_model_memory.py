"""rpd.model.stages / memory: costs from the model and the memory laws of docs/plan.md#bytes-per-rank-rpdmodelmemory."""

from __future__ import annotations

import numpy as np
import pytest

from rpd import schedules
from rpd.model import hardware, layers
from rpd.model.memory import rank_memory
from rpd.model.stages import partition, stage_costs, stages
from rpd.schedules.machinery import memory as sched_memory
from rpd.train.transforms import entry

HW = hardware.preset("a100_80g_flat")


def states(name: str) -> int:
    """The fp32 state values per parameter that optimizer ``name``'s registry entry declares."""
    state = entry(name).state
    assert state is not None
    return state


def _setup(S, name="gpt2_small", recompute="none", how="even"):
    m = layers.preset(name, recompute=recompute)
    st = stages(m, partition(m, S, how, HW), HW)
    costs, tick = stage_costs(st, HW)
    return m, st, costs, tick


def test_even_partition_puts_the_ends_on_the_end_stages_and_they_cost_more():
    m, st, costs, tick = _setup(4)
    assert st.bounds == ((0, 4), (4, 7), (7, 10), (10, 14))  # 12 blocks, embedding first, head last
    assert costs.F[3] > costs.F[1] == costs.F[2]  # the LM head makes the last stage slower
    assert costs.p2p == int(np.ceil((HW.p2p_latency + 2 * 1024 * 768 / HW.p2p_bandwidth) / tick - 1e-9))
    # the unequal stages flow into the timer: 1F1B's makespan is set by the slowest stage
    tl = schedules.one_f_one_b(4, 8, 8, costs)
    assert tl.T >= 8 * (costs.F[3] + costs.I[3] + costs.W[3])


def test_time_partition_is_no_slower_than_even():
    m = layers.preset("gpt2_small")
    slow = lambda how: (lambda s: (s.t_f + s.t_i + s.t_w).max())(stages(m, partition(m, 4, how, HW), HW))  # noqa: E731
    assert slow("time") <= slow("even")
    assert len(partition(m, 4, "memory", HW)) == 4


def test_adam_minus_sgd_is_eight_bytes_per_parameter_of_the_rank():
    m, st, costs, _ = _setup(4)
    m, st8, costs8, _ = _setup(8)  # ZB-V: two chunks per rank, eight stages on four ranks
    for tl, st in (
        (schedules.one_f_one_b(4, 8, 8, costs), st),
        (schedules.pipedream(4, 16, costs=costs), st),
        (schedules.zb_v(4, 8, 8, costs8), st8),
    ):
        adam, sgd = rank_memory(tl, st, states("adam")), rank_memory(tl, st, states("sgd"))
        held = adam.weights / 2  # 16-bit weights: values on the rank
        np.testing.assert_allclose(adam.peak - sgd.peak, 8 * held)
        np.testing.assert_allclose(rank_memory(tl, st, states("momentum")).peak - sgd.peak, 4 * held)


def test_adam_in_mixed_precision_is_eighteen_bytes_per_parameter():
    m, st, costs, _ = _setup(4)
    mem = rank_memory(schedules.one_f_one_b(4, 8, 8, costs), st, states("adam"), "bf16_mixed")
    np.testing.assert_allclose(mem.static, 18 * st.params)
    assert (
        rank_memory(schedules.one_f_one_b(4, 8, 8, costs), st, states("adam"), "bf16_mixed", grad_bytes=2).static[0]
        == 16 * st.params[0]
    )


def test_adam_with_a_bf16_optimizer_copy_and_state_is_six_bytes_over_the_shards():
    """``precision=bf16`` (Apex's DistributedFusedAdam at ``dtype: bf16``): the optimizer's copy of
    the weights and Adam's two moments are 2 B each, 6 B per value where mixed precision holds
    12; 16-bit weights and the gradients stay, ZeRO-1 shards the six over D."""
    m, st, costs, _ = _setup(4)
    tl = schedules.one_f_one_b(4, 8, 8, costs)
    mem = rank_memory(tl, st, states("adam"), "bf16", grad_bytes=2)
    np.testing.assert_allclose(mem.static, (2 + 2 + 6) * st.params)
    sharded = rank_memory(tl, st, states("adam"), "bf16", grad_bytes=2, zero=1, D=4)
    np.testing.assert_allclose(sharded.static, (2 + 2 + 6 / 4) * st.params)
    mixed = rank_memory(tl, st, states("adam"), "bf16_mixed", grad_bytes=2, zero=1, D=4)
    np.testing.assert_allclose(mixed.static - sharded.static, 6 / 4 * st.params)
    with pytest.raises(ValueError, match="precision"):
        rank_memory(tl, st, states("adam"), "fp8")


def test_gpipe_minus_1f1b_is_m_minus_s_microbatches_of_rank_0():
    S, M = 4, 12
    m, st, costs, _ = _setup(S)
    g = rank_memory(schedules.gpipe(S, 2 * M, M, costs), st)
    f = rank_memory(schedules.one_f_one_b(S, 2 * M, M, costs), st)
    assert g.peak[0] - f.peak[0] == (M - S) * st.act[0]
    np.testing.assert_array_equal(f.activations, [(S - s) * st.act[s] for s in range(S)])


def test_full_recomputation_keeps_two_sbh_per_layer():
    S, M = 4, 8
    m, st, costs, _ = _setup(S, recompute="full")
    sbh = 1024 * 1 * 768
    assert all(x.act_bytes == 2 * sbh for x in m.layers if x.kind == "block")
    f = rank_memory(schedules.one_f_one_b(S, M, M, costs), st)
    assert f.activations[1] == (S - 1) * 3 * 2 * sbh  # rank 1: three layers, S - 1 in flight


def test_pipedream_stashes_its_versions():
    S = 4
    m, st, costs, _ = _setup(S)
    tl = schedules.pipedream(S, 16, costs=costs)
    mem = rank_memory(tl, st)
    versions = sched_memory.weight_versions(tl)
    assert versions[0] == S and versions[-1] == 1  # rank 0 stashes the most, the last none
    np.testing.assert_allclose(mem.weights + mem.stash, 2 * st.params * versions)
    np.testing.assert_allclose(mem.master, 4 * st.params)  # one fp32 master copy, not stashed


def test_v_schedule_holds_a_tied_matrix_once_on_rank_0():
    S = 4
    m = layers.preset("gpt2_small")
    st = stages(m, partition(m, 2 * S), HW)
    tl = schedules.zb_v(S, 8, 8, stage_costs(st, HW)[0])
    mem = rank_memory(tl, st, states("sgd"), "fp32")
    assert st.tied and mem.weights[0] == 4 * (st.params[0] + st.params[-1] - 50257 * 768)


@pytest.mark.parametrize("S, M", [(4, 16), (8, 32)])
def test_zb_h2_peak_within_twice_1f1b(S, M):
    """ZB-H2's cap counts W residues (sail-sg's max_mem = 2p·mem_f): its peak stays within twice
    1F1B's at M >= 4S, where the F-not-I cap alone let the W's drift to the flush's end."""
    m, st, costs, _ = _setup(S)
    z = rank_memory(schedules.zb_h2(S, 2 * M, M, costs), st).activations
    f = rank_memory(schedules.one_f_one_b(S, 2 * M, M, costs), st).activations
    assert z.max() <= 2 * f.max()


def test_zb_h2_within_twice_1f1b_while_m_is_small():
    """At M = 2S the F-not-W cap never binds: the law holds without it too."""
    m, st, costs, _ = _setup(4)
    z = rank_memory(schedules.zb_h2(4, 16, 8, costs), st).activations
    f = rank_memory(schedules.one_f_one_b(4, 16, 8, costs), st).activations
    assert z.max() <= 2 * f.max()


def test_bad_partition_names_the_field():
    m = layers.preset("gpt2_small")
    with pytest.raises(ValueError, match="partition"):
        partition(m, 4, "random")
    with pytest.raises(ValueError, match="partition=even"):
        partition(m, 13)
    with pytest.raises(ValueError, match="partition must cover"):
        stages(m, ((0, 3), (4, 14)), HW)
