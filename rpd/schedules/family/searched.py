"""The schedule found by search (docs/schedules.md#schedules-found-by-search): its own parameters
(overlapped) and its entry (the search and its constructor: :mod:`rpd.schedules.machinery.search`)."""

from __future__ import annotations

import dataclasses

from rpd.schedules.machinery.entry import ScheduleEntry, Source
from rpd.schedules.machinery.search import searched


@dataclasses.dataclass(frozen=True)
class Params:
    """The searched schedule's own parameters."""

    overlapped: bool = False  # no barrier between flushes, the period minimised


ENTRY = ScheduleEntry(
    "searched",
    searched,
    ("M",),
    params_type=Params,
    flush=True,
    split_backward=True,
    doc="found by search under a 2S cap (rpd.schedules.machinery.search, heuristic)",
    label="searched (2S cap)",
    short="searched",
    colour="#444444",
    marker="*",
    source=Source("rpd's own search (docs/schedules.md#schedules-found-by-search)"),
)
