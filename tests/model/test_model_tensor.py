"""Tensor and sequence parallelism, the node, ZeRO-1, the compute model, the answer and the n-worker
search (rpd.model.tensor, topology, compute, answer, search3d)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hydra_helpers import compose

from rpd import registry
from rpd.cli import plan as entry
from rpd.model import compute, hardware, layers, tensor
from rpd.model.answer import answer, parse_bytes
from rpd.model.layers import GPTConfig, Parallel, block_layer, gpt_model
from rpd.model.plan import plan_one
from rpd.model.topology import place

# GPT-3 175B's layer at micro-batch 1 (Korthikanti et al.'s Table 3 model)
CFG = GPTConfig(n_layer=96, d_model=12288, n_head=96, seq=2048, vocab=51200, micro_batch=1)
S_, B_, H_, A_ = 2048, 1, 12288, 96
SBH = S_ * B_ * H_
DGX = hardware.preset("a100_80g")


def _act(t, sp=False, recompute="none"):
    return block_layer(CFG, 0, recompute, Parallel(TP=t, SP=sp) if t > 1 else layers.NO_TP).act_bytes


@pytest.mark.parametrize("t", [2, 4, 8])
def test_korthikanti_activation_laws(t):
    """Table 2 of Korthikanti et al., per layer and microbatch, 16-bit."""
    r = A_ * S_ / H_
    assert _act(1) == round(SBH * (34 + 5 * r))
    assert _act(t) == round(SBH * (10 + 24 / t + 5 * r / t))
    assert _act(t, sp=True) == round(SBH * (34 + 5 * r) / t)
    assert _act(t, recompute="selective") == round(SBH * (10 + 24 / t))
    assert _act(t, sp=True, recompute="selective") == round(SBH * 34 / t)
    assert _act(1, recompute="full") == 2 * SBH
    assert _act(t, recompute="full") == 2 * SBH
    assert _act(t, sp=True, recompute="full") == round(2 * SBH / t)


@pytest.mark.parametrize("t", [2, 8])
def test_traffic_is_counted_kernel_by_kernel_whatever_is_recomputed(t):
    """rpd.model.kernels, written out per kernel for GPT-3's layer under TP t without SP (16-bit
    bytes read + written per value): two layer norms 2 × 4 and two bias-dropout-adds 2 × 7 on the
    whole sbh; bias-GeLU 4 on the 4h-wide MLP split in t; under standard attention the softmax 4
    and the attention dropout 5 on the a·s² scores split in t. The backward: norms 2 × 6,
    dropout-adds 2 × 5, GeLU 6, softmax 6, dropout 5. The same at any recomputation (the forward
    always runs its kernels once)."""
    scores = A_ * S_ * S_ * B_ / t
    mlp = S_ * B_ * 4 * H_ / t
    for recompute in ("none", "selective", "full"):
        std = block_layer(CFG, 0, recompute, Parallel(TP=t))
        flash = block_layer(CFG, 0, recompute, Parallel(TP=t, attention="flash"))
        assert std.traffic == pytest.approx((2 * 4 + 2 * 7) * SBH + 4 * mlp + (4 + 5) * scores, rel=1e-12)
        assert std.traffic_i == pytest.approx((2 * 6 + 2 * 5) * SBH + 6 * mlp + (6 + 5) * scores, rel=1e-12)
        assert std.traffic_core == pytest.approx(9 * scores, rel=1e-12)
        assert flash.traffic == pytest.approx(22 * SBH + 4 * mlp, rel=1e-12) and flash.traffic_core == 0


def test_flash_attention_keeps_the_selective_bytes_without_its_recompute():
    sel = block_layer(CFG, 0, "selective", Parallel(TP=8, SP=True))
    flash = block_layer(CFG, 0, "none", Parallel(TP=8, SP=True, attention="flash"))
    assert flash.act_bytes == sel.act_bytes and flash.flops_recompute == 0 < sel.flops_recompute


@pytest.mark.parametrize("t", [2, 4, 8])
def test_weights_and_vocabulary_split_in_tp(t):
    """Matrices and column-parallel biases / t; layer norms and row-parallel biases on every rank;
    the vocabulary rows / t."""
    one, split = block_layer(CFG, 0), block_layer(CFG, 0, "none", Parallel(TP=t))
    whole = 2 * H_ + 2 * 2 * H_  # two row-parallel biases, two layer norms (scale and bias)
    assert split.params - whole == (one.params - whole) // t
    emb = gpt_model(CFG, par=Parallel(TP=t)).layers[0]
    assert emb.params == CFG.vocab // t * H_ + S_ * H_
    assert split.flops_fwd == one.flops_fwd / t and split.out_bytes == 2 * SBH // t


def _flat_node(**kw):
    """The toy device with an 8-GPU node: 1 TFLOP/s, NVLink 100 GB/s with 1 µs latency."""
    base = dict(name="node", peak_flops=1e12, memory_bytes=2**40, p2p_bandwidth=1e9, allreduce_bandwidth=1e9)
    base |= dict(efficiency=1.0, gpus_per_node=8, intra_bandwidth=1e11, intra_latency=1e-6)
    return hardware.Hardware(**(base | kw))


@pytest.mark.parametrize("sp", [False, True])
def test_tp_collectives_in_f_and_b(sp):
    """Two all-reduces of s·b·h 16-bit values in F and two in B (SP: an all-gather and a
    reduce-scatter each, the same bytes, twice the latencies); full recomputation repeats F's."""
    cfg = dataclasses.replace(CFG, seq=128, d_model=256, n_head=8)
    hw, t, sbh = _flat_node(), 4, 128 * 256
    ring = 2 * (t - 1) / t * 2 * sbh / 1e11  # one all-reduce's bytes over the link
    lat = (4 if sp else 2) * 1e-6
    x = block_layer(cfg, 0, "none", Parallel(TP=t, SP=sp))
    secs = compute.layer_seconds(layers.Model("m", (x,), 128), hw)[0]
    assert secs[0] == pytest.approx(x.flops_fwd / 1e12 + lat + 2 * ring, rel=1e-12)
    assert secs[1] == pytest.approx(x.flops_i / 1e12 + lat + 2 * ring, rel=1e-12)
    assert secs[2] == pytest.approx(x.flops_w / 1e12, rel=1e-12)
    full = block_layer(cfg, 0, "full", Parallel(TP=t, SP=sp))
    secs = compute.layer_seconds(layers.Model("m", (full,), 128), hw)[0]
    assert secs[1] == pytest.approx((full.flops_i + full.flops_fwd) / 1e12 + 2 * (lat + 2 * ring), rel=1e-12)


