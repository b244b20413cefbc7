"""GEMS, AMPNet and WPipe (docs/schedules.md#gems, rpd.schedules.family.frontier): orders, closed forms, bubbles,
memory and dependency validity, checked against the timer's independent reference loop."""

import numpy as np
import pytest

from rpd import schedules
from rpd.schedules.family import frontier
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import BWD, FWD, check_complete
from rpd.schedules.machinery.timer import time_order_reference

B2F = CostModel(F=1, B=2)


def _reference_T(order, n_stages, dur):
    out = time_order_reference(order, lambda k, g, m, f: dur[k], 0, n_stages)
    return max(e for _, e in out.values())


# ---------------------------------------------------------------- GEMS


def test_gems_order_is_the_pairwise_rule_and_complete():
    order = frontier.gems_order(4, 4)
    assert [tuple(r[:3]) for r in order[0].tolist()] == [
        (FWD, 0, 0),
        (BWD, 0, 0),
        (FWD, 3, 1),
        (BWD, 3, 1),
        (FWD, 0, 2),
        (BWD, 0, 2),
        (FWD, 3, 3),
        (BWD, 3, 3),
    ]
    for D in (2, 4, 6, 8):
        o = frontier.gems_order(D, 2 * D)
        check_complete(o, D, 2 * D)
        for r, a in enumerate(o):  # replica 1 (even mb) on stage r, replica 2 on stage D-1-r
            assert set(a[a[:, 2] % 2 == 0, 1]) == {r} and set(a[a[:, 2] % 2 == 1, 1]) == {D - 1 - r}
    with pytest.raises(ValueError, match="M must be even"):
        schedules.gems(4, 6, 3)


@pytest.mark.parametrize("D", [2, 3, 4, 8])
def test_gems_makespan_closed_form_and_reference_timer(D):
    """One step of M microbatches: T = M(D + 1) + D - 1 at unit costs (each pair takes 2D + 2
    ticks in steady state); the numba timer equals the plain reference loop."""
    for M in (2, 4, 8):
        tl = schedules.gems(D, M, M)
        assert tl.T == M * (D + 1) + D - 1
        assert tl.T == _reference_T(frontier.gems_order(D, M), D, {FWD: 1, BWD: 1})
    tl = schedules.gems(D, 4, 4, costs=B2F)
    assert tl.T == _reference_T(frontier.gems_order(D, 4), D, {FWD: 1, BWD: 2})


def test_gems_bubble_is_one_minus_theta_of_one_over_D():
    """The survey's claim 1 - Θ(1/D), measured: at unit costs the steady-state bubble is
    (D-1)/(D+1) = 1 - 2/(D+1), so D·(1 - bubble) -> 2; at B = 2F a pair takes 4D + 2 ticks for
    6 of work per rank, bubble (2D-2)/(2D+1), D·(1 - bubble) -> 1.5. Measured with 64 pairs per
    step (a step's fill adds D - 1 ticks)."""
    measured = {}
    for D in (2, 4, 8, 16, 32):
        M = 128
        tl = schedules.gems(D, M, M)
        f = tl.bubble_ratio()
        assert f == pytest.approx(1 - 2 * M / (M * (D + 1) + D - 1))
        measured[D] = D * (1 - f)
        b2f = schedules.gems(D, M, M, costs=B2F)
        assert schedules.gems(D, M + 2, M + 2, costs=B2F).T - b2f.T == 4 * D + 2
        assert 1.1 < D * (1 - b2f.bubble_ratio()) < 1.55
    assert measured[2] == pytest.approx(4 / 3, abs=0.02) and measured[32] == pytest.approx(64 / 33, abs=0.02)
    assert all(1.3 < v < 2.0 for v in measured.values())  # Θ(1/D): D·(1 - bubble) bounded


def test_gems_memory_and_allreduce():
    tl = schedules.gems(4, 8, 4)
    np.testing.assert_array_equal(memory.peak_activations(tl), np.ones(4))  # one replica's mb at a time
    np.testing.assert_array_equal(frontier.weight_memory(tl), np.full(4, 2.0))  # two stages per rank
    assert tl.synchronous and tl.replicas == 2
    c = CostModel(allreduce=(3, 0.5))
    tl2 = schedules.gems(4, 8, 4, costs=c, values=10)
    assert tl2.T == schedules.gems(4, 8, 4).T + 2 * c.allreduce_ticks(10)
    assert tl2.flush_time[0] == 4 * 5 + 3 - 1 + c.allreduce_ticks(10)


