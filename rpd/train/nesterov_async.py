"""Nesterov's method for asynchronous pipelines (``optimizer=nesterov_async``): Ajanthan,
Ramasinghe, Zuo, Avraham, Long, "Nesterov Method for Asynchronous Pipeline Parallel
Optimization", ICML 2025, arXiv 2505.01099; its public PipeDream-based implementation,
``PluralisResearch/AsyncPP`` (``optim/nadamw.py``, ``main_with_runtime.py``, ``run.bash``), read
for meaning and written anew here (docs/optimizers.md).

The method is Nesterov's accelerated gradient with its look-ahead taken by the step itself (the
NAdam form: the step adds the momentum one step ahead, μ_{t+1} m_t, to the fresh part of the
gradient), applied to the stale gradient of an asynchronous pipeline with weight stashing; the
delay enters through the momentum: a stage whose gradients are τ_s of its own steps old uses

    β1_s = b1 + τ_s (β_max - b1) / S           (the code's ``--adaptive_momentum``, β_max 0.99)

so the look-ahead reaches further the staler the stage (PipeDream 1F1B: τ_s = S - 1 - s; 2BW:
1; no delay: β1_s = b1, the base optimizer). The step is torch's NAdam with decoupled weight
decay, which the code runs (``torch.optim.NAdam``, momentum_decay 0.004): at step t = 1, 2, ...
of a block,

    μ_t = β1_s (1 - ½·0.96^(t·ψ)),  Π_t = μ_1 ··· μ_t                  (ψ = momentum_decay)
    m <- β1_s m + (1 - β1_s) g,     v <- b2 v + (1 - b2) g²,   d = √(v / (1 - b2^t)) + eps
    u  = -[ wd·W + (1 - μ_t) / (1 - Π_t) · g / d + μ_{t+1} / (1 - Π_t μ_{t+1}) · m / d ]

(the update to add, learning rate 1; the core multiplies it by γ). The code's headline run sets
b1 = 0.99 (``--momentum 0.99``), at which the per-stage rule is the identity; rpd's default b1 =
0.9 lets the delay set the momentum. τ_s is bound from the run's plan (the median own-block delay
of stage s, :func:`rpd.train.corrections.block_delays`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from rpd.train.corrections import delay_beta1


class NesterovAsyncState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # a field named like tuple.count: typeshed's NamedTuple clash; int32 []: steps so far
    mu_product: jax.Array  # Π_t (float, the params' dtype)
    m: optax.Updates
    v: optax.Updates


def stage_beta1(b1: float, tau: int, S: int, beta_max: float = 0.99) -> float:
    """β1_s = b1 + τ_s (β_max - b1) / S, capped at β_max (b1 with no delay)."""
    return delay_beta1(b1, tau, max(int(S), 1), beta_max) if tau > 0 else float(b1)


def nesterov_async(
    learning_rate: float,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    momentum_decay: float = 0.004,
    weight_decay: float = 0.0,
    beta_max: float = 0.99,
    *,
    tau: int = 0,
    S: int = 1,
) -> optax.GradientTransformation:
    """The look-ahead step of the module docstring for a stage with delay ``tau`` of ``S``, its
    updates times ``learning_rate`` (rpd's core builds it with 1 and scales by γ outside)."""
    beta1 = stage_beta1(b1, tau, S, beta_max)

    def init(params):
        dtype = jax.tree.leaves(params)[0].dtype
        zeros = jax.tree.map(jnp.zeros_like, params)
        return NesterovAsyncState(jnp.zeros((), jnp.int32), jnp.ones((), dtype), zeros, zeros)

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("nesterov_async needs the params (its weight decay)")
        t = optax.safe_int32_increment(state.count)
        dtype = state.mu_product.dtype
        tf = t.astype(dtype)
        mu = beta1 * (1 - 0.5 * 0.96 ** (tf * momentum_decay))
        mu_next = beta1 * (1 - 0.5 * 0.96 ** ((tf + 1) * momentum_decay))
        prod = state.mu_product * mu
        m = jax.tree.map(lambda m, g: beta1 * m + (1 - beta1) * g, state.m, updates)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state.v, updates)
        c_g, c_m = (1 - mu) / (1 - prod), mu_next / (1 - prod * mu_next)

        def step(g, m, v, p):
            d = jnp.sqrt(v / (1 - b2**tf)) + eps
            return -(weight_decay * p + c_g * g / d + c_m * m / d)

        u = jax.tree.map(step, updates, m, v, params)
        return u, NesterovAsyncState(t, prod, m, v)

    tx = optax.GradientTransformation(init, update)
    return tx if learning_rate == 1 else optax.chain(tx, optax.scale(learning_rate))
