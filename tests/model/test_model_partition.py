"""rpd.model.partition: PipeDream's partitioner against brute force
(docs/plan.md#stages-and-pipedreams-partitioner-rpdmodelstages-rpdmodelpartition)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rpd.model import hardware, layers
from rpd.model.partition import model_inputs, partition_model, pipedream, pipedream_hierarchical
from rpd.model.stages import partition, stages

HW = hardware.preset("a100_80g_flat")


def _compositions(i: int, j: int):
    """Every split of layers i..j−1 into contiguous non-empty (first, last) ranges."""
    n = j - i
    for cuts in itertools.product((False, True), repeat=n - 1):
        ranges, lo = [], i
        for k, c in enumerate(cuts):
            if c:
                ranges.append((lo, i + k))
                lo = i + k + 1
        ranges.append((lo, j - 1))
        yield ranges


def _T(c, w, r, B, combine):
    sync = 4 * (r - 1) * w / (r * B)
    return (max(c, sync) if combine == "max" else c + sync) / r


def brute(t, a, w, n, B, combine="max", activations=True, max_r=None, compute=None, i=0, j=None):
    """(bottleneck, fewest workers) over every contiguous partition and replica assignment of
    layers i..j−1 with at most n workers; ``compute(first, last)`` the stage's compute (default Σt)."""
    j = len(t) if j is None else j
    max_r = n if max_r is None else max_r
    compute = compute or (lambda lo, hi: sum(t[lo : hi + 1]))
    out = (np.inf, 0)
    for ranges in _compositions(i, j):
        cuts = [2 * a[hi] / B if activations else 0.0 for _, hi in ranges[:-1]]
        for reps in itertools.product(range(1, min(n, max_r) + 1), repeat=len(ranges)):
            if sum(reps) > n:
                continue
            v = max(
                [_T(compute(lo, hi), sum(w[lo : hi + 1]), r, B, combine) for (lo, hi), r in zip(ranges, reps)] + cuts
            )
            out = min(out, (v, sum(reps)))
    return out


def _value(t, a, w, p, B, combine="max", activations=True):
    """The objective of a returned partition, recomputed."""
    v = [_T(sum(t[lo : hi + 1]), sum(w[lo : hi + 1]), r, B, combine) for lo, hi, r in p.stages]
    return max(v + [2 * a[hi] / B if activations else 0.0 for _, hi, _ in p.stages[:-1]])


def _instance(rng, L):
    # integers and B a power of two: every sum is exact, so the DP and brute force agree bit for bit
    return (
        rng.integers(0, 20, L).astype(float),
        rng.integers(0, 40, L).astype(float),
        rng.integers(0, 60, L).astype(float),
    )


@pytest.mark.parametrize("combine,activations", [("max", True), ("sum", False), ("max", False)])
def test_equals_brute_force_on_random_instances(combine, activations):
    rng = np.random.default_rng(0)
    for _ in range(60):
        L, n, B = int(rng.integers(1, 7)), int(rng.integers(1, 6)), float(2.0 ** rng.integers(0, 4))
        t, a, w = _instance(rng, L)
        p = pipedream(t, a, w, n, B, combine=combine, activations=activations)
        want, fewest = brute(t, a, w, n, B, combine, activations)
        assert p.bottleneck == want
        assert _value(t, a, w, p, B, combine, activations) == want  # the stages returned reach it
        assert p.workers == fewest and p.workers <= n
        assert [lo for lo, _, _ in p.stages] == [0] + [hi + 1 for _, hi, _ in p.stages[:-1]]
        assert p.stages[-1][1] == L - 1


def test_equals_brute_force_with_real_valued_inputs_and_a_replica_cap():
    rng = np.random.default_rng(1)
    for _ in range(30):
        L, n = int(rng.integers(2, 7)), int(rng.integers(2, 6))
        t, a, w = rng.random(L), rng.random(L) * 3, rng.random(L) * 5
        cap = int(rng.integers(1, 3))
        p = pipedream(t, a, w, n, 7.3, max_replicas=cap)
        assert p.bottleneck == pytest.approx(brute(t, a, w, n, 7.3, max_r=cap)[0], rel=1e-12)
        assert max(p.replicas) <= cap


