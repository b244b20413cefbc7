"""Config schemas of the optimizer groups (stored in hydra's ConfigStore by ``experiments.schemas``):
``optimizer`` (rpd.train.optimizers and the staleness corrections) and ``outer_optimizer``
(LocalSGD's outer step, rpd.train.diloco).

An optimizer's schema is derived from its factory's signature (``rpd.train.transforms``): one
field per hyper-parameter, typed by its annotation, defaulting to the signature's default
(:func:`optimizer_schema`), stored as ``optimizer_schema/<name>`` and named in the defaults list
of ``configs/optimizer/<name>.yaml``. So ``optimizer=adamw optimizer.b2=0.95`` is checked at
compose time, and a field the chosen optimizer does not take is one line naming the field and the
optimizers that take it (:func:`key_hint`)."""

from __future__ import annotations

import dataclasses
import enum
import functools
import typing
from typing import Any, List, Mapping, Optional

from omegaconf import OmegaConf

from rpd.train.transforms import OPTIMIZERS, taking


class CorrectionName(enum.Enum):  # rpd.train.corrections.NAMES
    pipemare_lr = "pipemare_lr"
    delay_beta1 = "delay_beta1"
    dc_asgd = "dc_asgd"
    error_feedback = "error_feedback"


@dataclasses.dataclass
class OptimizerConfig:
    """``rpd.train.optimizers``: the optimizer every block update applies (its learning rate is the
    method's γ grid, which each configs/optimizer/*.yaml sets to its own default) and a correction
    arm. Each registered optimizer's schema (:func:`optimizer_schema`) adds its hyper-parameters."""

    name: str = "sgd"  # a registered optimizer (rpd.train.transforms.OPTIMIZERS); choose it with optimizer=<name>
    # a correction arm for staleness (rpd.train.corrections), applied per stage; null: none
    correction: Optional[CorrectionName] = None
    correction_window: Optional[int] = None  # pipemare_lr: warm-up K in updates per block; null: a quarter
    correction_beta_max: Optional[float] = None  # delay_beta1: the β1 the most-delayed stage tends to (0.99)
    correction_lam: Optional[float] = None  # dc_asgd: λ of g + λ g⊙g⊙(w_t - w_stale) (0.04); error_feedback: λ (1)


def _field_type(tp) -> Any:
    """The OmegaConf-typed form of a factory parameter's annotation (a tuple as a list)."""
    if tp in (bool, int, float, str):
        return tp
    if typing.get_origin(tp) in (tuple, list):
        items = {a for a in typing.get_args(tp) if a is not Ellipsis}
        lists = {bool: List[bool], int: List[int], float: List[float], str: List[str]}
        return lists.get(items.pop(), List[Any]) if len(items) == 1 else List[Any]
    return Any


def optimizer_schema(name: str) -> type:
    """The :class:`OptimizerConfig` subclass of the registered optimizer ``name``: ``name`` and
    one field per parameter of its factory, its annotation's type and the signature's default."""
    entry = OPTIMIZERS[name]
    hints = typing.get_type_hints(entry.factory)
    fields: list[tuple[str, Any, Any]] = [("name", str, dataclasses.field(default=name))]
    for key, default in entry.defaults.items():
        tp = _field_type(hints.get(key, Any))
        if isinstance(default, (tuple, list)):
            fields.append((key, tp, dataclasses.field(default_factory=functools.partial(list, default))))
        else:
            fields.append((key, tp, dataclasses.field(default=default)))
    return dataclasses.make_dataclass(f"Optimizer_{name}", fields, bases=(OptimizerConfig,))


def schemas() -> list[tuple[str, str, type, None]]:
    """Every registered optimizer's schema as ``optimizer_schema/<name>``: (group, name, node,
    package) for hydra's ConfigStore, made afresh on each call (a late registration included:
    the toy optimizer's test registers from its own file)."""
    return [("optimizer_schema", name, optimizer_schema(name), None) for name in OPTIMIZERS]


def key_hint(key: str, name: str | None = None) -> str | None:
    """The refusal of ``optimizer.<field>`` that the chosen optimizer ``name`` does not take: one
    line naming the field, the optimizers that take it and ``name``'s own; None for any other key."""
    head, _, field = key.partition(".")
    base = {f.name for f in dataclasses.fields(OptimizerConfig)}
    if head != "optimizer" or not field or "." in field or field in base:
        return None
    own = sorted(OPTIMIZERS[name].parameters) if name in OPTIMIZERS else []
    if field in own:
        return None
    takers = taking(field)
    where = f"taken by {', '.join(takers)} (optimizer=<name>)" if takers else "no registered optimizer takes it"
    return f"{key}: optimizer {name} has no such parameter; {where}; {name}'s: {', '.join(own) or 'none'}"


def compose_hint(key: str, kind: Any) -> str | None:
    """:func:`key_hint` for hydra's "no such key" in the schema ``kind`` (its name's default)."""
    if not (isinstance(kind, type) and issubclass(kind, OptimizerConfig)):
        return None
    return key_hint(key, str(next(f.default for f in dataclasses.fields(kind) if f.name == "name")))


def on_schema(cfg: Mapping) -> Mapping:
    """A plain config dict (``rpd.cli.train.run({...})``) with its ``optimizer`` dict on the
    schema of its name, every key checked first (ValueError: :func:`key_hint`); else as given."""
    node = cfg.get("optimizer")
    if not isinstance(node, dict) or str(node.get("name", "sgd")) not in OPTIMIZERS:
        return cfg  # a DictConfig is typed already; an unknown name is refused naming the choices
    name = str(node.get("name", "sgd"))
    for key in node:
        hint = key_hint(f"optimizer.{key}", name)
        if hint is not None:
            raise ValueError(hint)
    return {**cfg, "optimizer": OmegaConf.merge(OmegaConf.structured(optimizer_schema(name)), node)}


class OuterOptimizerName(enum.Enum):  # rpd.train.diloco.OUTER_NAMES
    sgd = "sgd"
    momentum = "momentum"
    nesterov = "nesterov"


class InnerState(enum.Enum):  # rpd.train.diloco.INNER_STATES
    keep = "keep"
    average = "average"
    reset = "reset"


@dataclasses.dataclass
class OuterOptimizerConfig:
    """``rpd.train.diloco``: LocalSGD's outer optimizer on the pseudo-gradient θ - mean_r x_r
    (configs/outer_optimizer/): sgd with lr 1 is plain averaging; nesterov is DiLoCo's."""

    name: OuterOptimizerName = OuterOptimizerName.sgd
    lr: Optional[float] = None  # null: the name's default (sgd 1.0, momentum / nesterov 0.7)
    beta: Optional[float] = None  # momentum (optax's trace); null: the name's default (0 / 0.9)
