"""Tensor and sequence parallelism of one transformer layer, per rank (docs/plan.md).

Megatron's tensor parallelism over t GPUs of a node splits each layer's matrices in t (QKV and
the first MLP matrix by columns, the output projection and the second MLP matrix by rows, the
heads among the ranks; the vocabulary of the embedding and the head in t too); layer norms,
dropouts and the inputs of the two split blocks stay whole on every rank. Sequence parallelism
(Korthikanti et al. 2022) splits those too, along the sequence.

Activation bytes a layer keeps for its backward, per microbatch, 16-bit (Korthikanti et al.,
Table 2; sequence s, micro-batch b, hidden h, heads a, MLP width f):

* whole on every rank without SP: 10·sbh -- attention's input 2sbh and dropout mask sbh, the
  MLP's input 2sbh and dropout mask sbh, the two layer norms' inputs 4sbh;
* split in t: attention 8·sbh (Q, K 4sbh, V 2sbh, the projection's input 2sbh) and the scores
  5·as²b (softmax output 2as²b, its dropout mask as²b and output 2as²b), the MLP 4·sbf (f = 4h:
  16·sbh; a gated MLP 6·sbf);

so no parallelism sbh(34 + 5as/h), TP sbh(10 + 24/t + 5as/(ht)), TP + SP sbh(34 + 5as/h)/t;
selective recomputation drops the scores (sbh(10 + 24/t), with SP sbh·34/t); full
recomputation keeps the layer's input, 2sbh (/t with SP). ``attention="flash"``: a fused kernel
never stores the scores (it keeps O(asb) softmax statistics), the selective numbers without its
extra forward. What the memory-bound kernels move through HBM (a layer's ``traffic``) is counted
kernel by kernel in :mod:`rpd.model.kernels`, not from these stored bytes.

Grouped-query attention (``kv`` = n_kv_heads / n_head): K and V have n_kv heads, so their
activations shrink by ``kv``: attention's split part is (4 + 4·kv)·sbh (Q 2sbh, K and V 2·kv·sbh
each, the projection's input 2sbh), 8·sbh at kv = 1.

Context parallelism over ``cp`` ranks (Megatron-Core's ring attention): every token-wise tensor
holds s/cp of the sequence, so every sbh term is divided by cp; the scores a standard kernel keeps
are those of the rank's s/cp queries against all s keys, 5·a·(s/cp)·s·b (their 1/cp share).

TP collectives per layer and microbatch, each of a tensor of s·b·h 16-bit values: two
all-reduces in the forward (after attention, after the MLP) and two in the backward; with SP each
becomes an all-gather plus a reduce-scatter (the same bytes in a ring, two latencies). Full
recomputation repeats the forward's in the backward. Counted as (collectives, halves), a half
being a reduce-scatter or an all-gather ((t-1)/t of the tensor per rank) and an all-reduce two.
"""

from __future__ import annotations

from rpd.validation import check_choice, check_int

ATTENTION = ("standard", "flash")


def activation_bytes(
    h: int,
    a: int,
    s: int,
    b: int,
    f: int | None = None,
    gated: bool = False,
    t: int = 1,
    sp: bool = False,
    recompute: str = "none",
    attention: str = "standard",
    kv: float = 1.0,
    cp: int = 1,
) -> float:
    """Bytes one rank keeps per layer and microbatch (module docstring); ``kv`` = n_kv / n_head,
    ``cp`` context-parallel ranks."""
    t, cp = check_int("pipeline.TP", t), check_int("pipeline.CP", cp)
    check_choice("recompute", recompute, ("none", "selective", "full"))
    check_choice("attention", attention, ATTENTION)
    f = 4 * h if f is None else f
    sbh = s * b * h / cp
    if recompute == "full":
        return 2 * sbh / (t if sp else 1)
    whole = 10 * sbh
    split = (4 + 4 * kv) * sbh + (6 if gated else 4) * s * b * f / cp
    scores = 5 * a * s * s * b / cp if recompute == "none" and attention == "standard" else 0
    return whole / (t if sp else 1) + (split + scores) / t


def collectives(sp: bool, recompute: str = "none") -> tuple[tuple[int, int], tuple[int, int]]:
    """((collectives, halves) in F, (collectives, halves) in B) of one layer (module docstring)."""
    fwd = (4, 4) if sp else (2, 4)
    bwd = (fwd[0] * 2, fwd[1] * 2) if recompute == "full" else fwd
    return fwd, bwd
