"""Correction arms for optimizers under staleness (docs/optimizers.md#correction-arms), each an optax wrapper around any
optimizer, applied per pipeline block (the core updates one block at a time; block s is stage s):

- ``pipemare_lr`` (PipeMare's learning-rate rescheduling, Yang et al. 2021, "PipeMare:
  Asynchronous Pipeline Parallel DNN Training", MLSys): block s's update is scaled by
  τ_s^-(1 - min(k / K, 1)), k the block's update count, K the warm-up window; with τ_s = 0 or 1
  the factor is 1. :func:`pipemare_lr` wraps any transformation.
- ``delay_beta1`` (β1 raised with the stage's delay, β1_s = β + τ_s (0.99 - β) / S, from the
  asynchronous pipeline Nesterov work, Ajanthan et al., ICML 2025): the block's optimizer is
  rebuilt with its momentum (``beta``, or Adam's ``b1``) replaced by :func:`delay_beta1`, capped at
  ``beta_max`` (0.99) where τ_s > S (RPD's random delays); it needs a named optimizer with a
  momentum, so plain SGD and a user's own transformation are refused.
- ``dc_asgd`` (DC-ASGD, Zheng et al. 2017, "Asynchronous Stochastic Gradient Descent with Delay
  Compensation", ICML, the constant-λ variant): the gradient g, read at the stale point
  w_stale, is replaced by g + λ g ⊙ g ⊙ (w_t - w_stale) before the optimizer sees it.
  :func:`dc_asgd` wraps any transformation and takes ``stale`` as an extra argument; the core
  passes block a of the exact point the gradient was read at (the plan's ``read`` version of
  block a, moved by the prediction horizon when the plan predicts), which the history ring
  holds (the ring is sized for it). A two-point plan (PipeMare: forward and backward at
  different versions) has no single stale point and is refused.
- ``error_feedback`` (an error-feedback correction for delayed updates, after Zmushko, Petrov,
  Abdullaev, Khrushchev, Horváth 2026, "One-Step Gradient Delay is Not a Barrier for Large-Scale
  Asynchronous Pipeline Parallel LLM Pretraining", arXiv 2606.30634). A RECONSTRUCTION: the
  paper's exact update could not be read here; this is the closest documented error-feedback
  rule (docs/optimizers.md). A block whose gradients are τ_s steps old applies at step k the
  update its optimizer computed one step of information late; the error of that late step, the
  change u_k - u_{k-1} of the optimizer's own update, becomes known at step k and is fed back,
  scaled by the delay: the applied update is u_k + λ τ_s (u_k - u_{k-1}) (no feedback at a
  block's first update). With τ_s = 0 (no delay) or λ = 0 it is the base optimizer; under
  2BW (τ_s = 1) and λ = 1 it is 2 u_k - u_{k-1}. :func:`error_feedback` wraps any transformation.

τ_s is the median own-block delay of block s over the plan (:func:`block_delays`: the updates
block s received between the version its gradient read and the update applying it; PipeDream
1F1B in steady state: S - 1 - s; RPD's uniform delays: about δ / 2).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rpd.train.plans import UpdatePlan, versions_before
from rpd.validation import check_choice, check_int, check_real

DEFAULTS: dict[str, dict[str, Any]] = {
    "pipemare_lr": {"window": None},  # K, updates per block; None: a quarter of the plan's
    "delay_beta1": {"beta_max": 0.99},
    "dc_asgd": {"lam": 0.04},  # DC-ASGD-c's constant λ (Zheng et al. 2017, CIFAR-10)
    "error_feedback": {"lam": 1.0},  # the feedback's weight per step of delay (a reconstruction)
}
NAMES = tuple(DEFAULTS)


@dataclasses.dataclass(frozen=True)
class Correction:
    """A correction arm: ``name`` (one of :data:`NAMES`), its parameters ``params`` (sorted
    pairs) and, once bound to a plan (:func:`bind`), ``taus``: τ_s of every block."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()
    taus: tuple[int, ...] | None = None

    @property
    def p(self) -> dict:
        return dict(self.params)


def make(name: str, **params) -> Correction:
    """A named correction with its defaults, some overridden (None keeps the default)."""
    check_choice("optimizer.correction", name, NAMES)
    unknown = sorted(set(params) - set(DEFAULTS[name]))
    if unknown:
        raise ValueError(f"optimizer.correction={name} has no parameter {unknown} (its: {sorted(DEFAULTS[name])})")
    values = {**DEFAULTS[name], **{k: v for k, v in params.items() if v is not None}}
    if values.get("window") is not None:
        values["window"] = check_int("optimizer.correction_window", values["window"])
    if "beta_max" in values and not 0.0 < float(values["beta_max"]) < 1.0:
        raise ValueError(f"optimizer.correction_beta_max must lie in (0, 1), got {values['beta_max']}")
    if "lam" in values:
        values["lam"] = check_real("optimizer.correction_lam", values["lam"], allow_zero=True)
    return Correction(name, tuple(sorted(values.items())))


def resolve(correction) -> Correction | None:
    """None, a name, a dict ``{"name": ..., params...}`` or a Correction."""
    if correction is None or isinstance(correction, Correction):
        return correction
    if isinstance(correction, str):
        return make(correction)
    if isinstance(correction, dict):
        d = dict(correction)
        return make(d.pop("name"), **d)
    raise TypeError(f"optimizer.correction must be a name, a dict or a Correction, got {type(correction).__name__}")