def test_a_hand_instance_replicates_the_heavy_light_stage():
    # two layers: 8 s of compute with tiny weights, 1 s with big weights; cut costs 2·1/1 = 2 s.
    # 4 workers: layer 0 on 3 replicas -> max(8, 4·2·1/3)/3 = 8/3; layer 1 alone: 1 -> 8/3 overall
    p = pipedream([8.0, 1.0], [1.0, 0.0], [1.0, 100.0], 4, 1.0)
    assert p.stages == ((0, 0, 3), (1, 1, 1)) and p.bottleneck == pytest.approx(8 / 3)
    # pure data parallelism when the weights are free: one stage on every worker
    p = pipedream([8.0, 1.0], [1.0, 0.0], [0.0, 0.0], 4, 1.0)
    assert p.stages == ((0, 1, 4),) and p.bottleneck == pytest.approx(9 / 4)


def test_hierarchical_equals_a_nested_brute_force():
    rng = np.random.default_rng(2)
    for _ in range(12):
        L = int(rng.integers(1, 6))
        t, a, w = _instance(rng, L)
        n1, n2, B1, B2 = int(rng.integers(1, 4)), int(rng.integers(1, 4)), 8.0, 2.0
        inner = lambda lo, hi: brute(t, a, w, n1, B1, i=lo, j=hi + 1)[0]  # noqa: E731
        want = brute(t, a, w, n2, B2, compute=inner)[0]
        p = pipedream_hierarchical(t, a, w, [(n1, B1), (n2, B2)])
        assert p.bottleneck == want
        assert len(p.inner) == len(p.stages) and p.workers <= n1 * n2
        for (lo, hi, _), q in zip(p.stages, p.inner):
            assert q.stages[0][0] == lo and q.stages[-1][1] == hi


def test_one_level_is_the_flat_partitioner():
    rng = np.random.default_rng(3)
    t, a, w = _instance(rng, 6)
    flat, hier = pipedream(t, a, w, 5, 4.0), pipedream_hierarchical(t, a, w, [(5, 4.0)])
    assert (flat.stages, flat.bottleneck) == (hier.stages, hier.bottleneck)


def test_gpt2_medium_on_a100s_is_a_straight_pipeline_bound_by_the_head():
    m = layers.preset("gpt2_medium")
    t, a, w = model_inputs(m, HW)
    assert w[1] == 4 * (12 * 1024**2 + 13 * 1024) and a[1] == 2 * 1024 * 1024
    p = partition_model(m, HW, 8)
    # a block's weights take 4·(r−1)/r·50 MB / 25 GB/s >= 4 ms to all-reduce, its compute 0.58 ms:
    # no stage is replicated; the output layer (LM head, 2 ms) bounds it from 9 workers on
    assert p.replicas == (1,) * 8 and p.workers == 8
    assert p.bottleneck == pytest.approx(max(t[lo : hi + 1].sum() for lo, hi, _ in p.stages))
    p16 = partition_model(m, HW, 16)
    assert p16.workers == 9 and p16.bottleneck == pytest.approx(t[-1])


def test_the_plan_partition_pipedream_is_the_straight_dp_for_g_stages():
    m = layers.mlp_model(5, 64, 8)
    tiny = hardware.Hardware("slow", peak_flops=1e9, memory_bytes=2**30, p2p_bandwidth=1e5, allreduce_bandwidth=1e5)
    t, a, w = model_inputs(m, tiny)
    for G in (1, 2, 3, 5):
        bounds = partition(m, G, "pipedream", tiny)
        st = stages(m, bounds, tiny)
        got = max([*(st.t_f + st.t_i + st.t_w)] + [2 * a[b - 1] / tiny.p2p_bandwidth for _, b in bounds[:-1]])
        want = min(
            max([sum(t[lo : hi + 1]) for lo, hi in r] + [2 * a[hi] / tiny.p2p_bandwidth for _, hi in r[:-1]])
            for r in _compositions(0, 5)
            if len(r) == G
        )
        assert got == pytest.approx(want)


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="n_workers"):
        pipedream([1.0], [0.0], [0.0], 0, 1.0)
    with pytest.raises(ValueError, match="equal-length"):
        pipedream([1.0, 2.0], [0.0], [0.0, 1.0], 2, 1.0)
    with pytest.raises(ValueError, match="layer_times"):
        pipedream([-1.0], [0.0], [0.0], 1, 1.0)
    with pytest.raises(ValueError, match="combine"):
        pipedream([1.0], [0.0], [0.0], 1, 1.0, combine="min")
