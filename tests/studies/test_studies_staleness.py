"""The S⁴ study (rpd.studies.staleness) at a tiny size: the fixed γ, the measured means and
the fitted slopes are recomputed independently; the seed exponents (global, local, large-S) are
checked on synthetic power laws with known exponents and on the tiny study's own output."""

import numpy as np
import pytest
from scipy import stats

from rpd import objectives, schedules
from rpd.analysis import theory, tuning
from rpd.studies import staleness
from rpd.train import methods

TINY = staleness.Config(S_values=(2, 4, 8), n=64, d=16, batch_size=8, N=24, gamma_exps=(-7, -3), large_S=4, n_seeds=2)


@pytest.fixture(scope="module")
def out():
    return staleness.run(TINY)


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_measured_means_equal_a_direct_pd_run(out, seed):
    a, gamma, S = out.arrays, out.summary["gamma"], 4
    obj = objectives.random_quadratic(n=64, d=16, S=S, batch_size=8, seed=seed)  # seed i: data seed 0 + i
    res = methods.pipedream(obj, schedules.pipedream(S, 24), [gamma], axis="block_update", stride=S, diag_stride=S + 1)
    diag = res.traces["diag"][0]
    rows = diag[np.arange(diag.shape[0]) % (S + 1) == 0]
    i = list(a["S"]).index(S)
    assert a["pd_xz_by_seed"][seed, i] == pytest.approx(rows[:, 0].mean(), rel=1e-12)
    assert a["pd_grad_gap_by_seed"][seed, i] == pytest.approx(rows[:, 1].mean(), rel=1e-12)
    G = res.traces["block_grad_norm"][0].max()
    delta = theory.pd_delta(S)
    assert a["pd_G_by_seed"][seed, i] == pytest.approx(G, rel=1e-12)
    assert a["pd_bound_xz_by_seed"][seed, i] == pytest.approx(gamma**2 * delta**2 * G**2, rel=1e-12)
    assert a["pd_bound_stale_by_seed"][seed, i] == pytest.approx(obj.L**2 * gamma**2 * delta**2 * G**2, rel=1e-12)
    # the stale read is the only difference between x and z: its gradient gap is at most L^2 ||x - z||^2
    assert np.all(rows[:, 1] <= obj.L**2 * rows[:, 0] * (1 + 1e-9))
    # the plain arrays are the seeds' geometric mean, and the seeds really differ
    v = a["pd_xz_by_seed"]
    assert a["pd_xz"] == pytest.approx(np.sqrt(v[0] * v[1]), rel=1e-12)
    assert not np.allclose(v[0], v[1])


@pytest.mark.slow
def test_slopes_equal_loglog_fit_on_saved_arrays(out):
    a, fits = out.arrays, out.summary["fits"]
    for m in staleness.METHODS:
        for q in ("xz", "grad_gap", "bound_stale"):
            f = theory.loglog_fit(a["S"], a[f"{m}_{q}"])
            assert fits[f"{m}/{q}/all"]["slope"] == pytest.approx(f.slope, rel=1e-12)
            assert fits[f"{m}/{q}/all"]["ci"] == pytest.approx(list(f.slope_ci), rel=1e-12)
    row = next(r for r in out.table if r["method"] == "PD" and r["quantity"] == "xz")
    e = out.summary["exponents"]["pd/xz"]
    assert row["bound_exponent"] == 4 and row["slope"] == round(e["global_slope"], 3)
    assert row["large_S_slope"] == round(e["large_S_slope"], 3) and row["large_S_range"] == "4..8"


