"""Interleaved 1F1B (docs/schedules.md#interleaved-1f1b): its constructor (Megatron's order:
:mod:`rpd.schedules.family.orders`), its own parameters (v, group) and its entry."""

from __future__ import annotations

import dataclasses

from rpd.schedules.family import orders
from rpd.schedules.family.flushes import check, flush_entry, flushes
from rpd.schedules.family.one_f_one_b import one_f_one_b
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, Source
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_int


@dataclasses.dataclass(frozen=True)
class Params:
    """Interleaved 1F1B's own parameters."""

    v: int = 2  # model chunks per rank (costs per chunk; 1: 1F1B)
    group: int | None = None  # Megatron's microbatch group; None: S (S <= group <= M)

    def resolve(self, S: int) -> Params:
        return dataclasses.replace(self, group=S if self.group is None else self.group)


def interleaved(S: int, N: int, M: int, v: int, costs: CostModel | None = None, group: int | None = None) -> Timeline:
    """Interleaved 1F1B with v chunks per rank and Megatron's microbatch group size ``group``
    (default S; S <= group <= M and M mod group in {0} ∪ [S, group)), docs/schedules.md#interleaved-1f1b.
    Costs are per chunk. v = 1 is 1F1B."""
    v = check_int("v", v)
    S, N, M = check(S, N, M, stages_per_rank=v)
    if v == 1:
        return one_f_one_b(S, N, M, costs)
    group = S if group is None else check_int("group", group)
    orders.check_interleaved(S, M, v, group)
    return flushes("interleaved", orders.interleaved_order(S, M, v, group), S, N, M, costs, n_stages=S * v, v=v)


ENTRY = flush_entry(
    "interleaved",
    interleaved,
    params_type=Params,
    chunks_per_rank="v",
    doc="interleaved 1F1B, v chunks per rank",
    look=Look("interleaved (v=2)", "C2", "D", short="interleaved"),
    source=Source(
        "Narayanan et al., Megatron-LM, SC 2021", "NVIDIA/Megatron-LM: megatron/core/pipeline_parallel/schedules.py"
    ),
)
