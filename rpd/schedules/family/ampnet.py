"""AMPNet (docs/schedules.md#ampnet): its constructor (its order: :mod:`rpd.schedules.family.frontier`) and its entry."""

from __future__ import annotations

from rpd.schedules.family.flushes import check, costs_of, flush_entry
from rpd.schedules.family.frontier import ampnet_order
from rpd.schedules.machinery.build import timed
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, Source
from rpd.schedules.machinery.timeline import Timeline


def ampnet(S: int, N: int, M: int, costs: CostModel | None = None) -> Timeline:
    """AMPNet (fairscale AMPnetPipe; :mod:`rpd.schedules.family.frontier`): one asynchronous 1F1B stream
    of N microbatches with no stashing; each stage steps after every M (= min_update_interval)
    backwards, so N is a whole number of M."""
    S, N, M = check(S, N, M)
    return timed("ampnet", ampnet_order(S, N), S=S, N=N, M=M, costs=costs_of(costs), noam=S)


ENTRY = flush_entry(
    "ampnet",
    ampnet,
    synchronous=False,
    semantics="ampnet",
    doc="AMPNet: async 1F1B, no stashing, a step every M backwards",
    look=Look("AMPNet", "#66A61E", "8"),
    source=Source("Gaunt et al., AMPNet, 2017", "facebookresearch/fairscale: fairscale/experimental/nn/ampnet_pipe"),
)
