"""Linear-model objectives of docs/science.md#objectives, built on the host exactly as the reference code does.

All three are chains of S stages with a_0 = 0 and stage_s(x_s, a) = a + X_b[:, block s] x_s,
so the chain output is X_b x and the loss acts on it; float64 throughout.
Data order: ``numpy.random.default_rng(seed)`` draws X (or Z), then w*, then the labels.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from rpd.objectives.base import BlockLayout, Objective, on_device
from rpd.objectives.chain import Chain
from rpd.runtime.programs import named_builder
from rpd.validation import check_int, check_real


@dataclasses.dataclass(frozen=True)
class RandomQuadraticParams:
    """The config of :func:`random_quadratic` (``objective=random_quadratic``: its schema and
    defaults, docs/architecture.md#adding-an-objective); E1/E8's setting."""

    n: int = 2000  # examples; a multiple of batch_size
    d: int = 512  # dimension
    batch_size: int = 100  # B
    seed: int = 0  # data seed (numpy.random.default_rng)
    rotate: bool = False  # Hessian Q Λ Qᵀ (the same spectrum, a seeded random rotation)
    align: bool = False  # Hessian Λ, diagonal (the same spectrum on the axes)


@dataclasses.dataclass(frozen=True)
class NesterovQuadraticParams:
    """The config of :func:`nesterov_quadratic` (``objective=nesterov_quadratic``); E3's setting."""

    n: int = 600  # examples; a multiple of batch_size, >= d
    d: int = 512
    batch_size: int = 5
    mu: float | None = 0.01  # A = tridiag(-1, 2, -1) + mu I
    condition_number: float | None = None  # overrides mu when set (nesterov_mu)
    seed: int = 0
    rotate: bool = False
    align: bool = False


@dataclasses.dataclass(frozen=True)
class LogisticRegressionParams:
    """The config of :func:`logistic_regression` (``objective=logistic_regression``); E4's setting."""

    n: int = 600
    d: int = 512
    batch_size: int = 5
    lam: float = 1e-4  # l2 weight
    seed: int = 0


def _check_sizes(n, d, S, batch_size):
    n, d, S = check_int("n", n), check_int("d", d), check_int("S", S)
    batch_size = check_int("batch_size", batch_size)
    if S > d:
        raise ValueError(f"S must be <= d (one coordinate per block at least), got S={S}, d={d}")
    if n % batch_size:
        raise ValueError(f"n must be a multiple of batch_size, got n={n}, batch_size={batch_size}")
    return n, d, S, batch_size


def _batch(data, b, B):
    X_b = jax.lax.dynamic_slice_in_dim(data["X"], b * B, B, axis=0)
    y_b = jax.lax.dynamic_slice_in_dim(data["y"], b * B, B, axis=0)
    return X_b, y_b


def _additive_chain(sizes: tuple[int, ...], B: int, head, penalty=None) -> Chain:
    """stage_s(x_s, (b, z)) = (b, z + X_b[:, block s] x_s) on batch b: the chain output is X_b x.

    The activation carries the batch index, not X_b: each stage reads its own B x |block s|
    columns of the data, so one stage's forward or backward costs O(B |block s|)."""
    offsets = BlockLayout(sizes).offsets

    def inputs(data, b):
        b = jnp.asarray(b, jnp.int32)
        return (b, jnp.zeros(B, data["X"].dtype)), _batch(data, b, B)[1]

    def stage(data, s, x_s, a):
        b, z = a
        return b, z + jax.lax.dynamic_slice(data["X"], (b * B, jnp.int32(offsets[s])), (B, sizes[s])) @ x_s

    return Chain(inputs=inputs, stage=stage, head=lambda data, a, y: head(a[1], y), penalty=penalty)


# The functions of an objective depend only on its static parameters (sizes, batch size, lam,
# mu) and are memoized on them: equal parameters give the same function objects, hence the same
# ``Objective.program_key``, so rebuilt objectives (and other seeds) reuse compiled programs.


def _nesterov_quad_form(mu: float):
    def quad_form(e):  # e^T (tridiag(-1, 2, -1) + mu I) e in O(d): evaluation runs every time step
        return (2.0 + mu) * jnp.dot(e, e) - 2.0 * jnp.dot(e[1:], e[:-1])

    return quad_form


@named_builder
def _least_squares_functions(B: int, sizes: tuple[int, ...], mu: float | None):
    """(value_and_grad, loss, chain) of least squares with batch size B; ``mu`` not None: the
    loss uses Nesterov's tridiagonal A + mu I instead of the dense ``data["A"]``."""
    quad_form = None if mu is None else _nesterov_quad_form(mu)

    def value_and_grad(data, x, b):
        X_b, y_b = _batch(data, b, B)
        r = X_b @ x - y_b
        return 0.5 * jnp.mean(r * r), X_b.T @ r / B

    # f(x) - f* = (x - w*)^T A (x - w*) / 2 exactly; with A = X^T X / n this costs d^2 instead of
    # n d per evaluation, and it keeps full float64 precision near the optimum.
    def loss(data, x):
        e = x - data["w_star"]
        return 0.5 * (quad_form(e) if quad_form else jnp.dot(e, data["A"] @ e))

    return value_and_grad, loss, _additive_chain(sizes, B, lambda z, y: 0.5 * jnp.mean((z - y) ** 2))


def _rotated(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """X M with M = V Qᵀ (A = XᵀX / n = V Λ Vᵀ, Q a Haar-random rotation drawn from ``rng``): the
    Hessian becomes (XM)ᵀ(XM) / n = Q Λ Qᵀ, the same spectrum in a random eigenbasis."""
    n, d = X.shape
    _, V = np.linalg.eigh(X.T @ X / n)
    Q, R = np.linalg.qr(rng.standard_normal((d, d)))
    Q = Q * np.sign(np.diag(R))  # Haar measure (QR's signs fixed)
    return X @ (V @ Q.T)


def _aligned(X: np.ndarray) -> np.ndarray:
    """X V (A = XᵀX / n = V Λ Vᵀ): the Hessian becomes (XV)ᵀ(XV) / n = Λ, the same spectrum on the
    coordinate axes (the axis-aligned control of ``rotate``)."""
    _, V = np.linalg.eigh(X.T @ X / X.shape[0])
    return X @ V


def _basis(rotate: bool, align: bool) -> None:
    if rotate and align:
        raise ValueError("objective.rotate and objective.align exclude each other (a random or the axis basis)")


def _least_squares(name, X, w_star, S, batch_size, meta, mu=None) -> Objective:
    """f(x) = ||X x - y||^2 / (2n) with y = X w*, so f* = 0 exactly. ``mu`` (Nesterov's A =
    tridiag(-1, 2, -1) + mu I) gives e^T A e in O(d) instead of the dense d^2 product."""
    n, d = X.shape
    y = X @ w_star
    A = X.T @ X / n
    B = batch_size
    layout = BlockLayout.even(d, S)
    value_and_grad, loss, chain = _least_squares_functions(B, layout.sizes, mu)
    data = {"X": on_device(X), "y": on_device(y), "A": on_device(A), "w_star": on_device(w_star)}
    return Objective(
        name=name,
        layout=layout,
        chain=chain,
        n_batches=n // B,
        x0=on_device(np.zeros(d)),
        data=data,
        value_and_grad=value_and_grad,
        loss=loss,
        f_star=0.0,
        L=float(np.linalg.eigvalsh(A)[-1]),
        batch_size=B,
        meta=dict(meta, n=n, d=d, S=S, batch_size=B),
    )


def random_quadratic(
    n: int, d: int, S: int, batch_size: int, seed: int = 0, rotate: bool = False, align: bool = False
) -> Objective:
    """f(x) = ||X x - y||^2 / (2n), X ~ N(0,1)^{n x d}, w* ~ N(0, I), y = X w*; f* = 0,
    L = lambda_max(X^T X / n). ``rotate``: X is replaced by X M so that the Hessian is Q Λ Qᵀ,
    Λ today's spectrum, Q a rotation drawn after w* from the same generator (so every earlier
    draw, and the unrotated objective, are unchanged). ``align``: X is replaced by X V so that the
    Hessian is Λ itself, diagonal (the same spectrum on the coordinate axes)."""
    n, d, S, batch_size = _check_sizes(n, d, S, batch_size)
    _basis(rotate, align)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    X = rng.standard_normal((n, d))
    w_star = rng.standard_normal(d)
    meta = dict(kind="random_quadratic", seed=seed)
    if rotate:
        X, meta = _rotated(X, rng), dict(meta, rotate=True)
    if align:
        X, meta = _aligned(X), dict(meta, align=True)
    return _least_squares("random_quadratic", X, w_star, S, batch_size, meta)


def nesterov_mu(d: int, condition_number: float) -> float:
    """mu such that tridiag(-1, 2, -1) + mu I (size d) has the given condition number."""
    lam = 2.0 - 2.0 * np.cos(np.arange(1, d + 1) * np.pi / (d + 1))
    kappa = check_real("condition_number", condition_number)
    if kappa <= 1.0:
        raise ValueError(f"condition_number must be > 1, got {kappa}")
    kappa_max = lam[-1] / lam[0]
    if kappa > kappa_max:
        raise ValueError(f"condition_number must be <= {kappa_max:.6g} for d={d} (reached at mu=0), got {kappa}")
    return float((lam[-1] - kappa * lam[0]) / (kappa - 1.0))


def nesterov_quadratic(
    n: int,
    d: int,
    S: int,
    batch_size: int,
    mu: float | None = NesterovQuadraticParams.mu,
    condition_number: float | None = None,
    seed: int = 0,
    rotate: bool = False,
    align: bool = False,
) -> Objective:
    """Nesterov's worst-case quadratic as least squares: A = tridiag(-1, 2, -1) + mu I,
    X = sqrt(n) Q C^T with Q from the reduced QR of Z ~ N(0,1)^{n x d} and A = C C^T, so that
    X^T X / n = A; then w* ~ N(0, I) and y = X w*. Needs n >= d. Give ``mu`` or a target
    ``condition_number`` (which overrides mu). ``rotate``: the Hessian becomes Q Λ Qᵀ (Λ the
    spectrum of A, Q a rotation drawn after w*); ``align``: the Hessian becomes Λ, diagonal (the
    axis-aligned control); either way the loss then uses the dense Hessian."""
    n, d, S, batch_size = _check_sizes(n, d, S, batch_size)
    _basis(rotate, align)
    if n < d:
        raise ValueError(f"n must be >= d for Nesterov's quadratic (X^T X / n = A), got n={n}, d={d}")
    if condition_number is not None:
        mu = nesterov_mu(d, condition_number)
    mu = check_real("mu", mu, allow_zero=True)
    A = 2.0 * np.eye(d) - np.eye(d, k=1) - np.eye(d, k=-1) + mu * np.eye(d)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    Z = rng.standard_normal((n, d))
    Q, _ = np.linalg.qr(Z, mode="reduced")
    C = np.linalg.cholesky(A)
    X = np.sqrt(n) * Q @ C.T
    w_star = rng.standard_normal(d)
    meta = dict(kind="nesterov_quadratic", mu=mu, seed=seed)
    if rotate:  # no longer tridiagonal: the loss's O(d) form does not apply
        return _least_squares("nesterov_quadratic", _rotated(X, rng), w_star, S, batch_size, dict(meta, rotate=True))
    if align:  # diagonal: the tridiagonal O(d) form does not apply either
        return _least_squares("nesterov_quadratic", _aligned(X), w_star, S, batch_size, dict(meta, align=True))
    return _least_squares("nesterov_quadratic", X, w_star, S, batch_size, meta, mu)


def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _logistic_f_star(X, y, lam) -> float:
    """min_x mean BCE + lam/2 ||x||^2 by L-BFGS, polished with Newton steps (strongly convex)."""
    n, d = X.shape

    def fg(x):
        z = X @ x
        f = np.mean(np.logaddexp(0.0, z) - y * z) + 0.5 * lam * x @ x
        return f, X.T @ (_sigmoid(z) - y) / n + lam * x

    x = scipy.optimize.minimize(
        fg, np.zeros(d), jac=True, method="L-BFGS-B", options=dict(maxiter=20000, gtol=1e-12, ftol=1e-16)
    ).x
    for _ in range(30):
        f, g = fg(x)
        p = _sigmoid(X @ x)
        H = (X.T * (p * (1 - p))) @ X / n + lam * np.eye(d)
        step = np.linalg.solve(H, g)
        x = x - step
        if np.linalg.norm(step) < 1e-14 * (1 + np.linalg.norm(x)):
            break
    return float(fg(x)[0])


def logistic_regression(
    n: int,
    d: int,
    S: int,
    batch_size: int,
    lam: float = 1e-4,
    grad_noise: float = 0.0,
    seed: int = 0,
) -> Objective:
    """f(x) = mean_i [log(1 + e^{z_i}) - y_i z_i] + lam/2 ||x||^2, z = X x, with X ~ N(0,1)^{n x d},
    w* ~ N(0, I), y ~ Bernoulli(sigmoid(X w*)); L = lambda_max(X^T X / n)/4 + lam; f* from a
    high-accuracy solver. ``grad_noise`` = sigma_g of the optional i.i.d. gradient noise."""
    n, d, S, batch_size = _check_sizes(n, d, S, batch_size)
    lam = check_real("lam", lam, allow_zero=True)
    grad_noise = check_real("grad_noise", grad_noise, allow_zero=True)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    X = rng.standard_normal((n, d))
    w_star = rng.standard_normal(d)
    y = rng.binomial(1, _sigmoid(X @ w_star)).astype(np.float64)
    B = batch_size
    layout = BlockLayout.even(d, S)
    value_and_grad, loss, chain = _logistic_functions(B, layout.sizes, lam)
    return Objective(
        name="logistic_regression",
        layout=layout,
        chain=chain,
        n_batches=n // B,
        x0=on_device(np.zeros(d)),
        data={"X": on_device(X), "y": on_device(y)},
        value_and_grad=value_and_grad,
        loss=loss,
        f_star=_logistic_f_star(X, y, lam),
        L=float(np.linalg.eigvalsh(X.T @ X / n)[-1] / 4 + lam),
        grad_noise=grad_noise,
        batch_size=B,
        meta=dict(kind="logistic_regression", n=n, d=d, S=S, batch_size=B, lam=lam, grad_noise=grad_noise, seed=seed),
    )


@named_builder
def _logistic_functions(B: int, sizes: tuple[int, ...], lam: float):
    """(value_and_grad, loss, chain) of L2-regularised logistic regression, batch size B."""

    def value_and_grad(data, x, b):
        X_b, y_b = _batch(data, b, B)
        z = X_b @ x
        f = jnp.mean(jnp.logaddexp(0.0, z) - y_b * z) + 0.5 * lam * jnp.dot(x, x)
        return f, X_b.T @ (jax.nn.sigmoid(z) - y_b) / B + lam * x

    def loss(data, x):
        z = data["X"] @ x
        return jnp.mean(jnp.logaddexp(0.0, z) - data["y"] * z) + 0.5 * lam * jnp.dot(x, x)

    chain = _additive_chain(
        sizes,
        B,
        lambda z, y: jnp.mean(jnp.logaddexp(0.0, z) - y * z),
        penalty=lambda x_s: 0.5 * lam * jnp.dot(x_s, x_s),
    )
    return value_and_grad, loss, chain
