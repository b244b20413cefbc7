"""Bytes per rank of a timed schedule: static state and activations in flight
(docs/plan.md#bytes-per-rank-rpdmodelmemory).

Static bytes per value a rank holds (Megatron's accounting):

=================  ======  =================================================================
weights            2 / 4   16-bit under ``bf16_mixed`` and ``bf16``, fp32 under ``fp32``; times the
                           schedule's weight versions (PipeDream's stashes, 2BW's two buffers,
                           :func:`rpd.schedules.machinery.memory.weight_versions`) -- ``stash`` is the
                           part beyond the first version
master copy        4 / 0   fp32 master weights under mixed precision (2 under ``bf16``)
gradients          4       fp32 main gradients (``grad_bytes=2``: 16-bit, as ZeRO counts)
optimizer state    0/4/8   4 per fp32 state value: SGD none, momentum one copy, Adam two (2
                           per value under ``bf16``)
=================  ======  =================================================================

``bf16`` is a distributed optimizer that keeps its copy of the weights and its state in bf16:
Apex's ``DistributedFusedAdam`` with ``dtype: bf16``, as NeMo's Nemotron-4 340B benchmark
configuration sets it (``nemotron/nemotron4-340b-synth.yaml``, ``model.optim``); Adam's copy and
two moments are then 6 B per value where mixed precision holds 12.

The optimizer enters as ``optimizer_states``, its fp32 state values per parameter: the plan reads
them off the optimizer's registry entry (``rpd.train.transforms.OptimizerEntry.state``), so this
layer holds no table of optimizer names.

so Adam in bf16 mixed precision is 18 B per value and Adam − SGD is 8 B per value of the rank.
ZeRO-1 (Megatron's distributed optimizer, ``zero=1``) shards the master copy and the optimizer
state over the D data-parallel replicas: 2 + 4 + 12/D B per value with Adam (6 + 12/D).
LocalSGD's R replicas of a block each carry all of it. A tied matrix held on two ranks counts on
both (once when one rank holds both ends, as a V schedule's rank 0 does).

Activations are counted from the timeline on *each rank*: F(m, g) allocates stage g's
``act`` bytes at its start, a full backward B frees them at its end, a split backward's I frees
all but ``act_w`` (what W still needs) and W the rest; at one tick frees come before
allocations (as :func:`rpd.schedules.machinery.memory.peak_activations`, whose ``until="W"`` count this
is, weighted by each stage's bytes). ``buffers``: a receive and a send buffer per stage held
(its input and output tensors). With activation offload (the timeline's ``transfers``), an
offloaded activation's ``act`` bytes leave the device at the end of its D2H and come back at the
start of its H2D; ``offloaded`` is the most bytes a rank has in host memory at once.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.model.stages import Stages
from rpd.schedules.machinery import memory as sched_memory
from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, FWD
from rpd.schedules.machinery.offload import D2H
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_choice, check_int

# bytes per value of (the weights, the optimizer's master copy, one optimizer state value)
PRECISION_BYTES = {"fp32": (4, 0, 4), "bf16_mixed": (2, 4, 4), "bf16": (2, 2, 2)}
PRECISIONS = tuple(PRECISION_BYTES)


def precision_bytes(precision: str) -> tuple[int, int, int]:
    """(weights, master copy, one optimizer state value) bytes per value under ``precision``."""
    return PRECISION_BYTES[check_choice("precision", precision, PRECISIONS)]


@dataclasses.dataclass(frozen=True)
class RankMemory:
    """Bytes per rank, float arrays [S]; ``activations`` is the peak over time."""

    weights: np.ndarray
    stash: np.ndarray
    master: np.ndarray
    grads: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    buffers: np.ndarray
    offloaded: np.ndarray | None = None  # most bytes in host memory at once (activation offload)

    @property
    def static(self) -> np.ndarray:
        return self.weights + self.stash + self.master + self.grads + self.optimizer

    @property
    def peak(self) -> np.ndarray:
        return self.static + self.activations + self.buffers

    def breakdown(self) -> dict[str, list[float]]:
        """Bytes per rank by kind, named for the reader (``offloaded``: in host memory, not in
        the peak)."""
        return {
            "weights": self.weights.tolist(),
            "master_weights": self.master.tolist(),
            "gradients": self.grads.tolist(),
            "optimizer": self.optimizer.tolist(),
            "stashed_versions": self.stash.tolist(),
            "activations": self.activations.tolist(),
            "buffers": self.buffers.tolist(),
            "offloaded": (np.zeros(len(self.weights)) if self.offloaded is None else self.offloaded).tolist(),
        }


def held(tl: Timeline) -> np.ndarray:
    """bool [S, n_stages]: which rank runs ops of which global stage."""
    t = tl.table
    out = np.zeros((tl.S, tl.n_stages), bool)
    out[t.rank, t.stage] = True
    return out


def rank_params(tl: Timeline, st: Stages) -> np.ndarray:
    """float [S, n_stages]: values of each stage on each rank (a tied matrix once per rank)."""
    if st.G != tl.n_stages:
        raise ValueError(f"the partition has {st.G} stages, the schedule {tl.n_stages}")
    h = held(tl)
    p = h * st.params[None, :].astype(float)
    for holder, owner, values in st.tied:
        both = h[:, holder] & h[:, owner]
        p[both, holder] -= values
    return p


def _peaks(S: int, delta: np.ndarray, when: np.ndarray, who: np.ndarray) -> np.ndarray:
    """float [S]: the highest running sum of ``delta`` per rank, events in time order (at one
    tick, frees before allocations)."""
    o = np.lexsort((delta, when, who))
    delta, who = delta[o], who[o]
    level = np.cumsum(delta)
    starts = np.searchsorted(who, np.arange(S))
    base = np.concatenate([[0.0], level])[starts]
    peak = np.zeros(S)
    np.maximum.at(peak, who, level - base[who])
    return peak


def activation_peak(tl: Timeline, act, act_w) -> np.ndarray:
    """float [S]: most activation bytes in flight on each rank over the run (module docstring)."""
    t = tl.table
    act, act_w = np.asarray(act, float), np.asarray(act_w, float)
    g = t.stage
    delta = np.select(
        [t.kind == FWD, t.kind == BWD, t.kind == BWD_I, t.kind == BWD_W],
        [act[g], -act[g], -(act[g] - act_w[g]), -act_w[g]],
        0.0,
    )
    when = np.where(t.kind == FWD, t.start, t.end)
    who = t.rank
    if tl.transfers is not None:  # offloaded: off the device from its D2H's end to its H2D's start
        x = tl.transfers
        out = x.kind == D2H
        delta = np.concatenate([delta, np.where(out, -act[x.stage], act[x.stage])])
        when = np.concatenate([when, np.where(out, x.end, x.start)])
        who = np.concatenate([who, x.rank])
    keep = delta != 0
    return _peaks(tl.S, delta[keep], when[keep], who[keep])


def host_peak(tl: Timeline, act) -> np.ndarray:
    """float [S]: most activation bytes each rank has in host memory at once (0 without offload)."""
    if tl.transfers is None:
        return np.zeros(tl.S)
    x = tl.transfers
    act = np.asarray(act, float)
    out = x.kind == D2H
    return _peaks(tl.S, np.where(out, act[x.stage], -act[x.stage]), np.where(out, x.end, x.start), x.rank)


def rank_memory(
    tl: Timeline,
    st: Stages,
    optimizer_states: int = 2,
    precision: str = "bf16_mixed",
    grad_bytes: int | None = None,
    zero: int = 0,
    D: int = 1,
) -> RankMemory:
    """:class:`RankMemory` of timeline ``tl`` whose global stages are ``st``; ``optimizer_states``
    state values per parameter (Adam's 2 by default), each of ``precision``'s bytes; ``zero`` 1: master weights and optimizer
    state sharded over ``D`` data-parallel replicas."""
    w_bytes, master_bytes, state_bytes = precision_bytes(precision)
    optimizer_bytes = state_bytes * check_int("optimizer_states", optimizer_states, minimum=0)
    check_choice("zero", zero, (0, 1))
    shard = float(check_int("pipeline.D", D)) if zero else 1.0
    grad_bytes = 4 if grad_bytes is None else check_choice("grad_bytes", grad_bytes, (2, 4))
    p = rank_params(tl, st)
    versions = sched_memory.weight_versions(tl).astype(float)
    copies = float(tl.copies) if tl.averaged else 1.0  # LocalSGD: whole replicas
    values = p.sum(axis=1)
    stash = (p * (versions - copies)[None, :]).sum(axis=1) * w_bytes  # LocalSGD: versions = copies = R
    h = held(tl)
    buffers = (h * (st.out + np.concatenate([[0], st.out[:-1]]))[None, :]).sum(axis=1).astype(float)
    return RankMemory(
        weights=copies * values * w_bytes,
        stash=np.asarray(stash, float),
        master=copies * values * master_bytes / shard,
        grads=copies * values * grad_bytes,
        optimizer=copies * values * optimizer_bytes / shard,
        activations=activation_peak(tl, st.act, st.act_w),
        buffers=buffers,
        offloaded=host_peak(tl, st.act),
    )
