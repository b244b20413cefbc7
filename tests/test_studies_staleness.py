"""The S⁴ study (rpd.studies.staleness) at a tiny size: the fixed γ, the measured means and
the fitted slopes are recomputed independently."""

import numpy as np
import pytest

from rpd import methods, objectives, schedules, theory, tuning
from rpd.studies import staleness

TINY = staleness.Config(S_values=(2, 4, 8), n=64, d=16, batch_size=8, N=24, gamma_exps=(-7, -3), large_S=2)


@pytest.fixture(scope="module")
def out():
    return staleness.run(TINY)


def test_fixed_gamma_is_largest_converging_at_largest_S_and_holds_everywhere(out):
    s, a = out.summary, out.arrays
    gamma = s["gamma"]
    assert gamma == a["gamma"] and tuning.log2_exponent(gamma) == s["gamma_exp"]
    first = s["gamma_trail"][:2]
    both = [k for k in first[0]["converging"] if first[0]["converging"][k] and first[1]["converging"][k]]
    assert f"2^{s['gamma_exp']}" == both[0]  # grid is listed largest first
    assert s["converged_everywhere"]
    for m in staleness.METHODS:
        assert np.all(np.isfinite(a[f"{m}_final"])) and np.all(a[f"{m}_final"] > 0)


def test_measured_means_equal_a_direct_pd_run(out):
    a, gamma, S = out.arrays, out.summary["gamma"], 4
    obj = objectives.random_quadratic(n=64, d=16, S=S, batch_size=8, seed=0)
    res = methods.pipedream(obj, schedules.pipedream(S, 24), [gamma], axis="block_update", stride=S,
                            diag_stride=S + 1)
    diag = res.traces["diag"][0]
    rows = diag[np.arange(diag.shape[0]) % (S + 1) == 0]
    i = list(a["S"]).index(S)
    assert a["pd_xz"][i] == pytest.approx(rows[:, 0].mean(), rel=1e-12)
    assert a["pd_grad_gap"][i] == pytest.approx(rows[:, 1].mean(), rel=1e-12)
    G = res.traces["block_grad_norm"][0].max()
    delta = theory.pd_delta(S)
    assert a["pd_G"][i] == pytest.approx(G, rel=1e-12)
    assert a["pd_bound_xz"][i] == pytest.approx(gamma**2 * delta**2 * G**2, rel=1e-12)
    assert a["pd_bound_stale"][i] == pytest.approx(obj.L**2 * gamma**2 * delta**2 * G**2, rel=1e-12)
    # the stale read is the only difference between x and z: its gradient gap is at most L^2 ||x - z||^2
    assert np.all(rows[:, 1] <= obj.L**2 * rows[:, 0] * (1 + 1e-9))


def test_slopes_equal_loglog_fit_on_saved_arrays(out):
    a, fits = out.arrays, out.summary["fits"]
    for m in staleness.METHODS:
        for q in ("xz", "grad_gap", "bound_stale"):
            f = theory.loglog_fit(a["S"], a[f"{m}_{q}"])
            assert fits[f"{m}/{q}/all"]["slope"] == pytest.approx(f.slope, rel=1e-12)
            assert fits[f"{m}/{q}/all"]["ci"] == pytest.approx(list(f.slope_ci), rel=1e-12)
    row = next(r for r in out.table if r["method"] == "PD" and r["quantity"] == "xz")
    assert row["bound_exponent"] == 4 and row["slope"] == round(fits["pd/xz/all"]["slope"], 3)


def test_figure_from_saved_output(out, figure_from_store):
    figure_from_store(staleness, TINY, out)


def test_converging_rejects_growth_and_nan():
    t = np.linspace(0, 1, 50)
    assert staleness.converging(np.exp(-5 * t), 1.0)
    assert not staleness.converging(np.exp(-5 * t) + np.r_[np.zeros(49), np.nan], 1.0)
    assert not staleness.converging(np.exp(5 * t), 1.0)
