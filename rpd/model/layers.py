"""A model as the pipeline sees it: a list of layers with parameters, FLOPs and bytes
(docs/plan.md#the-model-rpdmodellayers).

A :class:`Layer` carries what a stage needs to be timed and sized: its parameters, its forward
FLOPs and the two halves of its backward (I: the gradient with respect to the input, W: with
respect to the weights; for a matmul each costs about one forward), the activation bytes kept
from the forward for the backward -- ``act_bytes`` in all, of which ``act_w_bytes`` are still
needed by W after I has run -- and ``out_bytes``, the tensor sent to the next stage (and its
gradient sent back). A :class:`Model` is a tuple of layers.

GPT-style layers (:func:`gpt_model`) follow Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models", Eq. 1, Table 2; 16-bit activations, micro-batch b,
sequence s, hidden h, heads a, MLP width f = 4h):

* parameters 12h² + 13h (attention 4h² + 4h, MLP 8h² + 5h, two LayerNorms 4h);
* forward FLOPs 24·b·s·h² + 4·b·s²·h; I = 24·b·s·h² + 8·b·s²·h, W = 24·b·s·h² (the zero-bubble
  paper's Table 1), so F + I + W = 3F;
* activations s·b·h·(34 + 5·a·s/h) bytes (attention 11sbh + 5as²b, MLP 19sbh, LayerNorms 4sbh);
  selective recomputation drops the 5as²b of the attention core (recomputed: 4·b·s²·h FLOPs in
  the backward), full recomputation keeps the layer's input, 2sbh (recomputed: one forward);
* W needs the 16-bit inputs of the four linear layers and the gradients of their outputs,
  2sb(3h + f) + 2sb(5h + f) = 32sbh (the zero-bubble paper's figure).

Generalised for a gated MLP (SwiGLU: three matrices, MLP activations 3sbh + 6sbf), MLP width f,
no biases and RMSNorm (LLaMA), the same derivation term by term. The embedding layer (tokens,
learned positions) sits first with its dropout mask s·b·h; the output layer (final norm, LM
head, fp32 logits 4·s·b·V kept for the loss) last. With tied embeddings the head holds the
embedding matrix too (``tied_params``) but the model counts it once.
"""

from __future__ import annotations

import dataclasses

from rpd.model import kernels, tensor
from rpd.model.shapes import NO_TP, PRESETS, GPTConfig, Parallel
from rpd.validation import check_choice, check_int, check_real

RECOMPUTE = ("none", "selective", "full")


@dataclasses.dataclass(frozen=True)
class Layer:
    """One layer. FLOPs per microbatch; bytes per microbatch except ``params`` (values).

    ``time_*``: measured seconds (a profile), used instead of FLOPs / device speed when set.
    ``tied_params``: values held but owned by another layer (``tied_to``; tied embeddings)."""

    name: str
    params: int
    flops_fwd: float = 0.0
    flops_i: float = 0.0
    flops_w: float = 0.0
    act_bytes: int = 0
    act_w_bytes: int = 0
    out_bytes: int = 0
    kind: str = "block"  # "embedding" | "block" | "head"
    flops_recompute: float = 0.0  # extra backward FLOPs under recomputation (not model FLOPs)
    tied_params: int = 0
    tied_to: str | None = None
    time_fwd: float | None = None
    time_i: float | None = None
    time_w: float | None = None
    # per rank, for rpd.model.compute (TP and the fitted compute model; defaults: no TP)
    gemms: tuple = ()  # forward GEMMs (m, n, k, count, has_weights): weight GEMMs recur in I and W
    traffic: float = 0.0  # bytes the forward's memory-bound kernels move (rpd.model.kernels)
    traffic_i: float | None = None  # the same in the input-gradient pass (None: twice ``traffic``)
    traffic_core: float = 0.0  # of ``traffic``, the attention core's (selective recomputation reruns it)
    recompute: str = "none"  # what B recomputes: "selective" (the attention core) or "full"
    tp: int = 1
    tp_bytes: float = 0.0  # bytes of the tensor each TP collective moves
    tp_fwd: tuple = (0, 0)  # (collectives, halves) in F (rpd.model.tensor.collectives)
    tp_bwd: tuple = (0, 0)
    tp_overlap: bool = False  # TP collectives hidden under the layer's compute where they fit
    flash: bool = False  # the attention core a fused kernel (rpd.model.compute times it so)
    cp: int = 1  # context-parallel ranks (ring attention)
    cp_bytes: float = 0.0  # bytes of K and V one ring step sends in F (B sends them and their gradients)

    def __post_init__(self):
        check_int(f"{self.name}.params", self.params, minimum=0)
        for f in ("act_bytes", "act_w_bytes", "out_bytes", "tied_params"):
            check_int(f"{self.name}.{f}", getattr(self, f), minimum=0)
        for f in ("flops_fwd", "flops_i", "flops_w", "flops_recompute"):
            check_real(f"{self.name}.{f}", getattr(self, f), allow_zero=True)
        for f in ("time_fwd", "time_i", "time_w"):
            if getattr(self, f) is not None:
                check_real(f"{self.name}.{f}", getattr(self, f), allow_zero=True)
        if self.act_w_bytes > self.act_bytes:
            raise ValueError(f"{self.name}.act_w_bytes must be <= act_bytes, got {self.act_w_bytes} > {self.act_bytes}")
        check_choice(f"{self.name}.kind", self.kind, ("embedding", "block", "head"))

    @property
    def model_flops(self) -> float:
        """Forward plus backward FLOPs without recomputation (what MFU counts)."""
        return self.flops_fwd + self.flops_i + self.flops_w