def own_delays(plan: UpdatePlan, S: int) -> np.ndarray:
    """int [K]: update k's own-block delay, the updates block a_k received between the version
    of a_k its gradient read and update k."""
    block = np.asarray(plan.block)
    k = np.arange(len(block))
    return versions_before(block, S)[:-1][k, block] - np.asarray(plan.read)[k, block]


def block_delays(plan: UpdatePlan, S: int) -> tuple[int, ...]:
    """τ_s per block: the (lower) median own-block delay over the plan's updates of block s
    (0 for a block never updated): PipeDream's steady state S - 1 - s, not its warm-up
    transient (which reaches S - 1 on stages 0 and 1)."""
    own, block = own_delays(plan, S), np.asarray(plan.block)
    return tuple(int(np.percentile(own[block == s], 50, method="lower")) if np.any(block == s) else 0 for s in range(S))


def stale_ring(plan: UpdatePlan, S: int) -> int:
    """The ring size that keeps the version of block a every update of a reads (DC-ASGD)."""
    return int(own_delays(plan, S).max(initial=0)) + 1


def bind(correction: Correction, plan: UpdatePlan, S: int) -> Correction:
    """The correction with the plan's τ_s (and PipeMare's default window: a quarter of the
    updates of the most-updated block)."""
    if plan.read_bwd is not None and correction.name == "dc_asgd":
        raise ValueError(
            "optimizer.correction=dc_asgd: this plan's gradient reads two points (forward and "
            "backward weights, PipeMare); DC-ASGD needs the one stale point it was read at"
        )
    params = correction.p
    if correction.name == "pipemare_lr" and params["window"] is None:
        params["window"] = max(1, int(np.bincount(np.asarray(plan.block), minlength=S).max()) // 4)
    return Correction(correction.name, tuple(sorted(params.items())), block_delays(plan, S))


def delay_beta1(beta: float, tau: int, S: int, beta_max: float = 0.99) -> float:
    """β1_s = β + τ_s (β_max - β) / S, capped at β_max (and never below β)."""
    return float(min(max(beta + tau * (beta_max - beta) / S, beta), max(beta, beta_max)))


class PipeMareLRState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # a field named like tuple.count: typeshed's NamedTuple clash; int32 []: updates this block has received
    inner: Any  # the wrapped transformation's state


def pipemare_lr(inner: optax.GradientTransformation, tau: int, window: int) -> optax.GradientTransformationExtraArgs:
    """``inner`` with its updates scaled by max(τ, 1)^-(1 - min(k / window, 1)), k = count."""
    inner = optax.with_extra_args_support(inner)
    base = float(max(int(tau), 1))  # the factor's base, max(τ, 1)

    def init(params):
        return PipeMareLRState(jnp.zeros((), jnp.int32), inner.init(params))

    def update(updates, state, params=None, **extra):
        u, new = inner.update(updates, state.inner, params, **extra)
        dtype = jax.tree.leaves(u)[0].dtype  # int32 / int is float32: compute in the params' dtype
        progress = jnp.minimum(state.count.astype(dtype) / window, 1.0)
        factor = jnp.power(jnp.asarray(base, dtype), -(1.0 - progress))
        u = jax.tree.map(lambda leaf: leaf * factor, u)
        return u, PipeMareLRState(optax.safe_int32_increment(state.count), new)

    return optax.GradientTransformationExtraArgs(init, update)


def dc_asgd(inner: optax.GradientTransformation, lam: float) -> optax.GradientTransformationExtraArgs:
    """``inner`` fed g + λ g ⊙ g ⊙ (params - stale); ``stale`` (the point g was read at, the
    params' structure) is an extra argument of ``update``."""
    inner = optax.with_extra_args_support(inner)

    def update(updates, state, params=None, *, stale=None, **extra):
        if params is None or stale is None:
            raise ValueError("dc_asgd needs the current params and the stale point (stale=...)")
        g = jax.tree.map(lambda g, w, v: g + lam * g * g * (w - v), updates, params, stale)
        return inner.update(g, state, params, **extra)

    return optax.GradientTransformationExtraArgs(inner.init, update)


class ErrorFeedbackState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # a field named like tuple.count: typeshed's NamedTuple clash; int32 []: updates this block has applied
    previous: Any  # the inner transformation's last update u_{k-1} (zeros before the first)
    inner: Any


def error_feedback(inner: optax.GradientTransformation, tau: int, lam: float) -> optax.GradientTransformationExtraArgs:
    """``inner`` with its update u_k replaced by u_k + λ τ (u_k - u_{k-1}) from the block's second
    update on (a reconstruction of the one-step-delay paper's correction; module docstring)."""
    inner = optax.with_extra_args_support(inner)
    weight = float(lam) * float(max(int(tau), 0))

    def init(params):
        return ErrorFeedbackState(jnp.zeros((), jnp.int32), jax.tree.map(jnp.zeros_like, params), inner.init(params))

    def update(updates, state, params=None, **extra):
        u, new = inner.update(updates, state.inner, params, **extra)
        on = state.count > 0
        out = jax.tree.map(lambda a, b: a + jnp.where(on, weight * (a - b), 0.0), u, state.previous)
        return out, ErrorFeedbackState(optax.safe_int32_increment(state.count), u, new)

    return optax.GradientTransformationExtraArgs(init, update)
