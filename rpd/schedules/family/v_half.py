"""V-Half (docs/schedules.md#v-half-and-v-min): its entry (the constructor and the order:
:mod:`rpd.schedules.family.v_memory`, shared with V-Min)."""

from __future__ import annotations

from rpd.schedules.family.flushes import flush_entry
from rpd.schedules.family.v_memory import SOURCE, v_half
from rpd.schedules.machinery.entry import Look

ENTRY = flush_entry(
    "v_half",
    v_half,
    split_backward=True,
    chunks_per_rank=2,
    doc="V-Half: controllable-memory V schedule, about half of 1F1B's activations",
    look=Look("V-Half", "#A6CEE3", "<"),
    source=SOURCE,
)
