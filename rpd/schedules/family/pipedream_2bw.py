"""PipeDream-2BW (docs/schedules.md#pipedream-2bw): its constructor and its entry."""

from __future__ import annotations

from rpd.schedules.family.flushes import check, costs_of, flush_entry
from rpd.schedules.machinery import readiness
from rpd.schedules.machinery.build import order_of, timed
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, Source
from rpd.schedules.machinery.timeline import Timeline


def pipedream_2bw(S: int, N: int, M: int, costs: CostModel | None = None) -> Timeline:
    """PipeDream-2BW (msr-fiddle/pipedream@pipedream_2bw ``forward_backward_pipelining_no_flushes``):
    PipeDream's 1F1B stream with no flush; every M microbatches one coalesced update
    W_{k+1} = W_k - γ Σ ∇f_j(W_{k-1}) from two weight buffers. W_{k-1} is still held when a
    minibatch's last backward runs only if M >= S - 1 (docs/schedules.md#pipedream-2bw), else ValueError."""
    S, N, M = check(S, N, M)
    if M < S - 1:
        raise ValueError(f"pipedream_2bw needs M >= S - 1 (two weight versions), got M={M}, S={S}")
    tl = readiness.pipedream(S, N)
    return timed("pipedream_2bw", order_of(tl), S=S, N=N, M=M, costs=costs_of(costs), noam=S, versions=2)


ENTRY = flush_entry(
    "pipedream_2bw",
    pipedream_2bw,
    synchronous=False,
    semantics="two_bw",
    doc="PipeDream-2BW",
    look=Look("PipeDream-2BW", "C9", "*", short="2BW"),
    source=Source("Narayanan et al., Memory-efficient pipeline-parallel DNN training, ICML 2021"),
)
