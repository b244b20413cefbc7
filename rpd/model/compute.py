"""Seconds of a layer's F, I and W on one rank: compute from the work, and its TP collectives
(docs/plan.md).

Two compute models, chosen by the hardware:

* ``gemm_efficiency`` None (the flat presets): every FLOP at ``efficiency`` × peak, the first
  plan's model; F = forward FLOPs, I = input-gradient FLOPs + recomputation's, W = weight-gradient
  FLOPs, each over the sustained FLOP/s.
* ``gemm_efficiency`` g (the DGX presets): each GEMM of an m × k by k × n product takes
  2mnk / (g · w · peak) + 2(mk + kn + mn) / HBM bandwidth -- its FLOPs at the large-GEMM rate
  times its wave efficiency w on the chip's SMs (:func:`rpd.model.kernels.wave_efficiency`; w = 1
  without ``sm_count``) and its 16-bit operands through memory once -- so a GEMM's achieved FLOP/s
  falls where a dimension gets small (a narrow TP shard, few tokens, a short head) or its tiles
  leave the last wave part empty, and tends to g · peak as it grows. Memory-bound work takes
  ``traffic`` × the bytes its kernels read and write (``Layer.traffic`` in F, ``traffic_i`` in I:
  :mod:`rpd.model.kernels`, counted kernel by kernel) / HBM bandwidth. F = the layer's GEMMs +
  memory work; I = the input-gradient GEMMs (each forward GEMM's dX, an m × k output over n), the
  attention core's backward and I's memory work; W = the weight-gradient GEMMs (a k × n output
  over m). Recomputation adds to I: full, one more F; selective, the attention core and its
  scores' memory work.

TP collectives (:mod:`rpd.model.tensor`) run over the node's link: a collective costs the link's
latency and each half (a reduce-scatter or an all-gather) (t-1)/t of its tensor's bytes over the
intra-node bandwidth; F gets the forward's, I the backward's. With ``tp_overlap`` a pass takes
max(compute, collectives) instead of their sum.

Context parallelism (Megatron-Core's ring attention through Transformer Engine): the attention
of a layer runs in CP steps; at each step a rank computes its queries against the K and V chunk
it holds while it sends that chunk on and receives the next (``cp_bytes``, p2p), so CP − 1
transfers each overlap one step's attention core (the core's time / CP). The exposed time of a
pass is (CP − 1) · max(0, transfer − core / CP): F sends K and V, I sends them again and their
gradients (twice the bytes) under the backward's core (twice the forward's). The CP group sits
after TP in Megatron's rank order (:mod:`rpd.model.topology`): inside the node while TP·CP ≤
``gpus_per_node`` (NVLink), else each transfer crosses the sender's InfiniBand port.
"""

from __future__ import annotations

import numpy as np

from rpd.model.hardware import Hardware
from rpd.model.kernels import wave_efficiency
from rpd.model.layers import Layer, Model
from rpd.validation import required


def _gemm_rates(hw: Hardware) -> tuple[float, float]:
    """(FLOP/s of a large GEMM, HBM bytes/s) of ``hw``'s GEMM model; a ValueError without one."""
    eff = required("hardware.gemm_efficiency", hw.gemm_efficiency)
    return eff * hw.peak_flops, required("hardware.hbm_bandwidth", hw.hbm_bandwidth)


def gemm_seconds(hw: Hardware, m: float, n: float, k: float, count: float = 1) -> float:
    """One (m × k)·(k × n) product, ``count`` times in one kernel, on ``hw`` (module docstring):
    with ``hw.sm_count`` set its FLOPs run at the large-GEMM rate times its wave efficiency
    (:func:`rpd.model.kernels.wave_efficiency`)."""
    flops = 2.0 * m * n * k
    moved = 2.0 * (m * k + k * n + m * n)
    rate, hbm = _gemm_rates(hw)
    if hw.sm_count is not None:
        rate *= wave_efficiency(m, n, count, hw.sm_count)
    return count * (flops / rate + moved / hbm)


