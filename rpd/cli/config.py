"""Typed, locked config schemas for the entry points and their checks (plain dataclasses;
``experiments.schemas`` stores them in hydra's ConfigStore, :func:`schemas`).

The YAML files under ``configs/`` are merged onto these dataclasses, so a misspelt key or a
value of the wrong type fails at compose time naming the field (``full_key: schedule.SS``); a key
added with ``+`` fails in :func:`typed` (:func:`check_keys`, listing the valid keys); and
names with a fixed set of choices are enums (``method.delays=foo`` fails listing the choices).
Each objective, schedule and optimizer is typed by its own schema, derived from the library's
declaration (:mod:`rpd.cli.objective_config`, :mod:`rpd.cli.schedule_config`,
:mod:`rpd.cli.optimizer_config`). Value checks that a type cannot express (S >= 1, a non-empty γ grid, n >= d for Nesterov's
quadratic, S >= 3 for the LM, ...) run in :func:`rpd.cli.checks.validate`, before any objective is built,
with the library's own checks (``rpd.validation``, ``rpd.analysis.tuning.pow2_grid``) and the dotted
config path as the argument name: ``schedule.S must be >= 1, got 0``.

Only ``experiments/`` imports hydra; the library gets plain values from these nodes.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any, Dict, List, Optional

from omegaconf import MISSING, OmegaConf

from rpd import registry
from rpd.cli import objective_config, optimizer_config, schedule_config
from rpd.cli.objective_config import ObjectiveConfig, objective_schema  # re-exported: the objective group's schemas
from rpd.cli.optimizer_config import (  # re-exported: the optimizer groups' schemas
    CorrectionName,
    InnerState,
    OptimizerConfig,
    OuterOptimizerConfig,
    OuterOptimizerName,
    optimizer_schema,
)
from rpd.cli.schedule_config import ScheduleConfig, schedule_schema

__all__ = [
    "ObjectiveConfig",
    "objective_schema",
    "CorrectionName",
    "InnerState",
    "OptimizerConfig",
    "OuterOptimizerConfig",
    "OuterOptimizerName",
    "ScheduleConfig",
    "schedule_schema",
    "optimizer_schema",
]


# The names of the registries (rpd.registry): registering a method or a schedule is the only
# step, its name becomes a config choice here (a misspelling fails at compose time).
MethodName = enum.Enum("MethodName", {name: name for name in registry.METHODS})  # type: ignore[misc]  # members from the registry at import: mypy types the functional API from literals only


class Delays(enum.Enum):  # RPD's delay model; "pd" = PipeDream's exact delay table
    uniform = "uniform"
    max = "max"
    zero = "zero"
    pd = "pd"


class BlockOrder(enum.Enum):  # "pd" = the block order of PipeDream's timeline
    uniform = "uniform"
    cyclic = "cyclic"
    pd = "pd"


class BatchOrder(enum.Enum):  # "pd" = microbatch m uses batch m mod n_batches, in PD's order
    uniform = "uniform"
    cyclic = "cyclic"
    pd = "pd"


class Selector(enum.Enum):
    stable = "stable"
    reference = "reference"
    best_final = "best_final"


class Compare(enum.Enum):
    equal_time = "equal_time"  # every row of a sweep is read at one simulated time T (the default)
    equal_n = "equal_n"  # every row after N microbatches, its own time (the paper's protocol)


class LoggerKind(enum.Enum):
    none = "none"
    wandb = "wandb"


class Size(enum.Enum):
    quick = "quick"
    full = "full"


@dataclasses.dataclass
class MethodConfig:
    """``rpd.train.methods``: which method, its step-size grid 2^gamma_lo .. 2^gamma_hi (vmapped in one
    compile), seeds, RPD's options, and the step-size selector (``rpd.analysis.tuning``)."""

    name: MethodName = MethodName.pd  # type: ignore[attr-defined]  # a registry-built member (above)
    gamma_lo: int = -8  # log2 of the smallest step size
    gamma_hi: int = 0  # log2 of the largest step size
    gammas: Optional[List[float]] = None  # explicit grid (overrides gamma_lo/hi); every value > 0
    seeds: List[int] = dataclasses.field(default_factory=lambda: [0])  # method seeds (RPD sampling, noise)
    delta: Optional[int] = None  # RPD's delay bound; null: PD's floor(S^2 - S/2)
    delays: Delays = Delays.uniform
    block_order: BlockOrder = BlockOrder.uniform
    batch_order: BatchOrder = BatchOrder.uniform
    selector: Selector = Selector.best_final
    tail_frac: float = 0.2
    stride: int = 1  # record f every `stride` time steps (PD, pipeline) or block updates (RPD, SGD)
    # method=pipeline (rpd.train.methods.train), where the schedule's semantics has them:
    predict: bool = False  # PipeDream, PipeMare: forward at predicted weights
    ema: Optional[float] = None  # EMA factor of the velocity (predict, t2); null: 0.9
    t1: bool = False  # PipeMare T1: per-stage step-size warm-up by delay
    t1_window: Optional[int] = None  # T1's window in updates; null: N / 4
    t2: bool = False  # PipeMare T2: backward weights extrapolated toward the forward ones
    # method=localsgd: Streaming DiLoCo (rpd.train.streaming_diloco): P fragments synced in turn
    # (dividing schedule.H), each update landing ``overlap`` local steps late, mixed by ``mixing``
    fragments: int = 1
    overlap: int = 0
    mixing: float = 0.0


