"""rpd's named optimizers, one factory each over optax's own transformations (optax's ``alias.py``
style; docs/architecture.md#adding-an-optimizer), and the registry that names them.

A factory's signature is the optimizer: ``learning_rate`` first (the core builds every optimizer
with 1 and multiplies its updates by the γ grid), then its hyper-parameters with their defaults
(written once, here: the config schema, the checks and a result's meta read them off the
signature), then, keyword-only, what the core binds (:data:`BOUND`): ``tau`` and ``S`` (a stage's
delay, for a delay-aware optimizer) and ``vectors`` (whether a block is one flat vector). The
two delay-aware ones are rpd's own: ``nesterov_async`` (:mod:`rpd.train.nesterov_async`, its
momentum set by the stage's delay) and ``adam_rotated`` (:mod:`rpd.train.rotated_adam`, Adam in a
rotated basis). Defaults, optax vs torch: docs/optimizers.md#named-optimizers-one-factory-each.

A new optimizer is one function and one :func:`register` call, from its own module."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

import optax

from rpd.train.nesterov_async import nesterov_async
from rpd.train.rotated_adam import adam_rotated
from rpd.validation import check_choice, check_int

BOUND = ("tau", "S", "vectors")  # keyword-only parameters the core binds, never a user's


def sgd(learning_rate: float) -> optax.GradientTransformation:
    """Plain SGD, x <- x - lr g (the core's original path when named: rpd.train.optimizers)."""
    return optax.sgd(learning_rate)


def momentum(learning_rate: float, beta: float = 0.9) -> optax.GradientTransformation:
    """Heavy ball, optax's undampened trace t <- g + β t (torch's SGD with dampening=0)."""
    return optax.sgd(learning_rate, momentum=beta)


def nesterov(learning_rate: float, beta: float = 0.9) -> optax.GradientTransformation:
    """Nesterov's momentum, direction g + β t (torch's nesterov=True, dampening=0)."""
    return optax.sgd(learning_rate, momentum=beta, nesterov=True)


def adam(
    learning_rate: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0
) -> optax.GradientTransformation:
    """Adam, eps outside the square root (torch's too)."""
    return optax.adam(learning_rate, b1=b1, b2=b2, eps=eps, eps_root=eps_root, nesterov=False)


def adamw(
    learning_rate: float,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    weight_decay: float = 1e-2,  # torch's default (optax's is 1e-4)
) -> optax.GradientTransformation:
    """AdamW: decoupled weight decay times the learning rate, x <- x - lr (m̂/(√v̂+ε) + wd x)."""
    return optax.adamw(
        learning_rate, b1=b1, b2=b2, eps=eps, eps_root=eps_root, weight_decay=weight_decay, nesterov=False
    )


def nadam(
    learning_rate: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0
) -> optax.GradientTransformation:
    """NAdam, optax's: Adam with Nesterov's momentum (no β1 decay over time, unlike torch's)."""
    return optax.nadam(learning_rate, b1=b1, b2=b2, eps=eps, eps_root=eps_root)


def muon(
    learning_rate: float,
    beta: float = 0.95,
    nesterov: bool = True,
    ns_steps: int = 5,
    ns_coeffs: tuple[float, ...] = (3.4445, -4.775, 2.0315),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    adam_b1: float = 0.9,
    adam_b2: float = 0.999,
    adam_eps_root: float = 0.0,
    adam_weight_decay: float = 0.0,
) -> optax.GradientTransformation:
    """Muon, optax.contrib's: 2-D leaves orthogonalised by Newton-Schulz, the others to Adam."""
    return optax.contrib.muon(
        learning_rate,
        ns_coeffs=tuple(ns_coeffs),
        ns_steps=ns_steps,
        beta=beta,
        eps=eps,
        weight_decay=weight_decay,
        nesterov=nesterov,
        adam_b1=adam_b1,
        adam_b2=adam_b2,
        adam_eps_root=adam_eps_root,
        adam_weight_decay=adam_weight_decay,
    )


@dataclasses.dataclass(frozen=True)
class OptimizerEntry:
    """A named optimizer: its ``factory`` (the signature of the module docstring), the
    hyper-parameters ``momentum`` that ``optimizer.correction=delay_beta1`` raises with a stage's
    delay (its β1s; () when it has none), ``matrices``: it must see each block's weight
    matrices in their shapes (Muon; refused on a flat-vector objective), and ``state``: the fp32
    values of state it keeps per parameter (0 SGD, 1 a momentum buffer, 2 Adam's moments), what the
    plan counts as its optimizer state (docs/plan.md#bytes-per-rank-rpdmodelmemory); None: not
    declared, and the plan refuses it (state not proportional to the parameters, as
    ``adam_rotated``'s rotations)."""

    name: str
    factory: Callable[..., optax.GradientTransformation]
    momentum: tuple[str, ...] = ()
    matrices: bool = False
    state: int | None = None

    @property
    def parameters(self) -> dict[str, inspect.Parameter]:
        """The hyper-parameters a user sets, in signature order (learning rate and :data:`BOUND` left out)."""
        params = list(inspect.signature(self.factory).parameters.values())[1:]
        return {p.name: p for p in params if p.name not in BOUND}

    @property
    def defaults(self) -> dict[str, Any]:
        return {k: p.default for k, p in self.parameters.items()}

    @property
    def delayed(self) -> bool:
        """Whether its step depends on the stage's delay τ_s (it takes ``tau`` and ``S``)."""
        return "tau" in inspect.signature(self.factory).parameters

    @property
    def shaped(self) -> bool:
        """Whether it takes ``vectors``: each block's leaves in their shapes where the objective has them."""
        return "vectors" in inspect.signature(self.factory).parameters

    def build(self, h: dict, *, tau: int = 0, S: int = 1, vectors: bool = True) -> optax.GradientTransformation:
        """The transformation with hyper-parameters ``h`` and learning rate 1, bound to what its
        signature names of the stage's delay ``tau`` of ``S`` and ``vectors``."""
        bound = {"tau": tau, "S": S, "vectors": vectors}
        names = inspect.signature(self.factory).parameters
        return self.factory(1.0, **h, **{k: v for k, v in bound.items() if k in names})


OPTIMIZERS: dict[str, OptimizerEntry] = {}


def register(entry: OptimizerEntry) -> OptimizerEntry:
    """Add ``entry`` under its name (a name taken by another factory is an error)."""
    first = list(inspect.signature(entry.factory).parameters)[:1]
    if first != ["learning_rate"]:
        raise TypeError(f"optimizer {entry.name!r}: its factory's first parameter must be learning_rate, got {first}")
    if entry.state is not None:
        check_int(f"optimizer {entry.name!r}: state", entry.state, minimum=0)
    missing = sorted(set(entry.momentum) - set(entry.parameters))
    if missing:
        raise ValueError(f"optimizer {entry.name!r}: momentum {missing} are not parameters of its factory")
    taken = OPTIMIZERS.get(entry.name)
    if taken is not None and taken.factory is not entry.factory:
        raise ValueError(f"optimizer {entry.name!r} is already registered")
    OPTIMIZERS[entry.name] = entry
    return entry


for _entry in (
    OptimizerEntry("sgd", sgd, state=0),
    OptimizerEntry("momentum", momentum, momentum=("beta",), state=1),
    OptimizerEntry("nesterov", nesterov, momentum=("beta",), state=1),
    OptimizerEntry("adam", adam, momentum=("b1",), state=2),
    OptimizerEntry("adamw", adamw, momentum=("b1",), state=2),
    OptimizerEntry("nadam", nadam, momentum=("b1",), state=2),
    # Muon: one momentum buffer for its matrices (its Adam on the other leaves is not counted)
    OptimizerEntry("muon", muon, momentum=("beta", "adam_b1"), matrices=True, state=1),
    OptimizerEntry("nesterov_async", nesterov_async),  # Ajanthan et al. 2025: its code's torch NAdam
    OptimizerEntry("adam_rotated", adam_rotated, momentum=("b1",)),  # Jung, Shin, Lee 2026: its code's defaults
):
    register(_entry)


def entry(name: str) -> OptimizerEntry:
    """The registered optimizer ``name`` (a ValueError listing the names otherwise)."""
    return OPTIMIZERS[check_choice("optimizer", name, OPTIMIZERS)]


def taking(field: str) -> list[str]:
    """The registered optimizers that take the hyper-parameter ``field``."""
    return [name for name, e in OPTIMIZERS.items() if field in e.parameters]
