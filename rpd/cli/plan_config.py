"""The plan command's config schema (``plan_schema``, configs/plan.yaml): :class:`PlanConfig` and its
nodes. The ``model``, ``hardware`` and ``overlap`` schemas are made at import from rpd.model's own
types (:func:`_schema`: fields, types and defaults), so the config cannot drift from the library."""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any, Dict, List, Optional

from rpd.cli import config as C
from rpd.model import hardware as hw_lib
from rpd.model import layers
from rpd.model.overlap import Overlap


class ModelKind(enum.Enum):
    gpt = "gpt"
    profile = "profile"


class Precision(enum.Enum):
    fp32 = "fp32"
    bf16_mixed = "bf16_mixed"
    bf16 = "bf16"  # the optimizer's weight copy and state in bf16 (rpd.model.memory)


class Recompute(enum.Enum):
    none = "none"
    selective = "selective"
    full = "full"


class Partition(enum.Enum):
    even = "even"
    padded = "padded"
    layers = "layers"
    time = "time"
    memory = "memory"
    pipedream = "pipedream"


def _schema(name: str, source: type, required: dict, extra: tuple = (), doc: str = "") -> type:
    """A hydra schema with the fields, types and defaults of ``source`` (a frozen dataclass of
    rpd.model), ``required`` giving the fields the library leaves without a default (``???``
    where absent: a config group must set them), then ``extra`` fields: the config cannot drift
    from the library's type, and the library's own checks run when the plan builds it."""
    hints = typing.get_type_hints(source)
    fields = []
    for f in dataclasses.fields(source):
        default = f.default if f.default is not dataclasses.MISSING else required.get(f.name, "???")
        fields.append((f.name, hints[f.name], dataclasses.field(default=default)))
    schema = dataclasses.make_dataclass(name, [*fields, *extra])
    schema.__doc__ = doc
    return schema


# ``rpd.model.layers.GPTConfig`` (kind gpt, gpt2_medium's sizes by default) or a profile file
ModelConfig = _schema(
    "ModelConfig",
    layers.GPTConfig,
    dict(n_layer=24, d_model=1024, n_head=16, seq=1024, vocab=50257),
    extra=(
        ("name", str, dataclasses.field(default="gpt2_medium")),
        ("kind", ModelKind, dataclasses.field(default=ModelKind.gpt)),
        ("profile", Optional[str], dataclasses.field(default=None)),  # kind profile: JSON / CSV (rpd.model.profile)
        ("tokens_per_microbatch", Optional[int], dataclasses.field(default=None)),  # kind profile
    ),
    doc="rpd.model.layers.GPTConfig's fields (kind gpt) or a profile file (kind profile).",
)
# ``rpd.model.hardware.Hardware``: FLOP/s, bytes, bytes/s, seconds; the node and the compute model
# (configs/hardware/: a100_80g and h100_80g the DGX nodes, *_flat the first plan's), which set the
# fields the library requires (name, peak_flops, memory_bytes, p2p and all-reduce bandwidths)
HardwareConfig = _schema(
    "HardwareConfig",
    hw_lib.Hardware,
    {},
    doc="rpd.model.hardware.Hardware's fields and defaults; a configs/hardware/ file sets the rest.",
)


# ``rpd.model.overlap.Overlap``: Megatron-Core's overlap switches (docs/plan.md#megatrons-overlaps)
OverlapConfig = _schema("OverlapConfig", Overlap, {}, doc="rpd.model.overlap.Overlap's switches and defaults.")


@dataclasses.dataclass
class PipelineConfig:
    S: int = 4  # ranks
    M: Any = 8  # microbatches per step: an int or a list (a sweep)
    partition: Partition = Partition.even
    D: int = 1  # data-parallel pipelines (global batch D·M·micro_batch)
    overlap_allreduce: bool = False  # the DP all-reduce starts during the drain
    TP: int = 1  # tensor-parallel ranks per stage, inside one node
    SP: bool = False  # sequence parallelism (with TP > 1)
    v: Optional[int] = None  # interleaved: chunks per rank (null: 2)
    CP: int = 1  # context-parallel ranks (ring attention), placed after TP, before DP (Megatron's order)
    global_batch: Optional[int] = None  # n_workers: microbatches per step over all pipelines (null: n_workers)


