"""WPipe (docs/schedules.md#wpipe, a reconstruction): its constructor (its order: :mod:`rpd.schedules.family.frontier`)
and its entry."""

from __future__ import annotations

from rpd.schedules.family.flushes import check, costs_of, flush_entry
from rpd.schedules.family.frontier import as_wpipe, wpipe_order
from rpd.schedules.machinery.build import timed
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, Source
from rpd.schedules.machinery.timeline import Timeline


def wpipe(S: int, N: int, M: int, costs: CostModel | None = None) -> Timeline:
    """WPipe (ICLR'22; reconstruction, :mod:`rpd.schedules.family.frontier`): 2S stages in two groups,
    rank r holding stages r and S + r, Megatron's interleaved order with group M as one stream;
    one update per group per period of M microbatches. Costs are per chunk."""
    S, N, M = check(S, N, M, stages_per_rank=2)
    return as_wpipe(timed("wpipe", wpipe_order(S, N, M), S=S, N=N, M=M, costs=costs_of(costs), n_stages=2 * S, v=2))


ENTRY = flush_entry(
    "wpipe",
    wpipe,
    synchronous=False,
    chunks_per_rank=2,
    semantics="wpipe",
    doc="WPipe (reconstruction): two interleaved groups, 2BW delay on the input side",
    blocks=lambda S: 2 * S,
    look=Look("WPipe", "#7570B3", "$W$", reconstruction=True),
    source=Source("Yang et al., Group-based interleaved pipeline parallelism (WPipe), ICLR 2022"),
)
