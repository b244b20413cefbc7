import math

import numpy as np
import pytest
from scipy import stats

from rpd.analysis import theory


def test_bound_terms_by_hand():
    # gamma=1/2, S=2, K=10, L=2, G=3, delta=3, f0 - f* = 4
    b = theory.bound(0.5, S=2, K=10, L=2.0, G=3.0, delta=3, f0=5.0, f_star=1.0)
    assert b.optimisation == pytest.approx(2 * 2 * 4 / (0.5 * 10))  # 3.2
    assert b.noise == pytest.approx(0.5 * 2 * 2 * 9)  # 18
    assert b.stale == pytest.approx(0.25 * 4 * 9 * 9)  # 81
    assert b.total == pytest.approx(102.2)


def test_tuned_step_balances_first_two_terms_and_gives_the_stale_formula():
    L, G, K, delta, f0 = 2.0, 3.0, 10, 3, 4.0
    g = theory.tuned_gamma(L, G, K, f0)
    assert g == pytest.approx(math.sqrt(8 / 180))  # < 1/L = 0.5
    b = theory.bound(g, S=2, K=K, L=L, G=G, delta=delta, f0=f0)
    assert b.optimisation == pytest.approx(b.noise)
    assert b.stale == pytest.approx(theory.stale_term_tuned(L, delta, K, f0))
    assert theory.stale_term_tuned(L, delta, K, f0) == pytest.approx(2 * 2 * 4 * 9 / 10)  # 14.4


def test_tuned_step_caps_at_one_over_L():
    assert theory.tuned_gamma(L=2.0, G=0.1, K=1, f0=4.0) == 0.5  # sqrt branch would be 20
    assert theory.tuned_gamma(L=2.0, G=0.0, K=1, f0=4.0) == 0.5


def test_pd_delta_is_floor_S2_minus_half_S():
    assert [theory.pd_delta(S) for S in (1, 2, 3, 8, 16)] == [0, 3, 7, 60, 248]
    for S in range(1, 200):
        assert theory.pd_delta(S) == math.floor(S * S - S / 2)


def test_stale_term_grows_like_S4_at_tuned_step():
    S = np.array([2, 4, 8, 16, 32, 64, 128])
    stale = np.array([theory.stale_term_tuned(1.0, theory.pd_delta(int(s)), 1000, 1.0) for s in S])
    # delta/S^2 = 1 - 1/(2S) still grows with S, so the local exponent is above 4 and tends to 4
    assert 4.0 < theory.loglog_fit(S, stale).slope < 4.2
    assert 4.0 < theory.loglog_fit(S[3:], stale[3:]).slope < 4.0 + 2 / 31  # 4 + 2/(2S - 1)


def test_bound_from_run_uses_largest_block_gradient_norm():
    norms = np.array([[1.0, 0.5], [3.0, 2.0], [0.1, 0.2]])  # [K, S]
    rb = theory.bound_from_run(norms, gamma=0.5, S=2, K=10, L=2.0, delta=3, f0=5.0, f_star=1.0)
    assert rb.G == 3.0
    assert rb.at_gamma.total == pytest.approx(102.2)
    assert rb.gamma_tuned == pytest.approx(math.sqrt(8 / 180))
    assert rb.at_tuned.stale == pytest.approx(14.4)
    with pytest.raises(ValueError, match="finite"):
        theory.bound_from_run([1.0, np.nan], 0.5, 2, 10, 2.0, 3, 5.0)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="gamma"):
        theory.bound(0.0, 2, 10, 1.0, 1.0, 3, 1.0)
    with pytest.raises(ValueError, match="f0 - f_star"):
        theory.bound(0.1, 2, 10, 1.0, 1.0, 3, f0=0.0, f_star=1.0)
    with pytest.raises(TypeError, match="K"):
        theory.tuned_gamma(1.0, 1.0, 10.0, 1.0)


def test_loglog_fit_recovers_exact_exponent():
    x = 2.0 ** np.arange(1, 8)
    fit = theory.loglog_fit(x, 3.0 * x**4)
    assert fit.slope == pytest.approx(4.0, abs=1e-12)
    assert fit.intercept == pytest.approx(math.log(3.0), abs=1e-12)
    lo, hi = fit.slope_ci
    assert lo - 1e-9 <= 4.0 <= hi + 1e-9 and hi - lo < 1e-9 and fit.r2 == pytest.approx(1.0)


def test_loglog_fit_ci_on_noisy_power_law_matches_linregress():
    rng = np.random.default_rng(0)
    x = np.arange(2.0, 129.0)
    y = 0.5 * x**4 * np.exp(0.2 * rng.standard_normal(x.size))
    fit = theory.loglog_fit(x, y)
    ref = stats.linregress(np.log(x), np.log(y))
    t = stats.t.ppf(0.975, x.size - 2)
    assert fit.slope == pytest.approx(ref.slope, rel=1e-12)
    assert fit.stderr == pytest.approx(ref.stderr, rel=1e-10)
    assert fit.slope_ci == pytest.approx((ref.slope - t * ref.stderr, ref.slope + t * ref.stderr))
    assert fit.slope_ci[0] < 4.0 < fit.slope_ci[1]
    with pytest.raises(ValueError, match="> 0"):
        theory.loglog_fit([1.0, 2.0, 3.0], [1.0, 0.0, 2.0])
