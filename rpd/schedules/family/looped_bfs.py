"""Looped breadth-first pipeline parallelism (torch ``ScheduleLoopedBFS``; docs/schedules.md#looped-bfs-and-interleaved-zero-bubble).

Read for meaning from ``pytorch/pytorch: torch/distributed/pipelining/schedules.py``
(``ScheduleLoopedBFS._calculate_single_rank_operations``) and written anew. Rank r holds the v
chunks ``c*S + r`` (the looped placement of interleaved 1F1B) and, per flush of M microbatches,
runs every microbatch's forward of its first chunk, then of its second, ... (breadth first:
all M microbatches of chunk c before chunk c + 1), then the backwards chunk by chunk in reverse,
each chunk's microbatches from M - 1 down to 0 (the last forward of a chunk is the first
backward it can start). torch pads the list with ``None`` slots for alignment; the IR drops
them (the timer finds the idles). Synchronous, one flush per minibatch; a rank holds all M
microbatches of each of its v chunks before its first backward: vM chunk activations = M·A,
as GPipe.
"""

from __future__ import annotations

import dataclasses

from rpd.schedules.family.flushes import check, flush_entry, flushes
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import TORCH, Look, Source
from rpd.schedules.machinery.ir import BWD, FWD, Order, ops
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_int

KIND = "looped_bfs"


def looped_bfs_order(S: int, M: int, v: int) -> Order:
    """One flush: rank r runs F(c*S + r, j) for c = 0..v-1, j = 0..M-1, then B(c*S + r, j) for
    c = v-1..0, j = M-1..0."""
    out = []
    for r in range(S):
        chunks = [c * S + r for c in range(v)]
        rows = [(FWD, g, j) for g in chunks for j in range(M)]
        rows += [(BWD, g, j) for g in reversed(chunks) for j in reversed(range(M))]
        out.append(ops(rows))
    return out


@dataclasses.dataclass(frozen=True)
class Params:
    """Looped BFS's own parameters."""

    v: int = 2  # model chunks per rank (costs per chunk)


def looped_bfs(S: int, N: int, M: int, v: int = 2, costs: CostModel | None = None) -> Timeline:
    """Looped BFS on S ranks with v chunks each (S·v global stages; costs per chunk), N
    microbatches in flushes of M. v = 1 is GPipe's order."""
    v = check_int("v", v)
    S, N, M = check(S, N, M, stages_per_rank=v)
    return flushes(KIND, looped_bfs_order(S, M, v), S, N, M, costs, n_stages=S * v, v=v)


ENTRY = flush_entry(
    "looped_bfs",
    looped_bfs,
    params_type=Params,
    chunks_per_rank="v",
    doc="looped BFS: every microbatch of chunk c before chunk c + 1, v chunks per rank",
    look=Look("looped BFS (v=2)", "#FFD92F", "d", short="looped BFS"),  # gold: brown diamonds are LocalSGD
    source=Source("Lamy-Poirier, Breadth-first pipeline parallelism, MLSys 2023", TORCH),
)
