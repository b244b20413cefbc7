"""Adam in a rotated basis (``optimizer=adam_rotated``): basis rotation for asynchronous pipelines
(Jung, Shin, Lee, "Mitigating Staleness in Asynchronous Pipeline Parallelism via Basis
Rotation", ICML 2026, arXiv 2602.03515; its code, ``LOG-postech/basis-rotation``,
``optim/basis_rotation.py``, read for meaning and written anew here; docs/optimizers.md).

Adam's coordinate-wise scaling meets the delays in the coordinate basis; when the Hessian's
eigenbasis is not that basis, the stale steps oscillate. Basis rotation runs Adam's second
moment in an estimate of the eigenbasis, one per weight matrix G [r, c], from the EMAs of the
gradient's two Kronecker factors (the paper's default: two-sided, second-order source, as in
Shampoo / SOAP). At update t of a leaf (t = 1, 2, ...), with β_s = ``shampoo_beta`` (b2 if < 0):

    L <- β_s L + (1 - β_s) G Gᵀ,   R <- β_s R + (1 - β_s) Gᵀ G
    if t = 1:            Q_L, Q_R = eigenvectors of L, R, by decreasing eigenvalue
    elif t % freq = 0:   per side: sort Q's columns by diag(Qᵀ L Q) decreasing (v's rows or
                         columns with them), then Q <- qr(L Q) (one warm power iteration)
    m <- b1 m + (1 - b1) G                                    (momentum in the original basis)
    v <- b2 v + (1 - b2) (Q_Lᵀ G Q_R)²                        (second moment in the rotated one)
    u  = -[ wd·W + √(1 - b2^t)/(1 - b1^t) · Q_L ((Q_Lᵀ m Q_R) / (√v + eps)) Q_Rᵀ ]

(the update to add, learning rate 1: the core multiplies it by γ). The code rotates 2-D
parameters only; a leaf of any other rank gets plain Adam with decoupled decay (the same b1, b2,
eps, wd, bias-corrected as above). rpd's flat-vector objectives (the quadratics) give each block
as one vector: with ``vectors=True`` a vector of n entries is rotated as an [n, 1] matrix (its
one non-trivial side, the full n × n eigenbasis of its gradient covariance), which is what the
mechanism needs on a quadratic; the structured objectives (MLP chain, char LM) give each block's
leaves in their shapes and keep vectors on Adam, as the code does.

The state is per leaf, so in the core each pipeline block (stage) owns its bases and moments and
advances them at its own updates: the rotation composes with every schedule's semantics.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax


class LeafState(NamedTuple):
    m: jax.Array  # first moment, the leaf's shape (original basis)
    v: jax.Array  # second moment, the leaf's shape (rotated basis for a rotated leaf)
    L: jax.Array  # [r, r] EMA of G Gᵀ ([0, 0] for a leaf on plain Adam)
    R: jax.Array  # [c, c] EMA of Gᵀ G ([0, 0] for a vector or a plain leaf)
    QL: jax.Array
    QR: jax.Array


class RotatedAdamState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # a field named like tuple.count: typeshed's NamedTuple clash; int32 []: updates so far
    leaves: Any  # a LeafState per leaf


def _sides(shape, vectors: bool) -> tuple[int, int] | None:
    """(r, c) sizes of the two rotated sides (0: that side is not rotated); None: plain Adam."""
    if len(shape) == 2:
        return shape
    if len(shape) == 1 and vectors:
        return shape[0], 0
    return None


def _eigvecs(A: jax.Array) -> jax.Array:
    """Eigenvectors of the symmetric A by decreasing eigenvalue (the code's flipped eigh)."""
    return jnp.flip(jnp.linalg.eigh(A)[1], axis=1)


def _refine(A: jax.Array, Q: jax.Array, v: jax.Array, axis: int):
    """One warm power iteration: Q's columns (and v along ``axis``) sorted by diag(Qᵀ A Q)
    decreasing, then Q <- qr(A Q)."""
    order = jnp.argsort(-jnp.diag(Q.T @ A @ Q), stable=True)
    return jnp.linalg.qr(A @ Q[:, order])[0], jnp.take(v, order, axis=axis)


def adam_rotated(
    learning_rate: float,
    b1: float = 0.95,
    b2: float = 0.95,
    eps: float = 1e-8,
    weight_decay: float = 0.01,
    shampoo_beta: float = -1.0,
    frequency: int = 10,
    *,
    vectors: bool = True,
) -> optax.GradientTransformation:
    """The rotated Adam of the module docstring, for a pytree of leaves, its updates times
    ``learning_rate`` (rpd's core builds it with 1 and scales by γ outside)."""
    beta_s = b2 if shampoo_beta < 0 else shampoo_beta

    def init_leaf(p):
        sides = _sides(p.shape, vectors)
        r, c = sides if sides is not None else (0, 0)
        z = jnp.zeros_like(p)
        return LeafState(z, z, *(jnp.zeros((n, n), p.dtype) for n in (r, c, r, c)))

    def init(params):
        leaves = jax.tree.map(init_leaf, params)
        return RotatedAdamState(jnp.zeros((), jnp.int32), leaves)

    def update_leaf(g, st: LeafState, p, t):
        dtype = g.dtype
        tf = t.astype(dtype)
        scale = jnp.sqrt(1 - b2**tf) / (1 - b1**tf)
        m = b1 * st.m + (1 - b1) * g
        sides = _sides(g.shape, vectors)
        if sides is None:  # plain Adam (the code rotates 2-D parameters only)
            v = b2 * st.v + (1 - b2) * g**2
            u = scale * m / (jnp.sqrt(v) + eps)
            return -(weight_decay * p + u), LeafState(m, v, st.L, st.R, st.QL, st.QR)
        r, c = sides
        G = g.reshape(r, -1)
        L = beta_s * st.L + (1 - beta_s) * G @ G.T
        R = beta_s * st.R + (1 - beta_s) * G.T @ G if c else st.R
        vv = st.v.reshape(G.shape)

        def cold(_):
            return _eigvecs(L), (_eigvecs(R) if c else st.QR), vv

        def warm(_):
            QL, v1 = _refine(L, st.QL, vv, 0)
            QR, v2 = _refine(R, st.QR, v1, 1) if c else (st.QR, v1)
            return QL, QR, v2

        def keep(_):
            return st.QL, st.QR, vv

        branch = jnp.where(t == 1, 0, jnp.where(t % frequency == 0, 1, 2))
        QL, QR, vv = jax.lax.switch(branch, [cold, warm, keep], None)
        rot = (lambda X: QL.T @ X @ QR) if c else (lambda X: QL.T @ X)
        back = (lambda X: QL @ X @ QR.T) if c else (lambda X: QL @ X)
        vv = b2 * vv + (1 - b2) * rot(G) ** 2
        u = scale * back(rot(m.reshape(G.shape)) / (jnp.sqrt(vv) + eps))
        return -(weight_decay * p + u.reshape(g.shape)), LeafState(m, vv.reshape(g.shape), L, R, QL, QR)

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("adam_rotated needs the params (its weight decay)")
        t = optax.safe_int32_increment(state.count)
        flat_g, tree = jax.tree.flatten(updates)
        flat_s = tree.flatten_up_to(state.leaves)
        flat_p = tree.flatten_up_to(params)
        out = [update_leaf(g, s, p, t) for g, s, p in zip(flat_g, flat_s, flat_p)]
        return (
            tree.unflatten([o[0] for o in out]),
            RotatedAdamState(t, tree.unflatten([o[1] for o in out])),
        )

    tx = optax.GradientTransformation(init, update)
    return tx if learning_rate == 1 else optax.chain(tx, optax.scale(learning_rate))
