"""objective.rotate: the quadratics with Hessian Q Λ Qᵀ, Λ the unrotated spectrum."""

import jax
import numpy as np
import pytest

import rpd  # noqa: F401
from rpd.objectives.linear import nesterov_quadratic, random_quadratic

BUILDERS = {
    "random": lambda rotate: random_quadratic(n=60, d=12, S=3, batch_size=6, seed=4, rotate=rotate),
    "nesterov": lambda rotate: nesterov_quadratic(n=60, d=12, S=3, batch_size=6, mu=0.05, seed=4, rotate=rotate),
}


def _hessian(obj):
    X = np.asarray(obj.data["X"])
    return X.T @ X / X.shape[0]


@pytest.mark.parametrize("kind", BUILDERS)
def test_same_spectrum_other_basis_correct_gradient(kind):
    plain, rot = BUILDERS[kind](False), BUILDERS[kind](True)
    A, H = _hessian(plain), _hessian(rot)
    np.testing.assert_allclose(np.linalg.eigvalsh(H), np.linalg.eigvalsh(A), rtol=1e-10)
    assert rot.L == pytest.approx(plain.L, rel=1e-12) and rot.f_star == 0.0
    off = H - np.diag(np.diag(H))
    assert np.sum(off**2) > 0.1 * np.sum(H**2)  # far from axis-aligned
    assert not np.allclose(H, A)
    # the mean of the batch gradients is H (x - w*), and the loss is (x - w*)ᵀ H (x - w*) / 2
    x = np.random.default_rng(0).standard_normal(rot.D)
    w = np.asarray(rot.data["w_star"])
    grads = [np.asarray(rot.value_and_grad(rot.data, x, b)[1]) for b in range(rot.n_batches)]
    np.testing.assert_allclose(np.mean(grads, axis=0), H @ (x - w), rtol=1e-10, atol=1e-12)
    assert float(rot.loss(rot.data, x)) == pytest.approx(0.5 * (x - w) @ H @ (x - w), rel=1e-12)
    np.testing.assert_allclose(jax.grad(lambda z: rot.loss(rot.data, z))(x), H @ (x - w), rtol=1e-10, atol=1e-12)


def test_default_is_unchanged():
    """rotate=False draws nothing more: values recorded before the option existed."""
    a, b = BUILDERS["random"](False), BUILDERS["nesterov"](False)
    assert float(a.data["X"][7, 5]) == -1.4789857368704227 and float(a.data["w_star"][3]) == -0.24520313601620838
    assert float(b.data["X"][7, 5]) == -0.38890780250511936
    # Nesterov's O(d) loss kept: 0.5 ((2 + μ) e·e − 2 Σ e_i e_{i+1}), e = x − w*, and the dense A unread.
    # Its two float64 dot products are summed in an order the device picks (the GPU's differs from
    # the CPU's by 3 ulp); any order is within γ_k Σ|terms| of the exact sum, γ_k = kε / (1 − kε)
    # with k = d + 3 roundings per term (products, sums, the scaling), ε = 2⁻⁵³. Two evaluations
    # (the value recorded on the CPU, the one computed here, NumPy's) differ by at most twice that.
    x = np.ones(12)
    e, mu = x - np.asarray(b.data["w_star"]), b.meta["mu"]
    k, eps = len(e) + 3, 2.0**-53
    bound = 2 * k * eps / (1 - k * eps) * 0.5 * ((2 + mu) * (e @ e) + 2 * np.abs(e[1:]) @ np.abs(e[:-1]))
    loss = float(b.loss(b.data, x))
    assert abs(loss - 7.038928730450216) <= bound
    assert abs(loss - 0.5 * ((2 + mu) * (e @ e) - 2 * (e[1:] @ e[:-1]))) <= bound
    assert float(b.loss({**b.data, "A": np.zeros((12, 12))}, x)) == loss
    assert "rotate" not in a.meta


@pytest.mark.parametrize("kind", ["random", "nesterov"])
def test_align_puts_the_same_spectrum_on_the_axes(kind):
    """objective.align: the control of rotate, Hessian Λ itself (diagonal), gradient H (x − w*)."""
    build = {
        "random": lambda: random_quadratic(n=60, d=12, S=3, batch_size=6, seed=4, align=True),
        "nesterov": lambda: nesterov_quadratic(n=60, d=12, S=3, batch_size=6, mu=0.05, seed=4, align=True),
    }[kind]
    plain, al = BUILDERS[kind](False), build()
    A, H = _hessian(plain), _hessian(al)
    np.testing.assert_allclose(np.sort(np.diag(H)), np.linalg.eigvalsh(A), rtol=1e-10)
    assert np.abs(H - np.diag(np.diag(H))).max() < 1e-10 * np.abs(H).max()  # diagonal to rounding
    x = np.random.default_rng(1).standard_normal(al.D)
    w = np.asarray(al.data["w_star"])
    np.testing.assert_allclose(jax.grad(lambda z: al.loss(al.data, z))(x), H @ (x - w), rtol=1e-10, atol=1e-12)
    assert al.meta["align"] is True
    with pytest.raises(ValueError, match="exclude each other"):
        random_quadratic(n=60, d=12, S=3, batch_size=6, rotate=True, align=True)