@dataclasses.dataclass
class CostsConfig:
    """``rpd.schedules.machinery.costs.CostModel`` (docs/schedules.md#time-costs-and-the-one-timer), integer ticks. The defaults
    are unit costs: every F and B one tick (split-backward schedules: F = I = W = 1), which is the paper's time step."""

    F: int = 1  # forward, per stage (per chunk for interleaved / V schedules)
    B: Optional[int] = None  # full backward; null: I + W if given, else 1
    I: Optional[int] = None  # noqa: E741 (split backward: input gradient); null: B/2, or 1
    W: Optional[int] = None  # split backward: weight gradient; with I, I + W = B
    FB: Optional[int] = None  # DualPipeV's overlapped F&B pair; null: F + B
    p2p: int = 0  # latency added to every dependency that crosses ranks
    allreduce_alpha: float = 0.0  # an averaging / all-reduce of v values: ceil(alpha + beta v) ticks
    allreduce_beta: float = 0.0
    allreduce_values: Optional[int] = None  # v per stage; null: the objective's largest block
    straggler_p: float = 0.0  # each op independently slowed with probability p ...
    straggler_ticks: int = 0  # ... by this many ticks
    host_d2h: Optional[int] = (
        None  # activation offload (every schedule): ticks to move one activation to host; null: off
    )
    host_h2d: Optional[int] = None  # ... and back (null: host_d2h)
    host_latency: int = 0  # ... plus this per transfer
    host_min_gap: int = 2  # offload an activation when at least this many ops run between its F and its backward
    # stochastic time (docs/science.md#stochastic-time): each op's duration times a lognormal factor of
    # mean 1 and this coefficient of variation, per op type (0: exact) ...
    jitter_cv_F: float = 0.0
    jitter_cv_B: float = 0.0
    jitter_cv_IW: float = 0.0  # either half of a split backward (I, W)
    jitter_cv_p2p: float = 0.0  # a cross-rank dependency's latency
    jitter_cv_allreduce: float = 0.0  # a flush's all-reduce, a LocalSGD averaging
    slow_ranks: List[int] = dataclasses.field(default_factory=list)  # ... and persistent stragglers: these ranks'
    slow_factor: float = 1.0  # compute ops take slow_factor times as long, every step
    seed: int = 0  # seed of the straggler and jitter draws
    unit: str = (
        "tick"  # what one tick of the costs above stands for: tick, ns, us, ms or s (a label; integers stay exact)
    )


@dataclasses.dataclass
class LoggerConfig:
    """``rpd.io.tracking.make_logger``; see configs/logger/*.yaml."""

    kind: LoggerKind = LoggerKind.none
    project: str = "rpd"
    entity: Optional[str] = None
    mode: Optional[str] = None  # offline | online | disabled; null: $WANDB_MODE, else offline
    dir: Optional[str] = None  # null: the hydra job's output directory (outside hydra: $WANDB_DIR or .)
    tags: List[str] = dataclasses.field(default_factory=list)
    init_timeout: float = 30.0  # seconds an online run waits for the server, then logs offline


