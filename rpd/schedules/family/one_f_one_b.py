"""1F1B with flush (docs/schedules.md#1f1b-with-flush): its constructor (its order:
:func:`rpd.schedules.family.orders.one_f_one_b_order`) and its entry."""

from __future__ import annotations

from rpd.schedules.family import orders
from rpd.schedules.family.flushes import check, flush_entry, flushes
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import TORCH, Look, Source
from rpd.schedules.machinery.timeline import Timeline


def one_f_one_b(S: int, N: int, M: int, costs: CostModel | None = None) -> Timeline:
    """1F1B with flush (PipeDream-Flush / DAPPLE / Megatron, docs/schedules.md#1f1b-with-flush): GPipe's makespan,
    min(S - s, M) activations on rank s."""
    S, N, M = check(S, N, M)
    return flushes("1f1b", orders.one_f_one_b_order(S, M), S, N, M, costs)


ENTRY = flush_entry(
    "1f1b",
    one_f_one_b,
    doc="1F1B with flush",
    look=Look("1F1B", "C1", "s"),
    source=Source("Narayanan et al., Megatron-LM, SC 2021", TORCH),
)
