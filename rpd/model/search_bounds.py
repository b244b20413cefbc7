"""What the n_workers search knows of a configuration before timing it (docs/plan.md#n-workers):
its static bytes per rank, a lower bound of its step time, and the fewest devices a model's
static bytes need.

A configuration is TP × CP × PP × DP ranks, a schedule with v chunks per rank (global stage g on
rank g mod PP, Megatron's interleaving) and M microbatches per pipeline. From the layers'
seconds (:func:`rpd.model.compute.layer_seconds`) summed per global stage (f_g, i_g, w_g), rank
r's work per step is load_r = M · Σ_{g on r} (f_g + i_g + w_g), and

* no op of rank r starts before the first microbatch's forward crossed the stages before it:
  head_r = Σ_{g<r} (f_g + p2p);
* where the backward is one op (1F1B, interleaved), rank r's last op is a backward whose
  gradient still crosses the stages before it: tail_r = Σ_{g<r} (i_g + w_g + p2p); a split
  backward (ZB-H1) may end on a W, so its tail is 0;
* a flush schedule's step is one flush (T(2M) − T(M) = T(M), a barrier between flushes), at
  least max_r (head_r + load_r + tail_r); an asynchronous one's step is its steady state, at
  least max_r load_r;
* the data-parallel collectives add, when nothing overlaps them (no ``overlap_allreduce``, no
  ``overlap.grad_reduce``), the slowest rank's reduction of its gradients over DP × CP
  (:meth:`rpd.model.hardware.Hardware.allreduce_seconds`; ZeRO-1: a reduce-scatter, and the
  all-gather unless ``overlap.param_gather``), exactly as the plan adds them (over the site
  links where the DP groups span sites); else 0.

The ticks round each op to the nearest tick of 1/100 of the smallest op, so every op's ticks are
at least 0.995 of its seconds: the bound takes 0.995 of the compute. Static bytes are weights,
gradients, master weights and optimizer state of the rank's stages (ZeRO-1 shards the last two
over DP × CP); the peak is at least that.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rpd.model.compute import layer_seconds
from rpd.model.hardware import Hardware
from rpd.model.layers import Model
from rpd.model.memory import precision_bytes
from rpd.model.overlap import Overlap
from rpd.model.stages import partition
from rpd.model.topology import place

ROUNDING = 0.995  # every op's ticks x tick_s >= this x its seconds (stage_costs' resolution 100)


def bytes_per_value(kw: dict, shard: int = 1) -> float:
    """Static bytes per parameter: weights, gradients, master weights and optimizer state, the
    last two over ``shard`` ranks (ZeRO-1)."""
    w, master, state = precision_bytes(kw.get("precision", "bf16_mixed"))
    per_value: float = w + (kw.get("grad_bytes") or 4)
    return per_value + (master + state * kw.get("optimizer_states", 2)) / shard


def stage_params(model: Model, bounds) -> np.ndarray:
    """int [G]: values each stage of ``bounds`` holds, a tied matrix on both of its stages (as
    :func:`rpd.model.stages.stages` counts them)."""
    stage_of = np.repeat(np.arange(len(bounds)), [b - a for a, b in bounds])
    index = {x.name: j for j, x in enumerate(model.layers)}
    out = np.zeros(len(bounds), np.int64)
    for j, x in enumerate(model.layers):
        out[stage_of[j]] += x.params
        if x.tied_params and x.tied_to is not None and stage_of[index[x.tied_to]] != stage_of[j]:
            out[stage_of[j]] += x.tied_params
    return out


class Stages:
    """Per global stage sums of one model per rank for every G asked, cached: (f, i, w) seconds
    [3, G], values [G], and the smallest message between stages (bytes)."""

    def __init__(self, model: Model, hw: Hardware, how: str = "even"):
        self.model, self.hw, self.how = model, hw, how
        self.secs = layer_seconds(model, hw)
        self._cache: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}

    def __call__(self, G: int) -> tuple[np.ndarray, np.ndarray, float]:
        if G not in self._cache:
            bounds = partition(self.model, G, self.how, self.hw)
            starts = [a for a, _ in bounds]
            fiw = np.add.reduceat(self.secs, starts, axis=0).T
            out = min((self.model.layers[b - 1].out_bytes for _, b in bounds[:-1]), default=0)
            self._cache[G] = (fiw, stage_params(self.model, bounds), float(out))
        return self._cache[G]


def rank_sums(x: np.ndarray, S: int) -> np.ndarray:
    """[S]: the sum over each rank's global stages g = r, r + S, ... of ``x`` [G]."""
    return x.reshape(-1, S).sum(axis=0)


def static_bytes(params: np.ndarray, S: int, kw: dict, shard: int) -> float:
    """The fullest rank's weights, gradients, master weights and optimizer state."""
    return float(rank_sums(params.astype(float), S).max() * bytes_per_value(kw, shard))


def dp_floor(hw: Hardware, params: np.ndarray, TP: int, CP: int, DP: int, S: int, zero: int, kw: dict) -> float:
    """Seconds the DP × CP gradient collectives add at least (module docstring)."""
    DC = DP * CP
    ov: Overlap | None = kw.get("overlap")
    overlapped = ov.grad_reduce if ov is not None else bool(kw.get("overlap_allreduce", False))
    if DC == 1 or overlapped:
        return 0.0
    where = place(hw, TP, DP, S, CP)
    per_node, rings = where.dp_per_node, where.dp_site_rings
    values = rank_sums(params.astype(float), S)
    grads = values * (kw.get("grad_bytes") or 4)
    if not zero:
        return max(hw.allreduce_seconds(b, DC, per_node, rings) for b in grads)
    gather = ov is not None and ov.param_gather
    w = precision_bytes(kw.get("precision", "bf16_mixed"))[0]
    return max(
        hw.half_seconds(g, DC, per_node, rings) + (0.0 if gather else hw.half_seconds(v * w, DC, per_node, rings))
        for g, v in zip(grads, values)
    )


def step_floor(fiw: np.ndarray, S: int, M: int, p2p: float, *, split: bool, flush: bool) -> float:
    """Seconds a step takes at least, without the DP collectives (module docstring)."""
    f, i, w = fiw
    load = M * rank_sums(f + i + w, S)
    if not flush:
        return ROUNDING * float(load.max())
    head = np.concatenate([[0.0], np.cumsum(f[: S - 1] + p2p)])
    tail = np.zeros(S) if split else np.concatenate([[0.0], np.cumsum(i[: S - 1] + w[: S - 1] + p2p)])
    return ROUNDING * float((head + load + tail).max())


def least_devices(
    models: Callable[[int], Model], hw: Hardware, cap: float, TPs: list[int], how: str = "even", **kw
) -> tuple[int, int, int] | None:
    """(devices, TP, PP) of the fewest devices whose fullest rank holds its weights, gradients,
    master weights and optimizer state (one version, one pipeline: ZeRO over more pipelines
    costs more devices in all) within ``cap`` bytes, TP among ``TPs``; None when none does."""
    best = None
    per_value = bytes_per_value(kw)
    for TP in TPs:
        model = models(TP)
        blocks = sum(1 for x in model.layers if x.kind == "block")
        for PP in range(1, blocks + 1):
            if best is not None and TP * PP >= best[0]:
                break
            if stage_params(model, partition(model, PP, how, hw)).max() * per_value <= cap:
                best = (TP * PP, TP, PP)
                break
    return best
