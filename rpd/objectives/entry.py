"""An objective is one entry: :class:`ObjectiveEntry` holds what every layer above asks of an
objective by its name (whether it is a language model, its metric, its identity in a results-store
key, its evaluation cadence, its default γ grid, how it is built and checked from its config node),
and :data:`OBJECTIVES` is the only table of them, keyed by name. The built-in entries are
:mod:`rpd.objectives.entries` (collected by :mod:`rpd.objectives`); an objective outside rpd is one
:func:`register` call (docs/architecture.md#adding-an-objective).

Nothing here imports hydra: a config node is anything with attribute access (``o.n``, ``o.d``)
and, for the store key, a plain dict."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from rpd.objectives.base import Objective
from rpd.runtime.budget import Term

# The objective config's fields that every objective's store key keeps; each of the others is kept
# only by an objective that reads it (:attr:`ObjectiveEntry.reads`), null in every other key.
SHARED = ("name", "batch_size", "grad_noise", "seed", "_target_", "options")
# The fields of the one config struct every objective shared before each owned its parameters:
# a key holds each, null where its objective has no such field, so every run stored
# before keeps its key. A new objective's fields are in its own keys only.
KEYED: tuple[str, ...] = ("n", "d", "mu", "condition_number", "lam", "rotate", "align")
KEYED += ("text_path", "seq_len", "width", "heads", "heldout_frac", "heldout_batches")

Shapes = tuple[tuple[tuple[int, ...], ...], ...]


@dataclasses.dataclass(frozen=True)
class Metric:
    """The curve a run stores and selects γ on: its key in the stored curves, the axis label a
    figure gives it, and its unit ("" where the objective's own units)."""

    name: str
    label: str
    unit: str = ""


GAP = Metric("loss/f_minus_fstar", "f(x) − f*")
HELDOUT = Metric("loss/heldout", "held-out loss", "nats")


@dataclasses.dataclass(frozen=True)
class Memory:
    """An objective's part of a run's memory estimate (``rpd.runtime.budget``): its parameter
    vector's length D, the config fields that set D, the bytes of one value, and its data terms."""

    D: int
    by: tuple[str, ...]
    item: int
    data: tuple[Term, ...] = ()


@dataclasses.dataclass(frozen=True)
class ObjectiveEntry:
    """One objective. ``build(o, S)``: the Objective of a checked config node ``o`` with S blocks;
    ``check(o, S)``: its own value checks, raising ValueError naming ``objective.<field>``;
    ``reads``: the config fields beyond :data:`SHARED` it reads (its store key keeps them);
    ``identity(o)``: key fields a config does not hold (the LM's text's SHA-256);
    ``params_type``: the frozen dataclass of its config fields and their defaults, beside its
    builder (``objective=<name>``'s schema is derived from it; ``reads``, when not given, is its
    fields beyond :data:`SHARED`);
    ``evaluated``: "every_update", or "round_ends" (LocalSGD evaluates it after a round only);
    ``gamma_exps``: the default γ grid 2^lo .. 2^hi; ``block_shapes(obj)``: per block, the shapes
    of its weight matrices (None: one flat vector); ``memory(o, S)``: its part of the estimate."""

    name: str
    build: Callable[[Any, int], Objective] | None = None
    reads: tuple[str, ...] = ()
    is_lm: bool = False
    metric: Metric = GAP
    identity: Callable[[Mapping], dict] | None = None
    evaluated: str = "every_update"
    gamma_exps: tuple[int, int] = (-10, 0)
    check: Callable[[Any, int], None] | None = None
    block_shapes: Callable[[Objective], Shapes | None] | None = None
    memory: Callable[[Any, int], Memory] | None = None
    params_type: type | None = None

    def __post_init__(self):
        if self.evaluated not in ("every_update", "round_ends"):
            raise ValueError(f"evaluated must be every_update or round_ends, got {self.evaluated!r}")
        if self.params_type is not None:
            if not dataclasses.is_dataclass(self.params_type):
                raise TypeError(f"params_type of {self.name!r} must be a dataclass, got {self.params_type!r}")
            if not self.reads:  # frozen: set once here, from the one declaration
                object.__setattr__(self, "reads", tuple(n for n in self.own_names if n not in SHARED))

    @property
    def own_names(self) -> tuple[str, ...]:
        """The config fields of its :attr:`params_type` (none without one)."""
        return tuple(f.name for f in dataclasses.fields(self.params_type)) if self.params_type else ()

    def store_key(self, o: Mapping) -> dict:
        """The objective's part of a run's store key from its config as a plain dict: the shared
        fields and those it reads, every other field and every one of :data:`KEYED` it lacks
        null, and its :attr:`identity`."""
        key = {k: (v if k in SHARED or k in self.reads else None) for k, v in o.items()}
        key |= {k: None for k in KEYED if k not in key}
        if self.identity is not None:
            key.update(self.identity(o))
        return key


OBJECTIVES: dict[str, ObjectiveEntry] = {}


def register(entry: ObjectiveEntry) -> ObjectiveEntry:
    """Add an objective (its name becomes a choice of ``objective.name``)."""
    if entry.name in OBJECTIVES and OBJECTIVES[entry.name] is not entry:
        raise ValueError(f"objective {entry.name!r} is already registered")
    OBJECTIVES[entry.name] = entry
    return entry


def params_of(params_type: type, o: Any) -> Any:
    """An objective's parameters, its ``params_type`` made of a config node ``o`` (each field read
    off ``o`` by its name): what an entry's ``build`` hands its builder."""
    return params_type(**{f.name: getattr(o, f.name) for f in dataclasses.fields(params_type)})


def entry_of(name: str) -> ObjectiveEntry:
    """The registered entry of an objective, or a plain one (no LM, f − f*, every update) for an
    objective the registry does not know (a user's factory, ``objective._target_``)."""
    return OBJECTIVES.get(name) or ObjectiveEntry(name)


def structured() -> tuple[str, ...]:
    """The registered objectives whose blocks have weight matrices (:attr:`ObjectiveEntry.block_shapes`)."""
    return tuple(name for name, e in OBJECTIVES.items() if e.block_shapes is not None)


def readers(field: str) -> tuple[str, ...]:
    """The registered objectives that read the config field ``field``."""
    return tuple(name for name, e in OBJECTIVES.items() if field in e.reads)