@dataclasses.dataclass
class StudyConfig:
    """Which ``rpd.studies`` entry feeds the figure, and overrides of its ``Config`` fields.

    ``experiments.figure`` replaces this node by the study's own schema (:func:`study_schema`,
    the config group ``study``): one typed field per field of the study's ``Config``, null = the
    size's preset, so ``study.S=8`` is checked at compose time. ``overrides`` is the untyped
    form (``+study.overrides.S=8``), checked against the study's fields before any work."""

    name: str = MISSING  # a name in rpd.studies.REGISTRY
    overrides: Dict[str, Any] = dataclasses.field(default_factory=dict)


def _schema_type(tp) -> Any:
    """The OmegaConf-typed form of a study Config field's annotation: scalars as they are,
    tuples and lists as ``List[item]``, ``X | None`` as X; anything else ``Any``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in (bool, int, float, str):
        return tp
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return _schema_type(rest[0]) if len(rest) == 1 else Any
    if origin in (tuple, list):
        items = {a for a in args if a is not Ellipsis}
        item = items.pop() if len(items) == 1 else None
        return _LISTS.get(item, List[Any])
    if tp is dict or origin is dict:
        return Dict[str, Any]
    return Any


_LISTS: dict[Any, Any] = {bool: List[bool], int: List[int], float: List[float], str: List[str]}


def study_schema(name: str, config_cls) -> type:
    """A :class:`StudyConfig` subclass for the study ``name`` whose ``Config`` dataclass is
    ``config_cls``: every field of it, typed (:func:`_schema_type`), defaulting to null (the
    preset of the chosen size). Fields named like StudyConfig's own are left to ``overrides``."""
    hints = typing.get_type_hints(config_cls)
    fields: list[tuple[str, Any, Any]] = [
        (f.name, Optional[_schema_type(hints[f.name])], dataclasses.field(default=None))
        for f in dataclasses.fields(config_cls)
        if f.name not in ("name", "overrides")
    ]
    fields.insert(0, ("name", str, dataclasses.field(default=name)))
    return dataclasses.make_dataclass(f"Study_{name}", fields, bases=(StudyConfig,))


def study_fields(study) -> dict:
    """The study fields set on a composed ``study`` node: its typed fields that are not null,
    and ``overrides``; a field given both ways is an error naming both."""
    typed_: dict = {k: v for k, v in study.items() if k not in ("name", "overrides") and v is not None}
    typed_ = typing.cast(dict, OmegaConf.to_container(OmegaConf.create(typed_), resolve=True)) if typed_ else {}
    extra = typing.cast(dict, OmegaConf.to_container(study.overrides, resolve=True)) if "overrides" in study else {}
    both = sorted(set(typed_) & set(extra))
    if both:
        raise ValueError(
            f"study.{both[0]} and study.overrides.{both[0]} are both set; give one "
            f"(study.{both[0]}=... is the typed form)"
        )
    return {**extra, **typed_}


@dataclasses.dataclass
class Config:
    """Shared by both entry points: one experiment file describes a paper figure's study (for
    ``experiments.figure``) and a representative cell of its sweep (for ``experiments.train``)."""

    objective: ObjectiveConfig = dataclasses.field(default_factory=ObjectiveConfig)
    method: MethodConfig = dataclasses.field(default_factory=MethodConfig)
    schedule: ScheduleConfig = dataclasses.field(default_factory=ScheduleConfig)
    costs: CostsConfig = dataclasses.field(default_factory=CostsConfig)
    logger: LoggerConfig = dataclasses.field(default_factory=LoggerConfig)
    study: StudyConfig = dataclasses.field(default_factory=StudyConfig)
    experiment_name: str = "default"  # wandb group (set by configs/experiment/*); results are keyed by content
    results_root: str = "results"  # train runs: <root>/train/<hash>; studies: <root>/figures/<name>/<hash>
    force: bool = False  # recompute even when a complete result exists


