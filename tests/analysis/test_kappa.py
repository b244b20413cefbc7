"""κ read off hand-made loss curves and the power law fitted on points with a known exponent
(rpd.analysis.kappa); every expected number is worked out by hand in the comments."""

import math

import numpy as np
import pytest

from rpd.analysis import kappa as K

TOK = [0, 100, 200, 300, 400]
REF = [5.0, 4.0, 3.0, 2.5, 2.2]  # L_sync(200) = 3.0


def test_kappa_interpolates_the_first_crossing():
    """L* = 3.0; the method is at 3.5 at 200 and 2.9 at 300: it crosses 3.0 at
    200 + (3.5 − 3)/(3.5 − 2.9)·100 = 283.33 tokens, κ = 283.33/200 = 1.41667; gap (3.5 − 3)/3."""
    k = K.kappa(TOK, REF, TOK, [5.0, 4.5, 3.5, 2.9, 2.6], 200)
    assert k.kappa == pytest.approx(283.3333333 / 200)
    assert not k.censored and not k.diverged
    assert k.target == 3.0
    assert k.relative_gap == pytest.approx(0.5 / 3)


def test_kappa_at_a_budget_between_points_and_a_faster_method():
    """D = 150: L* = 3.5 (halfway between 4 and 3). The method is at 3.0 at 100, so it crosses 3.5
    between 0 (5.0) and 100: 0 + (5 − 3.5)/(5 − 3)·100 = 75 tokens, κ = 0.5; L_m(150) = 2.75,
    gap (2.75 − 3.5)/3.5."""
    k = K.kappa(TOK, REF, TOK, [5.0, 3.0, 2.5, 2.4, 2.3], 150)
    assert k.target == 3.5
    assert k.kappa == pytest.approx(0.5)
    assert k.relative_gap == pytest.approx(-0.75 / 3.5)


def test_kappa_censored_when_never_reached():
    """Never below 3.0 within 400 tokens: censored, κ unknown, only κ > 400/200 = 2."""
    k = K.kappa(TOK, REF, TOK, [5.0, 4.8, 4.6, 4.4, 4.2], 200)
    assert k.kappa is None and k.censored and not k.diverged
    assert k.kappa_bound == 2.0
    assert k.relative_gap == pytest.approx(1.6 / 3)


def test_kappa_diverged_is_not_censored():
    """A NaN at 200 tokens: nothing after it is read; diverged, neither reached nor censored."""
    k = K.kappa(TOK, REF, TOK, [5.0, 4.0, np.nan, 1.0, 1.0], 200)
    assert k.kappa is None and k.diverged and not k.censored
    assert math.isnan(k.relative_gap)


def test_kappa_refuses_a_reference_without_a_loss_at_D():
    with pytest.raises(ValueError, match="reference"):
        K.kappa(TOK, REF, TOK, REF, 500)


def test_power_fit_recovers_a_known_exponent():
    """κ − 1 = 0.3·(N/1e6)^−0.4 exactly at four sizes: c = 0.3, γ = −0.4, a zero-width interval;
    a censored point and a no-cost point are counted, not fitted."""
    N = np.array([1e4, 1e5, 1e6, 1e7, 3e7, 5e7])
    kap = 1 + 0.3 * (N / 1e6) ** -0.4
    kap[4], kap[5] = math.nan, 0.9
    f = K.fit_power(N, list(kap), censored=[False, False, False, False, True, False])
    assert f.c == pytest.approx(0.3) and f.gamma == pytest.approx(-0.4)
    assert f.gamma_ci95[0] == pytest.approx(-0.4, abs=1e-9) and f.gamma_ci95[1] == pytest.approx(-0.4, abs=1e-9)
    assert (f.n_sizes, f.n_censored, f.n_no_cost, f.n_diverged) == (4, 1, 1, 0)
    assert f.N_range == (1e4, 1e7)


def test_power_fit_interval_by_hand():
    """x = ln(N/1e6) = −1, 0, 1 and y = ln(κ − 1) = 1, 0, 0.5: slope −0.25, intercept 0.5,
    residuals 0.25, −0.5, 0.25, RSS 0.375, se = √(0.375/1/2) = 0.43301, t(0.975, 1 dof) = 12.7062:
    γ ∈ −0.25 ± 5.50195."""
    N = 1e6 * np.exp([-1.0, 0.0, 1.0])
    f = K.fit_power(N, 1 + np.exp([1.0, 0.0, 0.5]))
    assert f.gamma == pytest.approx(-0.25) and f.c == pytest.approx(math.exp(0.5))
    assert f.gamma_ci95 == pytest.approx((-0.25 - 5.501948, -0.25 + 5.501948), abs=1e-5)


def test_power_fit_needs_two_sizes_and_three_for_an_interval():
    assert K.fit_power([1e5], [1.5]).gamma is None
    two = K.fit_power([1e5, 1e6], [1.1, 1.2])
    assert two.gamma == pytest.approx(math.log(2) / math.log(10)) and two.gamma_ci95 is None


def test_diloco_development_trend_by_hand():
    """The DiLoCo development rows (Charles et al. 2025), M = 2: gap 3.508/3.485 − 1 at 35M, 2.657/2.653 − 1 at 550M:
    ln(0.0015077/0.0065997)/ln(550/35) = −0.5360; M = 4: −0.3505."""
    gaps = {2: (3.508 / 3.485 - 1, 2.657 / 2.653 - 1), 4: (3.554 / 3.485 - 1, 2.673 / 2.653 - 1), 1: (-0.001, 0.002)}
    e = K.diloco_dev_trend(gaps, 35e6, 550e6)
    assert e[2] == pytest.approx(-0.53599, abs=1e-4) and e[4] == pytest.approx(-0.35054, abs=1e-4)
    assert math.isnan(e[1])
