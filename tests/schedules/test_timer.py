"""rpd.schedules.machinery.timer / build / rpd.schedules.machinery.costs: the one timer reproduces every unit-cost timeline
exactly, equals a plain dependency-driven event loop under costs, and the cost model behaves."""

import numpy as np
import pytest

from rpd import schedules
from rpd.schedules.family import orders
from rpd.schedules.machinery.build import order_of, timed
from rpd.schedules.machinery.costs import CostModel, Straggler
from rpd.schedules.machinery.ir import BWD, FWD, ops
from rpd.schedules.machinery.timer import flatten, op_durations, time_order_reference


@pytest.mark.parametrize("S", range(1, 41))
def test_unit_timer_reproduces_pipedream(S):
    for N in (1, S, 3 * S + 1):
        fast = schedules.pipedream(S, N)
        again = timed("pipedream", order_of(fast), S=S, N=N, costs=None, noam=fast.noam)
        np.testing.assert_array_equal(again.f_time, fast.f_time)
        np.testing.assert_array_equal(again.b_time, fast.b_time)
        assert again.T == fast.T == 2 * N + 2 * S - 2


@pytest.mark.parametrize("S", [1, 2, 5, 8])
def test_unit_timer_reproduces_naive(S):
    fast = schedules.pipedream(S, 7, noam=1)
    again = timed("pipedream", order_of(fast), S=S, N=7, costs=None, noam=1)
    np.testing.assert_array_equal(again.f_time, fast.f_time)
    np.testing.assert_array_equal(again.b_time, fast.b_time)
    assert again.T == 2 * S * 7


@pytest.mark.parametrize("S,R,H", [(S, R, H) for S in (1, 2, 4, 6) for R in (1, 2, S, S + 1) for H in (1, 2, 3)])
def test_unit_timer_reproduces_local_sgd(S, R, H):
    N = 3 * R * H + 2
    fast = schedules.local_sgd(S, N, R, H)
    again = timed("local_sgd", order_of(fast), S=S, N=N, costs=None, R=R, H=H, barrier_every=R * H, averaging=True)
    np.testing.assert_array_equal(again.f_time, fast.f_time)
    np.testing.assert_array_equal(again.b_time, fast.b_time)
    np.testing.assert_array_equal(again.sync_time, fast.sync_time)
    assert again.T == fast.T


def _reference_times(tl, order, costs, split):
    G, N = tl.n_stages, tl.N
    flat = flatten(order, G, N)
    dur = op_durations(flat, costs, G, N, split)
    table = {(int(k), int(g), int(m)): int(d) for k, g, m, d in zip(flat.kind, flat.stage, flat.mb, dur)}
    ref = time_order_reference(order, lambda k, g, m, fused: table[(k, g, m)], costs.p2p, G)
    t = tl.table
    got = {(int(k), int(g), int(m)): (int(s), int(e)) for k, g, m, s, e in zip(t.kind, t.stage, t.mb, t.start, t.end)}
    return ref, got


@pytest.mark.parametrize(
    "make,split",
    [
        (lambda S, M, c: schedules.gpipe(S, M, M, c), False),
        (lambda S, M, c: schedules.one_f_one_b(S, M, M, c), False),
        (lambda S, M, c: schedules.interleaved(S, 2 * S, 2 * S, 2, c), False),
        (lambda S, M, c: schedules.zb_h1(S, M, M, c), True),
        (lambda S, M, c: schedules.zb_h2(S, M, M, c), True),
    ],
)
def test_timer_equals_reference_event_loop(make, split):
    rng = np.random.default_rng(0)
    for S, M in ((2, 3), (4, 8), (5, 7)):
        G = 2 * S if make(S, M, None).n_stages == 2 * S else S
        kw = (
            dict(I=rng.integers(1, 4, G).tolist(), W=rng.integers(1, 4, G).tolist())
            if split
            else dict(B=rng.integers(1, 5, G).tolist())
        )
        costs = CostModel(
            F=rng.integers(1, 4, G).tolist(),
            p2p=int(rng.integers(0, 3)),
            straggler=(0.3, 2),
            seed=int(rng.integers(100)),
            **kw,
        )
        tl = make(S, M, costs)
        order = [
            np.stack(
                [
                    tl.table.kind[tl.table.rank == r],
                    tl.table.stage[tl.table.rank == r],
                    tl.table.mb[tl.table.rank == r],
                    tl.table.fused[tl.table.rank == r],
                ],
                1,
            )
            for r in range(S)
        ]
        ref, got = _reference_times(tl, order, costs, split)
        assert ref == got


