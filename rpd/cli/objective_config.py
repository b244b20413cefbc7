"""Config schemas of the objective group (stored in hydra's ConfigStore by ``experiments.schemas``):
the fields every objective config has (:class:`ObjectiveConfig`) and, for each registered
objective with parameters, a subclass with its own, derived from the library's dataclass beside
its builder (``rpd.objectives.ObjectiveEntry.params_type``: one declaration, its defaults
included), as :mod:`rpd.cli.schedule_config` derives a schedule's.

``configs/objective/<name>.yaml`` lists ``/objective_schema@_here_: <name>`` first in its
defaults, so ``objective=nanochat objective.width=32`` is typed at compose time; a field another
objective owns (``objective=nanochat objective.d=8``) is refused in one line naming the
objectives that have it (:func:`key_hint`). A user's factory (``objective._target_``) is called
with the keys of the chosen objective's node that its signature names (``+objective.<key>`` adds
one): ``rpd.cli.objectives.user_args``.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, Dict, List, Optional

from omegaconf import OmegaConf

from rpd import objectives
from rpd.cli.schedule_config import field_type

DEFAULT = "random_quadratic"  # the objective of a config that names none (configs/train.yaml's default too)


@dataclasses.dataclass
class ObjectiveConfig:
    """``rpd.objectives``: the data and the loss. S comes from ``schedule.S``. An objective's own
    fields are those of its schema (:func:`objective_schema`)."""

    # a registered objective (rpd.objectives.OBJECTIVES; an unknown name is refused naming the field)
    name: str = DEFAULT
    grad_noise: float = 0.0  # sigma_g of i.i.d. Gaussian noise on every block gradient
    seed: int = 0  # data seed (numpy.random.default_rng)
    # a user's objective: an import path ``mymodule.make``, called with S, the objective.* keys
    # of ``args`` that its signature names, and ``options``; its name and sizes are the
    # returned Objective's (the name and sizes of the node are then not used)
    _target_: Optional[str] = None
    options: Dict[str, Any] = dataclasses.field(default_factory=dict)
    # a user's objective: the objective.* keys its factory is called with, the others take the
    # factory's own defaults; experiments.train sets those given on its command line (or in a
    # plain dict passed to rpd.cli.train.run). null: every key its signature names
    args: Optional[List[str]] = None


BASE = tuple(f.name for f in dataclasses.fields(ObjectiveConfig))


def _own(entry: objectives.ObjectiveEntry) -> list[tuple[str, Any, Any]]:
    """The schema fields of an objective's own parameters: each field's annotation (OmegaConf's
    form) and the dataclass's default."""
    if entry.params_type is None:
        return []
    hints = typing.get_type_hints(entry.params_type)
    return [
        (f.name, field_type(hints[f.name]), dataclasses.field(default=f.default))
        for f in dataclasses.fields(entry.params_type)
    ]


def objective_schema(name: str) -> type:
    """The :class:`ObjectiveConfig` subclass of objective ``name``: ``name`` and one field per
    field of its ``params_type``, typed by its annotation, its default the dataclass's."""
    fields = [("name", str, dataclasses.field(default=name)), *_own(objectives.OBJECTIVES[name])]
    return dataclasses.make_dataclass(f"Objective_{name}", fields, bases=(ObjectiveConfig,))


def default() -> ObjectiveConfig:
    """The objective node of a config that chooses none: :data:`DEFAULT`'s schema, its defaults."""
    return objective_schema(DEFAULT)()


def schemas() -> list[tuple[str, str, type, None]]:
    """Every registered objective's schema as ``objective_schema/<name>``: (group, name, node,
    package) for hydra's ConfigStore, made afresh on each call (a late registration included)."""
    return [
        ("objective_schema", name, objective_schema(name), None)
        for name, e in objectives.OBJECTIVES.items()
        if e.params_type is not None
    ]


def owners_of(field: str) -> tuple[str, ...]:
    """The registered objectives whose parameters have ``field``."""
    return tuple(name for name, e in objectives.OBJECTIVES.items() if field in e.own_names)


def key_hint(key: str, name: str | None) -> str | None:
    """The refusal of ``objective.<field>`` that objective ``name`` does not have but another
    does: one line naming the field, the objectives that have it and ``name``; None for any
    other key (a field no objective has is refused naming the valid keys)."""
    head, _, field = key.lstrip("+~").partition("=")[0].partition(".")
    if head != "objective" or not field or "." in field or field in BASE:
        return None
    entry = objectives.OBJECTIVES.get(name or DEFAULT)
    if entry is None or entry.params_type is None or field in entry.own_names:
        return None
    owners = owners_of(field)
    if not owners:
        return None
    return f"objective.{field} applies to {' and '.join(owners)}, not to {entry.name}"


def compose_hint(key: str, kind: Any) -> str | None:
    """:func:`key_hint` for hydra's "no such key" in the schema ``kind`` (its name's default)."""
    if not (isinstance(kind, type) and issubclass(kind, ObjectiveConfig)):
        return None
    name = next(f.default for f in dataclasses.fields(kind) if f.name == "name")
    return key_hint(f"objective.{key.rpartition('.')[2]}", name if isinstance(name, str) else None)


def on_schema(cfg: Mapping, schema: type) -> Mapping:
    """A plain config dict (``rpd.cli.train.run({...})``) with its ``objective`` dict on the schema
    of its name (of :data:`DEFAULT` where it names none, or one without parameters: a toy
    registered by name alone, a user's factory), every key checked first (ValueError:
    :func:`key_hint`); one without it given :data:`DEFAULT`'s where ``schema`` (the entry
    point's) has an objective node that is not optional; else as given."""
    node = cfg.get("objective")
    if "objective" not in cfg:
        needed = typing.get_type_hints(schema).get("objective") is ObjectiveConfig
        return {**cfg, "objective": OmegaConf.structured(default())} if needed else cfg
    if not isinstance(node, dict):
        return cfg  # a DictConfig is typed already
    name = node.get("name")
    entry = objectives.OBJECTIVES.get(name or DEFAULT)
    schema_name = entry.name if entry is not None and entry.params_type is not None else DEFAULT
    for key in node:
        hint = key_hint(f"objective.{key}", schema_name)
        if hint is not None:
            raise ValueError(hint)
    return {**cfg, "objective": OmegaConf.merge(OmegaConf.structured(objective_schema(schema_name)), node)}
