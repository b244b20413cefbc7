"""The 2025-2026 arms (docs/optimizers.md): error feedback, Nesterov's look-ahead for a delay and
Adam in a rotated basis, each against a literal PipeDream replay whose optimizer is written in
NumPy from the formulas, and each in its degenerate case (no delay) equal to a known method."""

import jax
import numpy as np
import optax
import pytest
from optax_replay import replay_pd

import rpd  # noqa: F401
from rpd import schedules
from rpd.objectives.linear import random_quadratic
from rpd.objectives.mlp import mlp_chain
from rpd.train import methods, optimizers

S, N, LR = 4, 10, 2.0**-5


@pytest.fixture(scope="module")
def quad():
    return random_quadratic(n=120, d=24, S=S, batch_size=10, seed=3)


class NumpyTx:
    """A duck-typed optax transformation (init / update) written in NumPy, its update already
    multiplied by the learning rate."""

    def __init__(self, step, init):
        self.step, self.init_fn = step, init

    def init(self, x):
        return self.init_fn(np.asarray(x, np.float64))

    def update(self, g, state, x):
        return self.step(np.asarray(g, np.float64), state, np.asarray(x, np.float64))


def np_momentum_ef(weight):
    """Heavy ball t <- g + 0.9 t, u = -LR t, then u + weight (u - u_prev) from the 2nd update."""

    def step(g, st, x):
        buf, prev, k = st
        buf = g + 0.9 * buf
        u = -LR * buf
        out = u + (weight * (u - prev) if k > 0 else 0.0)
        return out, (buf, u, k + 1)

    return NumpyTx(step, lambda x: (np.zeros_like(x), np.zeros_like(x), 0))


def np_nesterov_async(b1, b2=0.999, eps=1e-8, psi=0.004, wd=0.0):
    """torch's NAdam (decoupled decay) with momentum b1, literally."""

    def step(g, st, x):
        m, v, prod, t = st
        t += 1
        mu = b1 * (1 - 0.5 * 0.96 ** (t * psi))
        mu_next = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * psi))
        prod = prod * mu
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        d = np.sqrt(v / (1 - b2**t)) + eps
        u = -LR * (wd * x + (1 - mu) / (1 - prod) * g / d + mu_next / (1 - prod * mu_next) * m / d)
        return u, (m, v, prod, t)

    return NumpyTx(step, lambda x: (np.zeros_like(x), np.zeros_like(x), 1.0, 0))


def np_adam_rotated(shapes, b1=0.95, b2=0.95, eps=1e-8, wd=0.01, freq=3, vectors=True):
    """Basis rotation per leaf, from the formulas: covariance EMAs, eigh at the first update, a
    sorted warm QR power iteration every ``freq``, Adam's v in the rotated basis."""

    def rotated(shape):
        return len(shape) == 2 or (len(shape) == 1 and vectors)

    def init(x):
        leaves = []
        for sh in shapes:
            r, c = (sh if len(sh) == 2 else (sh[0], 0)) if rotated(sh) else (0, 0)
            leaves.append({"m": np.zeros(sh), "v": np.zeros(sh), "L": np.zeros((r, r)), "R": np.zeros((c, c))})
        return leaves, 0

    def eig(A):
        return np.linalg.eigh(A)[1][:, ::-1]

    def refine(A, Q, v, axis):
        order = np.argsort(-np.diag(Q.T @ A @ Q), kind="stable")
        return np.linalg.qr(A @ Q[:, order])[0], np.take(v, order, axis=axis)

    def step(g, st, x):
        leaves, t = st
        t += 1
        scale = np.sqrt(1 - b2**t) / (1 - b1**t)
        out, new, off = [], [], 0
        for sh, lf in zip(shapes, leaves):
            n = int(np.prod(sh))
            gl, xl = g[off : off + n].reshape(sh), x[off : off + n].reshape(sh)
            off += n
            lf = dict(lf)
            lf["m"] = b1 * lf["m"] + (1 - b1) * gl
            if not rotated(sh):
                lf["v"] = b2 * lf["v"] + (1 - b2) * gl**2
                out.append(-LR * (wd * xl + scale * lf["m"] / (np.sqrt(lf["v"]) + eps)))
                new.append(lf)
                continue
            G = gl.reshape(sh[0], -1)
            two = len(sh) == 2
            lf["L"] = b2 * lf["L"] + (1 - b2) * G @ G.T
            if two:
                lf["R"] = b2 * lf["R"] + (1 - b2) * G.T @ G
            v = lf["v"].reshape(G.shape)
            if t == 1:
                lf["QL"] = eig(lf["L"])
                lf["QR"] = eig(lf["R"]) if two else None
            elif t % freq == 0:
                lf["QL"], v = refine(lf["L"], lf["QL"], v, 0)
                if two:
                    lf["QR"], v = refine(lf["R"], lf["QR"], v, 1)
            QL, QR = lf["QL"], lf["QR"]
            rot = (lambda X: QL.T @ X @ QR) if two else (lambda X: QL.T @ X)  # noqa: B023
            back = (lambda X: QL @ X @ QR.T) if two else (lambda X: QL @ X)  # noqa: B023
            v = b2 * v + (1 - b2) * rot(G) ** 2
            lf["v"] = v.reshape(sh)
            u = scale * back(rot(lf["m"].reshape(G.shape)) / (np.sqrt(v) + eps)).reshape(sh)
            out.append(-LR * (wd * xl + u))
            new.append(lf)
        return np.concatenate([o.ravel() for o in out]), (new, t)

    return NumpyTx(step, init)


