"""Objectives as explicit stage chains, and the two-point chain gradient (SPEC §1, §11).

A chain objective computes a_0 = input(batch), a_{s+1} = stage_s(x_s, a_s) for s = 0..S-1
and the loss head(a_S, target), plus an optional separable penalty Σ_s p(x_s). Pipeline
schedules that do not stash weights (PipeMare) run the forward of stage s with one version of
x_s and its backward with another, so the gradient they apply is

    forward:   a_{s+1} = stage_s(x^F_s, a_s)                      (activations kept)
    backward:  δ_S = ∇head(a_S);   for q = S-1 .. 0:
               g_q = (∂stage_q/∂x)(x^B_q, a_q)ᵀ δ_{q+1} + ∇p(x^B_q),
               δ_q = (∂stage_q/∂a)(x^B_q, a_q)ᵀ δ_{q+1}

:func:`two_point_value_and_grad` is exactly that; with x^F = x^B it is ``value_and_grad``. For
the additive linear chains of SPEC §5 (stage_s(x_s, a) = a + X_b[:, s] x_s) the input Jacobian
is the identity and the weight Jacobian does not depend on x_s, so x^B has no effect there
(only the penalty, taken at x^B); it matters for nonlinear chains (the MLP chain, the LM).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True, eq=False)
class Chain:
    """The stage structure of an objective; every function takes the objective's ``data``.

    ``inputs(data, b) -> (a_0, target)`` for dataset batch b; ``stage(data, s, x_s, a) -> a``
    (s is a Python int); ``head(data, a_S, target) -> loss``; ``penalty(x_s) -> scalar`` or
    None."""

    inputs: Callable[[Any, jax.Array], tuple[jax.Array, Any]]
    stage: Callable[[Any, int, jax.Array, jax.Array], jax.Array]
    head: Callable[[Any, jax.Array, Any], jax.Array]
    penalty: Callable[[jax.Array], jax.Array] | None = None


def chain_value(obj, data, x: jax.Array, b) -> jax.Array:
    """The minibatch loss f(x; b) computed through the chain."""
    a, target = obj.chain.inputs(data, b)
    for s in range(obj.S):
        a = obj.chain.stage(data, s, obj.block(x, s), a)
    loss = obj.chain.head(data, a, target)
    if obj.chain.penalty is not None:
        loss = loss + sum(obj.chain.penalty(obj.block(x, s)) for s in range(obj.S))
    return loss


def two_point_value_and_grad(obj, data, x_fwd: jax.Array, x_bwd: jax.Array, b) -> tuple[jax.Array, jax.Array]:
    """Loss at the forward weights and the flat [D] gradient of the module doc: forward with
    ``x_fwd``, each stage's VJP at ``x_bwd`` applied to the forward-time activations."""
    chain = obj.chain
    if chain is None:
        raise ValueError(f"objective {obj.name!r} does not expose its stage chain")
    a, target = chain.inputs(data, b)
    acts = [a]
    for s in range(obj.S):
        a = chain.stage(data, s, obj.block(x_fwd, s), a)
        acts.append(a)
    loss, delta = jax.value_and_grad(lambda out: chain.head(data, out, target))(a)
    grads = [None] * obj.S
    for q in reversed(range(obj.S)):
        _, vjp = jax.vjp(lambda xq, aq, q=q: chain.stage(data, q, xq, aq), obj.block(x_bwd, q), acts[q])
        grads[q], delta = vjp(delta)
    if chain.penalty is not None:
        loss = loss + sum(chain.penalty(obj.block(x_fwd, s)) for s in range(obj.S))
        grads = [g + jax.grad(chain.penalty)(obj.block(x_bwd, q)) for q, g in enumerate(grads)]
    return loss, jnp.concatenate(grads)
