"""Replicated stages (1F1B-RR) and D data-parallel pipelines train through the stale core
(rpd.train.semantics_parallel), checked against literal replays written here."""

import jax
import numpy as np
import pytest

from rpd import objectives, registry, schedules
from rpd.schedules.family.pipedream_rr import pipedream_rr
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.data_parallel import data_parallel
from rpd.train import methods, semantics, semantics_parallel

S, GAMMA = 4, 0.05


@pytest.fixture(scope="module")
def quad():
    return objectives.random_quadratic(n=240, d=24, S=S, batch_size=5, seed=0)


@pytest.fixture(scope="module")
def grad(quad):
    return jax.jit(lambda x, b: quad.value_and_grad(quad.data, x, b)[1])


def _replay_rr(obj, grad, tl, gamma):
    """PipeDream 1F1B-RR op by op: F(m, g) stashes block g as the replica holds it; the j-th
    backwards of stage g's r replicas meet in an all-reduce on the stage's own channel (after the
    last of them and the previous all-reduce, ``tl.allreduce[g]`` ticks), whose end applies the
    mean of their gradients at their stashes with PipeDream's learning rate γ·r_g/r_0. Within a
    tick, reads come before landings."""
    reps = tl.replicas
    blocks = [slice(o, o + n) for o, n in zip(obj.layout.offsets, obj.layout.sizes)]
    x = np.asarray(obj.x0, float).copy()
    events = [(int(tl.f_time[m, g]), 0, g, m) for m in range(tl.N) for g in range(len(reps))]
    for g, r in enumerate(reps):
        free = 0
        for j in range(tl.N // r):
            ready = max(int(tl.b_time[j * r + i, g]) for i in range(r)) + 1
            start = max(ready, free)
            free = start + tl.allreduce[g]
            events.append((free - 1 if tl.allreduce[g] else ready - 1, 1, g, j))
    stash = {}
    for _, kind, g, a in sorted(events):
        if kind == 0:
            stash.setdefault(a, np.zeros(obj.D))[blocks[g]] = x[blocks[g]]
        else:
            r = reps[g]
            gs = [np.asarray(grad(stash[m], m % obj.n_batches))[blocks[g]] for m in range(a * r, a * r + r)]
            x[blocks[g]] -= gamma * (r / reps[0]) * np.mean(gs, axis=0)
    return x


@pytest.mark.slow
@pytest.mark.parametrize(
    "reps,costs,N",
    [
        ((2, 1, 1, 1), CostModel(F=1, B=2, p2p=1, allreduce=(1, 0.5)), 24),
        ((1, 2, 1, 3), CostModel(F=2, B=3, allreduce=(3, 0.1)), 25),  # trailing partial groups
        ((1, 1, 1, 1), None, 16),
    ],
)
def test_round_robin_trains_as_the_literal_replay(quad, grad, reps, costs, N):
    tl = pipedream_rr(S, N, reps, costs, values=6)
    res = methods.train(quad, tl, [GAMMA])
    np.testing.assert_allclose(res.x_final[0], _replay_rr(quad, grad, tl, GAMMA), rtol=0, atol=1e-13)
    assert res.axis[-1] == tl.T


def test_round_robin_plan_shape():
    """Stage g: one update per r_g microbatches, as r_g pieces of scale 1/r_0 at one tick, each
    reading whole updates only; a microbatch's gradient computed once (stashing)."""
    reps = (2, 1, 2, 1)
    tl = pipedream_rr(S, 16, reps, CostModel(F=1, B=2, allreduce=(2, 0)))
    plan, n_slots = semantics.of(tl).plan(tl, S, 10)
    assert len(plan.block) == 16 * S and plan.fresh.sum() == 16
    np.testing.assert_allclose(plan.scale, 0.5)
    for g, r in enumerate(reps):
        t = plan.time[plan.block == g]
        np.testing.assert_array_equal(t, np.repeat(tl.land[g], r))
        assert np.all(plan.read[:, g] % r == 0)
    assert 1 <= n_slots <= 16 and plan.slot.max() < n_slots


def _sgd(obj, grad, Q, B, gamma=GAMMA):
    x = np.asarray(obj.x0)
    for q in range(Q):
        x = x - gamma * np.mean([np.asarray(grad(x, (q * B + j) % obj.n_batches)) for j in range(B)], axis=0)
    return x


@pytest.mark.parametrize("overlap", [False, True])
def test_two_pipelines_equal_one_with_doubled_batch(quad, grad, overlap):
    """D = 2 synchronous pipelines of M microbatches = minibatch SGD with batch 2M = one pipeline
    with M' = 2M (same iterates), for 1F1B and the split-backward ZB-H1."""
    M, N = 4, 16
    c = CostModel(F=1, B=2, I=1, W=1, p2p=1, allreduce=(2, 0.5))
    for make in (schedules.one_f_one_b, schedules.zb_h1):
        tl = data_parallel(make(S, N, M, costs=c), 2, c, values=6, overlap=overlap)
        x = methods.train(quad, tl, [GAMMA]).x_final[0]
        np.testing.assert_allclose(x, _sgd(quad, grad, N // M, 2 * M), rtol=0, atol=1e-13)
        one = methods.train(quad, make(S, 2 * N, 2 * M, costs=c), [GAMMA]).x_final[0]
        np.testing.assert_allclose(x, one, rtol=0, atol=1e-13)


def test_dp_allreduce_in_the_timeline():
    """The all-reduce (ring: 2(D-1)/D of the values) follows the flush (or each rank's last
    backward, overlapped); the next flush waits for it; updates land at its end."""
    c = CostModel(F=1, B=2, p2p=1, allreduce=(1, 0.5))
    base = schedules.one_f_one_b(S, 12, 4, costs=c)
    flush = base.flush_time[0] + 1  # ticks per flush without all-reduce
    for D, values in [(2, 8), (4, 8)]:
        a = c.allreduce_ticks(2 * (D - 1) / D * values)
        tl = data_parallel(base, D, c, values=values)
        np.testing.assert_array_equal(np.diff(tl.flush_time), flush + a)
        np.testing.assert_array_equal(tl.dp_land, np.repeat(tl.flush_time[:, None], S, axis=1))
        ov = data_parallel(base, D, c, values=values, overlap=True)
        assert ov.T <= tl.T
        t = ov.table
        for r in range(S):  # rank r's update lands a ticks after its last backward of flush 0
            last = t.end[(t.rank == r) & (t.kind == 2) & (t.mb < 4)].max()
            assert ov.dp_land[0, r] == last + a - 1
    same = data_parallel(base, 1, c, values=8)  # D = 1: no all-reduce, the same ops
    np.testing.assert_array_equal(same.table.start, base.table.start)
    with pytest.raises(ValueError, match="flush"):
        data_parallel(schedules.pipedream(S, 8), 2)


def test_slots_are_an_interval_colouring():
    fresh, slot, n = semantics_parallel._slots(np.array([0, 1, 0, 2, 1, 2, 3, 3]))
    np.testing.assert_array_equal(fresh, [1, 1, 0, 1, 0, 0, 1, 0])
    np.testing.assert_array_equal(slot, [0, 1, 0, 0, 1, 0, 0, 0])  # 3 reuses the lowest free slot
    assert n == 2


def test_d_pipelines_from_the_registry():
    """``schedule.D`` (ScheduleParams.D): the registry wraps the flush schedule; D = 1 leaves the
    resolved parameters (a run's key) as they were; D > 1 without a flush is refused."""
    c = CostModel(F=1, B=2, allreduce=(1, 0.5))
    p = registry.ScheduleParams(S=S, N=16, M=4, D=2, overlap_allreduce=True)
    tl = registry.build("1f1b", p, c, values=6)
    ref = data_parallel(schedules.one_f_one_b(S, 16, 4, costs=c), 2, c, values=6, overlap=True)
    assert tl.D == 2 and tl.overlap and tl.T == ref.T
    np.testing.assert_array_equal(tl.dp_land, ref.dp_land)
    assert registry.resolve("1f1b", registry.ScheduleParams(S=S, N=16, M=4, D=1)).D is None
    with pytest.raises(ValueError, match="D > 1 needs a schedule with a flush"):
        registry.check_schedule("pipedream", registry.ScheduleParams(S=S, N=16, D=2))
