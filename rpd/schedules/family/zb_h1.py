"""ZB-H1 (docs/schedules.md#zb-h1): its constructor and its entry."""

from __future__ import annotations

from rpd.schedules.family import orders
from rpd.schedules.family.flushes import check, flush_entry, flushes
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import SAIL, Look, Source
from rpd.schedules.machinery.timeline import Timeline


def zb_h1(S: int, N: int, M: int, costs: CostModel | None = None) -> Timeline:
    """ZB-H1 (docs/schedules.md#zb-h1): 1F1B with the backward split into I and W, W delayed by r
    microbatches on rank r. Idle per rank (S - 1)(tF + tI - tW) when tW <= tF."""
    S, N, M = check(S, N, M, per_mb=3)
    return flushes("zb_h1", orders.zb_h1_order(S, M), S, N, M, costs, split=True)


ENTRY = flush_entry(
    "zb_h1",
    zb_h1,
    split_backward=True,
    doc="zero bubble H1",
    look=Look("ZB-H1", "C3", "^"),
    source=Source("Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024", SAIL),
)
