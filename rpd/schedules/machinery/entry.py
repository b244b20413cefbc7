"""A schedule is one object: :class:`ScheduleEntry`, every fact about one schedule that code
outside its own module reads, defined in that module beside its order, its constructor and its
own parameters (``rpd/schedules/family/<name>.py``; the registry, :mod:`rpd.registry`, collects
the entries by name).

An entry says how to build its timeline (one signature for all, :meth:`ScheduleEntry.make`),
which parameters it takes (its ``params_type``) and their defaults, whether it has a flush, splits
the backward, how many model chunks a rank holds, how it trains (``semantics``: the name of a
rule of :mod:`rpd.train.semantics`, or a ``Semantics`` value of its own, handed to
:func:`rpd.train.methods.train` by the registry), how it is drawn (its :class:`Look`: label,
colour, marker, whether rpd's order is a labelled reconstruction) and where it comes from (paper,
public code). A variant (:class:`Variant`) is drawn by a :class:`Look` of its own.
Studies, plotting, the plan and the entry points read entries; none of them compares a name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.timeline import Timeline

# The public code most entries cite (Source.code).
TORCH = "pytorch/pytorch: torch/distributed/pipelining/schedules.py"
SAIL = "sail-sg/zero-bubble-pipeline-parallelism: megatron/core/pipeline_parallel/zb_schedules.py"
DEFAULTS: Mapping[str, Callable[[int], Any]] = {"M": lambda S: S}  # shared field -> its default as a function of S


def own_fields(params_type: type | None) -> tuple[dataclasses.Field, ...]:
    """The fields of a schedule's own parameters (none without a ``params_type``)."""
    return () if params_type is None else dataclasses.fields(params_type)


@dataclasses.dataclass(frozen=True)
class Source:
    """Where a schedule comes from: the paper and the public code its order was read from."""

    paper: str
    code: str = ""  # "owner/repo: path" of the public implementation read for meaning; "" if none


@dataclasses.dataclass(frozen=True)
class Look:
    """How a schedule (or a variant) is named and drawn in every figure and table."""

    label: str = ""  # display name ("": the schedule's name)
    colour: str = "0.4"
    marker: str = "o"
    short: str = ""  # compact label for dense legends ("": the label)
    reconstruction: bool = False  # rpd's order is a reconstruction, not read from the source: marked in every label


class Drawn:
    """What figures and tables read of an entry or a variant (``name`` and ``look``)."""

    name: str
    look: Look

    @property
    def label(self) -> str:
        return self.look.label or self.name

    @property
    def colour(self) -> str:
        return self.look.colour

    @property
    def marker(self) -> str:
        return self.look.marker

    @property
    def title(self) -> str:
        """The display label, marked "(reconstruction)" where rpd reconstructed the order."""
        return f"{self.label} (reconstruction)" if self.look.reconstruction else self.label

    @property
    def compact(self) -> str:
        return self.look.short or self.label


@dataclasses.dataclass(frozen=True)
class ScheduleEntry(Drawn):
    """One schedule. ``build(S, N, costs=..., M=..., **own)`` -> Timeline (and ``values=``
    when ``allreduce``); :meth:`make` is the one signature every caller uses.

    ``fields``: the shared fields it reads besides S and N (``("M",)`` or none).
    ``params_type``: a frozen dataclass of the schedule's own parameters (interleaved's v and
    group, ZB-H2's post-validation knobs, ...), each with its default; ``build`` receives them as
    keywords, its config is ``schedule.<field>`` (``experiments`` derives the schema from it). A
    ``resolve(S)`` method fills defaults that depend on S; int fields are checked >= 1 (>= the
    field's ``metadata["minimum"]``) and bool fields as bools before any work, the rest by the
    constructor. ``flush``: N is a whole number of flushes (minibatches) of M microbatches.
    ``allreduce``: ``build`` also takes ``values=`` (numbers averaged / all-reduced per stage,
    for the cost model's all-reduce). ``defaults`` override :data:`DEFAULTS` (M's);
    ``aliases`` map the names the constructor's errors use to fields (Chimera calls S "D").
    ``blocks(S)``: the objective blocks it trains (None: S). ``semantics``: how it trains
    (:mod:`rpd.train.semantics`). ``chunks_per_rank``: model chunks a rank holds, a number or
    the own field that sets it ("v"). ``look``: how it is drawn (:class:`Look`; :class:`Drawn`
    reads it)."""

    name: str
    build: Callable[..., Timeline]
    fields: tuple[str, ...] = ()
    flush: bool = False
    allreduce: bool = False
    defaults: Mapping[str, Callable[[int], Any]] = dataclasses.field(default_factory=dict)
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    doc: str = ""
    blocks: Callable[[int], int] | None = None
    # what it is
    synchronous: bool = True  # every flush's gradients at one weight version (minibatch SGD)
    split_backward: bool = False  # B split into I (input) and W (weights)
    chunks_per_rank: int | str = 1
    semantics: Any = "synchronous"  # a rule of rpd.train.semantics.RULES by name, or a Semantics
    params_type: type | None = None
    # how it is drawn and where it comes from
    look: Look = Look()
    source: Source | None = None

    def default(self, field: str, S: int) -> Any:
        """The default of a shared field (M) or of one of its own parameters, on S ranks."""
        if field in self.own_names:
            return self.own({}, S)[field]
        return self.defaults.get(field, DEFAULTS[field])(S)

    @property
    def own_names(self) -> tuple[str, ...]:
        """The names of the schedule's own parameters."""
        return tuple(f.name for f in own_fields(self.params_type))

    def own(self, given: Mapping[str, Any], S: int) -> dict[str, Any]:
        """The schedule's own parameters on S ranks: ``given`` over the defaults of
        :attr:`params_type` (those that depend on S filled in); a name it does not have is a
        TypeError naming it and the schedules that have it."""
        for k in given:
            if k not in self.own_names:
                own = ", ".join(self.own_names) or "none"
                raise TypeError(f"{k}: schedule {self.name} has no such parameter ({self.name}'s own: {own})")
        if self.params_type is None:
            return {}
        value = self.params_type(**given)
        if hasattr(value, "resolve"):
            value = value.resolve(S)
        return {f: getattr(value, f) for f in self.own_names}

    def make(self, S: int, N: int, M: int | None, costs: CostModel | None, params: Mapping[str, Any] = {}) -> Timeline:
        """The timeline of N microbatches on S ranks (M per flush where the schedule reads M),
        the schedule's own parameters from ``params`` or their defaults (other keys ignored)."""
        kw = {f: (M if f == "M" else params.get(f)) for f in self.fields}
        kw = {f: self.default(f, S) if v is None else v for f, v in kw.items()}
        kw.update(self.own({k: v for k, v in params.items() if k in self.own_names}, S))
        if self.allreduce:
            kw["values"] = params.get("values", 0)
        return self.build(S, N, costs=costs, **kw)


@dataclasses.dataclass(frozen=True)
class Variant(Drawn):
    """A registered schedule with some fields fixed, named and drawn as a schedule of its own
    (accepted wherever a list of schedules is given by name: the plan's ``schedules=``, E9, E10)."""

    name: str
    base: str
    fixed: Mapping[str, Any]
    look: Look
