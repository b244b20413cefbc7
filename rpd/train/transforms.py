"""The optax transformations behind rpd's named optimizers (:mod:`rpd.train.optimizers`), each
with every hyper-parameter pinned in :data:`DEFAULTS` and learning rate 1 (the core multiplies
the update by γ). The two delay-aware ones are rpd's own: ``nesterov_async``
(:mod:`rpd.train.nesterov_async`, its momentum set by the stage's delay) and ``adam_rotated``
(:mod:`rpd.train.rotated_adam`, Adam in a rotated basis)."""

from __future__ import annotations

from typing import Any

import optax

from rpd.train.nesterov_async import nesterov_async
from rpd.train.rotated_adam import adam_rotated

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
    # Ajanthan et al. 2025's look-ahead (rpd.train.nesterov_async): its code's torch NAdam
    "nesterov_async": {
        "b1": 0.9,
        "b2": 0.999,
        "eps": 1e-8,
        "momentum_decay": 0.004,
        "weight_decay": 0.0,
        "beta_max": 0.99,
    },
    # Jung, Shin, Lee 2026's basis rotation (rpd.train.rotated_adam): its code's defaults
    "adam_rotated": {"b1": 0.95, "b2": 0.95, "eps": 1e-8, "weight_decay": 0.01, "shampoo_beta": -1.0, "frequency": 10},
}
NAMES = tuple(DEFAULTS)
DELAYED = ("nesterov_async",)  # optimizers whose step depends on the stage's delay τ_s
SHAPED = ("adam_rotated",)  # use each block's leaf shapes where the objective has them


def build(name: str, h: dict, *, tau: int = 0, S: int = 1, vectors: bool = True) -> optax.GradientTransformation:
    """The optax transformation of ``name`` with hyper-parameters ``h`` (learning rate 1);
    ``tau`` / ``S``: the stage's delay, for the delay-aware optimizers (:data:`DELAYED`);
    ``vectors``: rotate a flat block vector (adam_rotated on a flat-vector objective)."""
    if name == "nesterov_async":
        return nesterov_async(**h, tau=tau, S=S)
    if name == "adam_rotated":
        return adam_rotated(**h, vectors=vectors)
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
