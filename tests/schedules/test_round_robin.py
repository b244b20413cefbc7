"""PipeDream's 1F1B-RR (rpd.schedules.family.pipedream_rr): placement, order, timeline laws, the
all-reduce channel, memory."""

import numpy as np
import pytest

from rpd import registry, schedules
from rpd.schedules.family.pipedream_rr import channel, pipedream_rr, stashed_versions, warmup
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import BWD, FWD


def test_without_replicas_it_is_pipedreams_1f1b():
    """All r = 1: PipeDream's runtime order; the backwards are rpd's PD timeline's exactly (the
    readiness rule of docs/science.md#schedules lets a stage run one forward earlier during the warm-up only)."""
    for S, N in [(3, 9), (4, 16), (6, 30)]:
        rr, pd = pipedream_rr(S, N), schedules.pipedream(S, N)
        assert rr.T == pd.T == 2 * N + 2 * S - 2
        np.testing.assert_array_equal(rr.b_time, pd.b_time)
        np.testing.assert_array_equal(rr.f_time[S:], pd.f_time[S:])  # steady state
        np.testing.assert_array_equal(stashed_versions(rr), S - np.arange(S))  # S - s (docs/schedules.md#pipedream)
        np.testing.assert_array_equal(memory.peak_activations(rr), S - np.arange(S))


