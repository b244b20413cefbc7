"""An objective config node -> the objective it names: rpd's own by ``objective.name``, or a
user's factory by import path (``objective._target_=mymodule.make``, found by
:func:`rpd.cli.specs.user_factory`), and a user's objective's identity in the store key."""

from __future__ import annotations

import dataclasses
import inspect

from omegaconf import OmegaConf

from rpd import objectives
from rpd.cli.config import _value
from rpd.cli.specs import user_factory
from rpd.validation import required


def given_args(overrides) -> list[str]:
    """The ``objective.*`` keys that hydra command-line ``overrides`` set (``objective.n=400``,
    ``+objective.x=1``, ``++objective.x=1``): what a user's factory is called with."""
    keys = []
    for item in overrides:
        key = str(item).split("=", 1)[0].lstrip("+~")
        if key.startswith("objective.") and key.count(".") == 1:
            keys.append(key.split(".", 1)[1])
    return sorted(set(keys) - {"_target_", "options", "args"})


def user_args(o) -> dict:
    """The keyword arguments of a user's factory besides ``S`` and ``objective.options``: each
    ``objective.*`` key its signature names that ``objective.args`` lists (every one when null)
    or that it requires (a parameter without a default); the others keep the factory's defaults."""
    params = inspect.signature(user_factory(o)).parameters
    # omegaconf's stub returns a union; a structured node's container is a dict
    node: dict = OmegaConf.to_container(OmegaConf.structured(o), resolve=True)  # type: ignore[assignment]
    chosen = node.get("args")
    return {
        k: v
        for k, v in node.items()
        if k in params
        and k not in ("options", "_target_", "args", "S")
        and (chosen is None or k in chosen or params[k].default is inspect.Parameter.empty)
    }


def identity(o, obj) -> dict:
    """The objective part of a user's run key (config.json): the import path, the arguments and
    options it was called with, and the returned Objective's own name and sizes."""
    meta = obj.meta or {}
    B = obj.batch_size
    return {
        "_target_": o.get("_target_") if hasattr(o, "get") else o._target_,
        "name": obj.name,
        "n": meta.get("n", obj.n_batches * B if B else None),
        "D": int(obj.D),
        "batch_size": B,
        "args": user_args(o),
        "options": dict(o.options or {}),
        # objective.grad_noise, only where the run adds it (build_objective): the factory has none
        **({"grad_noise": float(obj.grad_noise)} if o.grad_noise else {}),
    }


def build_objective(o, S: int):
    """The objective of an objective config node, with S blocks: rpd's by ``objective.name``
    (its ``rpd.objectives.ObjectiveEntry.build``), or a user's factory (``objective._target_=mymodule.make``) called with
    ``S=S``, :func:`user_args` and ``objective.options``."""
    fn = user_factory(o)
    if fn is None:
        obj = required("build", objectives.OBJECTIVES[_value(o.name)].build)(o, S)
    else:
        obj = fn(S=S, **user_args(o), **dict(o.options or {}))
        if not isinstance(obj, objectives.Objective):
            raise TypeError(f"objective._target_={o._target_} returned {type(obj).__name__}, not an rpd Objective")
    if o.grad_noise and obj.grad_noise != o.grad_noise:
        obj = dataclasses.replace(obj, grad_noise=float(o.grad_noise))
    return obj
