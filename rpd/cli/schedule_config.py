"""Config schemas of the schedule group (stored in hydra's ConfigStore by ``experiments.schemas``): the
fields every schedule reads (:class:`ScheduleConfig`) and, for each registered schedule, a
subclass with its own parameters, derived from the library's dataclass
(``rpd.registry.ScheduleEntry.params_type``: one declaration, its defaults included).

``configs/schedule/<name>.yaml`` lists ``/schedule_schema@_here_: <name>`` first in its defaults,
so ``schedule=interleaved schedule.v=4`` is typed at compose time; a field another schedule owns
(``schedule=gpipe schedule.v=4``) is refused in one line naming the schedules that have it
(:func:`key_hint`). The method's own schedule (``configs/schedule/default.yaml``, ``name: null``)
is typed by ``default``: the parameters of every method's own schedule (PipeDream's noam,
LocalSGD's R and H), of which the chosen one reads its own (:func:`own`).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, List, Optional

from omegaconf import DictConfig, OmegaConf

from rpd import registry

DEFAULT = "default"  # the schema of the method's own schedule (schedule.name null)


@dataclasses.dataclass
class ScheduleConfig:
    """``rpd.schedules`` through ``rpd.registry``: the pipeline, the fields every schedule reads
    (``rpd.registry.ScheduleParams``). ``name`` null: the method's own schedule (PD, RPD, SGD,
    pipeline: pipedream; LocalSGD: local_sgd). A schedule's own parameters are the fields of its
    schema (:func:`schedule_schema`)."""

    name: Optional[str] = None  # a registered schedule (rpd.registry.SCHEDULES), checked before any work
    S: int = 8  # ranks = stages = blocks (chunked schedules: S * v stages on S ranks, S blocks)
    N: Optional[int] = 400  # microbatches (protocol (i)); flush schedules: a multiple of M (chart: null, two flushes)
    T: Optional[int] = None  # protocol (ii): take the smallest N whose timeline reaches T (N ignored)
    cut: Optional[str] = None  # with T: end (the point after T ticks; default) | authors (after T - 1)
    M: Optional[int] = None  # flush schedules, 2BW: microbatches per flush; null: S (dualpipe_v: 2S)
    D: int = 1  # flush schedules: D data-parallel pipelines, D·M per step (rpd.schedules.machinery.data_parallel)
    overlap_allreduce: bool = False  # with D > 1: each rank all-reduces after its last backward, during the drain
    local_steps: int = 1  # with D > 1: flushes between parameter averagings (LocalSGD / DiLoCo across pipelines)


SHARED = tuple(f.name for f in dataclasses.fields(ScheduleConfig))


def field_type(tp) -> Any:
    """The OmegaConf-typed form of a parameter's annotation: scalars as they are, tuples as
    ``List[item]``, ``X | None`` as ``Optional[X]``; anything else ``Any``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in (bool, int, float, str):
        return tp
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return Optional[field_type(rest[0])] if len(rest) == 1 else Any
    if origin in (tuple, list):
        items = {a for a in args if a is not Ellipsis}
        return _LISTS.get(items.pop() if len(items) == 1 else None, List[Any])
    return Any


_LISTS: dict[Any, Any] = {bool: List[bool], int: List[int], float: List[float], str: List[str]}


def _own(entries) -> list[tuple[str, Any, Any]]:
    """The schema fields of the schedules' own parameters (the first schedule's field wins a name)."""
    out: dict[str, tuple[str, Any, Any]] = {}
    for e in entries:
        if e.params_type is None:
            continue
        hints = typing.get_type_hints(e.params_type)
        for f in dataclasses.fields(e.params_type):
            value = None if f.default is dataclasses.MISSING else f.default
            default: Any = (
                dataclasses.field(default_factory=functools.partial(list, value))
                if isinstance(value, tuple)
                else dataclasses.field(default=value)
            )
            out.setdefault(f.name, (f.name, field_type(hints[f.name]), default))
    return list(out.values())


