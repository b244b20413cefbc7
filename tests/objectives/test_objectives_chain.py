"""rpd.objectives.chain and mlp_chain: the two-point chain gradient (docs/schedules.md#training-semantics)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rpd  # noqa: F401
from rpd.objectives import (
    logistic_regression,
    mlp_chain,
    nesterov_quadratic,
    random_quadratic,
    two_point_value_and_grad,
)

LINEAR = [
    lambda: random_quadratic(n=40, d=9, S=3, batch_size=10, seed=1),
    lambda: nesterov_quadratic(n=40, d=8, S=4, batch_size=8, seed=2),
    lambda: logistic_regression(n=40, d=9, S=3, batch_size=10, lam=0.1, seed=3),
]


def _points(obj, seed):
    rng = np.random.default_rng(seed)
    return (jnp.asarray(rng.standard_normal(obj.D)), jnp.asarray(rng.standard_normal(obj.D)))


def _two_point(obj, b=1):
    """``two_point_value_and_grad`` on batch ``b`` as one jitted program of (xf, xb): a program
    per primitive op, run eagerly, cost the test most of its time compiling."""
    return jax.jit(lambda xf, xb: two_point_value_and_grad(obj, obj.data, xf, xb, b))


@pytest.mark.slow
@pytest.mark.parametrize("make", LINEAR + [lambda: mlp_chain(n=32, width=5, S=4, batch_size=8, seed=4)])
def test_same_weights_equal_value_and_grad(make):
    obj = make()
    x, _ = _points(obj, 0)
    for b in (0, obj.n_batches - 1):
        f, g = obj.value_and_grad(obj.data, x, b)
        f2, g2 = two_point_value_and_grad(obj, obj.data, x, x, b)
        np.testing.assert_allclose(f2, f, rtol=1e-12)
        np.testing.assert_allclose(g2, g, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("make", LINEAR)
def test_backward_weights_do_not_matter_for_additive_linear_chains(make):
    obj = make()
    xf, xb = _points(obj, 1)
    f, g = jax.jit(obj.value_and_grad)(obj.data, xf, 1)  # jitted: one program each, not one per op
    f2, g2 = _two_point(obj)(xf, xb)
    lam = obj.meta.get("lam", 0.0)  # the separable L2 term is taken at the backward weights
    np.testing.assert_allclose(f2, f, rtol=1e-12)
    np.testing.assert_allclose(g2, g - lam * xf + lam * xb, rtol=1e-11, atol=1e-13)


def test_backward_weights_matter_for_the_mlp_and_match_a_manual_backprop():
    w, S, B = 4, 3, 8
    obj = mlp_chain(n=16, width=w, S=S, batch_size=B, seed=5)
    xf = obj.x0
    xb = xf + 0.3 * jnp.asarray(np.random.default_rng(6).standard_normal(obj.D))
    two_point = _two_point(obj)
    _, g_same = two_point(xf, xf)
    _, g_mixed = two_point(xf, xb)
    assert np.max(np.abs(g_mixed - g_same)) > 1e-3
    # manual: forward at xf keeping inputs and pre-activations, backward with xb's matrices
    X = np.asarray(obj.data["X"])[B : 2 * B]
    Y = np.asarray(obj.data["Y"])[B : 2 * B]
    P = (
        lambda x, s: (
            np.asarray(x)[s * (w * w + w) : s * (w * w + w) + w * w].reshape(w, w),  # noqa: E731
            np.asarray(x)[s * (w * w + w) + w * w : (s + 1) * (w * w + w)],
        )
    )
    a, acts, pre = X, [], []
    for s in range(S):
        W, c = P(xf, s)
        z = a @ W.T + c
        acts.append(a)
        pre.append(z)
        a = np.tanh(z) if s < S - 1 else z
    delta = (a - Y) / (B * w)
    grads = []
    for s in reversed(range(S)):
        Wb, cb = P(xb, s)
        if s < S - 1:  # the tanh derivative at the backward weights' pre-activation
            zb = acts[s] @ Wb.T + cb
            delta = delta * (1 - np.tanh(zb) ** 2)
        grads.append(np.concatenate([(delta.T @ acts[s]).ravel(), delta.sum(0)]))
        delta = delta @ Wb
    np.testing.assert_allclose(g_mixed, np.concatenate(grads[::-1]), rtol=1e-10, atol=1e-13)


def test_mlp_chain_teacher_is_optimal_and_sgd_descends():
    obj = mlp_chain(n=64, width=6, S=4, batch_size=8, seed=0)
    teacher = jnp.asarray(obj.meta["teacher"])
    assert float(obj.full_loss(teacher)) < 1e-28
    f0 = float(obj.full_loss(obj.x0))
    assert f0 > 1e-2 and obj.L > 0
    step = jax.jit(lambda x, b: x - (1.0 / obj.L) * obj.value_and_grad(obj.data, x, b)[1])
    x = obj.x0
    for k in range(200):
        x = step(x, k % obj.n_batches)
    assert float(obj.full_loss(x)) < 0.5 * f0
    with pytest.raises(ValueError, match="batch_size"):
        mlp_chain(n=10, width=4, S=2, batch_size=3)