@dataclasses.dataclass
class TrainConfig(Config):
    """``python -m experiments.train``: one (objective, method, schedule) job."""

    # A multirun without schedule.T compares its rows at one simulated time: the shortest any of
    # its rows needs for schedule.N microbatches (experiments.sweep.EqualTime); equal_n: each
    # row after N microbatches, at its own time.
    compare: Compare = Compare.equal_time
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    # LocalSGD only (DiLoCo, rpd.train.diloco): the outer optimizer and the inner state at a sync
    outer_optimizer: OuterOptimizerConfig = dataclasses.field(default_factory=OuterOptimizerConfig)
    inner_state: InnerState = InnerState.keep
    # Results are keyed by config and code (rpd.io.provenance.code_identity): after a change to
    # rpd a rerun recomputes. true: a run stored by any code is reused (its row says so).
    reuse_other_code: bool = False
    # The simulated time every curve is cut at (protocol (i): the run keeps its schedule.N and is
    # read at T, by schedule.cut); set by a sweep (equal_time) or by hand. Part of the key.
    compare_T: Optional[int] = None
    T_rule: Optional[str] = None  # how compare_T was chosen, when a sweep chose it (not part of the key)


@dataclasses.dataclass
class FigureConfig(Config):
    """``python -m experiments.figure``: one study, saved, then drawn from the saved output."""

    size: Size = Size.quick
    out_dir: Optional[str] = None  # None: paper_figures/ for full, paper_figures/quick/ for quick
    fanout: bool = False  # the study's units as jobs on the chosen launcher= (rpd.cli.fanout)


@dataclasses.dataclass
class ChartConfig(Config):
    """``python -m experiments.schedule``: one schedule's Gantt chart and its numbers."""

    schedule: ScheduleConfig = dataclasses.field(default_factory=lambda: ScheduleConfig(N=None))  # null: two flushes
    out: str = "schedule.png"  # the chart (PNG, and a PDF beside it)


def schemas() -> list[tuple[str | None, str, type, str | None]]:
    """The schemas as (group, name, node, package) for hydra's ConfigStore (``experiments.schemas``
    stores them: primary configs list ``train_schema`` / ``figure_schema`` first in their
    defaults; group files merge onto the typed nodes). Made afresh on each call: a schedule or
    optimizer registered since is included."""
    return [
        (None, "train_schema", TrainConfig, None),
        (None, "figure_schema", FigureConfig, None),
        (None, "chart_schema", ChartConfig, None),
        *schedule_config.schemas(),  # schedule_schema/<name>: each schedule typed by its own parameters
        *objective_config.schemas(),  # objective_schema/<name>: each objective typed by its own parameters
        *optimizer_config.schemas(),  # optimizer_schema/<name>: each optimizer typed by its factory
    ]


# The fields of CostsConfig that are times, in ticks of costs.unit.
TIME_FIELDS = ("F", "B", "I", "W", "FB", "p2p", "straggler_ticks", "host_d2h", "host_h2d", "host_latency")


def cost_hint(given: str) -> str | None:
    """The refusal of a cost that is no integer (``costs.F=1.5``, ``costs.F=1e12``): one line
    naming the field, or None for any other override. Costs are whole numbers of
    ``costs.unit``'s ticks, so the timer stays exact: a fraction wants a finer unit."""
    key, _, text = given.lstrip("+~").partition("=")
    if key.removeprefix("costs.") not in TIME_FIELDS or not key.startswith("costs."):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    if abs(value) >= 2**62:  # the timer's times are int64
        return f"{key}={text}: too large for the timer's 64-bit ticks: pick a coarser costs.unit (tick, ns, us, ms, s)"
    whole = f"write it as one, {int(value)}; " if value.is_integer() else ""
    return (
        f"{key}={text}: costs are whole numbers of ticks of costs.unit (tick, ns, us, ms, s): {whole}"
        f"pick a finer costs.unit for a fraction (1.5 ms is costs.unit=us {key}=1500)"
    )


def _value(x):
    return x.value if isinstance(x, enum.Enum) else x


def node_to(cls, node, **given):
    """The library dataclass ``cls`` made of a config node that holds its fields (a schema derived
    from it, or one sharing its names): each field of ``cls`` read off ``node``, but those ``given``."""
    return cls(**{f.name: getattr(node, f.name) for f in dataclasses.fields(cls) if f.name not in given}, **given)
