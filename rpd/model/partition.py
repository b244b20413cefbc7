"""PipeDream's partitioner (Narayanan et al., SOSP 2019, §3.1;
docs/plan.md#stages-and-pipedreams-partitioner-rpdmodelstages-rpdmodelpartition): layers into contiguous
stages, each replicated over some workers, minimising the slowest stage or boundary.

For layers l with compute time tₗ (forward + backward, seconds per microbatch), parameter bytes
wₗ and bytes aₗ leaving layer l, a stage of layers i..j on r workers takes

    T(i..j, r) = max(Σ tₗ, 4(r−1)·Σ wₗ / (r·B)) / r

(its compute, split round-robin over r replicas, against the ring all-reduce of its weights), and
a cut after layer k costs 2·aₖ/B (the activation forward, its gradient back). The partition
minimises the largest of these over stages and cuts with at most ``n_workers`` workers in all,
exactly, by the paper's dynamic programme over (prefix of layers, workers):

    A(j, m) = min( min_{r ≤ m} T(0..j, r),
                   min_{k < j, r < m} max(A(k, m − r), 2·a_k/B, T(k+1..j, r)) ).

Among the optimal configurations the one with the fewest workers is returned (the smallest m
whose A equals A(L, n)). ``combine="sum", activations=False`` is the objective of PipeDream's
own code (``optimizer/optimizer_graph_hierarchical.py``: compute and all-reduce added, the
activations between stages ignored unless compressed).

:func:`pipedream_hierarchical` is the paper's hierarchical variant: ``levels`` innermost first,
(components, bandwidth) per level -- e.g. ``[(8, nvlink), (4, infiniband)]``, 8 GPUs per server,
4 servers. Level 1 partitions every range i..j over the workers of one server; level k treats a
range placed on one component of level k − 1 as taking that level's optimum, replicates it over
r components with the all-reduce at level k's bandwidth, and cuts across level k's links.

:func:`partition_model` runs the flat partitioner on an :class:`~rpd.model.layers.Model` for a
:class:`~rpd.model.hardware.Hardware` (F + I + W seconds, ``out_bytes``, parameters × gradient
bytes, the p2p bandwidth).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rpd.model.hardware import Hardware
from rpd.model.layers import Model
from rpd.model.stages import layer_seconds
from rpd.validation import check_choice, check_int, check_real

COMBINE = ("max", "sum")


class Partition(NamedTuple):
    """``stages``: (first layer, last layer inclusive, replicas) in pipeline order; ``bottleneck``:
    the slowest stage or cut, seconds per microbatch (the pipeline's time per microbatch in
    steady state). ``inner`` (hierarchical): each stage's own partition one level down, placed
    on one of its replicas' components."""

    stages: tuple[tuple[int, int, int], ...]
    bottleneck: float
    inner: tuple = ()

    @property
    def bounds(self) -> tuple[tuple[int, int], ...]:
        """(first, stop) ranges, as :func:`rpd.model.stages.stages` takes them."""
        return tuple((a, b + 1) for a, b, _ in self.stages)

    @property
    def replicas(self) -> tuple[int, ...]:
        return tuple(r for _, _, r in self.stages)

    @property
    def workers(self) -> int:
        """Workers used: replicas × (one, or the workers of the stage's inner partition)."""
        if not self.inner:
            return sum(self.replicas)
        return sum(r * p.workers for r, p in zip(self.replicas, self.inner))


def stage_time(compute: float, weights: float, r: int, bandwidth: float, combine: str = "max") -> float:
    """T of one stage: compute seconds, weight bytes, r replicas (module docstring)."""
    sync = 4.0 * (r - 1) * weights / (r * bandwidth)
    return (max(compute, sync) if combine == "max" else compute + sync) / r


