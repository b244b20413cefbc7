"""Resolution independence: scaling every cost (F, B, I, W, p2p, all-reduce) by c scales every
event time by c and changes nothing else. The curves are recorded at the update events
(``meta["time_axis"] == "events"``), so the values, the traces and the γ a rule picks on the
per-tick reading (at the clock's resolution) are bit for bit those of c = 1."""

import numpy as np
import pytest

from rpd import schedules
from rpd.analysis import simtime, tuning
from rpd.objectives.linear import random_quadratic
from rpd.results import EVENTS, value_at
from rpd.schedules.machinery.costs import CostModel
from rpd.train import methods

SCALES = (1, 10**3, 10**6)
S = 4
GAMMAS = 2.0 ** np.arange(-9, 0)


def _cases():
    return {
        "pd": lambda c: schedules.pipedream(S, 24, costs=CostModel(F=c, B=2 * c)),
        "1f1b_p2p": lambda c: schedules.one_f_one_b(S, 24, 8, costs=CostModel(F=c, B=2 * c, p2p=c)),
        "localsgd": lambda c: schedules.local_sgd(S, 48, S, 3, costs=CostModel(F=c, B=2 * c, allreduce=(3 * c, 0))),
        "zb_h2_post_validation": lambda c: schedules.zb_h2(
            S, 24, 8, costs=CostModel(F=c, I=c, W=c, p2p=c), post_validation=True, rollback_p=0.3
        ),
    }


def _train(obj, tl):
    if tl.kind == "local_sgd":
        return methods.local_sgd(obj, tl, GAMMAS)
    return methods.train(obj, tl, GAMMAS)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(_cases()))
def test_scaling_every_cost_by_c_scales_every_event_time_by_c_and_nothing_else(case):
    obj = random_quadratic(d=24, n=64, S=S, batch_size=8, seed=3)
    make = _cases()[case]
    base_tl = make(1)
    base = _train(obj, base_tl)
    assert base.meta["time_axis"] == EVENTS
    n_events = len(np.unique(base.traces.get("update_time", base.traces.get("loss_time"))))
    # at the events, or at every clock tick where the clock has at most four ticks per event
    assert len(base.axis) <= 4 * (n_events + 1) + 1 + (2 * (1 + base_tl.T) if case == "localsgd" else 0)
    q = simtime.resolution(base_tl)
    ticks = simtime.on_ticks(base, q)
    pick = {rule: tuning.select_gamma(ticks.curve, GAMMAS, rule=rule).index for rule in tuning.RULES}
    for c in SCALES[1:]:
        tl = make(c)
        assert tl.T == c * base_tl.T and simtime.resolution(tl) == c * q
        res = _train(obj, tl)
        np.testing.assert_array_equal(res.axis, c * base.axis)
        np.testing.assert_array_equal(res.curve, base.curve)
        np.testing.assert_array_equal(res.x_final, base.x_final)
        assert sorted(res.traces) == sorted(base.traces)
        for k, v in base.traces.items():
            if k == "update_time":  # the last tick of an op: its end - 1, and ends scale by c
                np.testing.assert_array_equal(np.asarray(res.traces[k]) + 1, c * (np.asarray(v) + 1), err_msg=k)
            elif k == "loss_time":  # the tick a forward starts
                np.testing.assert_array_equal(res.traces[k], c * np.asarray(v), err_msg=k)
            else:
                np.testing.assert_array_equal(res.traces[k], v, err_msg=k)
        scaled = simtime.on_ticks(res, simtime.resolution(tl))
        np.testing.assert_array_equal(scaled.axis, c * ticks.axis)
        np.testing.assert_array_equal(scaled.curve, ticks.curve)
        for rule, index in pick.items():
            assert tuning.select_gamma(scaled.curve, GAMMAS, rule=rule).index == index, rule
        for T in (base_tl.T // 3, base_tl.T // 2 + 1):  # the equal-time protocols' cut, both rules
            for cut in simtime.CUTS:
                np.testing.assert_array_equal(
                    simtime.value_at_time(res, c * T - (c - 1) * (cut == "authors"), cut),
                    simtime.value_at_time(base, T, cut),
                )


def test_events_give_the_per_tick_curve_value_for_value():
    """Recorded at the events, read after every tick: exactly the curve recorded after every tick."""
    obj = random_quadratic(d=24, n=64, S=S, batch_size=8, seed=3)
    tl = schedules.one_f_one_b(S, 24, 8, costs=CostModel(F=2, B=3, p2p=1))
    ev = methods.train(obj, tl, GAMMAS)
    every_tick = methods.train(obj, tl, GAMMAS, at=np.arange(1, tl.T + 1))
    assert len(ev.axis) < tl.T // 4  # a flush schedule updates at the flush ends only
    # The models are the same; f of them is evaluated in one batch per run, whose size XLA's
    # matrix products may round by in the last bit (4e-16 here), so to 1e-14.
    np.testing.assert_allclose(value_at(ev.axis, ev.curve, np.arange(tl.T + 1)), every_tick.curve, rtol=1e-14)
    np.testing.assert_array_equal(simtime.on_ticks(ev).curve, value_at(ev.axis, ev.curve, np.arange(tl.T + 1)))
    np.testing.assert_array_equal(ev.x_final, every_tick.x_final)


def test_value_at_reads_the_last_event_at_or_before_t():
    axis, curve = np.array([0, 3, 7]), np.array([[5.0, 4.0, 1.0]])
    np.testing.assert_array_equal(value_at(axis, curve, [0, 2, 3, 6, 7, 100]), [[5, 5, 4, 4, 1, 1]])
    with pytest.raises(ValueError, match="t must be"):
        value_at(axis, curve, -1)
