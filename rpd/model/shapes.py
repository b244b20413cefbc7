"""A transformer's shape and how its layers are parallelised: :class:`GPTConfig`, the published
shapes of :data:`PRESETS`, and :class:`Parallel` (TP, SP, CP, attention kernel, TP overlap)
(docs/plan.md#the-model-rpdmodellayers). :mod:`rpd.model.layers` turns them into layers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from rpd.model import tensor
from rpd.validation import check_choice, check_int


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    """A GPT-style decoder. ``ffn`` None: 4·d_model; ``gated``: SwiGLU (three MLP matrices);
    ``norm``: "layernorm" (scale and bias) or "rmsnorm" (scale); ``positions``: "learned" (s·h
    table) or "rope" (none); ``n_kv_heads``: grouped-query attention's K and V heads (None:
    ``n_head``, multi-head attention)."""

    n_layer: int
    d_model: int
    n_head: int
    seq: int
    vocab: int
    micro_batch: int = 1
    tied: bool = True
    ffn: int | None = None
    gated: bool = False
    bias: bool = True
    norm: str = "layernorm"
    positions: str = "learned"
    n_kv_heads: int | None = None

    def __post_init__(self):
        for f in ("n_layer", "d_model", "n_head", "seq", "vocab", "micro_batch"):
            check_int(f, getattr(self, f))
        if self.ffn is not None:
            check_int("ffn", self.ffn)
        if self.d_model % self.n_head:
            raise ValueError(f"d_model must be a multiple of n_head, got d_model={self.d_model}, n_head={self.n_head}")
        if self.n_kv_heads is not None:
            check_int("n_kv_heads", self.n_kv_heads)
            if self.n_head % self.n_kv_heads:
                raise ValueError(
                    f"n_kv_heads must divide n_head (query groups of equal size), got n_kv_heads={self.n_kv_heads}, "
                    f"n_head={self.n_head}"
                )
        check_choice("norm", self.norm, ("layernorm", "rmsnorm"))
        check_choice("positions", self.positions, ("learned", "rope"))

    @property
    def kv_heads(self) -> int:
        return self.n_head if self.n_kv_heads is None else self.n_kv_heads


def _family(**fixed) -> Callable[[int, int, int, int], GPTConfig]:
    """A model family's sizes: its fixed fields, and per size the layers, width, heads and FFN."""

    def at(n_layer: int, d_model: int, n_head: int, ffn: int) -> GPTConfig:
        return GPTConfig(n_layer=n_layer, d_model=d_model, n_head=n_head, ffn=ffn, **fixed)

    return at


_llama3 = _family(
    n_kv_heads=8, seq=8192, vocab=128256, tied=False, gated=True, bias=False, norm="rmsnorm", positions="rope"
)
# squared-ReLU MLP (two matrices, ungated), no linear biases, layernorm1p (a LayerNorm), RoPE
_nemotron4 = _family(n_kv_heads=8, seq=4096, vocab=256000, tied=False, bias=False, positions="rope")


PRESETS: dict[str, GPTConfig] = {
    # GPT-2 (Radford et al. 2019; HF gpt2 / gpt2-medium): tied embeddings, learned positions
    "gpt2_small": GPTConfig(n_layer=12, d_model=768, n_head=12, seq=1024, vocab=50257),
    "gpt2_medium": GPTConfig(n_layer=24, d_model=1024, n_head=16, seq=1024, vocab=50257),
    # GPT-3 XL (Brown et al. 2020, Table 2.1: 24 layers, d 2048, context 2048; its "24 heads of
    # 128" do not multiply to 2048: 16 heads of 128 here, as Megatron's 1.3B; heads change only 5as²b)
    "gpt3_1.3b": GPTConfig(n_layer=24, d_model=2048, n_head=16, seq=2048, vocab=50257),
    # GPT-3 175B (Brown et al. 2020, Table 2.1; NeMo-Framework-Launcher conf/training/gpt3/175b.yaml):
    # 96 layers, d 12288, 96 heads, FFN 4d, GELU, learned positions, vocabulary 51200 (padded), tied
    "gpt3_175b": GPTConfig(n_layer=96, d_model=12288, n_head=96, seq=2048, vocab=51200),
    # LLaMA-7B (Touvron et al. 2023): SwiGLU 11008, RMSNorm, no biases, RoPE, untied head
    "llama_7b": GPTConfig(
        n_layer=32,
        d_model=4096,
        n_head=32,
        seq=2048,
        vocab=32000,
        tied=False,
        ffn=11008,
        gated=True,
        bias=False,
        norm="rmsnorm",
        positions="rope",
    ),
    # Llama 3 (Grattafiori et al. 2024, "The Llama 3 herd of models", Table 3): 8 KV heads, SwiGLU,
    # RMSNorm, RoPE, vocabulary 128256, untied, context 8192
    "llama3_8b": _llama3(32, 4096, 32, 14336),
    "llama3_70b": _llama3(80, 8192, 64, 28672),
    "llama3_405b": _llama3(126, 16384, 128, 53248),
    # Nemotron-4 15B (arXiv 2402.16819) and 340B (arXiv 2406.11704): 8 KV heads, squared ReLU,
    # vocabulary 256000, untied, context 4096
    "nemotron4_15b": _nemotron4(32, 6144, 48, 24576),
    "nemotron4_340b": _nemotron4(96, 18432, 96, 73728),
}


@dataclasses.dataclass(frozen=True)
class Parallel:
    """How each layer runs on its ranks: ``TP`` tensor-parallel ranks in a node, ``SP`` sequence
    parallelism, ``CP`` context-parallel ranks (the sequence split, ring attention),
    ``attention`` standard or flash (:mod:`rpd.model.tensor`), ``tp_overlap``: the TP collectives
    hidden under the layer's compute where they fit (Megatron's ``--tp-comm-overlap``)."""

    TP: int = 1
    SP: bool = False
    attention: str = "standard"
    tp_overlap: bool = False
    CP: int = 1

    def __post_init__(self):
        check_int("pipeline.TP", self.TP)
        check_int("pipeline.CP", self.CP)
        check_choice("attention", self.attention, tensor.ATTENTION)
        if self.SP and self.TP == 1:
            raise ValueError("pipeline.SP=true needs pipeline.TP > 1 (sequence parallelism splits over the TP ranks)")


NO_TP = Parallel()
