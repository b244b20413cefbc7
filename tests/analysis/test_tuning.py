import math

import numpy as np
import pytest

from rpd.analysis import tuning

T = np.arange(100, dtype=np.float64)  # 100 points, tail_frac 0.2 -> the last 20


def _curves():
    """Five curves for gammas 2^-4..2^0; with the default thresholds only 2^-3, 2^-2 are stable."""
    increasing = 0.01 * (1 + 0.001 * T)  # lowest tail mean, but creeps up
    stable_a = 0.100 + np.exp(-0.1 * T)  # plateau 0.100
    stable_b = 0.098 + np.exp(-0.2 * T)  # plateau 0.098 (the best stable), within 5% of it
    oscillating = 0.05 + 0.02 * (-1.0) ** T
    diverging = np.where(T < 50, np.exp(0.1 * T), np.nan)
    gammas = tuning.pow2_grid(-4, 0)
    return np.stack([increasing, stable_a, stable_b, oscillating, diverging]), gammas


def test_pow2_grid_and_exponent():
    np.testing.assert_array_equal(tuning.pow2_grid(-8, 0), 2.0 ** np.arange(-8, 1))
    assert [tuning.log2_exponent(g) for g in tuning.pow2_grid(-3, 2)] == [-3, -2, -1, 0, 1, 2]
    with pytest.raises(ValueError, match="power of two"):
        tuning.log2_exponent(0.3)
    with pytest.raises(ValueError, match="hi_exp"):
        tuning.pow2_grid(0, -1)


def test_tail_length():
    assert tuning.tail_length(100, 0.2) == 20
    assert tuning.tail_length(1000, 0.01) == 10  # at least 10
    assert tuning.tail_length(5, 0.2) == 5  # never more than the curve
    assert tuning.tail_length(101, 0.2) == 21  # ceil


def test_stable_selector_picks_smallest_gamma_near_best():
    curves, gammas = _curves()
    sel = tuning.select_gamma(curves, gammas, tail_frac=0.2)
    # stable: 2^-3 (0.100) and 2^-2 (0.098); 0.100 <= 1.05 * 0.098, so the smaller gamma wins
    assert sel.rule == "stable" and sel.index == 1 and sel.gamma == 2.0**-3
    r = sel.reports
    assert [x.stable for x in r] == [False, True, True, False, False]
    assert r[4].diverged and r[4].reasons == ("diverged (NaN/inf)",) and math.isnan(r[4].tail_mean)
    assert any(s.startswith("log_slope") for s in r[0].reasons)  # slowly increasing
    assert any(s.startswith("up_frac") for s in r[0].reasons)
    assert {s.split()[0] for s in r[3].reasons} >= {"cv", "up_frac", "tv_ratio"}  # oscillating
    # tail = T 80..99 starts with a down step: 9 of 19 steps go up
    assert r[3].cv == pytest.approx(0.4) and r[3].up_frac == pytest.approx(9 / 19)
    assert r[1].tail_mean == pytest.approx(0.100, abs=1e-3)
    assert "*" in tuning.format_reports(sel).splitlines()[2]


def test_near_best_excludes_far_gamma():
    curves, gammas = _curves()
    curves[1] += 0.01  # plateau 0.110 > 1.05 * 0.098 -> only 2^-2 remains
    sel = tuning.select_gamma(curves, gammas)
    assert sel.gamma == 2.0**-2 and sel.index == 2


def test_no_stable_falls_back_to_smallest_tail_mean():
    curves, gammas = _curves()
    sel = tuning.select_gamma(curves[[0, 3, 4]], gammas[[0, 3, 4]])
    assert sel.rule == "min_tail_mean" and sel.gamma == 2.0**-4  # tail mean 0.0109 < 0.05


def test_best_final():
    curves, gammas = _curves()
    sel = tuning.select_gamma(curves, gammas, rule="best_final")
    # finals: 0.01099, 0.100, 0.098, 0.03 (T=99 is odd), NaN -> the increasing curve
    assert sel.rule == "best_final" and sel.index == 0


def _zigzag(level: float, amp: float) -> np.ndarray:
    """100 points: 1.0 for the first 80, then level + amp·(−1)^t (t = 80..99, even count: the
    tail mean is exactly ``level``, the last point is level − amp)."""
    return np.where(T < 80, 1.0, level + amp * (-1.0) ** T)