# ---------------------------------------------------------------- AMPNet


@pytest.mark.parametrize("costs", [None, B2F, CostModel(F=2, B=3, p2p=1)])
def test_ampnet_versions_are_the_closed_forms(costs):
    S, N = 4, 24
    for k in (1, 2, 3, 4):
        tl = schedules.ampnet(S, N, k, costs=costs)
        vF, vB = frontier.step_versions(tl, k)
        m, s = np.arange(N)[:, None], np.arange(S)[None, :]
        np.testing.assert_array_equal(vF, np.maximum(0, m - (S - 1 - s)) // k)
        np.testing.assert_array_equal(vB, np.broadcast_to(m // k, (N, S)))
        np.testing.assert_array_equal(frontier.weight_versions(tl), np.ones(S))


def test_ampnet_order_is_fairscales_warmup_and_unit_makespan():
    S, N = 4, 12
    order = frontier.ampnet_order(S, N)
    for s, a in enumerate(order):
        kinds = a[:, 0].tolist()
        assert kinds[: S - s] == [FWD] * (S - s) and kinds[S - s] == BWD  # S-1-s warm-up + the first pair
        assert kinds.count(FWD) == kinds.count(BWD) == N
    check_complete(order, S, N)
    tl = schedules.ampnet(S, N, 2)
    assert tl.T == 2 * N + 2 * (S - 1) - 0  # 1F1B over one flush of N: (N + S - 1) * 2
    assert tl.T == _reference_T(order, S, {FWD: 1, BWD: 1})
    assert tl.bubble_ratio() == pytest.approx((S - 1) / (N + S - 1))
    with pytest.raises(ValueError, match="whole number"):
        schedules.ampnet(4, 10, 4)


# ---------------------------------------------------------------- WPipe


@pytest.mark.parametrize("S", [2, 4, 6])
def test_wpipe_groups_read_two_versions_and_one(S):
    """M >= 2S - 2: group 1's forwards of period q read W_{q-1} (2BW), group 2's W_q, at any
    costs; weights per rank 2·(1/2) + 1/2 = 1.5 full stages against 2BW's 2."""
    M = 2 * S - 2 if S > 2 else 2
    Q = 4
    for costs in (None, B2F):
        tl = schedules.wpipe(S, Q * M, M, costs=costs)
        check_complete(frontier.wpipe_order(S, Q * M, M), 2 * S, Q * M)
        vF, vB = frontier.step_versions(tl, M)
        q = np.arange(Q * M)[:, None] // M
        group = frontier.wpipe_group(S)[None, :]
        np.testing.assert_array_equal(vF, np.where(group == 0, np.maximum(q - 1, 0), q))
        np.testing.assert_array_equal(vB, np.broadcast_to(q, vB.shape))
        np.testing.assert_array_equal(frontier.weight_versions(tl), np.repeat([2, 1], S))
        np.testing.assert_allclose(frontier.weight_memory(tl), np.full(S, 1.5))


def test_wpipe_bubble_and_smaller_periods():
    """A stream with no flush: at unit costs idle is the pipeline's fill and drain only, T =
    2·(2N) + 2(S-1) chunk ticks; below M = 2S - 2 group 1 lags more than one period."""
    S, M = 4, 8
    for Q in (2, 4, 8):
        tl = schedules.wpipe(S, Q * M, M)
        assert tl.T == _reference_T(frontier.wpipe_order(S, Q * M, M), 2 * S, {FWD: 1, BWD: 1})
        assert tl.T == 4 * Q * M + 2 * (S - 1)
    tl = schedules.wpipe(4, 16, 4)
    assert frontier.weight_versions(tl)[:4].max() == 3  # M = S < 2S - 2: three versions
    with pytest.raises(ValueError, match="M >= S"):
        schedules.wpipe(4, 12, 3)
