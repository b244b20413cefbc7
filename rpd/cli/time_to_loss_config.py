"""The time-to-loss command's config schema (``time_to_loss_schema``, configs/time_to_loss.yaml):
the plan's recipe nodes (:mod:`rpd.cli.plan_config`: model, hardware with its sites, overlap,
optimizer, precision, ...) and the question's own fields: the methods, DiLoCo's settings, the
loss law and the target (a loss or a token budget), the bandwidths of the figure."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional

from rpd.cli import config as C
from rpd.cli.plan_config import HardwareConfig, ModelConfig, OverlapConfig, PipelineConfig, Precision, Recompute


@dataclasses.dataclass
class DilocoConfig:
    """DiLoCo and Streaming DiLoCo (rpd.model.outer_exchange): M replicas, the outer exchange
    every H inner steps at ``value_bytes`` per value; Streaming: P fragments, each overlapped by
    ``tau`` inner steps."""

    M: int = 2  # replicas (1 or a multiple of hardware.sites: each replica inside a site)
    H: int = 30  # inner steps between outer exchanges
    value_bytes: float = 4.0  # the pseudo-gradient's bytes per value: 4 fp32, 2 bf16, 0.5 a 4-bit float
    P: int = 3  # Streaming DiLoCo: fragments (P divides H)
    tau: int = 1  # Streaming DiLoCo: inner steps each fragment's exchange overlaps


@dataclasses.dataclass
class TimeToLossConfig:
    # the plan's nodes (rpd.cli.plan_config), read by rpd.cli.plan.recipe
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)  # type: ignore[valid-type]
    hardware: HardwareConfig = dataclasses.field(default_factory=HardwareConfig)  # type: ignore[valid-type]
    pipeline: PipelineConfig = dataclasses.field(default_factory=PipelineConfig)  # only global_batch is read
    overlap: OverlapConfig = dataclasses.field(default_factory=OverlapConfig)  # type: ignore[valid-type]
    optimizer: C.OptimizerConfig = dataclasses.field(default_factory=lambda: C.OptimizerConfig(name="adamw"))
    method: Dict[str, Any] = dataclasses.field(default_factory=dict)  # the optimizer group's γ grid (unused)
    precision: Precision = Precision.bf16_mixed  # as the plan's: fp32 | bf16_mixed | bf16
    recompute: Recompute = Recompute.none  # not read: the search tries none, selective and full
    grad_bytes: Optional[int] = None  # the gradients' dtype, kept and reduced (null: 4, fp32)
    memory_cap: Optional[Any] = None  # per device, bytes or a size (80GB); null: hardware.memory_bytes
    margin: float = 0.05  # a layout fits when its peak is at most (1 - margin) x the cap
    zero: int = 0  # not read: the search tries 0 and 1
    attention: str = "standard"  # standard | flash (a kernel, held fixed by the search)
    tp_overlap: bool = False  # TP collectives hidden under compute where they fit
    offload: bool = False  # activations to host memory (held fixed by the search)
    tick_s: Optional[float] = None  # the timer's tick; null: the smallest op / 100
    n_workers: int = 256  # the workers every method gets (its layout searched, rpd.model.search3d)
    # a schedule of the registry (its fastest layout on n_workers), diloco or streaming_diloco
    methods: List[str] = dataclasses.field(default_factory=lambda: ["1f1b", "pipedream_2bw", "diloco"])
    diloco: DilocoConfig = dataclasses.field(default_factory=DilocoConfig)
    law: str = "chinchilla"  # rpd.analysis.scale.LAWS: chinchilla | besiroglu
    target_loss: Optional[float] = None  # hours to this loss ...
    tokens: Optional[float] = None  # ... or the loss each method reaches on this many tokens
    # the figure's inter-site bandwidths, Gbit/s (hours to the loss against each; null: no sweep)
    bandwidths: Optional[List[float]] = dataclasses.field(default_factory=lambda: [1.0, 3.0, 10.0, 30.0, 100.0, 400.0])
    out: Optional[str] = None  # null: time_to_loss.json in the hydra run directory
    figure: Optional[str] = None  # null: time_to_loss.png in the hydra run directory


def schemas() -> list[tuple[None, str, type, None]]:
    """``time_to_loss_schema`` for hydra's ConfigStore (``experiments.schemas``)."""
    return [(None, "time_to_loss_schema", TimeToLossConfig, None)]