def test_reference_rule_ignores_stability():
    """The authors' effective rule (docs/science.md#step-sizes): smallest γ with tail mean <= 1.05 x the smallest
    tail mean over non-diverged γ, stable or not. Tails (last 20 of 100 points) by hand:
    2^-3: 0.0103 ± 0.002 (cv 0.19 > 0.15: unstable), 2^-2: flat 0.0100 (stable),
    2^-1: 0.0099 ± 0.003 (unstable, the smallest tail mean), 2^0: NaN (diverged).
    Cutoff 1.05 x 0.0099 = 0.010395: 2^-3, 2^-2, 2^-1 qualify; the smallest is 2^-3.
    "stable": only 2^-2 passes the test. "best_final": finals 0.0083, 0.0100, 0.0069 -> 2^-1."""
    flat = np.where(T < 80, 1.0, 0.0100)
    curves = np.stack([_zigzag(0.0103, 0.002), flat, _zigzag(0.0099, 0.003), np.full(100, np.nan)])
    gammas = tuning.pow2_grid(-3, 0)
    ref = tuning.select_gamma(curves, gammas, rule="reference")
    assert ref.rule == "reference" and ref.index == 0 and ref.gamma == 2.0**-3
    strict = tuning.select_gamma(curves, gammas, rule="stable")
    assert strict.rule == "stable" and strict.gamma == 2.0**-2
    assert tuning.select_gamma(curves, gammas, rule="best_final").gamma == 2.0**-1
    # the same statistics are reported whatever the rule
    assert ref.reports == strict.reports
    assert [r.stable for r in ref.reports] == [False, True, False, False]
    assert ref.reports[0].cv == pytest.approx(0.002 / 0.0103)
    assert ref.reports[2].tail_mean == pytest.approx(0.0099) and ref.reports[3].diverged
    assert "rule=reference chosen gamma=0.125" in tuning.format_reports(ref)
    # 2^-3's tail at 0.0104 > 0.010395 is out: the smallest γ left within 5 % is 2^-2
    curves[0] = _zigzag(0.0104, 0.002)
    assert tuning.select_gamma(curves, gammas, rule="reference").gamma == 2.0**-2
    # on the module's curve set: 2^-4 (creeping up, unstable) has the smallest tail mean
    # 0.01 x (1 + 0.001 x 89.5) = 0.010895 and nothing else is within 5 %; "stable" takes 2^-3
    c5, g5 = _curves()
    assert tuning.select_gamma(c5, g5, rule="reference").gamma == 2.0**-4
    assert tuning.select_gamma(c5, g5, rule="stable").gamma == 2.0**-3


def test_reference_rule_tail_is_max_10_or_frac():
    """tail = last max(10, ⌈tail_frac·n⌉) points: with tail_frac 0.01 of 100 points the last 10,
    with tail_frac 1.0 the whole curve."""
    a = np.where(T < 90, 1.0, 0.010)  # whole-curve mean 0.901, last-10 mean 0.010
    b = np.where(T < 50, 0.5, 0.012)  # whole-curve mean 0.256, last-10 mean 0.012
    curves, gammas = np.stack([a, b]), [0.25, 0.5]
    assert tuning.select_gamma(curves, gammas, rule="reference", tail_frac=0.01).gamma == 0.25
    sel = tuning.select_gamma(curves, gammas, rule="reference", tail_frac=1.0)
    assert sel.gamma == 0.5 and sel.reports[1].tail_mean == pytest.approx(0.5 * 0.5 + 0.5 * 0.012)


def test_lm_thresholds_are_looser():
    # tail: linear drift -0.001 per point plus a +-0.0035 zig-zag: up_frac 9/19 or 10/19,
    # total variation / net change ~ 2*0.0035/0.001 = 7 -> fails DEFAULT (0.45, 5), passes LM
    zigzag = 1.0 - 0.001 * T + 0.0035 * (-1.0) ** T
    flat = np.full(100, 2.0)
    curves, gammas = np.stack([flat, zigzag]), np.array([0.25, 0.5])
    r = tuning.gamma_report(zigzag, 0.5, 0.2, tuning.DEFAULT)
    assert not r.stable and 5 < r.tv_ratio < 10 and 0.45 < r.up_frac <= 0.55
    assert tuning.gamma_report(zigzag, 0.5, 0.2, tuning.LM).stable
    assert tuning.select_gamma(curves, gammas).gamma == 0.25
    assert tuning.select_gamma(curves, gammas, thresholds=tuning.LM).gamma == 0.5
    assert tuning.LM == tuning.StableThresholds(0.25, 0.55, 0.10, 10, 1e-3)


def test_all_diverged_is_reported_not_raised():
    curves = np.array([[1.0, np.inf] + [1.0] * 20, [np.nan] * 22])
    for rule in tuning.RULES:
        sel = tuning.select_gamma(curves, [0.5, 1.0], rule=rule)
        assert sel.all_diverged and sel.index is None and math.isnan(sel.gamma)
        assert sel.rule == "all_diverged" and all(r.diverged for r in sel.reports)


