"""V-Min (docs/schedules.md#v-half-and-v-min): its entry (the constructor and the order:
:mod:`rpd.schedules.family.v_memory`, shared with V-Half)."""

from __future__ import annotations

from rpd.schedules.family.flushes import flush_entry
from rpd.schedules.family.v_memory import SOURCE, v_min
from rpd.schedules.machinery.entry import Look

ENTRY = flush_entry(
    "v_min",
    v_min,
    split_backward=True,
    chunks_per_rank=2,
    doc="V-Min: controllable-memory V schedule, the least activation memory",
    look=Look("V-Min", "#1F78B4", ">"),
    source=SOURCE,
)