def test_deadlocking_order_is_an_error():
    bad = [ops([(BWD, 0, 0), (FWD, 0, 0)])]
    with pytest.raises(ValueError, match="deadlock"):
        timed("x", bad, S=1, N=1, costs=None)


def test_costs_shift_pipedream_exactly():
    # one stage: F and B alternate after the warm-up, so T = N (tF + tB) exactly
    tl = schedules.pipedream(1, 5, costs=CostModel(F=2, B=3))
    assert tl.T == 25
    # two stages, p2p latency c: the first microbatch's round trip is 2 tF + 2 tB + 2c
    tl = schedules.pipedream(2, 1, costs=CostModel(F=1, B=1, p2p=3))
    assert tl.T == 4 + 2 * 3
    # F(0,0) [0,1); F(0,1) [1+3, 5); B(0,1) [5, 6); B(0,0) [6+3, 10): updates land in ticks 5 and 9
    assert tl.update_time.tolist() == [5, 9]


def test_update_times_are_op_ends_under_costs():
    tl = schedules.pipedream(4, 12, costs=CostModel(F=2, B=3, p2p=1))
    t = tl.table
    ends = {(int(g), int(m)): int(e) for k, g, m, e in zip(t.kind, t.stage, t.mb, t.end) if k == BWD}
    for k in range(tl.K):
        assert tl.update_time[k] == ends[(int(tl.update_stage[k]), int(tl.update_mb[k]))] - 1
    assert np.all(np.diff(tl.update_time) >= 0)


def test_local_sgd_averaging_cost_delays_each_round():
    S, R, H, N = 4, 4, 2, 24
    free = schedules.local_sgd(S, N, R, H, costs=CostModel(F=1, B=2))
    paid = schedules.local_sgd(S, N, R, H, costs=CostModel(F=1, B=2, allreduce=(3, 0.5)), values=4)
    rounds = -(-N // (R * H))
    assert paid.T - free.T == rounds * 5  # ceil(3 + 0.5 * 4) = 5 ticks after every round
    np.testing.assert_array_equal(np.diff(paid.sync_time), np.diff(free.sync_time) + 5)


def test_straggler_noise_is_seeded():
    c = lambda seed: CostModel(F=1, B=2, straggler=Straggler(0.2, 3), seed=seed)  # noqa: E731
    a, b, other = (schedules.one_f_one_b(4, 32, 8, c(s)) for s in (1, 1, 2))
    np.testing.assert_array_equal(a.table.start, b.table.start)
    assert a.T != other.T or not np.array_equal(a.table.start, other.table.start)
    clean = schedules.one_f_one_b(4, 32, 8, CostModel(F=1, B=2))
    assert a.T > clean.T


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(F=0), "costs.F"),
        (dict(F=1.5), "costs.F"),
        (dict(B=[1, -1]), r"costs.B\[1\]"),
        (dict(I=1), "costs.I and costs.W"),
        (dict(I=1, W=1, B=3), "costs.B"),
        (dict(p2p=-1), "costs.p2p"),
        (dict(allreduce=(1,)), "costs.allreduce"),
        (dict(straggler=(2.0, 1)), "straggler.p"),
        (dict(seed=-1), "costs.seed"),
    ],
)
def test_cost_model_rejects_bad_fields(kwargs, field):
    with pytest.raises((ValueError, TypeError), match=field):
        CostModel(**kwargs)


def test_split_defaults():
    assert CostModel().resolve(2, split=True).I.tolist() == [1, 1]
    assert CostModel(B=4).resolve(2, split=True).W.tolist() == [2, 2]
    with pytest.raises(ValueError, match="costs.I and costs.W"):
        CostModel(B=3).resolve(2, split=True)
    with pytest.raises(ValueError, match="3 per-stage values"):
        CostModel(F=[1, 2, 3]).resolve(2, split=False)


def test_greedy_zb_h2_order_is_complete():
    from rpd.schedules.machinery.ir import check_complete

    for S in (1, 2, 3, 4, 6):
        for M in (1, S, 2 * S + 1):
            check_complete(orders.zb_h2_order(S, M), S, M)
