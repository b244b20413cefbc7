"""Megatron's overlaps as named switches, and the data-parallel collectives they hide
(docs/plan.md#megatrons-overlaps).

Each switch is one of Megatron-Core's arguments and a rule of what it hides and when:

* ``tp_comm`` (``--tp-comm-overlap``, Transformer Engine's userbuffers): a layer's TP
  all-gathers and reduce-scatters split and overlapped with its GEMMs; a pass takes
  max(compute, collectives) instead of their sum (set on the model: ``Parallel.tp_overlap``,
  :mod:`rpd.model.compute`).
* ``p2p`` (``--overlap-p2p-communication``, the interleaved schedule's sends and receives
  overlapped with compute): a stage boundary costs its message on the dependency only. Off,
  Megatron's sends and receives block the compute stream: every forward that sends on and every
  backward that sends back holds its rank for its message too. (On is rpd's first plan's model
  and its default; Megatron's argument is off by default.)
* ``grad_reduce`` (``--overlap-grad-reduce``): gradients reduced in buckets as each bucket's
  backward finishes; under ``no_sync`` only the last microbatch's backward launches them. A
  rank's model chunk starts its reduce-scatter (all-reduce without the distributed optimizer)
  when its last backward of the step starts, chunk after chunk on the rank's link; what runs
  past the end of the flush is exposed. Off: the reduction after the flush, every rank waiting.
* ``param_gather`` (``--overlap-param-gather``, with the distributed optimizer): the 16-bit
  parameter all-gather issued in the next step's forward pre-hooks, chunk after chunk on the
  rank's link; chunk j's gather must be done by the end of its first forward, what runs past
  it is exposed. Off: the all-gather follows the reduce-scatter, exposed.

The gradient dtype is ``grad_bytes`` of the plan (4: Megatron's fp32 main gradients, reduced in
fp32 unless ``--grad-reduce-in-bf16``; 2: NeMo's ``grad_sync_dtype: bf16``), read per source.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.model.hardware import Hardware
from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, FWD
from rpd.schedules.machinery.timeline import Timeline


@dataclasses.dataclass(frozen=True)
class Overlap:
    """Megatron-Core's overlap switches (module docstring)."""

    tp_comm: bool = False
    p2p: bool = True
    grad_reduce: bool = False
    param_gather: bool = False


def _chunk_times(tl: Timeline, kinds, first: bool, use_end: bool) -> dict[tuple[int, int], float]:
    """{(rank, global stage): the first (or last) op of ``kinds``'s start (or end) tick}."""
    t = tl.table
    sel = np.isin(t.kind, kinds)
    when = (t.end if use_end else t.start)[sel].astype(float)
    # one key per (rank, stage), rank * G + stage, reduced with ufunc.at (a Python loop over the
    # ops was the plan's fits' second-hottest line)
    G = int(t.stage.max()) + 1 if len(t.stage) else 1
    keys, at = np.unique(t.rank[sel].astype(np.int64) * G + t.stage[sel], return_inverse=True)
    best = np.full(len(keys), np.inf if first else -np.inf)
    (np.minimum if first else np.maximum).at(best, at, when)
    return {(k // G, k % G): w for k, w in zip(keys.tolist(), best.tolist())}


def _chunks(tl: Timeline, params: np.ndarray | None) -> dict[int, list[tuple[int, float]]]:
    """{rank: [(global stage, its share of the rank's values)]} (one chunk of share 1 without
    ``params``)."""
    # the distinct (rank, stage) pairs, sorted: one np.unique over rank * G + stage (a Python set
    # of numpy scalar pairs was the plan's fits' hottest line, ~15x slower)
    G = int(tl.table.stage.max()) + 1 if len(tl.table.stage) else 1
    keys = np.unique(tl.table.rank.astype(np.int64) * G + tl.table.stage).tolist()
    held = [(k // G, k % G) for k in keys]
    out: dict[int, list[tuple[int, float]]] = {}
    for r, g in held:
        out.setdefault(r, []).append((g, 1.0 if params is None else float(params[g])))
    for r, xs in out.items():
        total = sum(w for _, w in xs) or 1.0
        out[r] = [(g, w / total) for g, w in xs]
    return out


def dp_seconds(
    tl: Timeline,
    grads: np.ndarray,
    hw: Hardware,
    D: int,
    tick_s: float,
    overlap: bool | str = False,
    per_node: int = 1,
    gather: np.ndarray | None = None,
    param_gather: bool | None = None,
    stage_params: np.ndarray | None = None,
    site_rings: int = 0,
) -> float:
    """Seconds the data-parallel collectives add to one flush of ``tl`` (module docstring).

    ``grads`` [S] gradient bytes of each rank; ``gather`` [S] (the distributed optimizer): its
    16-bit weight bytes, a reduce-scatter of the gradients and an all-gather of these in place
    of the all-reduce. ``overlap``: False (after the flush, every rank waiting), True (each rank
    all-reduces after its last backward ends, during the drain) or "backward" (``grad_reduce``:
    chunk by chunk from each chunk's last backward start). ``param_gather`` None: on with
    ``overlap="backward"`` (the plan's earlier single switch). ``stage_params`` [n_stages]:
    values of each global stage, to split a rank's bytes over its chunks. ``site_rings`` > 0: the
    DP group spans the sites, that many rings on each site link
    (:meth:`~rpd.model.hardware.Hardware.allreduce_seconds`)."""
    if param_gather is None:
        param_gather = overlap == "backward"
    grads = np.asarray(grads, float)
    S = len(grads)

    def reduce(nbytes: float) -> float:
        if gather is None:
            return hw.allreduce_seconds(nbytes, D, per_node, site_rings)
        return hw.half_seconds(nbytes, D, per_node, site_rings)

    red = np.array([reduce(b) for b in grads])
    ag = np.zeros(S) if gather is None else np.array([hw.half_seconds(w, D, per_node, site_rings) for w in gather])
    flush = tl.T * tick_s
    t = tl.table
    if not overlap:
        exposed = red.copy()
    elif overlap != "backward":  # during the drain: each rank after its last backward's end
        bwd = np.isin(t.kind, (BWD, BWD_I, BWD_W))
        last = np.zeros(S)
        np.maximum.at(last, t.rank[bwd], t.end[bwd].astype(float))
        if not param_gather:  # the all-gather right after the reduce-scatter
            red, ag = red + ag, np.zeros(S)
        exposed = np.maximum(0.0, last * tick_s + red - flush)
    else:
        began = _chunk_times(tl, (BWD, BWD_I, BWD_W), first=False, use_end=False)
        exposed = np.zeros(S)
        for r, xs in _chunks(tl, stage_params).items():  # chunk after chunk on the rank's link
            free = 0.0
            for when, share in sorted((began[(r, g)] * tick_s, w) for g, w in xs):
                free = max(free, when) + reduce(share * grads[r])
            exposed[r] = max(0.0, free - flush)
    if gather is not None:
        if not param_gather:
            exposed = exposed + ag
        else:
            fwd_start = _chunk_times(tl, (FWD,), first=True, use_end=False)
            fwd_end = _chunk_times(tl, (FWD,), first=True, use_end=True)
            for r, xs in _chunks(tl, stage_params).items():
                done = min(fwd_start[(r, g)] for g, _ in xs) * tick_s  # issued at the rank's first forward
                late = 0.0
                for due, share in sorted((fwd_end[(r, g)] * tick_s, w) for g, w in xs):
                    done += hw.half_seconds(share * gather[r], D, per_node, site_rings)
                    late = max(late, done - due)
                exposed[r] += late
    return float(exposed.max())