def test_net_change_zero_edge_cases():
    const = tuning.gamma_report(np.full(30, 0.5), 1.0)
    assert const.stable and const.tv_ratio == 0.0 and const.cv == 0.0
    zero = tuning.gamma_report(np.zeros(30), 1.0)  # f - f* exactly 0: 0/0 counts as 0
    assert zero.stable and zero.cv == 0.0 and zero.max_up == 0.0
    back = np.full(30, 1.0)
    back[-5] = 1.01  # leaves and returns exactly: net change 0, variation > 0
    r = tuning.gamma_report(back, 1.0)
    assert r.tv_ratio == math.inf and not r.stable and any("tv_ratio" in s for s in r.reasons)


def test_negative_best_tail_mean_keeps_the_best():
    # f - f* slightly below 0 (approximate f*): 1.05 x best would exclude the best itself
    curves = np.stack([np.full(40, -1e-12), np.full(40, -2e-12)])
    assert tuning.select_gamma(curves, [0.5, 1.0]).gamma == 1.0


def test_bad_shapes_name_the_problem():
    with pytest.raises(ValueError, match="curves must be"):
        tuning.select_gamma(np.zeros((3, 20)), [1.0, 2.0])
    with pytest.raises(ValueError, match="rule"):
        tuning.select_gamma(np.zeros((1, 20)), [1.0], rule="best")


def test_huge_finite_curve_is_unstable_without_overflow_warning():
    """A run on its way to inf (finite, ~1e200) must fail the test quietly (warnings are errors)."""
    from rpd.analysis import tuning

    gammas = [0.1, 1.0]
    good = 1.0 + np.exp(-np.arange(100) / 10.0)
    huge = 1e200 * np.exp(np.arange(100) / 10.0) / np.exp(9.9)
    sel = tuning.select_gamma(np.stack([good, huge]), gammas)
    assert sel.gamma == 0.1 and not sel.reports[1].stable


# ---------------------------------------------------------------- divergence


def _spike(peak: float, n: int = 60) -> np.ndarray:
    """Starts at 1, jumps to ``peak`` at point 10, then sits flat at 1e-3: the lowest tail mean
    and the lowest final value of any curve below, and stable."""
    y = np.full(n, 1e-3)
    y[:10] = 1.0
    y[10] = peak
    return y


def test_divergence_bound_is_a_multiple_of_the_start():
    from rpd.results import DIVERGENCE_FACTOR, diverged

    assert DIVERGENCE_FACTOR == 1e6
    curves = np.stack([_spike(0.99e6), _spike(1.01e6), 2.0 * _spike(1.5e6), _spike(np.inf)])
    np.testing.assert_array_equal(diverged(curves), [False, True, True, True])  # 3e6 > 1e6 x 2
    assert not diverged(2.0 * _spike(0.9e6))  # the bound scales with the start: 1.8e6 < 2e6
    # a slice that does not start at x0: the caller's start decides, per row or broadcast
    tail = np.full((2, 5), 5e5)
    np.testing.assert_array_equal(diverged(tail), [False, False])
    np.testing.assert_array_equal(diverged(tail, start=[0.1, 1.0]), [True, False])
    # no scale at a start of exactly 0 (x0 = x*): only NaN/inf counts; a NaN start is diverged
    np.testing.assert_array_equal(diverged(np.array([[0.0, 1e300], [0.0, np.nan]])), [False, True])
    assert diverged(np.ones(4), start=np.nan)


def test_no_selector_picks_a_finite_blowup():
    """Once back down, the spiked curve is the best by every criterion (tail mean, final,
    stability): below the bound both rules pick it, above it neither does."""
    good = 2.0 * _spike(1.0)
    good[:10] = 1.0  # start 1, then flat at 2e-3: stable, but worse than the spike's 1e-3
    gammas = [0.5, 1.0]
    for rule in tuning.RULES:
        assert tuning.select_gamma(np.stack([good, _spike(0.5e6)]), gammas, rule=rule).index == 1
        sel = tuning.select_gamma(np.stack([good, _spike(2e6)]), gammas, rule=rule)
        assert sel.index == 0 and sel.gamma == 0.5 and sel.rule == rule, rule
        rep = sel.reports[1]
        assert rep.diverged and not rep.stable and math.isnan(rep.final)
        assert rep.reasons == ("diverged (max 2e+06 > 1e+06 x start 1)",)
        assert tuning.select_gamma(_spike(2e6)[None], [1.0], rule=rule).all_diverged
    # a tail (no x0 in it): the run's start, passed explicitly, decides
    tail = np.full((1, 20), 5e5)
    assert not tuning.select_gamma(tail, [1.0]).all_diverged
    assert tuning.select_gamma(tail, [1.0], start=0.1).all_diverged


def test_result_diverged_uses_the_bound():
    from rpd.results import Result

    curve = np.stack([_spike(1.0), _spike(5e6), _spike(np.nan)])
    res = Result("pd", np.array([0.1, 0.2, 0.4]), np.arange(60), "sim_time", curve, {}, np.zeros((3, 1)), {})
    np.testing.assert_array_equal(res.diverged, [False, True, True])
