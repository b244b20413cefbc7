import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

from rpd.objectives import corpus
from rpd.objectives import nanochat as nc
from rpd.runtime import compile_cache

TEXT = "".join(
    f"{w} "
    for w in np.random.default_rng(0).choice(
        ["to", "be", "or", "not", "that", "is", "the", "question", "whether", "tis", "nobler"], 400
    )
)
SMALL = dict(batch_size=4, seq_len=16, width=32, heads=2, heldout_frac=0.2, heldout_batches=3)


def reference_loss(params, inputs, targets, heads):
    """The whole model as one function, written independently of the stage code."""

    def ln(p, a):
        return (a - a.mean(-1, keepdims=True)) / jnp.sqrt(a.var(-1, keepdims=True) + 1e-5) * p["scale"] + p["bias"]

    def dense(p, a):
        return jnp.einsum("btw,wv->btv", a, p["w"]) + p.get("b", 0.0)

    jax.config.update("jax_numpy_rank_promotion", "allow")  # plain broadcasting in the reference only
    try:
        tok, pos = params[0]["tok"], params[0]["pos"]
        a = jnp.take(tok, inputs, axis=0) + pos[: inputs.shape[1]]
        for p in params[1:-1]:
            B, T, W = a.shape
            q, k, v = jnp.split(dense(p["qkv"], ln(p["ln1"], a)), 3, axis=-1)
            # (jax.nn.dot_product_attention is only float32-accurate, even on float64 inputs)
            q, k, v = (u.reshape(B, T, heads, W // heads).transpose(0, 2, 1, 3) for u in (q, k, v))
            future = jnp.triu(jnp.ones((T, T)), k=1) * -1e30
            att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(W // heads) + future, axis=-1) @ v
            att = att.transpose(0, 2, 1, 3).reshape(B, T, W)
            a = a + dense(p["proj"], att)
            hid = dense(p["fc"], ln(p["ln2"], a))
            a = a + dense(p["out"], 0.5 * hid * (1 + jax.scipy.special.erf(hid / math.sqrt(2))))
        logits = dense(params[-1]["head"], ln(params[-1]["ln"], a))
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
    finally:
        jax.config.update("jax_numpy_rank_promotion", "raise")


def _vg(f, argnums=0):
    return jax.jit(jax.value_and_grad(f, argnums=argnums), static_argnums=3 if argnums == 0 else 5)


def _flat(params):
    return jnp.concatenate([ravel_pytree(p)[0] for p in params])


def _train_windows(S, **kw):
    """Training batches computed here from the corpus functions, as the objective should."""
    kw = {**SMALL, **kw}
    vocab = corpus.Vocab.from_text(TEXT)
    train, _ = corpus.split(vocab.encode(TEXT), kw["heldout_frac"])
    return corpus.windows(train, kw["batch_size"], kw["seq_len"])


@pytest.mark.slow
def test_stage_chain_and_objective_equal_the_unsplit_model_loss_and_gradient():
    S, b = 4, 2
    obj = nc.nanochat(S, text=TEXT, **SMALL)
    w = _train_windows(S)[b]
    inputs, targets, heads = w[:, :-1], w[:, 1:], SMALL["heads"]
    params64 = jax.tree.map(lambda a: a.astype(jnp.float64), nc.stage_params(obj, obj.x0))
    ref, ref_grad = _vg(reference_loss)(params64, inputs, targets, heads)
    ref_grad = _flat(ref_grad)

    # in float64 the explicit chain and its scanned form are the same function as the reference
    chain, chain_grad = _vg(nc.chain_loss)(params64, inputs, targets, heads)
    first, blocks, last = params64[0], jax.tree.map(lambda *a: jnp.stack(a), *params64[1:-1]), params64[-1]
    scan, scan_grad = _vg(nc.scanned_chain_loss, argnums=(0, 1, 2))(first, blocks, last, inputs, targets, heads)
    scan_grad = [scan_grad[0], *(jax.tree.map(lambda a: a[i], scan_grad[1]) for i in range(S - 2)), scan_grad[2]]
    for loss, grad in [(chain, _flat(chain_grad)), (scan, _flat(scan_grad))]:
        np.testing.assert_allclose(loss, ref, rtol=1e-12)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-14)

    # the float32 objective on batch b: flat x, stage blocks, batch gather (traced and cyclic)
    vg = jax.jit(obj.value_and_grad)
    loss, g = vg(obj.data, obj.x0, jnp.int32(b))
    assert loss.dtype == jnp.float32 and g.dtype == jnp.float32 and g.shape == (obj.D,)
    np.testing.assert_allclose(loss, ref, rtol=1e-5)
    np.testing.assert_allclose(g, ref_grad, rtol=1e-3, atol=1e-5 * float(jnp.abs(ref_grad).max()))
    loss_wrapped, g_wrapped = vg(obj.data, obj.x0, jnp.int32(b + obj.n_batches))
    np.testing.assert_array_equal(loss_wrapped, loss)
    np.testing.assert_array_equal(g_wrapped, g)


def test_every_matrix_product_runs_at_full_float32_precision():
    """The LM sets its matmul precision (nc.MATMUL_PRECISION = HIGHEST): no dot of its loss and
    gradient may run at XLA's default, which is TF32 on a GPU (the rtol above would not hold)."""
    obj = nc.nanochat(4, text=TEXT, **SMALL)
    hlo = jax.jit(obj.value_and_grad).lower(obj.data, obj.x0, jnp.int32(0)).as_text()
    dots = [line for line in hlo.splitlines() if "dot_general" in line]
    assert nc.MATMUL_PRECISION == jax.lax.Precision.HIGHEST and len(dots) >= 6
    assert all("precision = [HIGHEST, HIGHEST]" in line for line in dots), [d for d in dots if "HIGHEST" not in d]


@pytest.mark.slow
@pytest.mark.parametrize("S", [3, 4, 7])
def test_shapes_layout_and_stage_params_roundtrip(S):
    obj = nc.nanochat(S, text=TEXT, **SMALL)
    V, T, W = obj.meta["vocab_size"], SMALL["seq_len"], SMALL["width"]
    assert obj.S == S and obj.layout.sizes == nc.stage_sizes(S, V, T, W)
    assert obj.layout.sizes[1:-1] == (12 * W * W + 13 * W,) * (S - 2)
    assert obj.x0.shape == (obj.D,) and obj.x0.dtype == jnp.float32
    params = nc.stage_params(obj, obj.x0)
    assert len(params) == S
    for s, p in enumerate(params):
        np.testing.assert_array_equal(ravel_pytree(p)[0], obj.block(obj.x0, s))
    a = jnp.asarray(_train_windows(S)[0][:, :-1])
    assert a.shape == (SMALL["batch_size"], T)
    for s, p in enumerate(params):
        a = jax.eval_shape(nc.stage_apply(s, S, SMALL["heads"]), p, a)
        assert a.shape == (SMALL["batch_size"], T, W if s < S - 1 else V) and a.dtype == jnp.float32
    heldout = jax.jit(obj.loss)(obj.data, obj.x0)
    assert heldout.shape == () and heldout.dtype == jnp.float32 and np.isfinite(heldout)
    assert obj.data["heldout"].shape == (SMALL["heldout_batches"] * SMALL["batch_size"], T + 1)


def test_default_sizes_and_reproducible_init():
    assert sum(nc.stage_sizes(16, 84, 32, 64)) == 712_704  # S = 16 at the defaults on Shakespeare
    counted = [ravel_pytree(p)[0].size for p in nc.init_params(0, 16, 84, 32, 64)]
    assert tuple(counted) == nc.stage_sizes(16, 84, 32, 64)
    a = nc.nanochat(3, text=TEXT, seed=1, **SMALL).x0
    np.testing.assert_array_equal(a, nc.nanochat(3, text=TEXT, seed=1, **SMALL).x0)
    assert not np.array_equal(a, nc.nanochat(3, text=TEXT, seed=2, **SMALL).x0)


def test_building_the_objective_compiles_no_program():
    """x0 and the stage unravelers come from the host and an abstract trace (docs/running.md#compile-time):
    the same numbers as ravel_pytree's, no XLA program (sizes no other test uses, so no eager
    op is already compiled)."""
    kw = dict(SMALL, seq_len=7, width=12, heads=3)
    with compile_cache.count_programs() as n:
        obj = nc.nanochat(4, text=TEXT, seed=3, **kw)
    assert n["compiled"] == 0 and n["from_cache"] == 0
    params = nc.stage_params(obj, obj.x0)
    init = nc.init_params(3, 4, obj.meta["vocab_size"], 7, 12)
    assert obj.x0.dtype == jnp.float32
    np.testing.assert_array_equal(obj.x0, _flat(init))
    for p, q in zip(params, init):
        assert jax.tree.structure(p) == jax.tree.structure(q)
        for u, v in zip(jax.tree.leaves(p), jax.tree.leaves(q)):
            np.testing.assert_array_equal(u, v)


def test_text_file_path_gives_the_same_objective(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(TEXT)
    a, b = nc.nanochat(3, text=TEXT, **SMALL), nc.nanochat(3, path=path, **SMALL)
    np.testing.assert_array_equal(a.data["train"], b.data["train"])
    np.testing.assert_array_equal(a.x0, b.x0)
    assert b.meta["source"] == str(path) and a.meta["vocab"] == "".join(sorted(set(TEXT)))


@pytest.mark.parametrize(
    "kw, err, match",
    [
        (dict(S=2), ValueError, "S must be >= 3"),
        (dict(S=0), ValueError, "S must be >= 1"),
        (dict(S=4.0), TypeError, "S must be an integer"),
        (dict(batch_size=0), ValueError, "batch_size"),
        (dict(seq_len=-1), ValueError, "seq_len"),
        (dict(width=0), ValueError, "width"),
        (dict(heads=0), ValueError, "heads"),
        (dict(width=30, heads=4), ValueError, r"width \(30\) must be divisible by heads \(4\)"),
        (dict(seed=-1), ValueError, "seed"),
        (dict(heldout_batches=0), ValueError, "heldout_batches"),
        (dict(heldout_frac=1.0), ValueError, "heldout_frac"),
        (dict(seq_len=4000), ValueError, "too short"),
        (dict(text=TEXT[:40]), ValueError, "text of 40 characters"),
        (dict(path="x.txt"), ValueError, "either text or path"),
        (dict(text=b"bytes"), TypeError, "text must be a str"),
    ],
)
def test_bad_sizes_raise_clear_errors(kw, err, match):
    kw = {"S": 3, "text": TEXT, **SMALL, **kw}
    with pytest.raises(err, match=match):
        nc.nanochat(**kw)


def test_missing_default_corpus_says_how_to_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv(corpus.CACHE_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="rpd.objectives.corpus fetch"):
        nc.nanochat(3)


@pytest.mark.slow
def test_plain_sgd_overfits_a_tiny_text():
    text = "the quick brown fox jumps over the lazy dog. " * 40
    obj = nc.nanochat(3, text=text, batch_size=4, seq_len=16, width=32, heads=2, heldout_frac=0.2)
    gamma, steps = 0.5, 200  # gamma from E5's grid 2^-5 .. 2^-1

    @jax.jit
    def run(data, x):
        def step(x, k):
            loss, g = obj.value_and_grad(data, x, k)
            return x - gamma * g, loss

        return jax.lax.scan(step, x, jnp.arange(steps))

    x, losses = run(obj.data, obj.x0)
    log_v = math.log(obj.meta["vocab_size"])
    assert losses[0] > 0.9 * log_v
    assert losses[-20:].mean() < 0.1 * log_v
    # the held-out tail repeats the same sentence, so it is learnt too
    assert jax.jit(obj.loss)(obj.data, x) < 0.1 * log_v


@pytest.mark.slow
def test_chain_two_point_gradient():
    """The LM's chain: x^F = x^B is value_and_grad; other backward weights change the gradient
    of every block below the last, and block S-1's only through x^B_{S-1}."""
    from rpd.objectives.chain import two_point_value_and_grad

    S = 4
    obj = nc.nanochat(S, text=TEXT, **SMALL)
    x = obj.x0 + 0.01 * jnp.asarray(np.random.default_rng(0).standard_normal(obj.D), obj.dtype)
    two = jax.jit(lambda xf, xb: two_point_value_and_grad(obj, obj.data, xf, xb, 3))
    loss, g = two(x, x)
    ref_loss, ref_g = jax.jit(obj.value_and_grad)(obj.data, x, 3)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    np.testing.assert_allclose(g, ref_g, rtol=1e-3, atol=1e-6)
    off, size = obj.layout.offsets, obj.layout.sizes
    blk = lambda v, s: np.asarray(v[off[s] : off[s] + size[s]])  # noqa: E731
    xb = obj.x0  # backward weights = the unperturbed ones
    _, gb = two(x, xb)
    for s in range(S - 1):
        assert np.abs(blk(gb, s) - blk(g, s)).max() > 1e-6, s
    only_first = x.at[: size[0]].set(obj.x0[: size[0]])  # x^B differs from x^F in block 0 only
    _, g0 = two(x, only_first)
    np.testing.assert_array_equal(blk(g0, S - 1), blk(g, S - 1))


@pytest.mark.slow  # ~15-20 s on 2 cores: the slow suite (CI's second step)
def test_pipemare_runs_stage_wise_on_the_lm():
    """PipeMare on the LM, one stage's backward per update (a_0 token ids, a_1..a_3 hidden
    states, a_4 logits: per-stage shapes), is the whole two-point gradient per update."""
    from rpd import schedules
    from rpd.train import methods, semantics

    S = 4
    obj = nc.nanochat(S, text=TEXT, **SMALL)
    plan = semantics.pipemare_plan(schedules.pipemare(S, 12), obj.n_batches, t2=True, predict=True)
    K = len(plan.block)
    fast = methods.run_plan(obj, plan, [0.05])
    whole = methods.run_plan(obj, plan._replace(fresh=np.ones(K, bool), slot=np.zeros(K, np.int32)), [0.05])
    assert np.abs(whole.x_final - np.asarray(obj.x0)).max() > 1e-2  # it trained
    np.testing.assert_allclose(fast.x_final, whole.x_final, rtol=0, atol=1e-6)
    np.testing.assert_allclose(fast.traces["loss_z"][:, plan.fresh], whole.traces["loss_z"][:, plan.fresh], rtol=1e-6)