@dataclasses.dataclass(frozen=True)
class Model:
    """Layers in pipeline order, and the tokens one microbatch carries."""

    name: str
    layers: tuple[Layer, ...]
    tokens_per_microbatch: int

    def __post_init__(self):
        if not self.layers:
            raise ValueError("model.layers must not be empty")
        check_int("model.tokens_per_microbatch", self.tokens_per_microbatch)
        names = [x.name for x in self.layers]
        if len(set(names)) != len(names):
            raise ValueError(f"model.layers have repeated names: {names}")
        for x in self.layers:
            if x.tied_to is not None and x.tied_to not in names:
                raise ValueError(f"{x.name}.tied_to names no layer: {x.tied_to!r}")

    @property
    def params(self) -> int:
        return sum(x.params for x in self.layers)

    @property
    def model_flops(self) -> float:
        """Model FLOPs per microbatch (forward + backward, no recomputation)."""
        return sum(x.model_flops for x in self.layers)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "params": self.params,
            "layers": [
                {
                    "name": x.name,
                    "params": x.params + x.tied_params,
                    "flops_fwd": x.flops_fwd,
                    "act_bytes": x.act_bytes,
                    "out_bytes": x.out_bytes,
                }
                for x in self.layers
            ],
        }


def _norm_params(cfg: GPTConfig) -> int:
    return 2 * cfg.d_model if cfg.norm == "layernorm" else cfg.d_model


