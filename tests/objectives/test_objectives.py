"""Linear objectives: built as docs/science.md#objectives says, with values that could be wrong checked."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rpd  # noqa: F401
from rpd.objectives import BlockLayout, logistic_regression, nesterov_mu, nesterov_quadratic, random_quadratic


def test_block_layout_sizes_follow_spec():
    assert BlockLayout.even(10, 4).sizes == (3, 3, 2, 2)
    assert BlockLayout.even(512, 16).sizes == (32,) * 16
    assert BlockLayout.even(10, 4).offsets == (0, 3, 6, 8)


def test_random_quadratic_data_order_and_constants():
    obj = random_quadratic(n=40, d=6, S=3, batch_size=10, seed=7)
    rng = np.random.default_rng(7)
    X = rng.standard_normal((40, 6))
    w = rng.standard_normal(6)
    np.testing.assert_array_equal(np.asarray(obj.data["X"]), X)
    np.testing.assert_allclose(np.asarray(obj.data["y"]), X @ w)
    assert obj.f_star == 0.0
    np.testing.assert_allclose(obj.L, np.linalg.eigvalsh(X.T @ X / 40)[-1])
    x = np.linspace(-1, 1, 6)
    np.testing.assert_allclose(obj.full_loss(jnp.asarray(x)), 0.5 * np.mean((X @ x - X @ w) ** 2), rtol=1e-12)
    f, g = obj.value_and_grad(obj.data, jnp.asarray(x), 2)
    Xb, yb = X[20:30], (X @ w)[20:30]
    np.testing.assert_allclose(f, 0.5 * np.mean((Xb @ x - yb) ** 2), rtol=1e-12)
    np.testing.assert_allclose(g, Xb.T @ (Xb @ x - yb) / 10, rtol=1e-12)


@pytest.mark.parametrize("mu,kappa", [(0.01, None), (None, 50.0)])
def test_nesterov_gram_matrix_is_A_and_cheap_loss_is_exact(mu, kappa):
    d = 16
    obj = nesterov_quadratic(n=32, d=d, S=4, batch_size=8, mu=mu, condition_number=kappa, seed=1)
    m = obj.meta["mu"]
    A = 2 * np.eye(d) - np.eye(d, k=1) - np.eye(d, k=-1) + m * np.eye(d)
    X = np.asarray(obj.data["X"])
    np.testing.assert_allclose(X.T @ X / 32, A, atol=1e-12)
    lam = np.linalg.eigvalsh(A)
    if kappa:
        np.testing.assert_allclose(lam[-1] / lam[0], kappa, rtol=1e-9)
    x = np.random.default_rng(0).standard_normal(d)
    direct = 0.5 * np.mean((X @ x - np.asarray(obj.data["y"])) ** 2)
    np.testing.assert_allclose(obj.full_loss(jnp.asarray(x)), direct, rtol=1e-10)


@pytest.mark.slow  # ~15-20 s on 2 cores: the slow suite (CI's second step)
def test_logistic_f_star_is_the_minimum():
    obj = logistic_regression(n=60, d=5, S=5, batch_size=6, lam=1e-2, seed=0)
    grad = jax.grad(lambda x: obj.full_loss(x))
    # f* is attained: gradient descent from anywhere cannot go below it, and it gets there.
    x = jnp.zeros(5)
    for _ in range(3000):
        x = x - 0.5 * grad(x)
    assert abs(float(obj.full_loss(x)) - obj.f_star) < 1e-10
    assert float(obj.full_loss(obj.x0)) - obj.f_star > 0


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda: random_quadratic(n=0, d=4, S=2, batch_size=1), "n"),
        (lambda: random_quadratic(n=10, d=4, S=5, batch_size=1), "S"),
        (lambda: random_quadratic(n=10, d=4, S=2, batch_size=3), "batch_size"),
        (lambda: nesterov_quadratic(n=8, d=16, S=2, batch_size=4), "n must be >= d"),
        (lambda: logistic_regression(n=8, d=4, S=2, batch_size=4, lam=-1.0), "lam"),
        (lambda: logistic_regression(n=8, d=4, S=2, batch_size=4, grad_noise=-0.1), "grad_noise"),
        (lambda: nesterov_mu(8, 0.5), "condition_number"),
        (lambda: nesterov_mu(16, 1e3), "condition_number must be <="),
    ],
)
def test_bad_arguments_name_the_field(call, field):
    with pytest.raises((ValueError, TypeError), match=field):
        call()
