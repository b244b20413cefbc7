"""Optimizers for the stale block core (SPEC §13): one interface over optax.

An :class:`Optimizer` names an optax transformation with every hyper-parameter pinned, or wraps
a user's own ``optax.GradientTransformation``. The core (``rpd.train.core``) keeps one optimizer
state per block (each pipeline stage keeps the state of its own weights) and applies, at update
k of block a,

    u, state_a  <- transform.update(g_a, state_a, x_a)     (g_a: the stale gradient's block a)
    x_a         <- x_a + gamma * u                         (gamma: the vmapped step size)

so a block's state advances once per applied gradient, at update time, in the order the
gradients arrive, and it is never stashed with the weights (PipeDream stashes weights only). The
transforms are built with learning rate 1 in optax's convention (updates are added, so ``u`` is
minus the direction), and the step size scales them outside: the γ grid stays one vmapped
compile. A user's own transformation follows the same rule: its updates are multiplied by γ
(give ``gamma=1`` to use its own learning rate as is). The transform sees one block at a time
(a global-norm clip is a per-block clip).

Plain SGD (``optimizer=None`` or ``"sgd"``) resolves to ``None``: the core's original path, bit
for bit. Muon (``optax.contrib.muon``) orthogonalises 2-D leaves only and hands every other leaf
to Adam: on a flat parameter vector it would silently be Adam, so it needs each block's weight
matrices in their shapes (:func:`block_shapes`: the MLP chain and the char LM have them) and is
refused with a ValueError on every other objective.

Defaults, optax vs torch (every one pinned here, so a config says what ran):

- momentum / nesterov: optax's trace t <- g + β t is undampened, like torch's SGD with
  dampening=0 (torch's own default momentum is 0); Nesterov's direction g + β t in both.
- adam: b1 0.9, b2 0.999, eps 1e-8 added outside the square root (torch's too), eps_root 0.
- adamw: weight decay 1e-2 (torch's default; optax's is 1e-4), decoupled and multiplied by the
  learning rate in both (x <- x - lr (m̂/(√v̂+ε) + wd x)).
- nadam: optax's NAdam is Adam with Nesterov's momentum m̂ = β1 m_t/(1-β1^{t+1}) + (1-β1) g/(1-β1^t);
  torch's NAdam also decays β1 over time (momentum_decay 4e-3), which optax does not.
- muon: optax.contrib's defaults (β 0.95, Nesterov, 5 Newton-Schulz steps with coefficients
  (3.4445, -4.775, 2.0315), eps 1e-8, no weight decay; non-matrix leaves to Adam with b1 0.9,
  b2 0.999); the Muon reference code (Keller Jordan's) uses the same β and coefficients.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

from rpd.objectives.base import Objective
from rpd.objectives.nanochat import init_params
from rpd.validation import check_choice

DEFAULTS: dict[str, dict[str, Any]] = {
    "sgd": {},
    "momentum": {"beta": 0.9},
    "nesterov": {"beta": 0.9},
    "adam": {"b1": 0.9, "b2": 0.999, "eps": 1e-8, "eps_root": 0.0},
    "adamw": {"b1": 0.9, "b2": 0.999, "eps": 1e-8, "eps_root": 0.0, "weight_decay": 1e-2},
    "nadam": {"b1": 0.9, "b2": 0.999, "eps": 1e-8, "eps_root": 0.0},
    "muon": {
        "beta": 0.95,
        "nesterov": True,
        "ns_steps": 5,
        "ns_coeffs": (3.4445, -4.775, 2.0315),
        "eps": 1e-8,
        "weight_decay": 0.0,
        "adam_b1": 0.9,
        "adam_b2": 0.999,
        "adam_eps_root": 0.0,
        "adam_weight_decay": 0.0,
    },
}
NAMES = tuple(DEFAULTS)
MATRICES = ("muon",)  # optimizers that must see each block's weight matrices in their shapes
STRUCTURED = ("mlp_chain", "nanochat")  # objectives whose blocks :func:`block_shapes` knows


@dataclasses.dataclass(frozen=True)
class Optimizer:
    """A pinned optimizer: ``name`` (one of :data:`NAMES`, or ``"custom"`` for ``custom``, a
    user's ``optax.GradientTransformation``), its hyper-parameters ``hyper`` (sorted (name,
    value) pairs, every one of the name's :data:`DEFAULTS`), and, once bound to an objective
    (:func:`bind`), ``shapes``: per block, the shapes of its leaves in ravel order (None: one
    flat vector per block). Hashable: a static option of the compiled core."""

    name: str
    hyper: tuple[tuple[str, Any], ...] = ()
    custom: Any = None
    matrices: bool = False
    shapes: tuple[tuple[tuple[int, ...], ...], ...] | None = None

    @property
    def params(self) -> dict:
        return dict(self.hyper)

    @property
    def stable(self) -> bool:
        """Whether the optimizer means the same in every process (a named one; a user's
        transformation is known only by identity)."""
        return self.custom is None

    def transform(self) -> optax.GradientTransformation:
        """The optax transformation with learning rate 1 (updates to add, scaled by γ outside)."""
        if self.custom is not None:
            return self.custom
        return _transform(self.name, self.params)


def describe(optimizer: Optimizer | None) -> dict:
    """Plain values for a result's meta: the name and the pinned hyper-parameters."""
    if optimizer is None:
        return {"name": "sgd"}
    return {"name": optimizer.name, **{k: list(v) if isinstance(v, tuple) else v for k, v in optimizer.hyper}}


