"""The work beside a layer's large GEMMs (rpd.model.kernels): wave quantisation, the optimizer
step's bytes and the logits' fp32 traffic, each against a count by hand; and the GEMM rate tending
to the preset's share of the measured ceiling as the GEMM grows."""

from __future__ import annotations

import dataclasses

import pytest

from rpd.model import compute, hardware, kernels
from rpd.model.layers import GPTConfig, gpt_model
from rpd.model.memory import precision_bytes


def test_wave_efficiency_by_hand():
    """NVIDIA's guide's example: a 1792 × 1792 output in 256 × 128 tiles is 7 × 14 = 98 tiles, one
    wave on an A100's 108 SMs: 98 / 108 of the SMs busy. 2048 × 2048 is 8 × 16 = 128 tiles either
    way round, two waves: 2048² / (2·108·256·128). 1793 × 1792 pads to 8 × 14 = 112 tiles as 256 ×
    128 (two waves) but 15 × 7 = 105 as 128 × 256 (one): the better orientation is taken."""
    assert kernels.wave_efficiency(1792, 1792, 1, 108) == pytest.approx(98 / 108, rel=1e-12)
    assert kernels.wave_efficiency(2048, 2048, 1, 108) == pytest.approx(2048**2 / (2 * 108 * 256 * 128))
    assert kernels.wave_efficiency(1793, 1792, 1, 108) == pytest.approx(1793 * 1792 / (108 * 256 * 128))
    # a batched GEMM's tiles share the waves: 54 heads of one tile each fill half a wave, 108 one
    assert kernels.wave_efficiency(256, 128, 54, 108) == pytest.approx(0.5)
    assert kernels.wave_efficiency(256, 128, 108, 108) == 1.0


def test_a_gemm_tends_to_the_presets_share_of_the_ceiling():
    """g × peak for a GEMM whose tiles fill whole waves (m = 256·108·j rows), its operands'
    memory time vanishing as it grows (n = k = 2^16)."""
    hw = dataclasses.replace(hardware.preset("a100_80g"), sm_count=108)  # the A100's SMs (the presets: no waves)
    g = hw.gemm_efficiency * hw.peak_flops
    rates = [compute.achieved_flops(hw, 256 * 108 * j, 2**16, 2**16) for j in (1, 4, 16)]
    assert rates[0] < rates[1] < rates[2] < g
    assert rates[2] / g > 0.99
    # without sm_count (the presets) the same formula with w = 1
    flat = dataclasses.replace(hw, sm_count=None)
    assert compute.achieved_flops(flat, 1793, 1792, 4096) > compute.achieved_flops(hw, 1793, 1792, 4096)


def test_the_optimizer_steps_bytes_by_hand():
    """Adam under bf16 mixed precision with fp32 gradients: master read + written (8), two fp32
    states read + written (16), the gradient read for the update and for the norm (8), the master
    read again into the bf16 weights (4 + 2): 38 bytes a parameter. SGD in fp32: the weights are
    the master copy (8), no state, the gradient twice (8): 16."""
    assert kernels.optimizer_bytes(precision_bytes("bf16_mixed"), 4, 2) == 38
    assert kernels.optimizer_bytes(precision_bytes("bf16_mixed"), 2, 2) == 34
    assert kernels.optimizer_bytes(precision_bytes("fp32"), 4, 0) == 16


def test_the_head_carries_the_fp32_cross_entropy():
    """The output layer's memory work: the final norm's 4 B per value of s·b·h, and 38 + 14 bytes
    per logit of Megatron's fp32 vocab-parallel cross entropy (cast, max, subtract, exp, sum,
    divide; multiply and cast back in the backward)."""
    cfg = GPTConfig(n_layer=2, d_model=64, n_head=4, seq=32, vocab=1000, micro_batch=2)
    head = gpt_model(cfg).layers[-1]
    sbh, logits = 32 * 2 * 64, 32 * 2 * 1000
    assert head.traffic == 4 * sbh + 38 * logits
    assert head.traffic_i == 6 * sbh + 14 * logits
