"""The work of a layer beside its large GEMMs, each term counted from the kernels Megatron runs
(docs/plan.md#compute-from-the-work-rpdmodelcompute-rpdmodelkernels).

:mod:`rpd.model.compute` times a layer as its GEMMs plus everything else; this module says what
the everything else is, term by term, and how a GEMM's shape costs it on the chip:

* **Wave quantisation** (:func:`wave_efficiency`). cuBLAS cuts a GEMM's m × n output into tiles
  and runs one tile per SM at a time, so a GEMM of T tiles on P SMs takes ⌈T / P⌉ waves of a whole
  tile each: its share of the SMs' work is m·n / (⌈T / P⌉ · P · t_m · t_n), the padding of the
  last tile row and column included (NVIDIA, *Matrix Multiplication Background User's Guide*,
  "Wave quantization": tiles of 256 × 128 and 128 × 256 for large GEMMs, one per SM; SMs per chip
  from the vendor's architecture whitepapers: A100 108, H100 SXM5 132, ``Hardware.sm_count``). It tends to 1 as the GEMM
  grows. The DGX presets leave ``sm_count`` unset (w = 1): with one tile size the model charges
  quantisation cuBLAS avoids by choosing among tiles (docs/plan.md).
* **Memory-bound kernels** (:func:`block_bytes`): the bytes each of Megatron's elementwise and
  normalisation kernels reads and writes in 16-bit, per rank, over HBM bandwidth: two layer
  norms (read x, write y: 4 B per value), two fused bias-dropout-adds (read the output and the
  residual, write the sum and a 1-byte mask: 7 B), the fused bias-GeLU (read, write: 4 B per MLP
  value; SwiGLU reads two halves and writes one: 6 B per gate value), under standard attention the
  fused scale-mask-softmax (read, write the scores: 4 B) and the attention dropout (read, write,
  mask: 5 B), under RoPE the rotation of Q and K (read, write). The input-gradient pass moves
  its backward's: a layer norm reads x and dy and writes dx (6 B), a dropout-add reads dy and the
  mask and writes dx (5 B), GeLU's backward reads its input and dy and writes dx (6 B), the
  softmax reads y and dy and writes dx (6 B) and its dropout 5 B.
* **The logits' fp32 traffic** (:data:`LOGIT_BYTES`): Megatron's vocab-parallel cross entropy
  (``megatron/core/tensor_parallel/cross_entropy.py``) casts the 16-bit logits to fp32 (read 2,
  write 4), takes the row max (read 4), subtracts it in place (read 4, write 4), exponentiates in
  place (read 4, write 4), sums (read 4) and divides in place (read 4, write 4): 38 B per logit in
  the forward; the backward multiplies by the loss gradient in place (read 4, write 4) and casts
  back to 16-bit for the logit GEMM's backward (read 4, write 2): 14 B.
* **The optimizer step** (:func:`optimizer_bytes`): after the flush every rank updates its
  parameters (its shard under the distributed optimizer) with a multi-tensor Adam that reads the
  master copy, the gradient and each state value and writes the copy and the states back, then
  copies the master into the 16-bit weights; the gradient norm for clipping reads the gradients
  once more.

Every number here is counted from the kernels or taken from a vendor document; none is fitted.
"""

from __future__ import annotations

import math

from rpd.validation import check_choice, check_int

# a large GEMM's output tile, one per SM (NVIDIA's Matrix Multiplication Background User's Guide)
TILE = (256, 128)
# bytes per logit of Megatron's fp32 vocab-parallel cross entropy: (forward, backward)
LOGIT_BYTES = (38.0, 14.0)


def wave_efficiency(m: float, n: float, count: float = 1, sms: int = 108, tile: tuple[int, int] = TILE) -> float:
    """Share of the SMs' tile work that is the GEMM's own, for ``count`` m × n outputs in one
    kernel (a batched GEMM's tiles share its waves), the better of the two tile orientations:

        w = count·m·n / (⌈T / P⌉ · P · t_m · t_n),   T = count · ⌈m / t_m⌉ · ⌈n / t_n⌉ tiles, P SMs.
    """
    sms = check_int("sms", sms)
    best = 0.0
    for tm, tn in (tile, tile[::-1]):
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * count
        waves = math.ceil(tiles / sms)
        best = max(best, count * m * n / (waves * sms * tm * tn))
    return best


def block_bytes(
    h: int,
    a: int,
    s: int,
    b: int,
    f: int,
    gated: bool = False,
    t: int = 1,
    sp: bool = False,
    attention: str = "standard",
    kv: float = 1.0,
    cp: int = 1,
    rope: bool = False,
) -> tuple[float, float, float]:
    """(forward, input-gradient, attention-core) bytes one rank's memory-bound kernels move for
    one transformer layer and microbatch (module docstring): with q = t under SP (else 1),

        F = 22·sbh/q + (4 or 6)·sbf/t + 9·as²b/t [standard attention] + RoPE's 2·(2 + 2·kv)·sbh/t
        I = 22·sbh/q + (6 or 8)·sbf/t + 11·as²b/t [standard attention] + the same RoPE bytes,

    s the rank's share of the sequence under context parallelism (the scores: its s/cp queries
    against all s keys); the third value is the forward's attention-core part (9·as²b/t), what
    selective recomputation runs again."""
    check_choice("attention", attention, ("standard", "flash"))
    t, cp = check_int("pipeline.TP", t), check_int("pipeline.CP", cp)
    q = t if sp else 1
    sbh = s * b * h / cp
    sbf = s * b * f / cp
    scores = a * s * s * b / cp / t if attention == "standard" else 0.0
    rot = 2.0 * (2 + 2 * kv) * sbh / t if rope else 0.0
    core_f = 9.0 * scores  # scale-mask-softmax 4, dropout 5
    fwd = 22.0 * sbh / q + (6.0 if gated else 4.0) * sbf / t + core_f + rot
    bwd = 22.0 * sbh / q + (8.0 if gated else 6.0) * sbf / t + 11.0 * scores + rot
    return fwd, bwd, core_f


def optimizer_bytes(precision: tuple[int, int, int], grad_bytes: int = 4, states: int = 2) -> float:
    """Bytes of HBM traffic per parameter of one optimizer step (module docstring); ``precision``
    the (weights, master copy, state value) bytes of :func:`rpd.model.memory.precision_bytes`: the
    master copy read and written, each of ``states`` state values read and written, the gradient
    read for the update and for the clipping norm, and (under mixed precision) the master read
    once more to write the 16-bit weights:

        bytes = 2·master + 2·state·states + 2·grad + [mixed] (master + weights).
    """
    w, m, s = precision
    check_choice("grad_bytes", grad_bytes, (2, 4))
    master = m if m else w  # fp32: the weights are the master copy, updated in place
    return 2.0 * master + 2.0 * s * check_int("states", states, minimum=0) + 2.0 * grad_bytes + (master + w if m else 0)
