"""Layers into contiguous stages, and a stage's costs in the schedules' integer ticks
(docs/plan.md#stages-and-pipedreams-partitioner-rpdmodelstages-rpdmodelpartition).

A partition of a :class:`~rpd.model.layers.Model` into G global stages (G = S, or S·v chunks for
the interleaved and V schedules) is a tuple of (first, stop) layer ranges:

* ``even``: the transformer blocks split as evenly as possible (earlier stages take the
  remainder), the embedding joined to the first stage and the output layer to the last (what
  Megatron and torchtitan do by default; the end stages come out heavier);
* ``padded``: Megatron's ``--allow-padding-num-layers`` as the zero-bubble code cuts
  (``sail-sg/zero-bubble-pipeline-parallelism``, ``megatron/model/transformer.py``,
  ``get_offset``): the blocks padded up to k·G, the padding taken from the last stage, then the
  first, the second, ..., so L = k·G − 2 blocks put k − 1 on each end stage and k on the others
  (the zero-bubble paper's runs, docs/plan.md#the-zero-bubble-papers-runs-which-bytes-they-held);
  ``even`` when G divides the blocks;
* ``layers``: every layer counts one, embedding and head included (rpd's NanoChat: one per stage);
* ``time``: minimises the slowest stage's F + I + W seconds, exactly (dynamic programming);
* ``memory``: minimises the largest stage's bytes under 1F1B, static bytes per parameter times
  its parameters plus G - g microbatches of its activations on stage g, exactly;
* ``pipedream``: PipeDream's objective (:mod:`rpd.model.partition`) for exactly G stages of one
  worker each: the slowest of each stage's F + I + W seconds and each cut's 2·out_bytes / p2p
  bandwidth, exactly (the schedules here do not replicate a stage; the full partitioner with
  replicas is :func:`rpd.model.partition.pipedream`).

:func:`stage_costs` turns a partition into a :class:`~rpd.schedules.machinery.costs.CostModel`: per-stage F,
I, W (so B = I + W for the schedules that do not split), each ``round(seconds / tick_s)`` ticks
and at least 1; ``p2p`` the slowest boundary's message, latency + bytes / bandwidth, rounded up.
``tick_s`` defaults to the smallest positive op time / ``resolution`` (rounding error <= 0.5 %
of any op at the default 100), and is returned with the costs: seconds = ticks × tick_s.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from rpd.model.compute import layer_seconds
from rpd.model.hardware import Hardware
from rpd.model.layers import Model
from rpd.schedules.machinery.costs import CostModel, HostLink
from rpd.validation import check_choice, check_int, check_real, required

PARTITIONS = ("even", "padded", "layers", "time", "memory", "pipedream")


@dataclasses.dataclass(frozen=True)
class Stages:
    """Per-stage sums of a partition, arrays [G]. ``params``: values the stage holds (a tied
    matrix on both ends counts on both); ``tied``: (holder stage, owner stage, values) pairs;
    ``out``: bytes stage g sends to stage g + 1 per microbatch (0 for the last)."""

    bounds: tuple[tuple[int, int], ...]
    params: np.ndarray
    model_flops: np.ndarray
    t_f: np.ndarray
    t_i: np.ndarray
    t_w: np.ndarray
    act: np.ndarray
    act_w: np.ndarray
    out: np.ndarray
    tied: tuple[tuple[int, int, int], ...]

    @property
    def G(self) -> int:
        return len(self.bounds)


def _balanced(cost, L: int, G: int) -> tuple[tuple[int, int], ...]:
    """Contiguous split of L layers into G non-empty groups minimising max_g cost(g, lo, hi)
    (``cost`` vectorised over lo), by dynamic programming."""
    best = np.full((G + 1, L + 1), np.inf)
    arg = np.zeros((G + 1, L + 1), np.int64)
    best[0, 0] = 0.0
    for g in range(1, G + 1):
        for hi in range(g, L - (G - g) + 1):
            lo = np.arange(g - 1, hi)
            val = np.maximum(best[g - 1, lo], cost(g - 1, lo, hi))
            k = int(np.argmin(val))
            best[g, hi], arg[g, hi] = val[k], lo[k]
    bounds: list[tuple[int, int]] = []
    hi = L
    for g in range(G, 0, -1):
        first = int(arg[g, hi])
        bounds.append((first, hi))
        hi = first
    return tuple(reversed(bounds))


def partition(
    model: Model, G: int, how: str = "even", hardware: Hardware | None = None, static_bytes_per_param: float = 18.0
) -> tuple[tuple[int, int], ...]:
    """(first, stop) layer ranges of G contiguous stages (module docstring for ``how``)."""
    G = check_int("stages", G)
    check_choice("partition", how, PARTITIONS)
    L = len(model.layers)
    if G > L:
        raise ValueError(f"stages={G} exceeds the model's {L} layers")
    if how == "layers":
        sizes = [len(a) for a in np.array_split(np.arange(L), G)]
        ends = np.cumsum([0, *sizes])
        return tuple((int(a), int(b)) for a, b in zip(ends[:-1], ends[1:]))
    if how in ("even", "padded"):
        kinds = [x.kind for x in model.layers]
        blocks = [j for j, k in enumerate(kinds) if k == "block"]
        if len(blocks) < G or blocks != list(range(blocks[0], blocks[-1] + 1)):
            raise ValueError(
                f"partition={how} needs at least stages={G} contiguous blocks, the model has "
                f"{len(blocks)}; use partition=layers"
            )
        if how == "padded":  # sail-sg's get_offset: the padding off rank_sizes[-1], [0], [1], ...
            k = -(-len(blocks) // G)
            sizes = [k] * G
            for j in range(-1, G * k - len(blocks) - 1):
                sizes[j] -= 1
        else:
            sizes = [len(gr) for gr in np.array_split(np.array(blocks), G)]
        ends = blocks[0] + np.cumsum([0, *sizes])
        bounds = [(int(a), int(b)) for a, b in zip(ends[:-1], ends[1:])]
        bounds[0], bounds[-1] = (0, bounds[0][1]), (bounds[-1][0], L)
        if G == 1:
            bounds = [(0, L)]
        return tuple(bounds)
    if how in ("time", "pipedream"):
        if hardware is None:
            raise ValueError(f"partition={how} needs the hardware")
        pre = np.concatenate([[0.0], np.cumsum(layer_seconds(model, hardware).sum(axis=1))])
        if how == "time":
            return _balanced(lambda g, lo, hi: pre[hi] - pre[lo], L, G)
        cut = np.array([2.0 * x.out_bytes / hardware.p2p_bandwidth for x in model.layers] + [0.0])
        cut[L - 1] = 0.0  # nothing leaves the last stage
        return _balanced(lambda g, lo, hi: np.maximum(pre[hi] - pre[lo], cut[hi - 1]), L, G)
    check_real("static_bytes_per_param", static_bytes_per_param, allow_zero=True)
    pp = np.concatenate([[0.0], np.cumsum([x.params + x.tied_params for x in model.layers])])
    pa = np.concatenate([[0.0], np.cumsum([x.act_bytes for x in model.layers])])
    return _balanced(lambda g, lo, hi: static_bytes_per_param * (pp[hi] - pp[lo]) + (G - g) * (pa[hi] - pa[lo]), L, G)


def stages(model: Model, bounds, hardware: Hardware) -> Stages:
    """The per-stage sums of the partition ``bounds`` of ``model`` on ``hardware``."""
    bounds = tuple((int(a), int(b)) for a, b in bounds)
    L = len(model.layers)
    if (
        not bounds
        or bounds[0][0] != 0
        or bounds[-1][1] != L
        or any(b[0] >= b[1] or (i and b[0] != bounds[i - 1][1]) for i, b in enumerate(bounds))
    ):
        raise ValueError(f"partition must cover layers 0..{L} in contiguous non-empty ranges, got {bounds}")
    secs = layer_seconds(model, hardware)
    stage_of = np.repeat(np.arange(len(bounds)), [b - a for a, b in bounds])
    index = {x.name: j for j, x in enumerate(model.layers)}
    G = len(bounds)
    params = np.zeros(G, np.int64)
    tied = []
    for j, x in enumerate(model.layers):
        params[stage_of[j]] += x.params
        if x.tied_params:
            owner = int(stage_of[index[required(f"{x.name}.tied_to", x.tied_to)]])
            if owner != stage_of[j]:
                params[stage_of[j]] += x.tied_params
                tied.append((int(stage_of[j]), owner, x.tied_params))
    total = lambda values: np.bincount(stage_of, weights=values, minlength=G)  # noqa: E731
    ints = lambda values: np.array([sum(values[a:b]) for a, b in bounds], np.int64)  # noqa: E731
    out = np.array([model.layers[b - 1].out_bytes for _, b in bounds], np.int64)
    out[-1] = 0
    return Stages(
        bounds=bounds,
        params=params,
        model_flops=total([x.model_flops for x in model.layers]),
        t_f=total(secs[:, 0]),
        t_i=total(secs[:, 1]),
        t_w=total(secs[:, 2]),
        act=ints([x.act_bytes for x in model.layers]),
        act_w=ints([x.act_w_bytes for x in model.layers]),
        out=out,
        tied=tuple(tied),
    )


def stage_costs(
    st: Stages,
    hardware: Hardware,
    tick_s: float | None = None,
    resolution: int = 100,
    replicas: int = 1,
    grad_bytes: int = 4,
    p2p_intra: bool = False,
) -> tuple[CostModel, float]:
    """(CostModel, tick_s) of the stages (module docstring). ``replicas`` > 1: the all-reduce of a
    stage's gradients (``grad_bytes`` per value) over that many copies, for the schedules that
    average replicas (Chimera, LocalSGD): ``CostModel.allreduce`` per value. ``p2p_intra``: every
    stage boundary inside one node (:mod:`rpd.model.topology`), p2p over the intra-node link."""
    times = np.concatenate([st.t_f, st.t_i, st.t_w])
    if tick_s is None:
        positive = times[times > 0]
        tick_s = (float(positive.min()) if positive.size else 1e-6) / check_int("resolution", resolution)
    tick_s = check_real("tick_s", tick_s)
    ticks = lambda t: tuple(max(1, int(round(v / tick_s))) for v in t)  # noqa: E731
    p2p = max((hardware.p2p_seconds(b, p2p_intra) for b in st.out[:-1]), default=0.0)
    replicas = check_int("replicas", replicas)
    allreduce = (0.0, 0.0)
    if replicas > 1:
        allreduce = (
            hardware.allreduce_latency / tick_s,
            hardware.ring_bytes(grad_bytes, replicas) / hardware.allreduce_bandwidth / tick_s,
        )
    costs = CostModel(
        F=ticks(st.t_f), I=ticks(st.t_i), W=ticks(st.t_w), p2p=int(math.ceil(p2p / tick_s - 1e-9)), allreduce=allreduce
    )
    return costs, tick_s


def host_link(st: Stages, hardware: Hardware, tick_s: float, min_gap: int = 2) -> HostLink:
    """Each rank's link to host memory in ticks (activation offload, docs/plan.md#activation-offload):
    one transfer moves the largest stage's activation of one microbatch (every stage's transfer
    takes that long: the timer's links have one duration), ``host_latency`` added per transfer."""
    if hardware.host_bandwidth is None:
        raise ValueError("offload needs hardware.host_bandwidth (bytes/s between a GPU and host memory)")
    ticks = max(1, int(math.ceil(float(st.act.max()) / hardware.host_bandwidth / tick_s - 1e-9)))
    return HostLink(ticks, ticks, int(math.ceil(hardware.host_latency / tick_s - 1e-9)), min_gap)
