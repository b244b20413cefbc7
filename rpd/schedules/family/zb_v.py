"""ZB-V (docs/schedules.md#zb-v): its constructor (the V order of :mod:`rpd.schedules.family.v_shape`), its own
parameters (overlapped) and its entry."""

from __future__ import annotations

import dataclasses

from rpd.schedules.family.flushes import check, flush_entry, flushes
from rpd.schedules.family.v_shape import zbv_order
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import SAIL, Look, Source
from rpd.schedules.machinery.timeline import Timeline


@dataclasses.dataclass(frozen=True)
class Params:
    """ZB-V's own parameters."""

    overlapped: bool = False  # no barrier between flushes


def zb_v(S: int, N: int, M: int, costs: CostModel | None = None, overlapped: bool = False) -> Timeline:
    """ZB-V (torch ``ScheduleZBVZeroBubble``, docs/schedules.md#zb-v): two chunks per rank in a V
    (rank r holds stages r and 2S-1-r), split backward. Chunk costs F = I = W give every rank a
    span of 6M chunk ticks; T_flush = 6M + S - 1."""

    S, N, M = check(S, N, M, per_mb=3, stages_per_rank=2)
    return flushes(
        "zb_v", zbv_order(S, M), S, N, M, costs, split=True, n_stages=2 * S, v=2, overlapped=bool(overlapped)
    )


ENTRY = flush_entry(
    "zb_v",
    zb_v,
    params_type=Params,
    split_backward=True,
    chunks_per_rank=2,
    doc="zero bubble V",
    look=Look("ZB-V", "C5", "<"),
    source=Source("Qi et al., Pipeline Parallelism with Controllable Memory, NeurIPS 2024", SAIL),
)
