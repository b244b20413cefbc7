import numpy as np
import pytest

import rpd  # noqa: F401
from rpd import schedules
from rpd.analysis import simtime
from rpd.objectives.linear import random_quadratic
from rpd.train import methods


@pytest.mark.parametrize("S,T", [(4, 100), (8, 3180), (3, 5), (2, 2)])
def test_protocol_ii_picks_smallest_n_pipedream(S, T):
    tl = simtime.smallest_n_reaching(T, lambda n: schedules.pipedream(S, n))
    assert tl.T >= T
    assert tl.N == 1 or schedules.pipedream(S, tl.N - 1).T < T
    assert tl.N == max(1, -(-(T - 2 * S + 2) // 2))  # from T = 2N + 2S - 2


@pytest.mark.parametrize("S,R,H,T", [(4, 4, 5, 3180), (4, 4, 1, 77), (3, 5, 2, 400)])
def test_protocol_ii_picks_smallest_n_localsgd(S, R, H, T):
    tl = simtime.smallest_n_reaching(T, lambda n: schedules.local_sgd(S, n, R, H))
    assert tl.T >= T and (tl.N == 1 or schedules.local_sgd(S, tl.N - 1, R, H).T < T)


@pytest.mark.parametrize("guess", [0, 1, 2, 9, 10, 11, 40])
def test_smallest_n_reaching_from_any_guess_is_the_brute_force_answer(guess):
    make = lambda n: schedules.local_sgd(3, n, 3, 2)
    lengths = {n: make(n).T for n in range(1, 60)}
    for T in (1, 5, 30, 57, 120):
        want = min(n for n, t in lengths.items() if t >= T)
        assert simtime.smallest_n_reaching(T, make, guess).N == want


def test_smallest_n_reaching_rejects_a_guess_that_is_not_an_integer():
    with pytest.raises(TypeError, match="guess"):
        simtime.smallest_n_reaching(10, lambda n: schedules.pipedream(2, n), 2.5)


def test_rpd_gets_pd_block_updates():
    tl = schedules.pipedream(4, 30)
    assert simtime.block_updates_in(tl) == tl.K == 120


def test_protocol_i_cuts_to_shortest_timeline():
    obj = random_quadratic(n=48, d=8, S=4, batch_size=4, seed=0)
    pd = methods.pipedream(obj, schedules.pipedream(4, 24), 0.05)  # recorded at its update events
    ls = methods.local_sgd(obj, schedules.local_sgd(4, 24, 4, 2), 0.05)
    a, b = simtime.cut_to_shortest([pd, ls])
    assert a.axis[-1] == b.axis[-1] == min(pd.meta["T"], ls.meta["T"]) == 2 * 24 + 2 * 4 - 2
    every_tick = methods.train(obj, schedules.pipedream(4, 24), 0.05, at=np.arange(1, pd.meta["T"] + 1))
    np.testing.assert_array_equal(simtime.value_at_time(pd, 10), every_tick.curve[:, 10])
    np.testing.assert_array_equal(simtime.on_ticks(pd).curve, every_tick.curve)
    np.testing.assert_array_equal(simtime.on_ticks(a).curve, every_tick.curve[:, : a.axis[-1] + 1])


def test_cut_conventions_end_and_authors():
    """cut="end" keeps the point after T steps; cut="authors" keeps curve[:T], the last point
    after T − 1 steps (the authors' protocol (i) code)."""
    obj = random_quadratic(n=48, d=8, S=4, batch_size=4, seed=0)
    # Read after every tick off the update events (rpd.results.value_at): the per-step curves.
    pd = simtime.on_ticks(methods.pipedream(obj, schedules.pipedream(4, 24), 0.05))
    ls_events = methods.local_sgd(obj, schedules.local_sgd(4, 24, 4, 2), 0.05)
    ls = simtime.on_ticks(ls_events)
    T = 2 * 24 + 2 * 4 - 2  # PD's timeline, the shorter one
    np.testing.assert_array_equal(pd.axis[: T + 1], np.arange(T + 1))  # one point per step, x0 first
    end, authors = simtime.cut_to(ls, T), simtime.cut_to(ls, T, cut="authors")
    assert end.axis[-1] == T and authors.axis[-1] == T - 1
    np.testing.assert_array_equal(authors.curve, ls.curve[:, :T])  # literally curve[:T]
    np.testing.assert_array_equal(end.curve, ls.curve[:, : T + 1])
    assert authors.meta["cut"] == "authors" and authors.meta["cut_T"] == T
    a, b = simtime.cut_to_shortest([pd, ls], cut="authors")
    assert a.axis[-1] == b.axis[-1] == T - 1 and a.curve.shape == (1, T)
    np.testing.assert_array_equal(simtime.value_at_time(ls, 10, cut="authors"), ls.curve[:, 9])
    np.testing.assert_array_equal(simtime.value_at_time(ls, 10, cut="end"), ls.curve[:, 10])
    assert (simtime.last_time(10, "end"), simtime.last_time(10, "authors")) == (10, 9)
    for cut in simtime.CUTS:  # cut at the events, then read per tick: the same as cut per tick
        np.testing.assert_array_equal(
            simtime.on_ticks(simtime.cut_to(ls_events, T, cut)).curve, simtime.cut_to(ls, T, cut).curve
        )
        np.testing.assert_array_equal(simtime.value_at_time(ls_events, 10, cut), simtime.value_at_time(ls, 10, cut))
    with pytest.raises(ValueError, match="cut"):
        simtime.cut_to(ls, T, cut="paper")