def test_placement_tp_inside_a_node_and_the_links_crossed():
    with pytest.raises(ValueError, match="pipeline.TP=3 must divide hardware.gpus_per_node=8"):
        place(DGX, TP=3)
    with pytest.raises(ValueError, match="pipeline.TP=2 must divide hardware.gpus_per_node=1"):
        place(hardware.preset("a100_80g_flat"), TP=2)
    assert place(DGX, TP=8, DP=4, S=2).dp_per_node == 1 and not place(DGX, TP=8, DP=1, S=2).p2p_intra
    assert place(DGX, TP=2, DP=2, S=2).p2p_intra and place(DGX, TP=2, DP=16, S=1).dp_per_node == 4
    # a DP all-reduce over 4 ports per node moves 4x the bytes of one port, capped by NVLink
    assert DGX.allreduce_seconds(1e9, 16, 4) - DGX.allreduce_latency == pytest.approx(2 * 15 / 16 * 1e9 / (4 * 25e9))
    assert DGX.allreduce_seconds(1e9, 8, 8) == pytest.approx(5e-6 + 2 * 7 / 8 * 1e9 / 300e9)


def test_zero1_shards_master_and_optimizer_over_dp():
    """Megatron's distributed optimizer: 6 + 12/D bytes per value with Adam, fp32 gradients."""
    cfg = dataclasses.replace(CFG, n_layer=4, d_model=512, n_head=8, seq=256, vocab=1000, tied=False)
    model = gpt_model(cfg)
    rows = {z: plan_one(model, DGX, "1f1b", registry.timeline, 2, 4, D=8, zero=z) for z in (0, 1)}
    for z, r in rows.items():
        m = r.memory
        values = np.array(m["weights"]) / 2
        static = sum(np.array(m[k]) for k in ("weights", "master_weights", "gradients", "optimizer"))
        assert static == pytest.approx(values * (18 if z == 0 else 6 + 12 / 8))
    # the reduce-scatter of fp32 gradients + all-gather of bf16 weights: 3/4 of the all-reduce's bytes
    assert max(rows[1].allreduce_bytes_per_step) == pytest.approx(0.75 * max(rows[0].allreduce_bytes_per_step))