# ---------------------------------------------------------------- error feedback (a reconstruction)


def test_error_feedback_equals_the_replay(quad):
    """PipeDream 1F1B, momentum + error feedback with λ = 0.5: stage s feeds back λ τ_s (u_k -
    u_{k-1}), τ_s = S - 1 - s, from its second update on."""
    tl = schedules.pipedream(S, N)
    opt = {"name": "momentum", "correction": "error_feedback", "correction_lam": 0.5}
    res = methods.pipedream(quad, tl, [LR], optimizer=opt)
    ref = replay_pd(quad, tl, lambda s: np_momentum_ef(0.5 * (S - 1 - s)))
    np.testing.assert_allclose(res.x_final[0], ref, rtol=1e-12, atol=1e-14)
    plain = replay_pd(quad, tl, lambda s: np_momentum_ef(0.0))
    assert np.abs(res.x_final[0] - plain).max() > 1e-6  # the feedback moved the iterates
    assert res.meta["optimizer"]["correction"] == {"name": "error_feedback", "lam": 0.5, "taus": [3, 2, 1, 0]}


@pytest.mark.slow
def test_error_feedback_without_delay_is_the_base_optimizer(quad):
    """Minibatch SGD's plan (τ_s = 0), and λ = 0 under PipeDream: the optimizer (to rounding: the
    per-stage path compiles apart)."""
    plain = methods.sgd(quad, 6, [LR], optimizer="adamw")
    fed = methods.sgd(quad, 6, [LR], optimizer=optimizers.make("adamw", correction="error_feedback"))
    np.testing.assert_allclose(fed.x_final, plain.x_final, rtol=1e-14)
    tl = schedules.pipedream(S, N)
    off = {"name": "adamw", "correction": "error_feedback", "correction_lam": 0.0}
    pd = methods.pipedream(quad, tl, [LR], optimizer="adamw")
    np.testing.assert_allclose(methods.pipedream(quad, tl, [LR], optimizer=off).x_final, pd.x_final, rtol=1e-14)


def test_error_feedback_under_2bw_is_one_step():
    """2BW's own-block delay is 1 on every stage: the bound τ_s."""
    quad = random_quadratic(n=40, d=8, S=4, batch_size=5, seed=0)
    tl = schedules.pipedream_2bw(4, 12, 4)
    res = methods.train(quad, tl, [LR], optimizer={"name": "adamw", "correction": "error_feedback"})
    assert res.meta["optimizer"]["correction"]["taus"] == [1, 1, 1, 1]
    assert np.all(np.isfinite(res.x_final))


# ---------------------------------------------------------------- Nesterov's look-ahead for a delay


def test_nesterov_async_equals_the_replay(quad):
    """PipeDream 1F1B: stage s runs torch's NAdam with β1_s = 0.9 + τ_s (0.99 - 0.9) / S."""
    tl = schedules.pipedream(S, N)
    res = methods.pipedream(quad, tl, [LR], optimizer={"name": "nesterov_async", "weight_decay": 0.1})
    beta = lambda s: 0.9 + (S - 1 - s) * (0.99 - 0.9) / S  # noqa: E731
    ref = replay_pd(quad, tl, lambda s: np_nesterov_async(beta(s), wd=0.1))
    np.testing.assert_allclose(res.x_final[0], ref, rtol=1e-12, atol=1e-14)
    assert res.meta["optimizer"]["taus"] == [3, 2, 1, 0]


