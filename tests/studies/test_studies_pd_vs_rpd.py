"""E1 / E8 studies (rpd.studies.pd_vs_rpd, rpd.studies.delta) at a tiny size: selections, summaries and figures
are recomputed from the saved arrays."""

from types import SimpleNamespace

import numpy as np
import pytest

from rpd import objectives, schedules
from rpd.analysis import tuning
from rpd.plotting import pd_vs_rpd as plot_pd_vs_rpd
from rpd.results import gamma_grid_label
from rpd.studies import delta, pd_vs_rpd
from rpd.train import methods

TINY = dict(S=4, n=64, d=16, batch_size=8, N=24, noam=4, deltas=(0, 6, 14), gamma_exps=(-5, -1), seeds=(0, 1), stride=1)


@pytest.fixture(scope="module")
def e1():
    return pd_vs_rpd.run(pd_vs_rpd.Config(**TINY))


@pytest.fixture(scope="module")
def e8():
    return delta.run(delta.Config(**TINY))


def test_e1_selection_is_finite_and_matches_selector(e1):
    a, s = e1.arrays, e1.summary
    assert s["selectors"] == ["reference", "stable", "best_final"]
    for u, rule in enumerate(s["selectors"]):
        j = int(a["pd_gamma_index"][u])
        assert j >= 0 and np.all(np.isfinite(a["pd_curves"][j]))
        assert j == tuning.select_gamma(a["pd_curves"], a["gammas"], rule=rule, tail_frac=0.2).index
        for i in range(len(a["deltas"])):
            mean = a["rpd_curves"][i].mean(0)
            j = int(a["rpd_gamma_index"][u, i])
            # RPD as the authors: tail 1.0 (the whole curve) without x0 (the first point)
            assert j == tuning.select_gamma(mean[:, 1:], a["gammas"], rule=rule, tail_frac=1.0).index
            if rule == "reference":  # by hand: the smallest γ within 5 % of the lowest curve mean
                m = mean[:, 1:].mean(1)
                assert j == min(np.flatnonzero(m <= 1.05 * m.min()))
            assert np.all(np.isfinite(a["rpd_curves"][i, :, j]))  # every seed finite at the chosen γ


def test_e1_summary_equals_recomputation(e1):
    a, s = e1.arrays, e1.summary
    K = s["K"]
    assert K == 4 * 24 and a["K"][-1] == K and a["rpd_curves"].shape == (3, 2, 5, K + 1)
    for u, rule in enumerate(s["selectors"]):
        pd_curve = a["pd_curves"][a["pd_gamma_index"][u]]
        assert s[rule]["pd"]["final"] == pd_curve[-1]
        for i, e in enumerate(s[rule]["rpd"]):
            j = a["rpd_gamma_index"][u, i]
            mean = a["rpd_curves"][i, :, j].mean(0)
            assert e["gamma"] == a["gammas"][j] and e["gamma_exp"] == int(np.log2(a["gammas"][j]))
            assert e["final"] == pytest.approx(mean[-1], rel=1e-12)
            gap = np.mean(np.abs(np.log10(mean) - np.log10(pd_curve)))
            assert e["log10_gap_to_pd"] == pytest.approx(gap, rel=1e-12)


