"""Small character-level language model ("NanoChat") split into S pipeline stages (docs/science.md#objectives).

The model is an explicit stage chain on one (inputs, targets) batch of token ids [B, T]:

    a_0     = inputs                                  int32 [B, T]
    a_1     = stage_0(p_0, a_0)   token + position embedding          [B, T, W]
    a_{s+1} = stage_s(p_s, a_s)   pre-LN transformer block, s = 1..S-2 [B, T, W]
    a_S     = stage_{S-1}(p_{S-1}, a_{S-1})   LayerNorm + bias-free head, logits [B, T, V]
    f       = mean cross-entropy(a_S, targets)

Each p_s is a pytree (a dict of float32 arrays). As an :class:`Objective`, the flat vector x is
the concatenation of the ravelled stage pytrees (``jax.flatten_util.ravel_pytree`` per stage),
so block s of the stale core is exactly stage s's parameters. Parameters are float32 even
though ``rpd`` turns on x64 for the linear models.

The objective also exposes this chain (``Objective.chain``: stage s applies the unravelled
block x_s), so PipeMare's two-point gradient (``rpd.objectives.chain``) runs on it: with
forward and backward weights equal it is ``value_and_grad``; unlike the linear chains, the
backward weights change the gradient (attention, LayerNorm and GELU Jacobians depend on them).

Initialisation (PyTorch's defaults, as in the authors' code), stage s drawn on the host from
``numpy.random.default_rng((seed, s))``: embeddings N(0, 1); every linear weight and bias
U(−1/√fan_in, 1/√fan_in) in the order weight, bias; LayerNorm scale 1, bias 0.

Matrix products run at :data:`MATMUL_PRECISION` = ``HIGHEST``: full float32 on every device. XLA's
default lets a GPU multiply float32 in TF32 (10-bit mantissa), which moves gradients by ~1e-3
relative; with HIGHEST a GPU and a CPU agree to float32 rounding (docs/running.md, "GPU").
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from rpd.objectives import corpus
from rpd.objectives.base import BlockLayout, Objective, on_device
from rpd.objectives.chain import Chain
from rpd.runtime.programs import named_builder
from rpd.validation import check_int

DTYPE = jnp.float32
LN_EPS = 1e-5
MATMUL_PRECISION = jax.lax.Precision.HIGHEST  # float32 products in float32, not TF32 (module doc)


@dataclasses.dataclass(frozen=True)
class NanochatParams:
    """The config of :func:`nanochat` (``objective=nanochat``: its schema; these defaults are the
    builder's too, written here only, docs/architecture.md#adding-an-objective); E5's setting."""

    batch_size: int = 16  # B sequences per batch
    seq_len: int = 32  # T characters per sequence
    width: int = 64  # W, the model width
    heads: int = 4  # attention heads; divide W
    text_path: str | None = None  # any UTF-8 text; null: the cached corpus (python -m rpd.objectives.corpus fetch)
    heldout_frac: float = 0.1  # the last fraction of the text, held out
    heldout_batches: int = 8  # held-out batches the loss averages
    seed: int = 0  # the initialisation's seed


# ---------------------------------------------------------------- initialisation


def _linear_init(rng, fan_in: int, fan_out: int, bias: bool = True) -> dict:
    bound = 1.0 / math.sqrt(fan_in)
    p = {"w": rng.uniform(-bound, bound, (fan_in, fan_out)).astype(np.float32)}
    if bias:
        p["b"] = rng.uniform(-bound, bound, (fan_out,)).astype(np.float32)
    return p


def _ln_init(width: int) -> dict:
    return {"scale": np.ones((width,), np.float32), "bias": np.zeros((width,), np.float32)}


def init_stage(rng: np.random.Generator, s: int, S: int, vocab_size: int, seq_len: int, width: int) -> dict:
    """Parameters of stage s (float32 numpy arrays; distributions in the module docstring)."""
    if s == 0:
        return {
            "tok": rng.standard_normal((vocab_size, width), np.float32),
            "pos": rng.standard_normal((seq_len, width), np.float32),
        }
    if s == S - 1:
        return {"ln": _ln_init(width), "head": _linear_init(rng, width, vocab_size, bias=False)}
    return {
        "ln1": _ln_init(width),
        "qkv": _linear_init(rng, width, 3 * width),
        "proj": _linear_init(rng, width, width),
        "ln2": _ln_init(width),
        "fc": _linear_init(rng, width, 4 * width),
        "out": _linear_init(rng, 4 * width, width),
    }


def init_params(seed: int, S: int, vocab_size: int, seq_len: int, width: int) -> list[dict]:
    """[p_0, …, p_{S-1}]; stage s draws from ``numpy.random.default_rng((seed, s))``."""
    return [init_stage(np.random.default_rng((seed, s)), s, S, vocab_size, seq_len, width) for s in range(S)]


# ---------------------------------------------------------------- stages


def _linear(p: dict, a: jax.Array) -> jax.Array:
    y = jnp.matmul(a, p["w"], precision=MATMUL_PRECISION)
    return y + p["b"][None, None, :] if "b" in p else y


def _layer_norm(p: dict, a: jax.Array) -> jax.Array:
    mu = a.mean(-1, keepdims=True)
    var = jnp.square(a - mu).mean(-1, keepdims=True)
    return (a - mu) * jax.lax.rsqrt(var + LN_EPS) * p["scale"][None, None, :] + p["bias"][None, None, :]


def embed(p: dict, ids: jax.Array) -> jax.Array:
    """Stage 0: ids int [B, T] -> tok[ids] + pos[:T], [B, T, W]."""
    return p["tok"][ids] + p["pos"][None, : ids.shape[1], :]


def _causal_attention(p: dict, h: jax.Array, heads: int) -> jax.Array:
    B, T, W = h.shape
    q, k, v = (u.reshape(B, T, heads, W // heads) for u in jnp.split(_linear(p["qkv"], h), 3, axis=-1))
    scores_BHTT = jnp.einsum("bthd,bshd->bhts", q, k, precision=MATMUL_PRECISION) / math.sqrt(W // heads)
    causal_TT = jnp.tril(jnp.ones((T, T), bool))
    scores_BHTT = jnp.where(causal_TT[None, None], scores_BHTT, -jnp.inf)
    y = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores_BHTT, axis=-1), v, precision=MATMUL_PRECISION)
    return _linear(p["proj"], y.reshape(B, T, W))


def block(p: dict, a: jax.Array, heads: int) -> jax.Array:
    """Stages 1..S-2: a + attn(LN(a)), then + MLP(LN(·)) with a 4W exact-GELU hidden layer."""
    a = a + _causal_attention(p, _layer_norm(p["ln1"], a), heads)
    return a + _linear(p["out"], jax.nn.gelu(_linear(p["fc"], _layer_norm(p["ln2"], a)), approximate=False))


def head(p: dict, a: jax.Array) -> jax.Array:
    """Stage S-1: logits LN(a) @ W_head, [B, T, V]."""
    return _linear(p["head"], _layer_norm(p["ln"], a))


def stage_apply(s: int, S: int, heads: int):
    """stage_s as a function (p_s, a_s) -> a_{s+1}."""
    if s == 0:
        return embed
    if s == S - 1:
        return head
    return lambda p, a: block(p, a, heads)


def cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Mean over all B·T positions of −log softmax(logits)[target]."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1).mean()


def chain_loss(params: list[dict], inputs: jax.Array, targets: jax.Array, heads: int) -> jax.Array:
    """f = loss(a_S, targets) with a_0 = inputs, a_{s+1} = stage_s(p_s, a_s)."""
    S = len(params)
    a = inputs
    for s, p in enumerate(params):
        a = stage_apply(s, S, heads)(p, a)
    return cross_entropy(a, targets)


def scanned_chain_loss(
    p_first: dict, p_blocks: dict, p_last: dict, inputs: jax.Array, targets: jax.Array, heads: int
) -> jax.Array:
    """:func:`chain_loss` with the S−2 block stages as one ``lax.scan`` over their stacked
    parameters (every leaf has a leading [S−2] axis). Same function; on CPU XLA runs the
    scanned backward ~3x faster than the unrolled chain, and compiles in time independent of S."""
    a = embed(p_first, inputs)
    a, _ = jax.lax.scan(_scan_body(heads), a, p_blocks)
    return cross_entropy(head(p_last, a), targets)


@functools.cache
def _scan_body(heads: int):
    """The scan body of :func:`scanned_chain_loss`, one function object per ``heads``: JAX then
    reuses its traced body, so an eager (un-jitted) loss does not compile its scan again."""
    return lambda a, p: (block(p, a, heads), None)


# ---------------------------------------------------------------- flat vector <-> stage pytrees


def _ravel_host(p: dict) -> np.ndarray:
    """Stage p as ``ravel_pytree(p)[0]`` lays it out (its leaves in tree order, each raveled),
    concatenated by NumPy on the host: the same numbers, no XLA program per leaf shape."""
    return np.concatenate([np.ravel(leaf) for leaf in jax.tree.leaves(p)])


def _unraveler(p: dict):
    """``ravel_pytree(p)[1]``, taken from an abstract trace: the unravel function depends on the
    leaves' shapes and dtypes only, so nothing is computed or compiled."""
    out = []
    jax.eval_shape(lambda q: out.append(ravel_pytree(q)[1]), p)
    return out[0]


@functools.cache
def _unravelers(S: int, vocab_size: int, seq_len: int, width: int):
    return tuple(_unraveler(p) for p in init_params(0, S, vocab_size, seq_len, width))


def _unflatten(x: jax.Array, layout: BlockLayout, unravelers) -> list[dict]:
    return [unravel(x[off : off + size]) for unravel, off, size in zip(unravelers, layout.offsets, layout.sizes)]


def _unflatten_stacked(x: jax.Array, layout: BlockLayout, unravelers) -> tuple[dict, dict, dict]:
    """(p_0, blocks stacked on a leading [S−2] axis, p_{S−1}); blocks 1..S−2 are contiguous in x."""
    S, off, size = layout.S, layout.offsets, layout.sizes
    blocks_RxP = x[off[1] : off[S - 1]].reshape(S - 2, size[1])
    return (unravelers[0](x[: size[0]]), jax.vmap(unravelers[1])(blocks_RxP), unravelers[S - 1](x[off[S - 1] :]))


def stage_params(objective: Objective, x: jax.Array) -> list[dict]:
    """The stage pytrees [p_0, …, p_{S-1}] held in a flat vector x [D] of a nanochat objective."""
    m = objective.meta
    return _unflatten(x, objective.layout, _unravelers(m["S"], m["vocab_size"], m["seq_len"], m["width"]))


def stage_sizes(S: int, vocab_size: int, seq_len: int, width: int) -> tuple[int, ...]:
    """Parameter counts per stage: (V+T)·W, then 12W² + 13W per block, then W·V + 2W."""
    blk = 12 * width * width + 13 * width
    return ((vocab_size + seq_len) * width,) + (blk,) * (S - 2) + (width * vocab_size + 2 * width,)


# ---------------------------------------------------------------- the objective


def nanochat(
    S: int,
    text: str | None = None,
    path=None,
    *,
    batch_size: int = NanochatParams.batch_size,
    seq_len: int = NanochatParams.seq_len,
    width: int = NanochatParams.width,
    heads: int = NanochatParams.heads,
    seed: int = NanochatParams.seed,
    heldout_frac: float = NanochatParams.heldout_frac,
    heldout_batches: int = NanochatParams.heldout_batches,
) -> Objective:
    """The small LM as an S-block :class:`Objective` on a character corpus.

    ``text`` (a string) or ``path`` (any UTF-8 text file); neither means the fetched default
    corpus (``python -m rpd.objectives.corpus fetch``). The last ``heldout_frac`` of the text is held out.

    * ``value_and_grad(data, x, b)``: loss and flat gradient [D] on training batch b mod n_batches
      (b may be traced); ``data["train"]`` is int32 [n_batches, B, T + 1] (see ``corpus.windows``).
    * ``loss(data, x)``: mean held-out loss over ``heldout_batches`` fixed batches spread evenly over
      the held-out text (all of them if there are fewer).
    * ``x0``: float32 [D] from :func:`init_params` with ``seed``.
    """
    S = check_int("S", S)
    if S < 3:
        raise ValueError(f"S must be >= 3 (embedding, at least one transformer block, head), got {S}")
    B = check_int("batch_size", batch_size)
    T = check_int("seq_len", seq_len)
    W = check_int("width", width)
    heads = check_int("heads", heads)
    if W % heads:
        raise ValueError(f"width ({W}) must be divisible by heads ({heads})")
    seed = check_int("seed", seed, minimum=0)
    heldout_batches = check_int("heldout_batches", heldout_batches)
    if text is not None and path is not None:
        raise ValueError("give either text or path, not both")
    source = "text" if text is not None else str(path) if path is not None else str(corpus.default_path())
    if text is None:
        text = corpus.load_text(path)
    elif not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")

    vocab = corpus.Vocab.from_text(text)
    train_tokens, heldout_tokens = corpus.split(vocab.encode(text), heldout_frac)
    try:
        train_NxBxT1 = corpus.windows(train_tokens, B, T)
        heldout_all = corpus.windows(heldout_tokens, B, T)
    except ValueError as err:
        raise ValueError(f"text of {len(text)} characters with heldout_frac={heldout_frac}: {err}") from None
    pick = np.unique(np.linspace(0, len(heldout_all) - 1, min(heldout_batches, len(heldout_all))).round().astype(int))
    heldout_MxT1 = heldout_all[pick].reshape(-1, T + 1)  # equal-size batches: one big batch has the same mean

    params0 = init_params(seed, S, vocab.size, T, W)
    flats = [_ravel_host(p) for p in params0]
    layout = BlockLayout(tuple(int(f.size) for f in flats))
    assert layout.sizes == stage_sizes(S, vocab.size, T, W), (layout.sizes, stage_sizes(S, vocab.size, T, W))
    x0 = on_device(np.concatenate(flats), DTYPE)
    value_and_grad, heldout_loss, chain = _functions(S, vocab.size, T, W, heads)

    data = {
        "train": on_device(train_NxBxT1),  # int32 [n_batches, B, T + 1]
        "heldout": on_device(heldout_MxT1),
    }  # int32 [n_heldout_batches · B, T + 1]
    n_batches = int(train_NxBxT1.shape[0])

    meta = dict(
        S=S,
        vocab_size=vocab.size,
        vocab=vocab.chars,
        batch_size=B,
        seq_len=T,
        width=W,
        heads=heads,
        seed=seed,
        heldout_frac=float(heldout_frac),
        n_chars=len(text),
        n_train_tokens=len(train_tokens),
        n_heldout_tokens=len(heldout_tokens),
        n_heldout_batches=len(pick),
        stage_sizes=layout.sizes,
        D=layout.D,
        source=source,
    )
    return Objective(
        name="nanochat",
        layout=layout,
        n_batches=n_batches,
        x0=x0,
        data=data,
        value_and_grad=value_and_grad,
        loss=heldout_loss,
        batch_size=B,
        meta=meta,
        chain=chain,
    )


@named_builder
def _functions(S: int, vocab_size: int, T: int, W: int, heads: int):
    """(value_and_grad, held-out loss, chain) of the LM, memoized on its static sizes: equal
    sizes give the same function objects, so rebuilt objectives (another seed, another text
    with the same vocabulary size and shapes) reuse compiled programs. The batch
    index wraps modulo the number of training batches, read off ``data["train"]``'s shape."""
    unravelers = _unravelers(S, vocab_size, T, W)
    layout = BlockLayout(stage_sizes(S, vocab_size, T, W))

    def flat_loss(x, w_BxT1):
        p_first, p_blocks, p_last = _unflatten_stacked(x, layout, unravelers)
        return scanned_chain_loss(p_first, p_blocks, p_last, w_BxT1[:, :-1], w_BxT1[:, 1:], heads)

    def batch(data, b):
        return jax.lax.dynamic_index_in_dim(data["train"], jnp.asarray(b) % data["train"].shape[0], keepdims=False)

    def value_and_grad(data, x, b):
        return jax.value_and_grad(flat_loss)(x, batch(data, b))

    def heldout_loss(data, x):
        return flat_loss(x, data["heldout"])

    def inputs(data, b):
        w_BxT1 = batch(data, b)
        return w_BxT1[:, :-1], w_BxT1[:, 1:]

    def stage(data, s, x_s, a):
        return stage_apply(s, S, heads)(unravelers[s](x_s), a)

    chain = Chain(inputs=inputs, stage=stage, head=lambda data, logits, targets: cross_entropy(logits, targets))
    return value_and_grad, heldout_loss, chain
