"""An objective config node -> the objective it names: rpd's own by ``objective.name``, or a
user's factory by import path (``objective._target_=mymodule.make``)."""

from __future__ import annotations

import dataclasses
import inspect

import hydra.utils
from omegaconf import OmegaConf

from experiments.config import _value
from rpd import objectives
from rpd.objectives.nanochat import nanochat

# objective.name -> the rpd.objectives factory call of a checked objective node, with S blocks
OBJECTIVES = {
    "random_quadratic": lambda o, S: objectives.random_quadratic(
        o.n, o.d, S, o.batch_size, seed=o.seed, rotate=bool(o.rotate), align=bool(o.align)
    ),
    "nesterov_quadratic": lambda o, S: objectives.nesterov_quadratic(
        o.n,
        o.d,
        S,
        o.batch_size,
        mu=o.mu,
        condition_number=o.condition_number,
        seed=o.seed,
        rotate=bool(o.rotate),
        align=bool(o.align),
    ),
    "logistic_regression": lambda o, S: objectives.logistic_regression(
        o.n, o.d, S, o.batch_size, lam=o.lam, grad_noise=o.grad_noise, seed=o.seed
    ),
    "mlp_chain": lambda o, S: objectives.mlp_chain(o.n, o.width, S, o.batch_size, seed=o.seed),
    "nanochat": lambda o, S: nanochat(
        S,
        path=o.text_path,
        batch_size=o.batch_size,
        seq_len=o.seq_len,
        width=o.width,
        heads=o.heads,
        seed=o.seed,
        heldout_frac=o.heldout_frac,
        heldout_batches=o.heldout_batches,
    ),
}


def user_factory(o):
    """The user's objective factory named by ``objective._target_`` (an import path), or None."""
    target = o.get("_target_") if hasattr(o, "get") else getattr(o, "_target_", None)
    if not target:
        return None
    try:
        fn = hydra.utils.get_method(target)
    except Exception as exc:  # ImportError, AttributeError, hydra's own wrapping
        raise ValueError(f"objective._target_={target} cannot be imported ({exc.__cause__ or exc})") from None
    return fn


def build_objective(o, S: int):
    """The objective of an objective config node, with S blocks: rpd's by ``objective.name``
    (:data:`OBJECTIVES`), or a user's factory (``objective._target_=mymodule.make``) called with
    ``S=S``, each ``objective.*`` key its signature names, and ``objective.options``."""
    fn = user_factory(o)
    if fn is None:
        obj = OBJECTIVES[_value(o.name)](o, S)
    else:
        params = inspect.signature(fn).parameters
        kw = {
            k: v
            for k, v in OmegaConf.to_container(OmegaConf.structured(o), resolve=True).items()
            if k in params and k not in ("options", "_target_")
        }
        obj = fn(S=S, **kw, **dict(o.options or {}))
        if not isinstance(obj, objectives.Objective):
            raise TypeError(f"objective._target_={o._target_} returned {type(obj).__name__}, not an rpd Objective")
    if o.grad_noise and obj.grad_noise != o.grad_noise:
        obj = dataclasses.replace(obj, grad_noise=float(o.grad_noise))
    return obj