@pytest.mark.slow
def test_nesterov_async_without_delay_is_nadam(quad):
    """No delay (minibatch SGD's plan): every stage's β1 is b1, and the step is torch's NAdam."""
    tl = schedules.pipedream(1, 8)
    one = random_quadratic(n=120, d=24, S=1, batch_size=10, seed=3)
    res = methods.sgd(one, 8, [LR], optimizer="nesterov_async")
    ref = replay_pd(one, tl, lambda s: np_nesterov_async(0.9))
    np.testing.assert_allclose(res.x_final[0], ref, rtol=1e-12, atol=1e-14)
    assert res.meta["optimizer"]["taus"] == [0]
    # and each of S blocks alone is the same NAdam when nothing is stale
    sync = methods.sgd(quad, 5, [LR], optimizer="nesterov_async")
    assert sync.meta["optimizer"]["taus"] == [0] * S


# ---------------------------------------------------------------- Adam in a rotated basis


@pytest.mark.slow
def test_adam_rotated_equals_the_replay_on_flat_blocks():
    """Blocks of 2 entries rotated whole (their 2 x 2 gradient covariance), refreshed every 3.
    eps = 1e-4: at a block's first update the covariance has rank one, and its null direction's
    step is rounding over eps (any two eigensolvers differ there by ~1e-17 / eps)."""
    q = random_quadratic(n=60, d=8, S=S, batch_size=6, seed=1, rotate=True)
    tl = schedules.pipedream(S, N)
    res = methods.pipedream(q, tl, [LR], optimizer={"name": "adam_rotated", "frequency": 3, "eps": 1e-4})
    ref = replay_pd(q, tl, lambda s: np_adam_rotated([(2,)], freq=3, eps=1e-4))
    np.testing.assert_allclose(res.x_final[0], ref, rtol=1e-12, atol=1e-14)
    adam = replay_pd(q, tl, lambda s: optax.adamw(LR, b1=0.95, b2=0.95, weight_decay=0.01))
    assert np.abs(res.x_final[0] - adam).max() > 1e-6  # the rotation moved the iterates


@pytest.mark.slow
def test_adam_rotated_equals_the_replay_on_weight_matrices():
    """The MLP chain's blocks (W [2, 2] two-sided, b [2] on plain Adam), PipeDream S = 3."""
    mlp = mlp_chain(n=16, width=2, S=3, batch_size=4, seed=0)
    tl = schedules.pipedream(3, 8)
    res = methods.pipedream(mlp, tl, [LR], optimizer={"name": "adam_rotated", "frequency": 2})
    ref = replay_pd(mlp, tl, lambda s: np_adam_rotated([(2, 2), (2,)], freq=2, vectors=False))
    # The replay's eigh is NumPy's (LAPACK); rpd's is JAX's, LAPACK too on the CPU but cuSOLVER on
    # an NVIDIA GPU, whose eigenvectors differ in the last bits and compound over the steps (6.4e-11
    # relative measured on an H200): the tolerance is the eigensolvers' agreement, per backend.
    rtol = 1e-12 if jax.default_backend() == "cpu" else 1e-9
    np.testing.assert_allclose(res.x_final[0], ref, rtol=rtol, atol=1e-14)


@pytest.mark.slow
def test_adam_rotated_on_one_coordinate_blocks_is_adam():
    """A block of one coordinate has nothing to rotate: without eps and decay, Adam (optax's),
    with no delay (minibatch SGD) and under PipeDream."""
    q = random_quadratic(n=40, d=4, S=4, batch_size=5, seed=2)
    h = {"name": "adam_rotated", "b1": 0.9, "b2": 0.999, "eps": 0.0, "weight_decay": 0.0}
    res = methods.sgd(q, 7, [LR], optimizer=h)
    np.testing.assert_allclose(
        res.x_final, methods.sgd(q, 7, [LR], optimizer={"name": "adam", "eps": 0.0}).x_final, rtol=1e-12
    )
    tl = schedules.pipedream(4, 9)
    res = methods.pipedream(q, tl, [LR], optimizer=h)
    ref = replay_pd(q, tl, lambda s: optax.adam(LR, eps=0.0))
    np.testing.assert_allclose(res.x_final[0], ref, rtol=1e-12)


@pytest.mark.parametrize(
    "hyper,match",
    [
        ({"name": "adam_rotated", "frequency": 0}, "frequency"),
        ({"name": "adam_rotated", "shampoo_beta": 1.0}, "shampoo_beta"),
        ({"name": "nesterov_async", "momentum_decay": -1.0}, "momentum_decay"),
        ({"name": "nesterov_async", "beta_max": 1.0}, "beta_max"),
    ],
)
def test_bad_hyper_parameters_are_refused(hyper, match):
    with pytest.raises(ValueError, match=match) as err:
        optimizers.resolve(hyper)
    assert "\n" not in str(err.value)