def test_gemm_efficiency_falls_where_gemms_get_small():
    big = compute.achieved_flops(DGX, 8192, 12288, 12288)
    small = compute.achieved_flops(DGX, 2048, 12288 // 8, 1024)
    assert small < big < DGX.gemm_efficiency * DGX.peak_flops
    # the same model: MFU falls as TP narrows its GEMMs (no communication on the toy node's count)
    cfg = dataclasses.replace(CFG, n_layer=4, d_model=1024, n_head=16, seq=1024, vocab=1000)
    mfu = [
        plan_one(gpt_model(cfg, par=Parallel(TP=t)), DGX, "1f1b", registry.timeline, 1, 4, TP=t).mfu for t in (1, 2, 8)
    ]
    assert mfu[0] > mfu[1] > mfu[2]


def test_memory_cap_units():
    assert parse_bytes("40GiB") == 40 * 2**30 and parse_bytes("80GB") == 80e9 and parse_bytes(8e10) == 8e10
    assert parse_bytes("512 MiB") == 512 * 2**20
    with pytest.raises(ValueError, match="memory_cap must be bytes or a size like 40GiB"):
        parse_bytes("40 gigs")


def test_the_answer_names_the_synchronous_row_then_the_stale_one():
    cfg = dataclasses.replace(CFG, n_layer=8, d_model=512, n_head=8, seq=256, vocab=1000)
    rows = [
        plan_one(gpt_model(cfg), DGX, n, registry.timeline, 4, 8, margin=0.05) for n in ("1f1b", "gpipe", "pipedream")
    ]
    lines = answer(rows, float(DGX.memory_bytes), 0.05)
    sync = max((r for r in rows if r.synchronous), key=lambda r: r.tokens_per_s)
    assert lines[0].startswith(f"use: {sync.schedule} ")
    fastest = max(rows, key=lambda r: r.tokens_per_s)
    if not fastest.synchronous:
        assert f"stale by up to {fastest.max_delay} updates" in lines[1]


def test_the_done_when_command_rows(tmp_path, capsys):
    out = tmp_path / "p.json"
    entry.run(
        compose(
            [
                "model.n_layer=8",
                "model.d_model=12288",
                "model.n_head=96",
                "model.seq=2048",
                "model.vocab=51200",
                "hardware=a100_80g",
                "pipeline.TP=8",
                "pipeline.S=4",
                "pipeline.SP=true",
                "recompute=selective",
                "pipeline.M=8",
                "schedules=[1f1b,interleaved]",
                f"out={out}",
            ],
            "plan",
        )
    )
    assert capsys.readouterr().out.startswith("use: ")
    for r in json.loads(out.read_text())["rows"]:
        assert {"TP", "SP", "v", "zero", "recompute", "step_time_s", "mfu"} <= set(r)
        assert {"weights", "gradients", "optimizer", "activations"} <= set(r["memory"])
        assert r["TP"] == 8 and r["SP"] is True and r["recompute"] == "selective"


def test_nothing_fits_says_which_knob_does(capsys):
    entry.run(compose(["model=llama_7b", "pipeline.S=8", "memory_cap=40e9", "schedules=[1f1b,gpipe]"], "plan"))
    text = capsys.readouterr().out
    assert text.startswith("nothing fits") and "recompute=full:" in text and "what would fit" in text


def test_collectives_table():
    assert tensor.collectives(False) == ((2, 4), (2, 4)) and tensor.collectives(True, "full") == ((4, 4), (8, 8))
