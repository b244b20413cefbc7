"""Optimizers for the stale block core (docs/optimizers.md#optimizer-state-under-staleness): one interface over optax.

An :class:`Optimizer` names a registered factory with every hyper-parameter pinned, or wraps
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

Each name is a factory over optax's own transformations with its hyper-parameters and their
defaults in its signature (:mod:`rpd.train.transforms`, the registry :data:`OPTIMIZERS`): a
config, :func:`make` and a result's meta take the names and defaults from there.

Two delay-aware optimizers of the 2025-2026 work (docs/optimizers.md; transformations in
:mod:`rpd.train.transforms`): ``nesterov_async`` (Ajanthan et al. 2025's look-ahead, its momentum
raised with the stage's delay τ_s, which :func:`bind_plan` reads off the plan: every block gets
its own transformation, like a correction arm) and ``adam_rotated`` (Jung, Shin, Lee 2026's basis
rotation: each block's Adam in the eigenbasis of its gradient covariance; it takes the block's
weight matrices in their shapes where the objective has them, one vector per block elsewhere).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import typing
from typing import Any

import jax
import jax.numpy as jnp
import optax

from rpd.objectives.base import Objective
from rpd.objectives.entry import entry_of
from rpd.train import corrections
from rpd.train.transforms import OPTIMIZERS, OptimizerEntry, entry
from rpd.validation import check_int, required

# the checks of a hyper-parameter by its name, whichever optimizer takes it: (rule, test)
UNIT = ("must lie in [0, 1)", lambda v: 0.0 <= v < 1.0)
NONNEGATIVE = ("must be >= 0", lambda v: v >= 0)
CHECKS: dict[str, tuple[str, Any]] = {
    **dict.fromkeys(("beta", "b1", "b2", "adam_b1", "adam_b2"), UNIT),
    **dict.fromkeys(("eps", "eps_root", "weight_decay", "adam_eps_root", "adam_weight_decay"), NONNEGATIVE),
    "momentum_decay": NONNEGATIVE,
    "beta_max": ("must lie in (0, 1)", lambda v: 0.0 < v < 1.0),
    "shampoo_beta": ("must be < 1 (negative: b2)", lambda v: v < 1.0),
}


@dataclasses.dataclass(frozen=True)
class Optimizer:
    """A pinned optimizer: ``name`` (one of :data:`OPTIMIZERS`, or ``"custom"`` for ``custom``, a
    user's ``optax.GradientTransformation``), its hyper-parameters ``hyper`` (sorted (name,
    value) pairs, every parameter of the name's factory), and, once bound to an objective
    (:func:`bind`), ``shapes``: per block, the shapes of its leaves in ravel order (None: one
    flat vector per block). Hashable: a static option of the compiled core."""

    name: str
    hyper: tuple[tuple[str, Any], ...] = ()
    custom: Any = None
    matrices: bool = False
    shapes: tuple[tuple[tuple[int, ...], ...], ...] | None = None
    correction: corrections.Correction | None = None  # a correction arm (rpd.train.corrections)
    taus: tuple[int, ...] | None = None  # τ_s per block, bound from the plan (delay-aware optimizers)

    @property
    def params(self) -> dict:
        return dict(self.hyper)

    @property
    def entry(self) -> OptimizerEntry | None:
        """The registered optimizer (None for a user's transformation)."""
        return None if self.custom is not None else OPTIMIZERS[self.name]

    @property
    def needs_stale(self) -> bool:
        """Whether ``update`` needs the stale point the gradient was read at (DC-ASGD)."""
        return self.correction is not None and self.correction.name == "dc_asgd"

    @property
    def stage_taus(self) -> tuple[int, ...] | None:
        """τ_s per block where a block's transformation depends on its stage (a correction arm or
        a delay-aware optimizer, bound to a plan); None: one transformation for every block."""
        return self.correction.taus if self.correction is not None else self.taus

    @property
    def stable(self) -> bool:
        """Whether the optimizer means the same in every process (a named one; a user's
        transformation is known only by identity)."""
        return self.custom is None

    def transform(self) -> optax.GradientTransformation:
        """The optax transformation with learning rate 1 (updates to add, scaled by γ outside)."""
        if self.custom is not None:
            return self.custom
        return entry(self.name).build(self.params, vectors=self.shapes is None)

    def block_transform(self, s: int) -> optax.GradientTransformation:
        """Block s's transformation: :meth:`transform` with the correction arm for stage s
        (bound to a plan's delays, :func:`bind_plan`)."""
        c, taus = self.correction, self.stage_taus
        if taus is None:
            return self.transform()
        tau, S = taus[s], len(taus)
        own = 0 if self.taus is None else self.taus[s]  # a delay-aware optimizer's own τ_s
        if self.custom is not None:
            base = self.custom
        else:
            base = entry(self.name).build(self.params, tau=own, S=S, vectors=self.shapes is None)
        if c is None:
            return base
        if c.name == "delay_beta1":
            h = dict(self.params)
            for k in entry(self.name).momentum:
                h[k] = corrections.delay_beta1(h[k], tau, S, c.p["beta_max"])
            return entry(self.name).build(h, tau=own, S=S, vectors=self.shapes is None)
        if c.name == "pipemare_lr":
            return corrections.pipemare_lr(base, tau, c.p["window"])
        if c.name == "error_feedback":
            return corrections.error_feedback(base, tau, c.p["lam"])
        return corrections.dc_asgd(base, c.p["lam"])


def describe(optimizer: Optimizer | None) -> dict:
    """Plain values for a result's meta: the name and the pinned hyper-parameters."""
    if optimizer is None:
        return {"name": "sgd"}
    out = {"name": optimizer.name, **{k: list(v) if isinstance(v, tuple) else v for k, v in optimizer.hyper}}
    if optimizer.taus is not None:
        out["taus"] = list(optimizer.taus)
    if optimizer.correction is not None:  # absent otherwise: earlier metas unchanged
        c = optimizer.correction
        out["correction"] = {"name": c.name, **c.p, **({} if c.taus is None else {"taus": list(c.taus)})}
    return out


def _typed(name: str, p: inspect.Parameter, v):
    """``v`` as the parameter's annotation says: a tuple of floats from a list, an int checked."""
    tp = typing.get_type_hints(OPTIMIZERS[name].factory).get(p.name)
    if tp is int:
        return check_int(f"optimizer {name}: {p.name}", v)
    if typing.get_origin(tp) is tuple:
        return tuple(float(c) for c in v)
    return v


def make(name: str, *, correction=None, **hyper) -> Optimizer:
    """A named optimizer with its factory's defaults, some overridden by ``hyper`` (an unknown
    name raises a ValueError listing the known ones; a parameter its factory does not take, one
    listing its own); ``correction``: a correction arm (:mod:`rpd.train.corrections`: a name, a
    dict or a Correction)."""
    e = entry(name)
    correction = corrections.resolve(correction)
    if correction is not None and correction.name == "delay_beta1" and not e.momentum:
        has = sorted(n for n, o in OPTIMIZERS.items() if o.momentum)
        raise ValueError(
            f"optimizer.correction=delay_beta1: optimizer {name} has no momentum (β1) to raise; use one of {has}"
        )
    known = e.parameters
    unknown = sorted(set(hyper) - set(known))
    if unknown:
        raise ValueError(f"optimizer {name!r} has no hyper-parameter {unknown} (its: {sorted(known) or 'none'})")
    values = {**e.defaults, **{k: v for k, v in hyper.items() if v is not None}}
    values = {k: _typed(name, known[k], v) for k, v in values.items()}
    for k, v in values.items():
        if k in CHECKS and not CHECKS[k][1](float(v)):
            raise ValueError(f"optimizer {name}: {k} {CHECKS[k][0]}, got {v}")
    return Optimizer(name, tuple(sorted(values.items())), matrices=e.matrices, correction=correction)


def custom(transform: optax.GradientTransformation, *, matrices: bool = False, correction=None) -> Optimizer:
    """A user's own transformation (optax's convention: updates are added; the core multiplies
    them by γ). ``matrices``: it must see each block's leaves in their shapes (like Muon);
    ``correction``: ``pipemare_lr`` or ``dc_asgd`` (which wrap any transformation)."""
    if not isinstance(transform, optax.GradientTransformation):
        raise TypeError(f"expected an optax.GradientTransformation, got {type(transform).__name__}")
    correction = corrections.resolve(correction)
    if correction is not None and correction.name == "delay_beta1":
        raise ValueError(
            "optimizer.correction=delay_beta1 rebuilds a named optimizer with a raised β1; a user's transformation has none to raise"
        )
    return Optimizer("custom", custom=transform, matrices=bool(matrices), correction=correction)


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
        c = {k[len("correction_") :]: d.pop(k) for k in [k for k in d if k.startswith("correction_")]}
        name = d.pop("correction", None)
        if c and name is None:
            raise ValueError(f"optimizer: {sorted('correction_' + k for k in c)} set without optimizer.correction")
        optimizer = make(d.pop("name", "sgd"), correction=None if name is None else {"name": name, **c}, **d)
    elif isinstance(optimizer, optax.GradientTransformation):
        optimizer = custom(optimizer)
    elif not isinstance(optimizer, Optimizer):
        raise TypeError(
            "optimizer must be None, a name, a dict, an Optimizer or an optax.GradientTransformation, "
            f"got {type(optimizer).__name__}"
        )
    plain = optimizer.name == "sgd" and optimizer.custom is None and optimizer.correction is None
    return None if plain else optimizer


def bind_plan(optimizer: Optimizer | None, plan, S: int) -> Optimizer | None:
    """The optimizer with its correction arm, and a delay-aware optimizer (``OptimizerEntry.delayed``) itself,
    bound to the plan's delays (τ_s per block, :func:`rpd.train.corrections.block_delays`);
    unchanged otherwise."""
    if optimizer is None:
        return None
    if optimizer.entry is not None and optimizer.entry.delayed:
        optimizer = dataclasses.replace(optimizer, taus=corrections.block_delays(plan, S))
    if optimizer.correction is None:
        return optimizer
    return dataclasses.replace(optimizer, correction=corrections.bind(optimizer.correction, plan, S))


def block_shapes(obj: Objective) -> tuple[tuple[tuple[int, ...], ...], ...] | None:
    """Per block, the shapes of its leaves in the order they are ravelled into x (None when the
    objective's parameter is one flat vector): the MLP chain's block is (W [w, w], b [w]); the
    char LM's stage s is its parameter dict ravelled by ``jax.flatten_util.ravel_pytree``."""
    shapes = entry_of(obj.name).block_shapes  # rpd.objectives.ObjectiveEntry.block_shapes
    return None if shapes is None else shapes(obj)


def bind(optimizer: Optimizer | None, obj: Objective) -> Optimizer | None:
    """The optimizer with the objective's block shapes when it needs them; a ValueError when it
    needs weight matrices and the objective's parameter is one flat vector. An optimizer whose
    factory takes ``vectors`` (``OptimizerEntry.shaped``) takes the shapes where the objective has
    them, one flat vector per block elsewhere."""
    shaped = optimizer is not None and optimizer.entry is not None and optimizer.entry.shaped
    if optimizer is None or not (optimizer.matrices or shaped):
        return optimizer
    shapes = block_shapes(obj)
    if shapes is None and not optimizer.matrices:
        return optimizer
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
    if optimizer.stage_taus is not None:  # one transformation per block: stack their states
        S = len(optimizer.stage_taus)
        if optimizer.shapes is None:
            per_block = [optimizer.block_transform(s).init(windows[s]) for s in range(S)]
            return jax.tree.map(lambda *leaves: jnp.stack(leaves), *per_block)
        return tuple(optimizer.block_transform(s).init(_split(windows[s], sh)) for s, sh in enumerate(optimizer.shapes))
    if optimizer.shapes is None:
        return jax.vmap(tx.init)(windows)
    return tuple(tx.init(_split(windows[s], shapes)) for s, shapes in enumerate(optimizer.shapes))


def update(optimizer: Optimizer, state, a: jax.Array, g: jax.Array, x: jax.Array, stale: jax.Array | None = None):
    """(u [P], state): block a's update from its gradient g [P] and weights x [P] (zero past
    the block's end), advancing block a's state only; ``stale`` [P]: block a of the point g was
    read at (DC-ASGD's correction needs it)."""
    if optimizer.stage_taus is not None:
        return _corrected_update(optimizer, state, a, g, x, stale)
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


# ---------------------------------------------------------------- whole vectors (LocalSGD's replicas)


def _blocks(optimizer: Optimizer, v: jax.Array, layout) -> list:
    parts = [v[off : off + size] for off, size in zip(layout.offsets, layout.sizes)]
    return parts if optimizer.shapes is None else [_split(p, shapes) for p, shapes in zip(parts, optimizer.shapes)]


def init_blocks(optimizer: Optimizer, x: jax.Array, layout) -> tuple:
    """One state per block of the flat vector ``x`` [D] (``layout``: the objective's BlockLayout)."""
    tx = optimizer.transform()
    return tuple(tx.init(p) for p in _blocks(optimizer, x, layout))


def update_blocks(optimizer: Optimizer, state: tuple, g: jax.Array, x: jax.Array, layout):
    """(u [D], state): every block's update from the full gradient g [D] at x [D], each block
    advancing its own state, as the core's per-block :func:`update` does one block at a time."""
    tx = optimizer.transform()
    out = [
        tx.update(gs, st, xs) for gs, st, xs in zip(_blocks(optimizer, g, layout), state, _blocks(optimizer, x, layout))
    ]
    u = [o[0] if optimizer.shapes is None else jnp.concatenate([jnp.ravel(leaf) for leaf in o[0]]) for o in out]
    return jnp.concatenate(u), tuple(o[1] for o in out)


def _corrected_update(optimizer: Optimizer, state, a, g, x, stale):
    """:func:`update` with a correction arm: block s's own transformation, chosen by lax.switch."""
    extra = optimizer.needs_stale
    shapes = optimizer.shapes

    def branch(s):
        tx = optimizer.block_transform(s)

        def run(state, g, x, stale):
            kw = {"stale": stale if shapes is None else _split(stale, shapes[s])} if extra else {}
            if shapes is None:
                mine = jax.tree.map(lambda leaf: leaf[s], state)
                u, mine = tx.update(g, mine, x, **kw)
                return u, jax.tree.map(lambda leaf, new: leaf.at[s].set(new), state, mine)
            u, new = tx.update(_split(g, shapes[s]), state[s], _split(x, shapes[s]), **kw)
            return _join(u, g.shape[0]), state[:s] + (new,) + state[s + 1 :]

        return run

    stale = jnp.zeros_like(x) if stale is None else stale
    n_blocks = len(required("stage_taus", optimizer.stage_taus))  # set: update() came here for it
    return jax.lax.switch(a, [branch(s) for s in range(n_blocks)], state, g, x, stale)
