"""A real model on the pipeline (docs/plan.md): layers with parameters, FLOPs and bytes
(:mod:`~rpd.model.layers`, :mod:`~rpd.model.profile`), a device (:mod:`~rpd.model.hardware`),
contiguous stages and their costs in ticks (:mod:`~rpd.model.stages`), PipeDream's partitioner with
replicated stages (:mod:`~rpd.model.partition`), tensor and sequence parallelism per rank
(:mod:`~rpd.model.tensor`), the node's links (:mod:`~rpd.model.topology`), compute from the work
(:mod:`~rpd.model.compute`), bytes per rank of any timed schedule
(:mod:`~rpd.model.memory`), the plan over every schedule (:mod:`~rpd.model.plan`), and a measured
Megatron-LM job's layout and step as a replay program (:mod:`~rpd.model.job_layout`,
:mod:`~rpd.model.megatron_step`; docs/replay.md).
Plain values in and out; the schedules come from :mod:`rpd.schedules` or a maker the caller
passes (the registry sits above this layer). ``rpd.model.partition`` is the module; the
partition of G stages by a rule is :func:`rpd.model.stages.partition`."""

from rpd.model.hardware import Hardware
from rpd.model.job_layout import JobLayout
from rpd.model.layers import GPTConfig, Layer, Model, Parallel, gpt_model, mlp_model, nanochat_model, preset
from rpd.model.memory import RankMemory, rank_memory
from rpd.model.partition import Partition, partition_model, pipedream, pipedream_hierarchical
from rpd.model.plan import Row, format_table, plan, to_json
from rpd.model.profile import load_profile
from rpd.model.stages import Stages, stage_costs, stages

__all__ = [
    "GPTConfig",
    "Hardware",
    "JobLayout",
    "Layer",
    "Model",
    "Parallel",
    "Partition",
    "RankMemory",
    "Row",
    "Stages",
    "format_table",
    "gpt_model",
    "load_profile",
    "mlp_model",
    "nanochat_model",
    "partition_model",
    "pipedream",
    "pipedream_hierarchical",
    "plan",
    "preset",
    "rank_memory",
    "stage_costs",
    "stages",
    "to_json",
]