def method_schedules() -> list[str]:
    """The schedules the methods run by default (``schedule.name`` null): pipedream, local_sgd."""
    names = [(m.schedules or (m.default_schedule,))[0] for m in registry.METHODS.values()]
    return sorted(set(names), key=names.index)


def schedule_schema(name: str) -> type:
    """The :class:`ScheduleConfig` subclass of schedule ``name``: ``name`` and one field per
    parameter of its ``params_type``, its annotation's type and the dataclass's default.
    ``default``: the method's own schedule, with every such schedule's parameters."""
    if name == DEFAULT:
        fields = _own(registry.SCHEDULES[n] for n in method_schedules())
        return dataclasses.make_dataclass("Schedule_default", fields, bases=(ScheduleConfig,))
    fields = [("name", Optional[str], dataclasses.field(default=name)), *_own([registry.SCHEDULES[name]])]
    return dataclasses.make_dataclass(f"Schedule_{name}", fields, bases=(ScheduleConfig,))


def schemas() -> list[tuple[str, str, type, None]]:
    """Every registered schedule's schema as ``schedule_schema/<name>``, and ``default``: (group,
    name, node, package) for hydra's ConfigStore, made afresh on each call (a late registration
    included: the toy schedule's test registers from its own file)."""
    return [("schedule_schema", name, schedule_schema(name), None) for name in [DEFAULT, *registry.SCHEDULES]]


def key_hint(key: str, name: str | None) -> str | None:
    """The refusal of ``schedule.<field>`` that schedule ``name`` (None: the method's own) does
    not have: one line naming the field, the schedules that have it and ``name``'s own; None
    for any other key."""
    head, _, field = key.partition(".")
    if head != "schedule" or not field or "." in field or field in SHARED:
        return None
    if name is None:
        own = sorted({f for n in method_schedules() for f in registry.SCHEDULES[n].own_names})
        name = "of the method (schedule.name null)"
    elif name in registry.SCHEDULES:
        own = list(registry.SCHEDULES[name].own_names)
    else:
        return None
    if field in own:
        return None
    owners = registry.owners_of(field)
    if not owners:
        return None
    where = f"a parameter of {', '.join(owners)} (schedule={owners[0]})"
    return f"{key}: schedule {name} has no such parameter; {where}; its own: {', '.join(own) or 'none'}"


def compose_hint(key: str, kind: Any) -> str | None:
    """:func:`key_hint` for hydra's "no such key" in the schema ``kind`` (its name's default)."""
    if not (isinstance(kind, type) and issubclass(kind, ScheduleConfig)):
        return None
    name = next(f.default for f in dataclasses.fields(kind) if f.name == "name")
    return key_hint(key, name if isinstance(name, str) else None)


def own(node, name: str) -> dict[str, Any]:
    """The own parameters of schedule ``name`` in a schedule config node: the keys of its
    ``params_type`` that the node holds (the method's own node holds every such schedule's
    keys; the chosen one reads its own)."""
    values: dict = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)  # type: ignore[assignment]
    return {k: values[k] for k in registry.SCHEDULES[name].own_names if k in values}


def on_schema(cfg: Mapping) -> Mapping:
    """A plain config dict (``rpd.cli.train.run({...})``) with its ``schedule`` dict on the
    schema of its name, every key checked first (ValueError: :func:`key_hint`); else as given."""
    node = cfg.get("schedule")
    if not isinstance(node, dict):
        return cfg  # a DictConfig is typed already
    name = node.get("name")
    if name is not None and name not in registry.SCHEDULES:
        return cfg  # an unknown name is refused naming the choices
    for key in node:
        hint = key_hint(f"schedule.{key}", name)
        if hint is not None:
            raise ValueError(hint)
    schema = schedule_schema(DEFAULT if name is None else name)
    return {**cfg, "schedule": OmegaConf.merge(OmegaConf.structured(schema), node)}