@pytest.mark.slow
def test_seed_exponents_recomputed_from_the_saved_per_seed_arrays(out):
    """Real output: every exponent is recomputed by hand from the per-seed arrays; the local slopes
    telescope to the endpoint slope; the measured ‖x − z‖² stays under the proof's bound γ²δ²G² at
    every (S, seed) and grows with S on both methods (each can fail on a wrong run)."""
    a, ex = out.arrays, out.summary["exponents"]
    S = a["S"].astype(float)
    t = stats.t.ppf(0.975, TINY.n_seeds - 1)
    for m in staleness.METHODS:
        for q in ("xz", "grad_gap", "bound_xz"):
            Y = a[f"{m}_{q}_by_seed"]
            assert Y.shape == (TINY.n_seeds, len(S))
            e = ex[f"{m}/{q}"]
            for i, loc in enumerate(e["local"]):
                k = [(np.log(Y[s, i + 1]) - np.log(Y[s, i])) / np.log(S[i + 1] / S[i]) for s in range(TINY.n_seeds)]
                half = t * np.std(k, ddof=1) / np.sqrt(len(k))
                assert (loc["S_lo"], loc["S_hi"]) == (S[i], S[i + 1])
                assert loc["slope"] == pytest.approx(np.mean(k), rel=1e-12)
                assert loc["ci"] == pytest.approx([np.mean(k) - half, np.mean(k) + half], rel=1e-12)
            glob = [np.polyfit(np.log(S), np.log(Y[s]), 1)[0] for s in range(TINY.n_seeds)]
            assert e["global_slope"] == pytest.approx(np.mean(glob), rel=1e-10)
            big = S >= TINY.large_S
            large = [np.polyfit(np.log(S[big]), np.log(Y[s, big]), 1)[0] for s in range(TINY.n_seeds)]
            assert e["large_S_slope"] == pytest.approx(np.mean(large), rel=1e-10)
            # telescoping: the log-spacing-weighted mean of the local slopes is the endpoint slope
            w = np.diff(np.log(S))
            endpoint = np.log(Y[:, -1] / Y[:, 0]).mean() / np.log(S[-1] / S[0])
            assert np.dot(w, [x["slope"] for x in e["local"]]) / w.sum() == pytest.approx(endpoint, rel=1e-10)
        assert np.all(a[f"{m}_xz_by_seed"] <= a[f"{m}_bound_xz_by_seed"])
        assert all(x["slope"] > 0 for x in ex[f"{m}/xz"]["local"])
        assert ex[f"{m}/xz"]["bound_exponent"] == 4 and ex[f"{m}/stale_tuned"]["bound_exponent"] == 3


def test_exponents_recover_a_known_power_law_with_noise():
    """Synthetic y = c_seed · S^k · exp(noise): global, local and large-S slopes all ≈ k, within
    a few standard errors of the seed mean, and their CIs are the t-intervals of the seed slopes."""
    rng = np.random.default_rng(0)
    S = np.array([2, 4, 8, 16, 32, 64, 128, 256], float)
    k, n_seeds, sigma = 2.7, 8, 0.02
    Y = np.exp(rng.normal(0, 1, (n_seeds, 1))) * S**k * np.exp(rng.normal(0, sigma, (n_seeds, S.size)))
    e = staleness.exponents(S, Y, large_S=64)
    sd_local = sigma * np.sqrt(2) / np.log(2) / np.sqrt(n_seeds)  # sd of a mean local slope
    for x in e["local"]:
        assert abs(x["slope"] - k) < 4 * sd_local
        assert x["ci"][0] < x["slope"] < x["ci"][1]
    assert abs(e["global_slope"] - k) < 0.02 and e["global_ci"][0] < k < e["global_ci"][1]
    assert abs(e["large_S_slope"] - k) < 4 * sd_local and e["large_S_range"] == "64..256"
    ks = staleness.local_slopes(S, Y)
    lo, hi = stats.t.interval(0.95, n_seeds - 1, loc=ks[:, 3].mean(), scale=stats.sem(ks[:, 3]))
    assert e["local"][3]["ci"] == pytest.approx([lo, hi], rel=1e-12)


def test_exponents_see_a_steepening_curve():
    """A broken power law (S^1.5 up to 32, S^2.7 beyond, continuous): the local slopes are exactly
    1.5 then 2.7, the large-S slope is 2.7 and the global fit lies in between -- a single fit
    understates the large-S exponent."""
    S = np.array([2, 4, 8, 16, 32, 64, 128, 256], float)
    y = np.where(S <= 32, S**1.5, 32**1.5 * (S / 32) ** 2.7)
    Y = np.vstack([y, 3.0 * y, 0.5 * y])  # seeds differ by a constant: zero spread in the slopes
    e = staleness.exponents(S, Y, large_S=64)
    assert [x["slope"] for x in e["local"]] == pytest.approx([1.5] * 4 + [2.7] * 3, abs=1e-12)
    assert e["local"][-1]["ci"] == pytest.approx([2.7, 2.7], abs=1e-12)
    assert e["large_S_slope"] == pytest.approx(2.7, abs=1e-12)
    assert 1.5 < e["global_slope"] < 2.7
    mean, ci = staleness.seed_ci([2.0])
    assert mean == 2.0 and np.all(np.isnan(ci))
    with pytest.raises(ValueError, match="large_S"):
        staleness.exponents(S, Y, large_S=512)
    with pytest.raises(ValueError, match="increasing"):
        staleness.local_slopes(S[::-1], Y)


@pytest.mark.slow
def test_figure_from_saved_output(out, figure_from_store):
    figure_from_store(staleness, TINY, out)


def test_converging_rejects_growth_and_nan():
    t = np.linspace(0, 1, 50)
    assert staleness.converging(np.exp(-5 * t), 1.0)
    assert not staleness.converging(np.exp(-5 * t) + np.r_[np.zeros(49), np.nan], 1.0)
    assert not staleness.converging(np.exp(5 * t), 1.0)