@pytest.mark.parametrize(
    "reps,costs",
    [
        ((2, 1, 1, 1), None),
        ((1, 3, 2, 1), CostModel(F=(1, 2, 1, 1), B=(2, 4, 3, 2), p2p=1)),
        ((2, 2, 1), CostModel(F=2, B=3, allreduce=(1, 0.5), straggler=(0.3, 2), seed=3)),
        ((4, 1, 2, 1, 3), CostModel(F=1, B=2)),
    ],
)
def test_round_robin_placement_and_order(reps, costs):
    S, N = len(reps), 24
    tl = pipedream_rr(S, N, reps, costs, values=10)
    t = tl.table
    first = tl.first_rank
    assert tl.S == sum(reps) and tl.n_stages == S
    np.testing.assert_array_equal(t.rank, first[t.stage] + t.mb % np.asarray(reps)[t.stage])  # m mod r_g
    w = warmup(reps)
    for r in range(tl.S):
        mine = np.nonzero(t.rank == r)[0]
        assert np.all(t.start[mine][1:] >= t.end[mine][:-1])  # one op at a time
        g = int(t.stage[mine[0]])
        kinds = t.kind[mine]
        n_warm = int(np.argmax(kinds == BWD))  # forwards before the first backward
        assert n_warm == min(w[g] + 1, len(mine) // 2)
        assert np.all(kinds[n_warm : len(mine) - n_warm + 1 : 2] == BWD)  # then F, B alternate
    # dependencies: F(m, g) after F(m, g-1), B(m, g) after B(m, g+1) and F(m, g)
    assert np.all(tl.f_time[:, 1:] > tl.f_time[:, :-1])
    assert np.all(tl.b_time[:, :-1] > tl.b_time[:, 1:]) and np.all(tl.b_time > tl.f_time)
    # PipeDream's warm-up: (workers of stages g.. - 1) // r_g, so in flight per replica w + 1
    np.testing.assert_array_equal(w, (np.cumsum(reps[::-1])[::-1] - 1) // np.asarray(reps))
    peak = memory.peak_activations(tl)
    np.testing.assert_array_equal(peak, np.repeat(np.minimum(w + 1, N // np.asarray(reps)), reps))


def test_replicating_the_slow_stage_restores_the_period():
    """Stage 0 three times slower: alone it sets the period (9 ticks per microbatch); on 3
    replicas the pipeline runs at the others' F + B = 3."""
    c = CostModel(F=(3, 1, 1, 1), B=(6, 2, 2, 2))
    step = lambda reps: pipedream_rr(4, 120, reps, c).T - pipedream_rr(4, 60, reps, c).T  # noqa: E731
    assert step((1, 1, 1, 1)) == 60 * 9
    assert step((2, 1, 1, 1)) == 60 * 9 // 2
    assert step((3, 1, 1, 1)) == 60 * 3


def test_allreduce_channel():
    """Group j of r microbatches lands after its last backward and the previous all-reduce; an
    all-reduce slower than the stage's compute sets the period (PipeDream's max(compute, AR)/r)."""
    b = np.array([3, 5, 6, 7, 20, 21])
    np.testing.assert_array_equal(channel(b, 2, 0), [5, 7, 21])
    np.testing.assert_array_equal(channel(b, 2, 4), [9, 13, 25])  # 6..9, 10..13, 22..25
    np.testing.assert_array_equal(channel(b, 4, 2), [9])  # ticks 8, 9; the partial group never lands
    c = CostModel(F=1, B=2, allreduce=(0, 1.0))
    tl = pipedream_rr(4, 40, (2, 1, 1, 1), c, values=8)
    assert tl.allreduce == (8, 0, 0, 0)  # 2(r-1)/r * 8 values * 1 tick
    step = pipedream_rr(4, 80, (2, 1, 1, 1), c, values=8).T - tl.T
    assert step == 40 * 4  # 8 ticks per group of 2 > 3 ticks of compute per microbatch
    assert tl.T == int(tl.land[0][-1]) + 1 > int(tl.table.end.max())
    for g, r in enumerate(tl.replicas):
        ready = tl.b_time[:, g].reshape(-1, r).max(axis=1)
        assert np.all(tl.land[g] >= ready + tl.allreduce[g]) and np.all(np.diff(tl.land[g]) >= tl.allreduce[g])


def test_registered_and_checked():
    tl = registry.build("pipedream_rr", registry.ScheduleParams(S=4, N=12, params={"replicas": (2, 1, 1, 1)}))
    assert tl.kind == "pipedream_rr" and tl.S == 5 and tl.replicas == (2, 1, 1, 1)
    with pytest.raises(ValueError, match="replicas has 3 entries"):
        pipedream_rr(4, 12, (2, 1, 1))
    with pytest.raises(ValueError, match=r"replicas\[1\]"):
        pipedream_rr(3, 12, (2, 0, 1))
    assert np.all(tl.table.kind[tl.table.kind != BWD] == FWD)


def test_no_depth_rule_deadlocks_and_cover_feeds_replicated_stages():
    rng = np.random.default_rng(0)
    for _ in range(100):
        S = int(rng.integers(1, 6))
        reps = tuple(int(x) for x in rng.integers(1, 4, S))
        c = CostModel(F=tuple(rng.integers(1, 4, S).tolist()), B=tuple(rng.integers(1, 6, S).tolist()), p2p=1)
        for depth in ("runtime", "cover"):
            tl = pipedream_rr(S, int(rng.integers(1, 30)), reps, c, depth=depth)  # the timer raises on deadlock
            assert tl.table.start.size == 2 * tl.N * S
    np.testing.assert_array_equal(warmup((1,) * 8 + (3, 1)), [11, 10, 9, 8, 7, 6, 5, 4, 1, 0])  # runtime
    np.testing.assert_array_equal(warmup((1,) * 8 + (3, 1), "cover"), [13, 12, 11, 10, 9, 8, 7, 6, 1, 0])
    np.testing.assert_array_equal(warmup((1, 1, 1, 1), "cover"), warmup((1, 1, 1, 1)))
    c = CostModel(F=(1, 1, 3, 1), B=(2, 2, 6, 2))
    step = lambda d: pipedream_rr(4, 96, (1, 1, 3, 1), c, depth=d).T - pipedream_rr(4, 48, (1, 1, 3, 1), c, depth=d).T  # noqa: E731
    assert step("runtime") == 48 * 6 and step("cover") == 48 * 3 and step((6, 5, 1, 0)) == 48 * 4
