"""What a schedule holds in memory, per rank (docs/schedules.md#memory-accounting): activations in flight, weight
versions, weights. Functions of a timed :class:`~rpd.schedules.machinery.timeline.Timeline`; PipeDream's
stashed versions come from its delay table (:func:`rpd.schedules.machinery.delays.stashed_versions`)."""

from __future__ import annotations

import numpy as np

from rpd.schedules.machinery.delays import stashed_versions
from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, FWD
from rpd.schedules.machinery.offload import D2H
from rpd.schedules.machinery.timeline import Timeline


def peak_activations(tl: Timeline, until: str | None = None) -> np.ndarray:
    """float [S]: most activations in flight on each rank, in units of A (one microbatch on
    one full stage; a chunk holds A/v, a piece of a microbatch A/pieces). Allocated at the start of F(m, g), freed at the end
    of the op named by ``until``: "B" (full backward), "I" (split: the default, counts
    F-not-I) or "W" (split: F-not-W, which also holds the W residues)."""
    t = tl.table
    until = ("I" if tl.split else "B") if until is None else until
    if until not in ("B", "I", "W"):
        raise ValueError(f"until must be 'B', 'I' or 'W', got {until!r}")
    release = {"B": (BWD,), "I": (BWD, BWD_I), "W": (BWD, BWD_W)}[until]
    if until == "B" and tl.split and np.any(t.kind == BWD_I):
        raise ValueError("this schedule splits its backward: use until='I' or until='W'")
    G, N = tl.n_stages, tl.N
    free_at = np.full((G, N), -1, np.int64)
    rel = np.isin(t.kind, release)
    np.maximum.at(free_at, (t.stage[rel], t.mb[rel]), t.end[rel])  # a microbatch's last piece
    f = t.kind == FWD
    alloc_t, rank = t.start[f], t.rank[f]
    free_t = free_at[t.stage[f], t.mb[f]]
    # events sorted by (rank, tick, frees first); the running sum's max per rank is the peak
    when = np.concatenate([alloc_t, free_t])
    delta = np.concatenate([np.ones(len(alloc_t)), -np.ones(len(free_t))])
    who = np.concatenate([rank, rank])
    if tl.transfers is not None:  # offloaded: off the device from the end of its D2H to the start of its H2D
        x = tl.transfers
        out = x.kind == D2H
        when = np.concatenate([when, x.end[out], x.start[~out]])
        delta = np.concatenate([delta, -np.ones(int(out.sum())), np.ones(int((~out).sum()))])
        who = np.concatenate([who, x.rank[out], x.rank[~out]])
    o = np.lexsort((delta, when, who))
    level = np.cumsum(delta[o])
    who = who[o]
    starts = np.searchsorted(who, np.arange(tl.S))
    base = np.concatenate([[0.0], level])[starts]
    peak = np.zeros(tl.S)
    np.maximum.at(peak, who, level - base[who])
    return peak / (tl.v * tl.pieces)  # a piece of a microbatch holds 1/pieces of its activations


def weight_versions(tl: Timeline) -> np.ndarray:
    """int [n_stages]: versions of each block kept at once. Synchronous schedules keep one
    (Chimera's two replicas of a stage are kept identical); PD stashes up to S - s
    (:func:`rpd.schedules.machinery.delays.stashed_versions`); 2BW double-buffers (2); PipeMare keeps one;
    LocalSGD keeps the R replica copies of the block on its stage."""
    if tl.stash:
        return stashed_versions(tl)
    held = getattr(tl, "held_versions", None)  # versions that differ by stage: WPipe, 1F1B-RR, AvgPipe
    if held is not None:
        return np.asarray(held(), np.int64)
    return np.full(tl.n_stages, tl.versions, np.int64)  # 2BW: 2; LocalSGD: R; the rest: 1


def weight_memory(tl: Timeline) -> np.ndarray:
    """float [S]: weights held per rank, in units of one full stage's weights (a chunk is
    1/v): every version of every block the rank holds (Chimera: both stage replicas)."""
    t = tl.table
    held = np.zeros((tl.S, tl.n_stages), bool)
    held[t.rank, t.stage] = True
    return (held * weight_versions(tl)[None, :]).sum(axis=1) / tl.v
