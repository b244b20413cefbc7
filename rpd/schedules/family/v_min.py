"""V-Min (docs/schedules.md#v-half-and-v-min): its entry (the constructor and the order:
:mod:`rpd.schedules.family.v_memory`, shared with V-Half, as is what their entries share)."""

from __future__ import annotations

from rpd.schedules.family import v_memory
from rpd.schedules.machinery.entry import Look

ENTRY = v_memory.entry(
    "v_min",
    v_memory.v_min,
    doc="V-Min: controllable-memory V schedule, the least activation memory",
    look=Look("V-Min", "#000080", ">"),  # navy: GPipe has C0, the blue this was
)
