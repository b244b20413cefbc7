"""DiLoCo's two optimizers for LocalSGD (docs/optimizers.md#diloco-localsgd-with-an-inner-and-an-outer-optimizer;
Douillard et al. 2023, "DiLoCo: Distributed Low-Communication Training of Language Models", Algorithm 1).

Inner: each replica r runs the ``optimizer=`` of every other method on its own microbatches, with
its own state, one state per pipeline block (as the stale core keeps it):

    u, state_r  <- inner.update(g_r, state_r, x_r);   x_r <- x_r + gamma * u.

Outer: at a sync the averaged pseudo-gradient Δ = θ − mean_r x_r is handed to an optax
transformation of the whole flat vector, θ <- θ + outer.update(Δ, outer_state, θ). DiLoCo's is
``optax.sgd(0.7, momentum=0.9, nesterov=True)``; ``sgd`` with learning rate 1 and no momentum is
θ <- θ − Δ = mean_r x_r, plain averaging, and :func:`resolve_outer` maps it to ``None``: the
averaging path of :mod:`rpd.train.localsgd`, bit for bit the results before DiLoCo existed.

What happens to the inner state at a sync (``inner_state``): ``keep`` (DiLoCo: local, neither
averaged nor reset), ``average`` (the replicas' float state leaves are replaced by their mean,
Local Adam; integer leaves such as step counts are kept), ``reset`` (every replica starts the
round from ``inner.init(θ)``). Plain SGD has no state, so the three coincide (tested).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax

from rpd.validation import check_choice, check_real

INNER_STATES = ("keep", "average", "reset")
OUTER_DEFAULTS: dict[str, dict[str, float]] = {
    "sgd": {"lr": 1.0, "beta": 0.0},  # plain averaging (lr 1, no momentum)
    "momentum": {"lr": 0.7, "beta": 0.9},
    "nesterov": {"lr": 0.7, "beta": 0.9},  # DiLoCo's outer optimizer
}
OUTER_NAMES = tuple(OUTER_DEFAULTS)


@dataclasses.dataclass(frozen=True)
class Outer:
    """A pinned outer optimizer: ``name`` (one of :data:`OUTER_NAMES`, or ``"custom"`` with
    ``custom`` a user's ``optax.GradientTransformation``), learning rate ``lr`` and momentum
    ``beta`` (optax's undampened trace). Hashable: a static option of LocalSGD's program."""

    name: str
    lr: float = 1.0
    beta: float = 0.0
    custom: object = None

    @property
    def stable(self) -> bool:
        return self.custom is None

    def transform(self) -> optax.GradientTransformation:
        if self.custom is not None:
            return self.custom
        momentum = self.beta if self.beta > 0 else None
        return optax.sgd(self.lr, momentum=momentum, nesterov=self.name == "nesterov")


def make_outer(name: str, *, lr: float | None = None, beta: float | None = None) -> Outer:
    """A named outer optimizer with its defaults (:data:`OUTER_DEFAULTS`), some overridden."""
    check_choice("outer_optimizer", name, OUTER_NAMES)
    d = OUTER_DEFAULTS[name]
    lr = check_real("outer_optimizer.lr", d["lr"] if lr is None else lr)
    beta = float(d["beta"] if beta is None else beta)
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"outer_optimizer.beta must lie in [0, 1), got {beta}")
    if name == "sgd" and beta > 0:
        raise ValueError("outer_optimizer.beta: sgd has no momentum (use outer_optimizer=momentum or nesterov)")
    if name != "sgd" and beta == 0:
        raise ValueError(f"outer_optimizer.beta: {name} needs a momentum in (0, 1), got 0")
    return Outer(name, float(lr), beta)


def resolve_outer(outer) -> Outer | None:
    """None for plain averaging (``None``, ``"sgd"``, an outer sgd with lr 1 and no momentum);
    otherwise an :class:`Outer` from a name, a dict ``{"name": ..., "lr": ..., "beta": ...}`` (a
    config node; None values are the defaults), an Outer or an optax transformation."""
    if outer is None:
        return None
    if isinstance(outer, str):
        outer = make_outer(outer)
    elif isinstance(outer, dict):
        d = dict(outer)
        name = d.pop("name", "sgd")
        unknown = sorted(set(d) - {"lr", "beta"})
        if unknown:
            raise ValueError(f"outer_optimizer has no field {unknown} (its: ['beta', 'lr', 'name'])")
        outer = make_outer(name, **d)
    elif isinstance(outer, optax.GradientTransformation):
        outer = Outer("custom", custom=outer)
    elif not isinstance(outer, Outer):
        raise TypeError(
            f"outer_optimizer must be None, a name, a dict, an Outer or an optax transformation, got {type(outer).__name__}"
        )
    averaging = outer.custom is None and outer.name == "sgd" and outer.lr == 1.0 and outer.beta == 0.0
    return None if averaging else outer


def describe_outer(outer: Outer | None) -> dict:
    """Plain values for a result's meta."""
    if outer is None:
        return {"name": "sgd", "lr": 1.0, "beta": 0.0}
    return (
        {"name": outer.name} if outer.custom is not None else {"name": outer.name, "lr": outer.lr, "beta": outer.beta}
    )


def check_inner_state(inner_state: str) -> str:
    return check_choice("inner_state", inner_state, INNER_STATES)


def average_state(state, mean):
    """The state with every float leaf replaced by ``mean(leaf)`` (integer leaves kept)."""
    return jax.tree.map(lambda leaf: mean(leaf) if jnp.issubdtype(leaf.dtype, jnp.floating) else leaf, state)
