"""GEMS (docs/schedules.md#gems): its constructor (its order: :mod:`rpd.schedules.family.frontier`) and its entry."""

from __future__ import annotations

from rpd.schedules.family.flushes import allreduce_gap, check, flush_entry, flushes
from rpd.schedules.family.frontier import gems_order, replicated
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, Source
from rpd.schedules.machinery.timeline import Timeline


def gems(S: int, N: int, M: int, costs: CostModel | None = None, values: int = 0) -> Timeline:
    """GEMS (SC'20; :mod:`rpd.schedules.family.frontier`): two replicas in opposite directions over S
    ranks, one microbatch pair at a time; synchronous, each step of M (even) microbatches ends
    with the all-reduce of the two replicas of every stage, ``costs.allreduce_ticks(values)``."""
    S, N, M = check(S, N, M)
    gap = allreduce_gap(costs, values)
    return replicated(flushes("gems", gems_order(S, M), S, N, M, costs, gap=gap, copies=2))


ENTRY = flush_entry(
    "gems",
    gems,
    allreduce=True,
    semantics="gems",
    aliases={"D": "S"},
    defaults={"M": lambda S: S + S % 2},
    doc="GEMS, two replicas in opposite directions",
    look=Look("GEMS", "#E7298A", "p"),
    source=Source("Jain et al., GEMS, SC 2020"),
)