@dataclasses.dataclass
class PlanTrainConfig:
    """Time to a target loss (``objective=`` turns it on; rpd.analysis.plan_train)."""

    N: int = 256  # microbatches each schedule trains; T = the shortest run's wall-clock time
    gamma_lo: Optional[int] = None  # the γ grid 2^lo..2^hi; null: the optimizer group's (method.*)
    gamma_hi: Optional[int] = None
    target: Optional[float] = None  # null: the lowest loss any schedule reaches at T/2
    rule: str = "best_final"  # γ at T: best_final | stable | reference
    points: int = 32  # instants up to T the curves are read at (time-to-target resolution T/points)
    seed: int = 0


@dataclasses.dataclass
class PlanCostsConfig:
    """Stochastic time over the plan's stage costs (docs/plan.md#stochastic-time): the fields of
    experiments.train's ``costs.*`` that the plan reads (its costs come from the model)."""

    jitter_cv_F: float = 0.0  # lognormal per-op jitter, mean 1, this CV per op type (0: exact)
    jitter_cv_B: float = 0.0
    jitter_cv_IW: float = 0.0
    jitter_cv_p2p: float = 0.0
    jitter_cv_allreduce: float = 0.0
    slow_ranks: List[int] = dataclasses.field(default_factory=list)  # persistent stragglers: these ranks'
    slow_factor: float = 1.0  # compute ops take slow_factor times as long, every step
    seed: int = 0  # seed of the jitter draws
    jitter_trace: Optional[str] = None  # a measured trace (parquet): the CVs read from it (rpd.io.trace_jitter) ...
    jitter_meta: Optional[str] = None  # ... with its meta file (YAML); exclusive with jitter_cv_*


@dataclasses.dataclass
class PlanConfig:
    # schemas made from rpd.model's types at import (_schema): a type to hydra, a variable to mypy
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)  # type: ignore[valid-type]
    hardware: HardwareConfig = dataclasses.field(default_factory=HardwareConfig)  # type: ignore[valid-type]
    pipeline: PipelineConfig = dataclasses.field(default_factory=PipelineConfig)
    overlap: OverlapConfig = dataclasses.field(default_factory=OverlapConfig)  # type: ignore[valid-type]
    # the optimizer group shared with experiments.train (configs/optimizer/): its entry's declared
    # state (rpd.train.transforms.OptimizerEntry.state, fp32 values per parameter) is counted
    optimizer: C.OptimizerConfig = dataclasses.field(default_factory=lambda: C.OptimizerConfig(name="adam"))
    method: Dict[str, Any] = dataclasses.field(default_factory=dict)  # the optimizer group's γ grid (train)
    # objective=mlp_chain|nanochat (configs/objective/): each schedule trained through its own
    # semantics on that objective cut into the same stages, time to a target loss (train.*)
    objective: Optional[C.ObjectiveConfig] = None
    train: PlanTrainConfig = dataclasses.field(default_factory=PlanTrainConfig)
    costs: PlanCostsConfig = dataclasses.field(default_factory=PlanCostsConfig)  # jitter, stragglers
    precision: Precision = Precision.bf16_mixed
    recompute: Recompute = Recompute.none
    # the gradients' dtype, kept and reduced: 4 (fp32, Megatron's default under bf16) or 2
    # (--grad-reduce-in-bf16; NeMo's grad_sync_dtype: bf16); null: 4
    grad_bytes: Optional[int] = None
    memory_cap: Optional[Any] = None  # per device: bytes or a size (40GiB, 80GB); null: hardware.memory_bytes
    margin: float = 0.05  # a row fits when its peak is at most (1 - margin) x the cap
    zero: int = 0  # 1: the distributed optimizer (master weights, optimizer state sharded over D)
    attention: str = "standard"  # standard | flash (no a*s^2 scores kept)
    tp_overlap: bool = False  # the same as overlap.tp_comm (kept for earlier commands)
    offload: bool = False  # activations to host memory between F and B (hardware.host_bandwidth)
    n_workers: Optional[int] = None  # the layout and knobs searched for this many workers (rpd.model.search3d)
    schedules: Optional[List[str]] = None  # null: every registered schedule
    tick_s: Optional[float] = None  # null: the smallest op / 100
    out: Optional[str] = None  # null: plan.json in the hydra run directory
    figure: Optional[str] = None  # a PNG of step time against peak bytes


def schemas() -> list[tuple[None, str, type, None]]:
    """``plan_schema`` as (group, name, node, package) for hydra's ConfigStore (``experiments.schemas``)."""
    return [(None, "plan_schema", PlanConfig, None)]
