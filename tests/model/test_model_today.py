"""The layers of today's models (docs/plan.md#todays-models): grouped-query attention, context
parallelism, a fused attention kernel's time and Megatron's overlaps, each law checked by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hydra_helpers import compose
from toy_hardware import toy_hardware

from rpd import registry
from rpd.cli import plan as entry
from rpd.model import compute, hardware, tensor
from rpd.model.layers import Layer, Model, block_layer, gpt_model
from rpd.model.overlap import Overlap, dp_seconds
from rpd.model.plan import plan_one
from rpd.model.shapes import PRESETS, GPTConfig, Parallel
from rpd.model.topology import place

# the published parameter counts (Meta's model cards / Hugging Face configs, untied heads)
PUBLISHED = {"llama3_8b": 8_030_261_248, "llama3_70b": 70_553_706_496}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_llama3_presets_have_their_published_parameter_counts(name):
    assert gpt_model(PRESETS[name]).params == PUBLISHED[name]


def test_gqa_shrinks_k_and_v_projections_and_activations_by_n_kv_over_n_head():
    h, a, kv, s, f = 1024, 16, 4, 512, 4096
    mha = GPTConfig(n_layer=1, d_model=h, n_head=a, seq=s, vocab=100, bias=False, ffn=f)
    gqa = dataclasses.replace(mha, n_kv_heads=kv)
    par = Parallel(TP=2, SP=True, attention="flash")
    x, y = block_layer(mha, 0, par=par), block_layer(gqa, 0, par=par)
    d = h // a
    assert (x.params - y.params) * 2 == 2 * h * (a - kv) * d  # K and V: h x n_kv·d each, split in TP
    # Q 2sbh, K and V 2·(n_kv/a)·sbh each, split over TP: 4·(1 - n_kv/a)·sbh fewer bytes
    assert x.act_bytes - y.act_bytes == pytest.approx(4 * (1 - kv / a) * s * h / 2, abs=1)
    assert block_layer(dataclasses.replace(mha, n_kv_heads=a), 0, par=par) == x  # n_kv = n_head: MHA


def test_tp_must_divide_the_kv_heads():
    with pytest.raises(ValueError, match="n_kv_heads=2"):
        block_layer(GPTConfig(n_layer=1, d_model=512, n_head=8, n_kv_heads=2, seq=64, vocab=10), 0, par=Parallel(TP=4))


@pytest.mark.parametrize("attention", ["flash", "standard"])
def test_context_parallelism_splits_activations_and_flops_by_cp(attention):
    cfg = dataclasses.replace(PRESETS["llama3_8b"], seq=4096)
    one = block_layer(cfg, 0, par=Parallel(TP=2, SP=True, attention=attention))
    four = block_layer(cfg, 0, par=Parallel(TP=2, SP=True, attention=attention, CP=4))
    assert four.act_bytes == pytest.approx(one.act_bytes / 4, abs=1)
    assert four.model_flops == pytest.approx(one.model_flops / 4, rel=1e-12)
    assert four.out_bytes == one.out_bytes // 4 and four.params == one.params
    # one ring step's K and V of the rank's s/CP tokens, 8 KV heads of 128 over TP 2, 16-bit
    assert four.cp_bytes == 2 * 2 * (4096 // 4) * 8 * 128 / 2


def test_the_ring_exchange_is_exposed_only_beyond_the_attention_it_overlaps():
    hw = dataclasses.replace(
        hardware.preset("h100_80g"), p2p_latency=0.0, intra_latency=0.0, intra_bandwidth=1e9, p2p_bandwidth=1e8
    )
    x = Layer("l", params=1, tp=2, cp=4, cp_bytes=1e6, kind="block")  # 1 ms a step on NVLink here
    assert compute.cp_seconds(hw, x, core=4e-3) == 0.0  # each of 3 steps hidden under 1 ms of core
    assert compute.cp_seconds(hw, x, core=2e-3) == pytest.approx(3 * (1e-3 - 0.5e-3))
    assert compute.cp_seconds(hw, x, core=2e-3, backward=True) == pytest.approx(3 * (2e-3 - 0.5e-3))
    wide = dataclasses.replace(x, tp=4)  # TP x CP = 16 > 8 per node: each step over InfiniBand
    assert compute.cp_seconds(hw, wide, core=0.0) == pytest.approx(3 * 1e-2)


def test_cp_ranks_sit_after_tp_and_reduce_gradients_with_dp():
    hw = hardware.preset("h100_80g")
    where = place(hw, TP=2, DP=4, S=2, CP=2)
    assert where.workers == 32 and where.cp_intra and not where.p2p_intra
    assert where.dp_per_node == 4  # 8 // TP = 4 of the DP x CP = 8 ranks in each node
    assert not place(hw, TP=8, DP=1, S=1, CP=2).cp_intra


def test_a_fused_kernel_times_the_causal_half_at_its_own_rate_without_the_scores():
    hw = hardware.preset("h100_80g")
    s, d, heads = 8192, 128, 32
    core = [(s, s, d, heads, False), (s, d, s, heads, False)]
    flops = heads * 2 * s * s * d  # the causal half of two s x s x d matmuls
    moved = heads * 2.0 * 4 * s * d  # Q, K, V and the output, 16-bit
    want = flops / (hw.attention_efficiency * hw.peak_flops) + moved / hw.hbm_bandwidth
    assert compute.flash_seconds(hw, core) == pytest.approx(want, rel=1e-12)
    assert compute.flash_seconds(hw, core) < sum(compute.gemm_seconds(hw, *g[:4]) for g in core)


def _toy_pipeline(p2p_bytes: int) -> Model:
    return Model(
        "toy",
        (
            Layer("a", params=1000, flops_fwd=1e9, flops_i=1e9, flops_w=1e9, out_bytes=p2p_bytes),
            Layer("b", params=1000, flops_fwd=1e9, flops_i=1e9, flops_w=1e9),
        ),
        100,
    )


def test_blocking_sends_hold_the_sender_for_its_message():
    hw = dataclasses.replace(toy_hardware(), p2p_bandwidth=1e9)  # a 1 MB message: 1 ms, F = I = W = 1 ms
    model = _toy_pipeline(10**6)
    go = lambda ov: plan_one(model, hw, "gpipe", registry.timeline, 2, 1, how="layers", overlap=ov)  # noqa: E731
    # one microbatch, two stages: F0, send, F1, B1 (I + W), send back, B0; a blocking send adds
    # its 1 ms on the sender as well as on the edge
    assert go(Overlap(p2p=True)).step_time_s == pytest.approx(8e-3)
    assert go(Overlap(p2p=False)).step_time_s == pytest.approx(10e-3)


def test_the_parameter_gather_hides_under_the_first_forward_and_the_reduction_under_the_last_backward():
    hw = toy_hardware()
    model = _toy_pipeline(0)
    unit = registry.timeline("1f1b", 2, 4, 4, None, 0, None)
    row = plan_one(model, hw, "1f1b", registry.timeline, 2, 4, how="layers")
    tick = row.tick_s
    grads, weights = np.array([4000.0, 4000.0]), np.array([2000.0, 2000.0])
    # D = 2: each half moves (D-1)/D of the bytes at 1 GB/s: 2 us of gradients, 1 us of weights
    after = dp_seconds(unit, grads, hw, 2, tick, False, 1, weights)
    assert after == pytest.approx(2e-6 + 1e-6)
    hidden = dp_seconds(unit, grads, hw, 2, tick, False, 1, weights, param_gather=True)
    assert hidden == pytest.approx(2e-6)  # 1 us of gather under a first forward of many ticks
    both = dp_seconds(unit, grads, hw, 2, tick, "backward", 1, weights, param_gather=True)
    assert both == 0.0  # the reduce-scatter fits under the last backward


def test_only_the_part_of_the_reduction_past_the_flush_is_exposed():
    """A reduction that starts under the last backward but runs past the flush's end is exposed
    for that part only. By hand: 1F1B at S = 2, M = 4, unit ticks of 1 us, T = (M + S - 1) · 2 = 10;
    rank 0's last backward starts at tick 9 (ends 10), rank 1's at 8 (ends 9). 3000 gradient bytes
    per rank over D = 2 at 1 GB/s, no latency: a ring all-reduce moves 2(D-1)/D · 3000 bytes, 3 us.
    grad_reduce (from the last backward's start): rank 0 ends at 12 us, 2 us past the flush (rank 1:
    11, 1 us); during the drain (from its end): 13 and 12, 3 us; after the flush: 3 us."""
    hw = toy_hardware()
    unit = registry.timeline("1f1b", 2, 4, 4, None, 0, None)
    assert unit.T == 10
    grads = np.array([3000.0, 3000.0])
    assert dp_seconds(unit, grads, hw, 2, 1e-6, "backward") == pytest.approx(2e-6)
    assert dp_seconds(unit, grads, hw, 2, 1e-6, True) == pytest.approx(3e-6)
    assert dp_seconds(unit, grads, hw, 2, 1e-6, False) == pytest.approx(3e-6)
    # 1500 bytes (1.5 us) from tick 9 end at 10.5: half a microsecond exposed; 900 bytes fit whole
    assert dp_seconds(unit, grads / 2, hw, 2, 1e-6, "backward") == pytest.approx(0.5e-6)
    assert dp_seconds(unit, grads * 0.3, hw, 2, 1e-6, "backward") == 0.0


def test_gradients_reduced_in_bf16_halve_the_reduction():
    hw = dataclasses.replace(toy_hardware(), allreduce_bandwidth=1e6)
    model = _toy_pipeline(0)
    go = lambda gb: plan_one(model, hw, "1f1b", registry.timeline, 2, 4, how="layers", D=2, zero=1, grad_bytes=gb)  # noqa: E731
    fp32, bf16 = go(4), go(2)
    # 1000 values per rank over D = 2: RS of 4 (or 2) bytes and AG of 2 bytes, half of each moved
    assert fp32.dp_allreduce_s == pytest.approx((4000 + 2000) / 2 / 1e6)
    assert bf16.dp_allreduce_s == pytest.approx((2000 + 2000) / 2 / 1e6)


def test_tensor_activation_law_with_gqa_and_cp_by_hand():
    h, a, s, b, f, t, c = 4096, 32, 8192, 1, 14336, 4, 2
    sbh = s * b * h / c
    want = 10 * sbh / t + ((4 + 4 * 8 / 32) * sbh + 6 * s * b * f / c) / t  # SP, flash, SwiGLU
    got = tensor.activation_bytes(h, a, s, b, f, True, t, True, "none", "flash", kv=8 / 32, cp=c)
    assert got == pytest.approx(want, rel=1e-12)


def test_the_done_when_command_prints_a_step_time(capsys):
    out = entry.run(
        compose(
            [
                "model=llama3_70b",
                "hardware=h100_80g",
                "pipeline.TP=8",
                "pipeline.CP=4",
                "pipeline.S=2",
                "pipeline.v=4",
                "pipeline.D=1",
                "pipeline.M=32",
                "zero=1",
                "schedules=[interleaved]",
                "out=null",
            ],
            "plan",
        )
    )
    (row,) = out["rows"]
    assert row["CP"] == 4 and row["step_time_s"] > 0 and out["settings"]["CP"] == 4
    assert "CP=4" in capsys.readouterr().out