def _transform(name: str, h: dict) -> optax.GradientTransformation:
    if name == "sgd":
        return optax.sgd(1.0)
    if name in ("momentum", "nesterov"):
        return optax.sgd(1.0, momentum=h["beta"], nesterov=name == "nesterov")
    if name == "adam":
        return optax.adam(1.0, b1=h["b1"], b2=h["b2"], eps=h["eps"], eps_root=h["eps_root"], nesterov=False)
    if name == "adamw":
        return optax.adamw(
            1.0,
            b1=h["b1"],
            b2=h["b2"],
            eps=h["eps"],
            eps_root=h["eps_root"],
            weight_decay=h["weight_decay"],
            nesterov=False,
        )
    if name == "nadam":
        return optax.nadam(1.0, b1=h["b1"], b2=h["b2"], eps=h["eps"], eps_root=h["eps_root"])
    if name == "muon":
        return optax.contrib.muon(
            1.0,
            ns_coeffs=tuple(h["ns_coeffs"]),
            ns_steps=h["ns_steps"],
            beta=h["beta"],
            eps=h["eps"],
            weight_decay=h["weight_decay"],
            nesterov=h["nesterov"],
            adam_b1=h["adam_b1"],
            adam_b2=h["adam_b2"],
            adam_eps_root=h["adam_eps_root"],
            adam_weight_decay=h["adam_weight_decay"],
        )
    raise ValueError(f"unknown optimizer {name!r}")


def make(name: str, **hyper) -> Optimizer:
    """A named optimizer with its pinned defaults, some overridden by ``hyper`` (an unknown
    name raises a ValueError listing the known ones)."""
    check_choice("optimizer", name, NAMES)
    known = DEFAULTS[name]
    unknown = sorted(set(hyper) - set(known))
    if unknown:
        raise ValueError(f"optimizer {name!r} has no hyper-parameter {unknown} (its: {sorted(known) or 'none'})")
    values = {**known, **{k: v for k, v in hyper.items() if v is not None}}
    if "ns_coeffs" in values:
        values["ns_coeffs"] = tuple(float(c) for c in values["ns_coeffs"])
    for k, v in values.items():
        if k in ("beta", "b1", "b2", "adam_b1", "adam_b2") and not 0.0 <= float(v) < 1.0:
            raise ValueError(f"optimizer {name}: {k} must lie in [0, 1), got {v}")
        if k in ("eps", "eps_root", "weight_decay", "adam_eps_root", "adam_weight_decay") and float(v) < 0:
            raise ValueError(f"optimizer {name}: {k} must be >= 0, got {v}")
    return Optimizer(name, tuple(sorted(values.items())), matrices=name in MATRICES)


def custom(transform: optax.GradientTransformation, *, matrices: bool = False) -> Optimizer:
    """A user's own transformation (optax's convention: updates are added; the core multiplies
    them by γ). ``matrices``: it must see each block's leaves in their shapes (like Muon)."""
    if not isinstance(transform, optax.GradientTransformation):
        raise TypeError(f"expected an optax.GradientTransformation, got {type(transform).__name__}")
    return Optimizer("custom", custom=transform, matrices=bool(matrices))


