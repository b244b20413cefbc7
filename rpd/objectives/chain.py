"""Objectives as explicit stage chains, and the two-point chain gradient (docs/science.md#model-and-words,
docs/schedules.md#training-semantics).

A chain objective computes a_0 = input(batch), a_{s+1} = stage_s(x_s, a_s) for s = 0..S-1
and the loss head(a_S, target), plus an optional separable penalty Σ_s p(x_s). Pipeline
schedules that do not stash weights (PipeMare) run the forward of stage s with one version of
x_s and its backward with another, so the gradient they apply is

    forward:   a_{s+1} = stage_s(x^F_s, a_s)                      (activations kept)
    backward:  δ_S = ∇head(a_S);   for q = S-1 .. 0:
               g_q = (∂stage_q/∂x)(x^B_q, a_q)ᵀ δ_{q+1} + ∇p(x^B_q),
               δ_q = (∂stage_q/∂a)(x^B_q, a_q)ᵀ δ_{q+1}

:func:`two_point_value_and_grad` is exactly that; with x^F = x^B it is ``value_and_grad``. Its
two halves are exposed for a pipeline that runs them at different times: :func:`forward` (the
loss, the kept activations and δ_S) and :func:`stage_vjp` (one stage's backward). An activation
is any pytree; cotangents are carried for its floating-point leaves only (integer leaves, such
as token ids or a batch index, are data). For the additive linear chains of docs/science.md#objectives
(stage_s(x_s, a) = a + X_b[:, s] x_s) the input Jacobian is the identity and the weight
Jacobian does not depend on x_s, so x^B has no effect there (only the penalty, taken at x^B);
it matters for nonlinear chains (the MLP chain, the LM).
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
    None. Activations are pytrees of arrays, and their floating-point leaves carry the
    gradient."""

    inputs: Callable[[Any, jax.Array], tuple[Any, Any]]
    stage: Callable[[Any, int, jax.Array, Any], Any]
    head: Callable[[Any, Any, Any], jax.Array]
    penalty: Callable[[jax.Array], jax.Array] | None = None


def _is_floating(leaf) -> bool:
    return jnp.issubdtype(leaf.dtype, jnp.inexact)


def floating(a) -> list:
    """The floating-point leaves of an activation: the ones a cotangent is carried for."""
    return [leaf for leaf in jax.tree.leaves(a) if _is_floating(leaf)]


def integer(a) -> list:
    """The other leaves of an activation (token ids, a batch index): data, with no cotangent."""
    return [leaf for leaf in jax.tree.leaves(a) if not _is_floating(leaf)]


def merge(a, floats: list, ints: list):
    """An activation shaped like ``a`` (arrays or ShapeDtypeStructs) whose floating leaves
    are ``floats`` and other leaves ``ints``, in order."""
    leaves, treedef = jax.tree.flatten(a)
    next_float, next_int = iter(floats), iter(ints)
    return jax.tree.unflatten(treedef, [next(next_float) if _is_floating(leaf) else next(next_int) for leaf in leaves])


def _chain(obj) -> Chain:
    if obj.chain is None:
        raise ValueError(f"objective {obj.name!r} does not expose its stage chain")
    return obj.chain


def chain_value(obj, data, x: jax.Array, b) -> jax.Array:
    """The minibatch loss f(x; b) computed through the chain."""
    a, target = obj.chain.inputs(data, b)
    for s in range(obj.S):
        a = obj.chain.stage(data, s, obj.block(x, s), a)
    loss = obj.chain.head(data, a, target)
    if obj.chain.penalty is not None:
        loss = loss + sum(obj.chain.penalty(obj.block(x, s)) for s in range(obj.S))
    return loss


def forward(obj, data, x_fwd: jax.Array, b) -> tuple[jax.Array, list, list[jax.Array]]:
    """The forward half at ``x_fwd`` on batch b: (loss f(x_fwd; b), [a_0, .., a_{S-1}], δ_S),
    δ_S = ∇head(a_S) (a list: one array per floating leaf of a_S)."""
    chain = _chain(obj)
    a, target = chain.inputs(data, b)
    acts = []
    for s in range(obj.S):
        acts.append(a)
        a = chain.stage(data, s, obj.block(x_fwd, s), a)
    loss, delta = jax.value_and_grad(lambda leaves: chain.head(data, merge(a, leaves, integer(a)), target))(floating(a))
    if chain.penalty is not None:
        loss = loss + sum(chain.penalty(obj.block(x_fwd, s)) for s in range(obj.S))
    return loss, acts, delta


def stage_vjp(obj, data, s: int, x_s: jax.Array, a_s, delta: list[jax.Array]) -> tuple[jax.Array, list[jax.Array]]:
    """The backward of stage s at weights ``x_s`` on its kept input ``a_s``, applied to
    δ_{s+1}: (g_s, δ_s) of the module doc, the penalty's gradient at ``x_s`` included."""
    chain = _chain(obj)
    _, vjp = jax.vjp(
        lambda x, leaves: floating(chain.stage(data, s, x, merge(a_s, leaves, integer(a_s)))), x_s, floating(a_s)
    )
    g, delta = vjp(delta)
    if chain.penalty is not None:
        g = g + jax.grad(chain.penalty)(x_s)
    return g, delta


def two_point_value_and_grad(obj, data, x_fwd: jax.Array, x_bwd: jax.Array, b) -> tuple[jax.Array, jax.Array]:
    """Loss at the forward weights and the flat [D] gradient of the module doc: forward with
    ``x_fwd``, each stage's VJP at ``x_bwd`` applied to the forward-time activations."""
    loss, acts, delta = forward(obj, data, x_fwd, b)
    grads: dict[int, jax.Array] = {}
    for q in reversed(range(obj.S)):
        grads[q], delta = stage_vjp(obj, data, q, obj.block(x_bwd, q), acts[q], delta)
    return loss, jnp.concatenate([grads[q] for q in range(obj.S)])
