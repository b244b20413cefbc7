"""E3/E4 study: protocol (i), γ selection recomputed from the saved arrays, figure from disk."""

import dataclasses

import numpy as np
import pytest

import rpd  # noqa: F401
from rpd import methods, schedules, tuning
from rpd.studies import load
from rpd.studies import pd_vs_localsgd as study

TINY = dict(S=2, R=2, d=8, n=24, batch_size=4, N=12, H=(1, 3), pd_gamma_exps=(-5, -2),
            localsgd_gamma_exps=(-5, -2))


@pytest.fixture(scope="module", params=["nesterov_quadratic", "logistic_regression"])
def tiny(request):
    cfg = study.Config(objective=request.param, **TINY)
    return cfg, study.run(cfg)


def test_registry_routes_both_names_here():
    assert load("e3_nesterov") is study and load("e4_logistic") is study


def test_presets_are_the_papers_settings():
    e3, e4 = study.config_for("e3_nesterov", "full"), study.config_for("e4_logistic", "full")
    assert (e3.objective, e3.S, e3.R, e3.d, e3.n, e3.batch_size, e3.N, e3.mu) == (
        "nesterov_quadratic", 16, 16, 512, 600, 5, 600, 0.01)
    assert e3.H == (2, 5, 30) and e3.pd_gamma_exps == (-12, -3) and e3.localsgd_gamma_exps == (-8, 2)
    assert e3.tail_frac == 0.2
    assert dataclasses.replace(e4, objective="nesterov_quadratic", N=600) == e3
    assert e4.lam == 1e-4 and e4.N == 400
    q4 = study.config_for("e4_logistic", "quick")
    assert q4.objective == "logistic_regression" and q4.N < e4.N
    assert study.config_for("e3_nesterov", "quick", N=7).N == 7
    with pytest.raises(ValueError, match="e3_nesterov"):
        study.config_for("e5", "full")
    with pytest.raises(TypeError, match="Hs"):
        study.config_for("e3_nesterov", "full", Hs=(1,))


def test_protocol_i_cuts_every_curve_to_the_shortest_timeline(tiny):
    cfg, out = tiny
    S, N, R = cfg.S, cfg.N, cfg.R
    T_pd = 2 * N + 2 * S - 2
    T_ls = {H: 2 * N + -(-N // (R * H)) * (2 * S - 2) for H in cfg.H}
    ents = {e["key"]: e for e in out.summary["methods"]}
    assert ents["pd"]["T"] == T_pd and all(ents[f"localsgd_H{H}"]["T"] == T_ls[H] for H in cfg.H)
    T_cut = min([T_pd, *T_ls.values()])
    assert out.summary["T_cut"] == T_cut
    np.testing.assert_array_equal(out.arrays["time"], np.arange(T_cut + 1))
    for key in study.method_keys(cfg):
        assert out.arrays[f"{key}_curves"].shape[1] == T_cut + 1


def test_cut_curves_are_prefixes_of_the_full_runs(tiny):
    cfg, out = tiny
    obj = study.make_objective(cfg)
    H = max(cfg.H, key=lambda h: schedules.local_sgd(cfg.S, cfg.N, cfg.R, h).T)  # the most cut
    full = methods.local_sgd(obj, schedules.local_sgd(cfg.S, cfg.N, cfg.R, H),
                             tuning.pow2_grid(*cfg.localsgd_gamma_exps), seed=cfg.seed)
    assert full.curve.shape[1] > out.summary["T_cut"] + 1
    np.testing.assert_allclose(out.arrays[f"localsgd_H{H}_curves"], full.curve[:, : out.summary["T_cut"] + 1],
                               rtol=1e-12)


def test_summary_equals_recomputation_from_arrays(tiny):
    cfg, out = tiny
    for e in out.summary["methods"]:
        curves, gammas = out.arrays[f"{e['key']}_curves"], out.arrays[f"{e['key']}_gammas"]
        sel = tuning.select_gamma(curves, gammas, rule="stable", tail_frac=cfg.tail_frac)
        assert e["gamma_index"] == sel.index and e["gamma"] == sel.gamma and e["rule"] == sel.rule
        assert e["gamma_exp"] == tuning.log2_exponent(sel.gamma)
        assert e["f_at_cut"] == curves[sel.index, -1]
    f = {e["key"]: e["f_at_cut"] for e in out.summary["methods"]}
    pd, ls = f.pop("pd"), f
    if cfg.objective == "nesterov_quadratic":
        assert out.summary["checks"][0]["holds"] == (pd < min(ls.values()))
    rows = [r for r in out.table if r["method"] != "paper claim"]
    assert [r["f_minus_fstar_at_cut"] for r in rows] == [e["f_at_cut"] for e in out.summary["methods"]]


def test_figure_from_saved_output(tiny, figure_from_store):
    cfg, out = tiny
    figure_from_store(study, cfg, out)
