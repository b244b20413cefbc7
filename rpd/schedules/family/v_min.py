"""V-Min (docs/schedules.md#v-half-and-v-min): its entry (the constructor and the order:
:mod:`rpd.schedules.family.v_memory`, shared with V-Half)."""

from __future__ import annotations

from rpd.schedules.family.flushes import flush_entry
from rpd.schedules.family.v_memory import v_min
from rpd.schedules.machinery.entry import Look, Source

SAIL_V = "sail-sg/zero-bubble-pipeline-parallelism: megatron/core/pipeline_parallel/zerobubble/scheduler/zbv_greedy.py"

ENTRY = flush_entry(
    "v_min",
    v_min,
    split_backward=True,
    chunks_per_rank=2,
    doc="V-Min: controllable-memory V schedule, the least activation memory",
    look=Look("V-Min", "#1F78B4", ">"),
    source=Source("Qi et al., Pipeline Parallelism with Controllable Memory, NeurIPS 2024", SAIL_V),
)
