"""A nonlinear chain: deep MLP teacher-student regression, one layer per stage (docs/science.md#objectives).

Stage s maps a_s in R^{B x w} to tanh(a_s W_sᵀ + c_s) (the last stage is linear), block s is
(W_s, c_s) flattened (w² + w values). Targets come from a teacher of the same architecture, so
the student can reach the teacher's weights exactly and f* = 0. Unlike the linear chains of
docs/science.md#objectives, the input Jacobian of a stage depends on its weights, so a backward at weights other
than the forward's (PipeMare, weight prediction) changes the gradient.

Host-side data in ``numpy.random.default_rng(seed)`` order: inputs X ~ N(0, 1)^{n x w}, then
the teacher's layers (W ~ N(0, gain²/w), c ~ N(0, 0.1²)), then the student's (the same law),
all float64. L is estimated as the largest Hessian eigenvalue of f at x_0 by power iteration
on Hessian-vector products (a local estimate: the MLP is not globally L-smooth).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from rpd.objectives.base import BlockLayout, Objective, on_device
from rpd.objectives.chain import Chain, chain_value
from rpd.runtime.programs import named_builder
from rpd.validation import check_int, check_real


@dataclasses.dataclass(frozen=True)
class MLPChainParams:
    """The config of :func:`mlp_chain` (``objective=mlp_chain``: its schema and defaults,
    docs/architecture.md#adding-an-objective)."""

    n: int = 512  # examples; a multiple of batch_size
    width: int = 32  # w, every layer's width
    batch_size: int = 16
    seed: int = 0


def _layers(rng, S: int, w: int, gain: float) -> list[np.ndarray]:
    return [
        np.concatenate([(gain / np.sqrt(w) * rng.standard_normal((w, w))).ravel(), 0.1 * rng.standard_normal(w)])
        for _ in range(S)
    ]


class _Shell:
    """What ``chain.chain_value`` reads of an objective (its chain and block layout)."""

    def __init__(self, chain: Chain, layout: BlockLayout):
        self.chain, self.layout, self.S = chain, layout, layout.S

    def block(self, x, s):
        off = self.layout.offsets[s]
        return x[..., off : off + self.layout.sizes[s]]


@named_builder
def _functions(w: int, S: int, B: int):
    """(chain, value_and_grad, loss, jitted forward, jitted Hessian-vector product) of the MLP
    chain, memoized on its static parameters: equal parameters give the same function objects,
    so rebuilt objectives (and other seeds) reuse compiled programs."""

    def stage(data, s, x_s, a):
        z = a @ x_s[: w * w].reshape(w, w).T + x_s[None, w * w :]
        return jnp.tanh(z) if s < S - 1 else z

    def head(data, out, target):
        return 0.5 * jnp.mean(jnp.sum((out - target) ** 2, axis=-1)) / w

    def forward(x, inputs):
        a = inputs
        for s in range(S):
            a = stage(None, s, x[s * (w * w + w) : (s + 1) * (w * w + w)], a)
        return a

    def inputs(data, b):
        return (
            jax.lax.dynamic_slice_in_dim(data["X"], b * B, B, axis=0),
            jax.lax.dynamic_slice_in_dim(data["Y"], b * B, B, axis=0),
        )

    chain = Chain(inputs=inputs, stage=stage, head=head)
    shell = _Shell(chain, BlockLayout((w * w + w,) * S))

    def value_and_grad(data, x, b):
        return jax.value_and_grad(lambda x: chain_value(shell, data, x, b))(x)

    def loss(data, x):
        return head(data, forward(x, data["X"]), data["Y"])

    hvp = jax.jit(lambda data, x0, v: jax.jvp(jax.grad(lambda x: loss(data, x)), (x0,), (v,))[1])
    return chain, value_and_grad, loss, jax.jit(forward), hvp


def mlp_chain(n: int, width: int, S: int, batch_size: int, seed: int = 0, gain: float = 1.5) -> Objective:
    """Teacher-student regression f(x) = (1/2n) Σ_i ||student_x(X_i) - teacher(X_i)||² / w with
    S layers of width ``width``, one per stage; f* = 0 (the teacher is a student)."""
    n, w, S = check_int("n", n), check_int("width", width), check_int("S", S)
    B = check_int("batch_size", batch_size)
    gain = check_real("gain", gain)
    if n % B:
        raise ValueError(f"n must be a multiple of batch_size, got n={n}, batch_size={B}")
    if n * w + 2 * S * (w * w + w) > 2 * 10**8:
        raise ValueError(f"mlp_chain with n={n}, width={w}, S={S} needs more than 1.6 GB of float64")
    rng = np.random.default_rng(check_int("seed", seed, 0))
    X = rng.standard_normal((n, w))
    teacher = np.concatenate(_layers(rng, S, w, gain))
    student = np.concatenate(_layers(rng, S, w, gain))
    chain, value_and_grad, loss, forward, _ = _functions(w, S, B)
    Y = np.asarray(forward(on_device(teacher), on_device(X)))
    layout = BlockLayout((w * w + w,) * S)
    obj = Objective(
        name="mlp_chain",
        layout=layout,
        n_batches=n // B,
        x0=on_device(student),
        data={"X": on_device(X), "Y": on_device(Y)},
        value_and_grad=value_and_grad,
        loss=loss,
        f_star=0.0,
        batch_size=B,
        chain=chain,
        meta=dict(kind="mlp_chain", n=n, width=w, S=S, batch_size=B, gain=gain, seed=seed, teacher=teacher),
    )
    return dataclasses.replace(obj, L=_top_hessian_eigenvalue(obj))


def _top_hessian_eigenvalue(obj: Objective, iters: int = 30) -> float:
    """Largest |eigenvalue| of the full-data Hessian at x_0 by power iteration."""
    m = obj.meta
    hvp = _functions(m["width"], m["S"], m["batch_size"])[4]  # data and x0 as arguments: compiled once
    v = on_device(np.random.default_rng(0).standard_normal(obj.D))
    lam = 0.0
    for _ in range(iters):
        hv = hvp(obj.data, obj.x0, v / jnp.linalg.norm(v))
        lam = float(jnp.linalg.norm(hv))
        v = hv
    return lam
