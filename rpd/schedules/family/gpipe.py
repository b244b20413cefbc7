"""GPipe fill-drain (docs/schedules.md#gpipe): its constructor (its order: :func:`rpd.schedules.family.orders.gpipe_order`)
and its entry."""

from __future__ import annotations

from rpd.schedules.family import orders
from rpd.schedules.family.flushes import check, flush_entry, flushes
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import TORCH, Look, Source
from rpd.schedules.machinery.timeline import Timeline


def gpipe(S: int, N: int, M: int, costs: CostModel | None = None) -> Timeline:
    """GPipe fill-drain: per flush every rank runs F(0..M-1) then B(0..M-1) (docs/schedules.md#gpipe).
    T_flush = (M + S - 1)(tF + tB) for any tF:tB; M activations in flight."""
    S, N, M = check(S, N, M)
    return flushes("gpipe", orders.gpipe_order(S, M), S, N, M, costs)


ENTRY = flush_entry(
    "gpipe",
    gpipe,
    doc="GPipe fill-drain",
    look=Look("GPipe", "C0", "o"),
    source=Source("Huang et al., GPipe, NeurIPS 2019", TORCH),
)
