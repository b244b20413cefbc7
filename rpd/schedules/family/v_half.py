"""V-Half (docs/schedules.md#v-half-and-v-min): its entry (the constructor and the order:
:mod:`rpd.schedules.family.v_memory`, shared with V-Min, as is what their entries share)."""

from __future__ import annotations

from rpd.schedules.family import v_memory
from rpd.schedules.machinery.entry import Look

ENTRY = v_memory.entry(
    "v_half",
    v_memory.v_half,
    doc="V-Half: controllable-memory V schedule, about half of 1F1B's activations",
    look=Look("V-Half", "#A6CEE3", "<"),
)