def _backward(hw: Hardware, gemms) -> tuple[float, float]:
    """(I, W) seconds of the forward GEMMs ``gemms``: the input gradient dX = dY·Bᵀ is an m × k
    output over n, the weight gradient dB = Xᵀ·dY a k × n output over m."""
    return (
        sum(gemm_seconds(hw, m, k, n, c) for m, n, k, c, _ in gemms),
        sum(gemm_seconds(hw, k, n, m, c) for m, n, k, c, _ in gemms),
    )


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


# a fused attention kernel's backward runs five matmuls (the scores recomputed, dP, dV, dQ, dK)
# to its forward's two (FlashAttention-2, Dao 2023, Algorithms 1 and 2)
FLASH_BACKWARD = 2.5


def flash_seconds(hw: Hardware, core: list) -> float:
    """A fused attention kernel's forward over the core GEMMs ``core`` ((queries, keys, head
    dim, heads) of Q·K^T first): the causal half of the score tiles at the kernel's published
    rate (``hardware.attention_efficiency`` × peak; None: the large-GEMM rate), Q, K, V and the
    output through memory once; the s² scores never leave the chip."""
    rate, hbm = _gemm_rates(hw)
    if hw.attention_efficiency is not None:
        rate = hw.attention_efficiency * hw.peak_flops
    if not core:
        return 0.0
    q, kv, d, heads = core[0][:4]
    flops = 2 * (2.0 * q * kv * d) / 2  # the two matmuls, the causal half of the tiles
    moved = 2.0 * (2 * q * d + 2 * kv * d)
    return heads * (flops / rate + moved / hbm)


def cp_seconds(hw: Hardware, x: Layer, core: float, backward: bool = False) -> float:
    """Exposed seconds of layer ``x``'s ring-attention exchange in F (or I, ``backward``), its
    attention core taking ``core`` seconds in that pass (module docstring)."""
    if x.cp == 1 or x.cp_bytes <= 0:
        return 0.0
    intra = x.tp * x.cp <= hw.gpus_per_node
    step = hw.p2p_seconds(x.cp_bytes * (2 if backward else 1), intra)
    return (x.cp - 1) * max(0.0, step - core / x.cp)


def _passes(hw: Hardware, x: Layer) -> tuple[float, float, float]:
    """Compute seconds (F, I, W) of ``x`` without its TP collectives."""
    if hw.gemm_efficiency is None:
        core = hw.compute_seconds(sum(2.0 * m * n * k * c for m, n, k, c, w in x.gemms if not w))
        return (
            hw.compute_seconds(x.flops_fwd) + cp_seconds(hw, x, core),
            hw.compute_seconds(x.flops_i + x.flops_recompute) + cp_seconds(hw, x, 2 * core, backward=True),
            hw.compute_seconds(x.flops_w),
        )
    rate, hbm = _gemm_rates(hw)
    mine = [g for g in x.gemms if g[4]]
    weights = sum(gemm_seconds(hw, m, n, k, c) for m, n, k, c, _ in mine)
    weights_i, weights_w = _backward(hw, mine)
    if x.flash:
        core = flash_seconds(hw, [g for g in x.gemms if not g[4]])
        core_i = FLASH_BACKWARD * core
    else:
        core = sum(gemm_seconds(hw, m, n, k, c) for m, n, k, c, w in x.gemms if not w)
        core_i = sum(_backward(hw, [g for g in x.gemms if not g[4]]))
    mem = hw.traffic * x.traffic / hbm
    mem_i = hw.traffic * (2 * x.traffic if x.traffic_i is None else x.traffic_i) / hbm
    f = weights + core + mem + cp_seconds(hw, x, core)
    i = weights_i + core_i + mem_i + cp_seconds(hw, x, core_i, backward=True)
    if x.recompute == "full":
        i += f
    elif x.recompute == "selective" and x.flops_recompute > 0:  # the core attention's forward again
        i += core + hw.traffic * x.traffic_core / hbm
    if not x.gemms:  # a layer given only FLOPs (a profile, an MLP chain): at the large-GEMM rate
        return f + x.flops_fwd / rate, i + (x.flops_i + x.flops_recompute) / rate, x.flops_w / rate
    return f, i, weights_w


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
