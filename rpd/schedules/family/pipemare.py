"""PipeMare (docs/schedules.md#pipemare): PipeDream's order without stashing; its constructor and its entry."""

from __future__ import annotations

from rpd.schedules.family.flushes import costs_of
from rpd.schedules.machinery import readiness
from rpd.schedules.machinery.build import order_of, timed
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, ScheduleEntry, Source
from rpd.schedules.machinery.timeline import Timeline


def pipemare(S: int, N: int, costs: CostModel | None = None) -> Timeline:
    """PipeMare's order: PipeDream's 1F1B stream without weight stashing (docs/schedules.md#pipemare; one
    weight version per block, forward and backward read different versions)."""
    tl = readiness.pipedream(S, N)
    return timed("pipemare", order_of(tl), S=tl.S, N=tl.N, costs=costs_of(costs), noam=tl.noam)


ENTRY = ScheduleEntry(
    "pipemare",
    pipemare,
    (),
    synchronous=False,
    semantics="pipemare",
    doc="PipeMare: PD's order, no stashing",
    look=Look("PipeMare", "#556B2F", "h"),  # dark olive: the searched schedule has the dark grey
    source=Source("Yang et al., PipeMare, MLSys 2021"),
)
