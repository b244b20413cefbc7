"""Undoing an Adam(W) step exactly (ZB-H2's optimizer post-validation,
docs/schedules.md#zb-h2-with-optimizer-post-validation).

sail-sg's ``zbpp_optimizer_helper.rollback_adamw`` (@39f2c186) inverts apex FusedAdam's AdamW
step in place when the post-validated global norm says the eager step was wrong (clipping or a
non-finite norm). Written here for optax's ``ScaleByAdamState`` (``optax.adam`` /
``optax.adamw``: updates are added, so the step was p_t = p_{t-1} - lr (m̂/(√v̂ + ε) + wd p_{t-1})
with m̂ = m_t / (1 - β1^t), v̂ = v_t / (1 - β2^t)):

    p_{t-1} = (p_t + lr m̂/(√v̂ + ε)) / (1 - lr wd),
    v_{t-1} = (v_t - (1 - β2) g²) / β2,    m_{t-1} = (m_t - (1 - β1) g) / β1,    t -= 1,

g the gradient the step used. Exact up to float rounding (tested against optax's own step).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def adam_rollback(
    params,
    state: optax.ScaleByAdamState,
    grad,
    *,
    lr: float,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
):
    """(params, state) before the Adam(W) step that used ``grad`` and produced ``params``,
    ``state`` (module doc); pytrees as optax's. ``eps_root`` must have been 0."""
    t = state.count
    c1 = 1 - b1 ** t.astype(jnp.float64)
    c2 = 1 - b2 ** t.astype(jnp.float64)

    def undo(p, m, v):
        return (p + lr * (m / c1) / (jnp.sqrt(v / c2) + eps)) / (1 - lr * weight_decay)

    params = jax.tree.map(undo, params, state.mu, state.nu)
    mu = jax.tree.map(lambda m, g: (m - (1 - b1) * g) / b1, state.mu, grad)
    nu = jax.tree.map(lambda v, g: (v - (1 - b2) * g * g) / b2, state.nu, grad)
    return params, optax.ScaleByAdamState(count=t - 1, mu=mu, nu=nu)