def block_layer(cfg: GPTConfig, i: int, recompute: str = "none", par: Parallel = NO_TP) -> Layer:
    """Transformer layer i on one of ``par.TP`` × ``par.CP`` ranks (module docstring and
    :mod:`rpd.model.tensor` for the formulas; grouped-query attention's K and V are n_kv·h/a wide,
    context parallelism holds s/CP of the sequence and attends it to all s keys)."""
    check_choice("recompute", recompute, RECOMPUTE)
    h, a, s, b = cfg.d_model, cfg.n_head, cfg.seq, cfg.micro_batch
    t, sp, c, kvh = par.TP, par.SP, par.CP, cfg.kv_heads
    if t > 1 and (a % t or h % t or kvh % t):
        raise ValueError(f"pipeline.TP={t} must divide model.n_head={a}, model.d_model={h} and model.n_kv_heads={kvh}")
    if c > 1 and s % (2 * c):
        raise ValueError(f"pipeline.CP={c}: model.seq={s} must split into 2·CP equal chunks (causal load balancing)")
    f = 4 * h if cfg.ffn is None else cfg.ffn
    k = 3 if cfg.gated else 2  # MLP matrices
    d = h // a
    kvd = kvh * d  # width of K and of V
    matmul = 2 * h * h + 2 * h * kvd + k * h * f
    split_biases = (h + 2 * kvd + (k - 1) * f) if cfg.bias else 0  # QKV and the first MLP matrix: by columns
    whole_biases = 2 * h if cfg.bias else 0  # after the row-parallel matrices: on every rank
    params = matmul + split_biases + whole_biases + 2 * _norm_params(cfg)
    if t > 1:
        params = -(-(matmul + split_biases) // t) + whole_biases + 2 * _norm_params(cfg)
    sl = s // c  # tokens of the sequence on this rank
    fwd = 2 * b * sl * matmul + 4 * b * sl * s * h  # its queries against all s keys
    sbh = sl * b * h
    w_inputs = 2 * sl * b * (3 * h + f) + 2 * sl * b * (3 * h + 2 * kvd + (k - 1) * f)
    if t == 1 and c == 1 and kvh == a and not sp and par.attention == "standard":  # the first plan's arithmetic
        mlp_act = 3 * sbh + (6 if cfg.gated else 4) * s * b * f
        act = 11 * sbh + 5 * a * s * s * b + mlp_act + 4 * sbh
        act_w = w_inputs
        if recompute == "selective":
            act -= 5 * a * s * s * b
        elif recompute == "full":  # only the input is kept; W recomputes from it, so all of it waits for W
            act = act_w = 2 * sbh
    else:
        kv = kvh / a
        act = round(tensor.activation_bytes(h, a, s, b, f, cfg.gated, t, sp, recompute, par.attention, kv, c))
        act_w = act if recompute == "full" else round(w_inputs / t)
    extra = 0.0
    if recompute == "selective":  # Megatron checkpoints the core attention, whichever kernel runs it
        extra = 4.0 * b * sl * s * h / t
    elif recompute == "full":
        extra = float(fwd) / t
    gemms = (
        (sl * b, (h + 2 * kvd) // t, h, 1, True),
        (sl, s, d, b * a // t, False),  # scores Q K^T, per head (all s keys)
        (sl, d, s, b * a // t, False),  # scores x V
        (sl * b, h, h // t, 1, True),
        (sl * b, (k - 1) * f // t, h, 1, True),
        (sl * b, h, f // t, 1, True),
    )
    fwd_c, bwd_c = tensor.collectives(sp, recompute) if t > 1 else ((0, 0), (0, 0))
    moved = kernels.block_bytes(h, a, s, b, f, cfg.gated, t, sp, par.attention, kvh / a, c, cfg.positions == "rope")
    return Layer(
        name=f"layer{i}",
        params=params,
        flops_fwd=float(fwd) / t,
        flops_i=float(fwd + 4 * b * sl * s * h) / t,
        flops_w=float(2 * b * sl * matmul) / t,
        act_bytes=act,
        act_w_bytes=min(act_w, act),
        out_bytes=2 * sbh // t,
        kind="block",
        flops_recompute=extra,
        gemms=gemms,
        traffic=moved[0],  # counted kernel by kernel (rpd.model.kernels.block_bytes)
        traffic_i=moved[1],
        traffic_core=moved[2],
        recompute=recompute,
        tp=t,
        tp_bytes=2.0 * sbh,
        tp_fwd=fwd_c,
        tp_bwd=bwd_c,
        tp_overlap=par.tp_overlap,
        flash=par.attention == "flash",
        cp=c,
        cp_bytes=2.0 * 2 * sl * b * kvd / t if c > 1 else 0.0,
    )


def gpt_model(cfg: GPTConfig, recompute: str = "none", name: str = "gpt", par: Parallel = NO_TP) -> Model:
    """Embedding, ``n_layer`` transformer layers, output layer (module docstring), each on one of
    ``par.TP`` ranks: the vocabulary split in TP too (one all-reduce of the embedding's output in
    F, one of the head's input gradient in B)."""
    check_choice("recompute", recompute, RECOMPUTE)
    h, b, V = cfg.d_model, cfg.micro_batch, cfg.vocab
    t, sp = par.TP, par.SP
    s = cfg.seq // par.CP  # the rank's share of the sequence (context parallelism)
    q = t if sp else 1  # what sequence parallelism splits
    sbh = s * b * h
    vt = -(-V // t)  # vocabulary rows per rank
    coll = (1, 1) if sp else (1, 2)
    emb = Layer(
        name="embedding",
        params=vt * h + (cfg.seq * h if cfg.positions == "learned" else 0),
        act_bytes=sbh // q,
        out_bytes=2 * sbh // t,
        kind="embedding",
        # the row gather (read, write), the learned positions' add (read two, write one) and
        # dropout (read, write, a 1-byte mask); I: dropout's backward and the gradient rows
        # accumulated in fp32 (read dy, read and write 4 B) -- rpd.model.kernels
        traffic=(9.0 + (6.0 if cfg.positions == "learned" else 0.0)) * sbh / q,
        traffic_i=15.0 * sbh / q,
        tp=t,
        tp_bytes=2.0 * sbh,
        tp_fwd=coll if t > 1 else (0, 0),
        tp_overlap=par.tp_overlap,
    )
    head_flops = 2.0 * b * s * h * vt
    head = Layer(
        name="lm_head",
        params=_norm_params(cfg) + (0 if cfg.tied else h * vt),
        flops_fwd=head_flops,
        flops_i=head_flops,
        flops_w=head_flops,
        act_bytes=4 * sbh // q + 4 * s * b * vt,
        act_w_bytes=2 * sbh // q + 2 * s * b * vt,
        kind="head",
        tied_params=h * vt if cfg.tied else 0,
        tied_to="embedding" if cfg.tied else None,
        gemms=((s * b, vt, h, 1, True),),
        # the final norm (4 B per value, 6 in I) and the fp32 cross entropy's bytes per logit
        traffic=4.0 * sbh / q + kernels.LOGIT_BYTES[0] * s * b * vt,
        traffic_i=6.0 * sbh / q + kernels.LOGIT_BYTES[1] * s * b * vt,
        tp=t,
        tp_bytes=2.0 * sbh,
        tp_fwd=(1, 1) if t > 1 and sp else (0, 0),
        tp_bwd=coll if t > 1 else (0, 0),
        tp_overlap=par.tp_overlap,
    )
    blocks = tuple(block_layer(cfg, i, recompute, par) for i in range(cfg.n_layer))
    return Model(name=name, layers=(emb, *blocks, head), tokens_per_microbatch=cfg.seq * b)


def preset(name: str, micro_batch: int = 1, recompute: str = "none") -> Model:
    """A model of :data:`PRESETS` at micro-batch ``micro_batch``."""
    check_choice("model", name, PRESETS)
    cfg = dataclasses.replace(PRESETS[name], micro_batch=check_int("micro_batch", micro_batch))
    return gpt_model(cfg, recompute, name=name)


def nanochat_model(
    S: int,
    vocab_size: int,
    seq_len: int = 32,
    width: int = 64,
    heads: int = 4,
    batch_size: int = 16,
    recompute: str = "none",
) -> Model:
    """rpd's NanoChat (:mod:`rpd.objectives.nanochat`): embedding stage, S - 2 pre-LN blocks
    (12W² + 13W), untied bias-free head with its LayerNorm (W·V + 2W); one layer per stage."""
    S = check_int("S", S, minimum=3)
    cfg = GPTConfig(
        n_layer=S - 2, d_model=width, n_head=heads, seq=seq_len, vocab=vocab_size, micro_batch=batch_size, tied=False
    )
    return gpt_model(cfg, recompute, name="nanochat")


def mlp_model(S: int, width: int, batch_size: int, bytes_per_value: int = 8) -> Model:
    """rpd's MLP chain (:mod:`rpd.objectives.mlp`): S layers of w² + w values, float64; F, I, W
    are each one B×w by w×w matmul (2·B·w² FLOPs); a layer keeps its input and tanh output."""
    S, w, B = check_int("S", S), check_int("width", width), check_int("batch_size", batch_size)
    v = check_int("bytes_per_value", bytes_per_value)
    mm = 2.0 * B * w * w
    layers = tuple(
        Layer(
            name=f"layer{i}",
            params=w * w + w,
            flops_fwd=mm,
            flops_i=mm,
            flops_w=mm,
            act_bytes=2 * B * w * v,
            act_w_bytes=B * w * v,
            out_bytes=B * w * v,
        )
        for i in range(S)
    )
    return Model(name="mlp_chain", layers=layers, tokens_per_microbatch=B)


def model_flops_per_microbatch(cfg: GPTConfig) -> float:
    """Korthikanti et al. App. A: 72·b·L·s·h²·(1 + s/(6h) + V/(12·h·L)) for f = 4h, ungated (the
    check of :meth:`Model.model_flops`)."""
    b, L, s, h, V = cfg.micro_batch, cfg.n_layer, cfg.seq, cfg.d_model, cfg.vocab
    return 72.0 * b * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L))