def _solve(
    C: np.ndarray, pw: np.ndarray, cut: np.ndarray, n: int, B: float, s: int, combine: str, max_r: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The DP from layer ``s``: best[j, m] over layers s..j−1 with at most m workers (inf for
    m = 0 or j <= s); C[i, j] compute of layers i..j−1 on one worker; pw prefix of weight bytes;
    cut[k] the cost of cutting before layer k. Choices: ck[j, m] the first layer of the last
    stage (−1: the optimum of m − 1 workers), cr[j, m] its replicas."""
    L = C.shape[0] - 1
    best = np.full((L + 1, n + 1), np.inf)
    ck = np.full((L + 1, n + 1), -1, np.int64)
    cr = np.zeros((L + 1, n + 1), np.int64)
    r = np.arange(1, max_r + 1, dtype=float)
    for j in range(s + 1, L + 1):
        ks = np.arange(s + 1, j)
        sync = 4.0 * (r - 1) * (pw[j] - pw[ks[:, None]]) / (r * B)  # [K, R] last stage k..j−1
        last = (np.maximum(C[ks, j][:, None], sync) if combine == "max" else C[ks, j][:, None] + sync) / r
        sync0 = 4.0 * (r - 1) * (pw[j] - pw[s]) / (r * B)
        single = (np.maximum(C[s, j], sync0) if combine == "max" else C[s, j] + sync0) / r  # [R]
        for m in range(1, n + 1):
            v, k, rr = best[j, m - 1], -1, 0
            if m <= max_r and single[m - 1] < v:
                v, k, rr = single[m - 1], s, m
            top = min(m - 1, max_r)
            if top and ks.size:
                prev = best[ks][:, m - 1 : m - 1 - top : -1]  # best[k, m − r] for r = 1..top
                val = np.maximum(np.maximum(prev, cut[ks][:, None]), last[:, :top])
                a = int(np.argmin(val))
                if val.flat[a] < v:
                    v, k, rr = val.flat[a], int(ks[a // top]), a % top + 1
            best[j, m], ck[j, m], cr[j, m] = v, k, rr
    return best, ck, cr


def _walk(ck: np.ndarray, cr: np.ndarray, s: int, j: int, m: int) -> tuple[tuple[int, int, int], ...]:
    out = []
    while True:
        while ck[j, m] == -1:
            m -= 1
        k, r = int(ck[j, m]), int(cr[j, m])
        out.append((k, j - 1, r))
        if k == s:
            return tuple(reversed(out))
        j, m = k, m - r


def _inputs(layer_times, activation_bytes, param_bytes):
    t = np.asarray(layer_times, float)
    a = np.asarray(activation_bytes, float)
    w = np.asarray(param_bytes, float)
    if t.ndim != 1 or not t.size or a.shape != t.shape or w.shape != t.shape:
        raise ValueError(
            f"layer_times, activation_bytes and param_bytes must be equal-length non-empty lists, "
            f"got lengths {t.size}, {a.size}, {w.size}"
        )
    for name, x in (("layer_times", t), ("activation_bytes", a), ("param_bytes", w)):
        if not np.all(np.isfinite(x)) or np.any(x < 0):
            raise ValueError(f"{name} must be finite and >= 0")
    pt = np.concatenate([[0.0], np.cumsum(t)])
    return t, a, np.concatenate([[0.0], np.cumsum(w)]), pt[None, :] - pt[:, None]


def _cut(a: np.ndarray, B: float, activations: bool) -> np.ndarray:
    """cut[k]: cost of a boundary before layer k (after layer k − 1); cut[0] unused."""
    return np.concatenate([[0.0], 2.0 * a / B if activations else np.zeros_like(a)])


def _fewest(best: np.ndarray, j: int, n: int) -> int:
    """The fewest workers reaching the optimum best[j, n]."""
    return int(np.flatnonzero(best[j, 1 : n + 1] == best[j, n])[0]) + 1


def pipedream(
    layer_times,
    activation_bytes,
    param_bytes,
    n_workers: int,
    bandwidth: float,
    *,
    combine: str = "max",
    activations: bool = True,
    max_replicas: int | None = None,
) -> Partition:
    """The optimal :class:`Partition` of the layers over at most ``n_workers`` workers (module
    docstring). Bytes and seconds per microbatch; ``bandwidth`` bytes/s; ``max_replicas`` caps
    each stage's replication (1: a straight pipeline)."""
    n = check_int("n_workers", n_workers)
    B = check_real("bandwidth", bandwidth)
    check_choice("combine", combine, COMBINE)
    max_r = n if max_replicas is None else min(n, check_int("max_replicas", max_replicas))
    t, a, pw, C = _inputs(layer_times, activation_bytes, param_bytes)
    best, ck, cr = _solve(C, pw, _cut(a, B, activations), n, B, 0, combine, max_r)
    L = t.size
    m = _fewest(best, L, n)
    return Partition(stages=_walk(ck, cr, 0, L, m), bottleneck=float(best[L, n]))


def pipedream_hierarchical(
    layer_times, activation_bytes, param_bytes, levels, *, combine: str = "max", activations: bool = True
) -> Partition:
    """The hierarchical partition (module docstring): ``levels`` a list of (components,
    bandwidth) pairs, innermost first. The result's stages are the top level's, each with its
    ``inner`` partition (recursively); with one level it is :func:`pipedream`."""
    levels = [
        (check_int(f"levels[{i}].components", c), check_real(f"levels[{i}].bandwidth", b))
        for i, (c, b) in enumerate(levels)
    ]
    if not levels:
        raise ValueError("levels must not be empty")
    check_choice("combine", combine, COMBINE)
    t, a, pw, C = _inputs(layer_times, activation_bytes, param_bytes)
    L = t.size
    tables = []  # per level: {start: (best, ck, cr)}
    for depth, (n, B) in enumerate(levels):
        starts = [0] if depth == len(levels) - 1 else range(L)
        sol = {s: _solve(C, pw, _cut(a, B, activations), n, B, s, combine, n) for s in starts}
        tables.append(sol)
        C = np.full((L + 1, L + 1), np.inf)  # the next level's "compute": this level's optimum
        for s, (best, _, _) in sol.items():
            C[s, s + 1 :] = best[s + 1 :, n]

    def build(depth: int, s: int, j: int) -> Partition:
        n = levels[depth][0]
        best, ck, cr = tables[depth][s]
        st = _walk(ck, cr, s, j, _fewest(best, j, n))
        inner = tuple(build(depth - 1, i, k + 1) for i, k, _ in st) if depth else ()
        return Partition(stages=st, bottleneck=float(best[j, n]), inner=inner)

    return build(len(levels) - 1, 0, L)


def model_inputs(model: Model, hardware: Hardware, grad_bytes: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(layer_times, activation_bytes, param_bytes) of a model on a device: F + I + W seconds,
    ``out_bytes``, (parameters + tied parameters) × ``grad_bytes``."""
    grad_bytes = check_int("grad_bytes", grad_bytes)
    times = layer_seconds(model, hardware).sum(axis=1)
    acts = np.array([x.out_bytes for x in model.layers], float)
    params = np.array([(x.params + x.tied_params) * grad_bytes for x in model.layers], float)
    return times, acts, params


def partition_model(
    model: Model, hardware: Hardware, n_workers: int, *, bandwidth: float | None = None, grad_bytes: int = 4, **kw
) -> Partition:
    """:func:`pipedream` on ``model``'s layers (:func:`model_inputs`); ``bandwidth`` defaults to
    the hardware's p2p bandwidth. Keywords go to :func:`pipedream`."""
    B = hardware.p2p_bandwidth if bandwidth is None else bandwidth
    return pipedream(*model_inputs(model, hardware, grad_bytes), n_workers, B, **kw)
