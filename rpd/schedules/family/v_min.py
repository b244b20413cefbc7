"""V-Min (docs/schedules.md#v-half-and-v-min): its entry (the constructor and the order:
:mod:`rpd.schedules.family.v_memory`, shared with V-Half)."""

from __future__ import annotations

from rpd.schedules.family.v_memory import v_min
from rpd.schedules.machinery.entry import ScheduleEntry, Source

SAIL_V = "sail-sg/zero-bubble-pipeline-parallelism: megatron/core/pipeline_parallel/zerobubble/scheduler/zbv_greedy.py"

ENTRY = ScheduleEntry(
    "v_min",
    v_min,
    ("M",),
    flush=True,
    split_backward=True,
    chunks_per_rank=2,
    doc="V-Min: controllable-memory V schedule, the least activation memory",
    label="V-Min",
    colour="#1F78B4",
    marker=">",
    source=Source("Qi et al., Pipeline Parallelism with Controllable Memory, NeurIPS 2024", SAIL_V),
)