def resolve(optimizer) -> Optimizer | None:
    """None for plain SGD (``None``, ``"sgd"``, ``make("sgd")``: the core's original path);
    otherwise an :class:`Optimizer` from a name, an Optimizer, a transformation, or a dict
    ``{"name": ..., hyper...}`` (a config node; None values are left at the defaults)."""
    if optimizer is None:
        return None
    if isinstance(optimizer, str):
        optimizer = make(optimizer)
    elif isinstance(optimizer, dict):
        d = dict(optimizer)
        optimizer = make(d.pop("name", "sgd"), **d)
    elif isinstance(optimizer, optax.GradientTransformation):
        optimizer = custom(optimizer)
    elif not isinstance(optimizer, Optimizer):
        raise TypeError(
            "optimizer must be None, a name, a dict, an Optimizer or an optax.GradientTransformation, "
            f"got {type(optimizer).__name__}"
        )
    return None if optimizer.name == "sgd" and optimizer.custom is None else optimizer


def block_shapes(obj: Objective) -> tuple[tuple[tuple[int, ...], ...], ...] | None:
    """Per block, the shapes of its leaves in the order they are ravelled into x (None when the
    objective's parameter is one flat vector): the MLP chain's block is (W [w, w], b [w]); the
    char LM's stage s is its parameter dict ravelled by ``jax.flatten_util.ravel_pytree``."""
    m = obj.meta
    if obj.name == "mlp_chain" and "width" in m:
        w = int(m["width"])
        return tuple(((w, w), (w,)) for _ in range(obj.S))
    if obj.name == "nanochat" and "vocab_size" in m:
        params = init_params(0, obj.S, m["vocab_size"], m["seq_len"], m["width"])
        return tuple(tuple(tuple(leaf.shape) for leaf in jax.tree.leaves(p)) for p in params)
    return None


def bind(optimizer: Optimizer | None, obj: Objective) -> Optimizer | None:
    """The optimizer with the objective's block shapes when it needs them; a ValueError when it
    needs weight matrices and the objective's parameter is one flat vector."""
    if optimizer is None or not optimizer.matrices:
        return optimizer
    shapes = block_shapes(obj)
    if shapes is None:
        raise ValueError(
            f"optimizer {optimizer.name!r} orthogonalises weight matrices, but objective {obj.name!r} "
            "exposes one flat parameter vector (on it Muon would silently be Adam); use it on "
            "objective=mlp_chain or nanochat"
        )
    sizes = tuple(sum(math.prod(s) for s in block) for block in shapes)
    if sizes != tuple(obj.layout.sizes):
        raise ValueError(f"block shapes {shapes} do not add up to the layout's sizes {obj.layout.sizes}")
    return dataclasses.replace(optimizer, shapes=shapes)


# ---------------------------------------------------------------- per-block state, in the core


def _split(v: jax.Array, shapes) -> list:
    out, off = [], 0
    for shape in shapes:
        n = math.prod(shape)
        out.append(v[off : off + n].reshape(shape))
        off += n
    return out


def _join(leaves, P: int) -> jax.Array:
    flat = jnp.concatenate([jnp.ravel(leaf) for leaf in leaves])
    return jnp.pad(flat, (0, P - flat.shape[0]))


def init_state(optimizer: Optimizer, windows: jax.Array, sizes: tuple[int, ...]):
    """Every block's optimizer state from its starting weights ``windows`` [S, P] (block s's
    first sizes[s] entries): flat, one state stacked over blocks (leaves [S, ...]); with shapes,
    a tuple of S states, one per block's leaves."""
    tx = optimizer.transform()
    if optimizer.shapes is None:
        return jax.vmap(tx.init)(windows)
    return tuple(tx.init(_split(windows[s], shapes)) for s, shapes in enumerate(optimizer.shapes))


def update(optimizer: Optimizer, state, a: jax.Array, g: jax.Array, x: jax.Array):
    """(u [P], state): block a's update from its gradient g [P] and weights x [P] (zero past
    the block's end), advancing block a's state only."""
    tx = optimizer.transform()
    if optimizer.shapes is None:
        mine = jax.tree.map(lambda leaf: leaf[a], state)
        u, mine = tx.update(g, mine, x)
        return u, jax.tree.map(lambda leaf, new: leaf.at[a].set(new), state, mine)
    P = g.shape[0]

    def branch(s, shapes):
        def run(state, g, x):
            u, new = tx.update(_split(g, shapes), state[s], _split(x, shapes))
            return _join(u, P), state[:s] + (new,) + state[s + 1 :]

        return run

    return jax.lax.switch(a, [branch(s, shapes) for s, shapes in enumerate(optimizer.shapes)], state, g, x)