@pytest.mark.slow
def test_rpd_sweep_equals_methods_rpd_and_pipedream():
    """Shared program (one ring, PD's gradient slots) + seed convention: the sweep's curve for
    (δ, seed) is methods.rpd's and its PD run is methods.pipedream's, on any number of threads."""
    obj = objectives.random_quadratic(n=64, d=16, S=4, batch_size=8, seed=0)
    gammas = tuning.pow2_grid(-4, -2)
    tl = schedules.pipedream(4, 24)
    axis, curves, pd = pd_vs_rpd.rpd_sweep(obj, tl.K, gammas, (2, 14), (0, 3), timeline=tl, workers=2)
    ref = methods.rpd(obj, tl.K, gammas, 14, seed=3)
    np.testing.assert_allclose(curves[1, 1], ref.curve, rtol=1e-12, atol=0)
    pd_ref = methods.pipedream(obj, tl, gammas, axis="block_update")
    np.testing.assert_allclose(pd.curve, pd_ref.curve, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(axis, pd_ref.axis)
    _, serial, _ = pd_vs_rpd.rpd_sweep(obj, tl.K, gammas, (2, 14), (0, 3), workers=1)
    np.testing.assert_array_equal(serial, curves)
    with pytest.raises(ValueError, match="K="):
        pd_vs_rpd.rpd_sweep(obj, tl.K + 1, gammas, (2,), (0,), timeline=tl)


def test_e1_figure_from_saved_output(e1, figure_from_store):
    figure_from_store(pd_vs_rpd, pd_vs_rpd.Config(**TINY), e1)


def test_e8_best_equals_recomputation(e8):
    a, s = e8.arrays, e8.summary
    for u, rule in enumerate(s["selectors"]):
        for i in range(len(a["deltas"])):
            j = a["best_gamma_index"][u, i]
            assert j >= 0
            assert a["best_final"][u, i] == pytest.approx(a["rpd_final"][i, :, j].mean(), rel=1e-12)
            np.testing.assert_array_equal(a["best_final_per_seed"][u, i], a["rpd_final"][i, :, j])
            assert s[rule]["best_final"][i] == a["best_final"][u, i]
        assert a["pd_level"][u] == a["pd_final"][a["pd_gamma_index"][u]]
        below = [int(d) for d, v in zip(a["deltas"], a["best_final"][u]) if v <= a["pd_level"][u]]
        assert s[rule]["deltas_at_or_below_pd"] == below


def test_e8_figure_from_saved_output(e8, figure_from_store):
    figure_from_store(SimpleNamespace(figure=delta.figure), delta.Config(**TINY), e8)


def test_e1_e8_claims_are_trends(e1, e8):
    for out in (e1, e8):
        checks = out.summary["checks"]
        assert checks and all("Spearman" in c["measured"] or "δ" in c["measured"] for c in checks)
        assert len(out.summary["checks_stable_rule"]) == len(checks)
        assert "rows.append" in out.summary["authors_override"]
    # E8 by hand: RPD at or below PD (1.0) up to δ = 60, above from δ = 180 (S² − S/2 = 60); in
    # (log δ, log f) f goes from 0.1 at 60 to 10 at 180, so f = 1 halfway: δ* = sqrt(60·180) ≈ 104
    trend, near = delta.claim_checks([0, 8, 30, 60, 180], [0.01, 0.02, 0.09, 0.1, 10.0], 1.0, 60)
    assert trend["holds"] and "ρ(δ, f) = 1.00" in trend["measured"]
    assert near["holds"] and "up to δ = 60, above from δ = 180; crossing δ* ≈ 104" in near["measured"]
    _, late = delta.claim_checks([0, 8, 30, 60, 180, 420], [0.01, 0.02, 0.09, 0.1, 0.5, 10.0], 1.0, 60)
    assert not late["holds"] and "δ* ≈ 219" in late["measured"]  # 180·(420/180)^(log 2 / log 20)
    _, far = delta.claim_checks([0, 8, 30, 60, 180], [0.1, 2.0, 0.9, 1.5, 9.0], 1.0, 60)
    assert not far["holds"]  # above PD already at δ = 8


def test_quick_configs_are_valid():
    from rpd.studies import make_config

    assert make_config(pd_vs_rpd.Config, "full") == pd_vs_rpd.Config()
    cfg = make_config(delta.Config, "quick", delta.QUICK)
    assert 60 in cfg.deltas and 0 in cfg.deltas
    with pytest.raises(ValueError, match="selector"):
        pd_vs_rpd.rules_of(pd_vs_rpd.Config(selector="best"))


def test_e1_and_e8_titles_name_the_same_problem():
    # both figures' titles name the quadratic and the γ grid from the config the same way
    cfg = dict(S=4, n=8, d=256, batch_size=32, gamma_exps=(-8, -2))
    text = plot_pd_vs_rpd._problem(cfg)
    assert text == f"random quadratic, S = 4, n = 8, d = 256, B = 32, γ ∈ {gamma_grid_label((-8, -2))}"
    assert text.endswith("γ ∈ {2⁻⁸, …, 2⁻²}")
