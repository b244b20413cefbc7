"""The schedule found by search (docs/schedules.md#schedules-found-by-search): its own parameters
(overlapped) and its entry (the search and its constructor: :mod:`rpd.schedules.machinery.search`)."""

from __future__ import annotations

import dataclasses

from rpd.schedules.family.flushes import flush_entry
from rpd.schedules.machinery.entry import Look, Source
from rpd.schedules.machinery.search import searched


@dataclasses.dataclass(frozen=True)
class Params:
    """The searched schedule's own parameters."""

    overlapped: bool = False  # no barrier between flushes, the period minimised


ENTRY = flush_entry(
    "searched",
    searched,
    params_type=Params,
    split_backward=True,
    doc="found by search under a 2S cap (rpd.schedules.machinery.search, heuristic)",
    look=Look("searched (2S cap)", "#444444", "*", short="searched"),
    source=Source("rpd's own search (docs/schedules.md#schedules-found-by-search)"),
)
