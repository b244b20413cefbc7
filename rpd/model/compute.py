"""Seconds of a layer's F, I and W on one rank: compute from the work, and its TP collectives
(docs/plan.md).

Two compute models, chosen by the hardware:

* ``gemm_efficiency`` None (the flat presets): every FLOP at ``efficiency`` × peak, the first
  plan's model; F = forward FLOPs, I = input-gradient FLOPs + recomputation's, W = weight-gradient
  FLOPs, each over the sustained FLOP/s.
* ``gemm_efficiency`` g (the DGX presets): each GEMM of an m × k by k × n product takes
  2mnk / (g · peak) + 2(mk + kn + mn) / HBM bandwidth -- its FLOPs at the large-GEMM rate and its
  16-bit operands through memory once -- so a GEMM's achieved FLOP/s is g · peak / (1 + g · peak
  · 2(mk + kn + mn) / (2mnk · HBM)): it falls where a dimension gets small (a narrow TP shard,
  few tokens, a short head). Memory-bound work (layer norms, softmax, dropout, GeLU, the residual
  adds) takes ``traffic`` × the bytes the forward writes / HBM bandwidth in F and twice that in I.
  F = the layer's GEMMs + memory work; I = the same weight GEMMs (the input gradient has the same
  shapes), the attention core's twice, twice the memory work; W = the weight GEMMs again.
  Recomputation adds to I: full, one more F; selective, the attention core and its scores'
  memory work.

TP collectives (:mod:`rpd.model.tensor`) run over the node's link: a collective costs the link's
latency and each half (a reduce-scatter or an all-gather) (t-1)/t of its tensor's bytes over the
intra-node bandwidth; F gets the forward's, I the backward's. With ``tp_overlap`` a pass takes
max(compute, collectives) instead of their sum.
"""

from __future__ import annotations

import numpy as np

from rpd.model.hardware import Hardware
from rpd.model.layers import Layer, Model
from rpd.validation import required


def _gemm_rates(hw: Hardware) -> tuple[float, float]:
    """(FLOP/s of a large GEMM, HBM bytes/s) of ``hw``'s GEMM model; a ValueError without one."""
    eff = required("hardware.gemm_efficiency", hw.gemm_efficiency)
    return eff * hw.peak_flops, required("hardware.hbm_bandwidth", hw.hbm_bandwidth)


def gemm_seconds(hw: Hardware, m: float, n: float, k: float, count: float = 1) -> float:
    """One (m × k)·(k × n) product, ``count`` times, on ``hw`` (module docstring)."""
    flops = 2.0 * m * n * k
    moved = 2.0 * (m * k + k * n + m * n)
    rate, hbm = _gemm_rates(hw)
    return count * (flops / rate + moved / hbm)


def achieved_flops(hw: Hardware, m: float, n: float, k: float) -> float:
    """FLOP/s one GEMM reaches on ``hw`` (its FLOPs over :func:`gemm_seconds`)."""
    return 2.0 * m * n * k / gemm_seconds(hw, m, n, k)


def tp_seconds(hw: Hardware, x: Layer, which: tuple) -> float:
    """Seconds of (collectives, halves) of layer ``x``'s TP group on the node's link."""
    n, halves = which
    if x.tp == 1 or n == 0:
        return 0.0
    bw = hw.intra_bandwidth if hw.intra_bandwidth is not None else hw.allreduce_bandwidth
    return n * hw.intra_latency + halves * (x.tp - 1) / x.tp * x.tp_bytes / bw


def _passes(hw: Hardware, x: Layer) -> tuple[float, float, float]:
    """Compute seconds (F, I, W) of ``x`` without its TP collectives."""
    if hw.gemm_efficiency is None:
        return (
            hw.compute_seconds(x.flops_fwd),
            hw.compute_seconds(x.flops_i + x.flops_recompute),
            hw.compute_seconds(x.flops_w),
        )
    rate, hbm = _gemm_rates(hw)
    weights = sum(gemm_seconds(hw, m, n, k, c) for m, n, k, c, w in x.gemms if w)
    core = sum(gemm_seconds(hw, m, n, k, c) for m, n, k, c, w in x.gemms if not w)
    mem = hw.traffic * x.traffic / hbm
    f = weights + core + mem
    i = weights + 2 * core + 2 * mem
    if x.recompute == "full":
        i += f
    elif x.recompute == "selective" and x.flops_recompute > 0:  # standard attention: its core again
        i += core + hw.traffic * max(0.0, x.traffic - x.act_bytes) / hbm
    if not x.gemms:  # a layer given only FLOPs (a profile, an MLP chain): at the large-GEMM rate
        return f + x.flops_fwd / rate, i + (x.flops_i + x.flops_recompute) / rate, x.flops_w / rate
    return f, i, weights


def layer_seconds(model: Model, hw: Hardware) -> np.ndarray:
    """float [L, 3]: F, I, W seconds of each layer (measured when the profile has them)."""
    out = np.empty((len(model.layers), 3))
    for j, x in enumerate(model.layers):
        f, i, w = _passes(hw, x)
        cf, cb = tp_seconds(hw, x, x.tp_fwd), tp_seconds(hw, x, x.tp_bwd)
        if x.tp_overlap:
            f, i = max(f, cf), max(i, cb)
        else:
            f, i = f + cf, i + cb
        out[j] = (
            x.time_fwd if x.time_fwd is not None else f,
            x.time_i if x.time_i is not None else i,
            x.time_w if x.time_w is not None else w,
        )
    return out
