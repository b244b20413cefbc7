"""E3/E4 study: protocol (i), γ selection recomputed from the saved arrays, figure from disk."""

import dataclasses

import numpy as np
import pytest

import rpd  # noqa: F401
from rpd import schedules
from rpd.analysis import simtime, tuning
from rpd.studies import load, pd_vs_localsgd_claims
from rpd.studies import pd_vs_localsgd as study
from rpd.train import methods

TINY = dict(S=2, R=2, d=8, n=24, batch_size=4, N=12, H=(1, 3), pd_gamma_exps=(-5, -2), localsgd_gamma_exps=(-5, -2))


# the logistic case with gradient noise over two noise seeds and a noise-free sensitivity row
NOISY = dict(grad_noise=0.5, noise_seeds=(0, 1), sensitivity_n=16)


@pytest.fixture(scope="module", params=["nesterov_quadratic", "logistic_regression"])
def tiny(request):
    extra = NOISY if request.param == "logistic_regression" else {}
    cfg = study.Config(objective=request.param, **TINY, **extra)
    return cfg, study.run(cfg)


def test_registry_routes_both_names_here():
    assert load("e3_nesterov") is study and load("e4_logistic") is study


def test_presets_are_the_papers_settings():
    e3, e4 = study.config_for("e3_nesterov", "full"), study.config_for("e4_logistic", "full")
    assert (e3.objective, e3.S, e3.R, e3.d, e3.n, e3.batch_size, e3.N, e3.mu) == (
        "nesterov_quadratic",
        16,
        16,
        512,
        600,
        5,
        600,
        0.01,
    )
    assert e3.H == (2, 5, 30) and e3.pd_gamma_exps == (-12, -3) and e3.localsgd_gamma_exps == (-8, 2)
    assert e3.tail_frac == 0.2 and e3.selector == "reference" and e3.cut == "authors"
    assert e3.noise_seeds == (0,) and e3.grad_noise == 0 and e3.sensitivity_n is None
    # E4: the setting inferred from the published figure, 5 noise seeds, the old one as sensitivity
    assert (e4.n, e4.batch_size, e4.grad_noise, e4.noise_seeds) == (100, 5, 0.5, (0, 1, 2, 3, 4))
    assert (e4.sensitivity_n, e4.sensitivity_grad_noise) == (600, 0.0)
    assert (
        dataclasses.replace(
            e4, objective="nesterov_quadratic", N=600, n=600, grad_noise=0.0, noise_seeds=(0,), sensitivity_n=None
        )
        == e3
    )
    assert e4.lam == 1e-4 and e4.N == 400
    assert "inferred from the published figure" in study.setting(e4)
    q4 = study.config_for("e4_logistic", "quick")
    assert q4.objective == "logistic_regression" and q4.N < e4.N
    assert study.config_for("e3_nesterov", "quick", N=7).N == 7
    with pytest.raises(ValueError, match="e3_nesterov"):
        study.config_for("e5", "full")
    with pytest.raises(TypeError, match="Hs"):
        study.config_for("e3_nesterov", "full", Hs=(1,))


@pytest.mark.slow
def test_protocol_i_cuts_every_curve_to_the_shortest_timeline(tiny):
    cfg, out = tiny
    S, N, R = cfg.S, cfg.N, cfg.R
    T_pd = 2 * N + 2 * S - 2
    T_ls = {H: 2 * N + -(-N // (R * H)) * (2 * S - 2) for H in cfg.H}
    ents = {e["key"]: e for e in out.summary["methods"]}
    assert ents["pd"]["T"] == T_pd and all(ents[f"localsgd_H{H}"]["T"] == T_ls[H] for H in cfg.H)
    T_cut = min([T_pd, *T_ls.values()])
    assert out.summary["T_cut"] == T_cut
    # cut="authors": curve[:T], the last point after T − 1 steps
    assert out.summary["cut"] == "authors" and out.summary["t_last"] == T_cut - 1
    np.testing.assert_array_equal(out.arrays["time"], np.arange(T_cut))
    for key in study.method_keys(cfg):
        assert out.arrays[f"{key}_curves"].shape[1] == T_cut
        assert out.arrays[f"{key}_seed_curves"].shape[::2] == (len(cfg.noise_seeds), T_cut)


@pytest.mark.slow
def test_cut_curves_are_prefixes_of_the_full_runs(tiny):
    cfg, out = tiny
    obj = study.make_objective(cfg)
    H = max(cfg.H, key=lambda h: schedules.local_sgd(cfg.S, cfg.N, cfg.R, h).T)  # the most cut
    T = out.summary["T_cut"]
    for i, seed in enumerate(cfg.noise_seeds):
        tl = schedules.local_sgd(cfg.S, cfg.N, cfg.R, H)
        # recorded at its events; read after every time step, as the study reads it
        full = simtime.per_tick(methods.local_sgd(obj, tl, tuning.pow2_grid(*cfg.localsgd_gamma_exps), seed=seed), tl)
        assert full.curve.shape[1] > T + 1
        np.testing.assert_allclose(out.arrays[f"localsgd_H{H}_seed_curves"][i], full.curve[:, :T], rtol=1e-12)
    if len(cfg.noise_seeds) > 1:  # the noise seeds differ, the drawn curve is their mean
        seeds = out.arrays[f"localsgd_H{H}_seed_curves"]
        assert not np.allclose(seeds[0], seeds[1])
        np.testing.assert_allclose(out.arrays[f"localsgd_H{H}_curves"], seeds.mean(0), rtol=1e-12)


@pytest.mark.slow
def test_summary_equals_recomputation_from_arrays(tiny):
    cfg, out = tiny
    for e in out.summary["methods"]:
        curves, gammas = out.arrays[f"{e['key']}_curves"], out.arrays[f"{e['key']}_gammas"]
        sel = tuning.select_gamma(curves, gammas, rule="reference", tail_frac=cfg.tail_frac)
        assert e["gamma_index"] == sel.index and e["gamma"] == sel.gamma and e["rule"] == sel.rule == "reference"
        assert e["gamma_exp"] == tuning.log2_exponent(sel.gamma)
        assert e["f_at_cut"] == curves[sel.index, -1]
        for rule in ("stable", "best_final"):  # the other rules' picks beside it
            other = tuning.select_gamma(curves, gammas, rule=rule, tail_frac=cfg.tail_frac)
            assert e["by_rule"][rule]["gamma_exp"] == tuning.log2_exponent(other.gamma)
            assert e["by_rule"][rule]["rule"] == other.rule
            assert e["by_rule"][rule]["f_at_cut"] == curves[other.index, -1]
        seeds = out.arrays[f"{e['key']}_seed_curves"]
        assert [p["seed"] for p in e["per_seed"]] == list(cfg.noise_seeds)
        for p, c in zip(e["per_seed"], seeds):  # each seed's own pick
            own = tuning.select_gamma(c, gammas, rule="reference", tail_frac=cfg.tail_frac)
            assert p["gamma_exp"] == tuning.log2_exponent(own.gamma) and p["f_at_cut"] == c[own.index, -1]
        assert e["f_at_cut_seed_min"] == seeds[:, sel.index, -1].min()
        assert e["f_at_cut_seed_max"] == seeds[:, sel.index, -1].max()
    f = {e["key"]: e["f_at_cut"] for e in out.summary["methods"]}
    pd, ls = f.pop("pd"), f
    if cfg.objective == "nesterov_quadratic":
        assert out.summary["checks"][0]["holds"] == (pd < min(ls.values()))
    rows = [r for r in out.table if r["method"] in ("PD", "LocalSGD")]
    assert [r["f_minus_fstar_at_cut"] for r in rows] == [e["f_at_cut"] for e in out.summary["methods"]]
    assert "rows.append" in out.summary["authors_override"] and out.summary["selectors"][0] == "reference"


@pytest.mark.slow
def test_sensitivity_setting_is_reported_beside(tiny):
    cfg, out = tiny
    sens = out.summary["sensitivity"]
    if cfg.sensitivity_n is None:
        assert sens is None
        return
    alone = study.run(
        dataclasses.replace(cfg, n=cfg.sensitivity_n, grad_noise=0.0, noise_seeds=(0,), sensitivity_n=None)
    )
    assert sens["n"] == 16 and sens["grad_noise"] == 0.0 and sens["setting"] == alone.summary["setting"]
    assert [e["f_at_cut"] for e in sens["methods"]] == [e["f_at_cut"] for e in alone.summary["methods"]]
    assert sens["checks"] == alone.summary["checks"]
    assert any(str(r["method"]).startswith("sensitivity n=16") for r in out.table)


def test_claims_count_the_noise_seeds():
    """Verdicts on the seed means; the seeds (each at its own γ) counted beside, by hand:
    H = 5 below PD in seeds 0 and 2 (0.44 < 0.5, 0.5 < 0.6; 0.41 > 0.4), H = 30 worst in
    seeds 0 and 2 (seed 1's worst is H = 2's 0.6)."""

    def entry(key, f, seeds):
        return dict(key=key, f_at_cut=f, per_seed=[dict(seed=i, f_at_cut=v) for i, v in enumerate(seeds)])

    entries = [
        entry("pd", 0.5, [0.5, 0.4, 0.6]),
        entry("localsgd_H2", 0.6, [0.6, 0.6, 0.6]),
        entry("localsgd_H5", 0.45, [0.44, 0.41, 0.5]),
        entry("localsgd_H30", 0.7, [0.7, 0.3, 0.8]),
    ]
    h5, h30 = pd_vs_localsgd_claims.claim_checks("logistic_regression", entries)
    assert h5["holds"] and h5["measured"] == "H=5 0.45 vs PD 0.5; holds in 2/3 noise seeds (each at its own γ)"
    assert (
        h30["holds"] and h30["measured"] == "worst is localsgd_H30 (0.7); holds in 2/3 noise seeds (each at its own γ)"
    )
    (e3,) = pd_vs_localsgd_claims.claim_checks("nesterov_quadratic", entries)
    # PD below every LocalSGD: seed 0 (0.44 < 0.5), seed 1 (0.3 < 0.4), seed 2 (0.5 < 0.6) say no
    assert not e3["holds"] and "0/3 noise seeds" in e3["measured"]


def test_cut_end_keeps_the_point_after_T_steps():
    cfg = study.Config(objective="nesterov_quadratic", **{**TINY, "H": (3,)}, cut="end")
    out = study.run(cfg)
    T = out.summary["T_cut"]
    np.testing.assert_array_equal(out.arrays["time"], np.arange(T + 1))
    assert out.summary["t_last"] == T and "cut at T" in out.summary["cut_text"]
    authors = study.run(dataclasses.replace(cfg, cut="authors"))
    np.testing.assert_array_equal(authors.arrays["pd_seed_curves"], out.arrays["pd_seed_curves"][..., :T])
    with pytest.raises(ValueError, match="cut"):
        study.run(dataclasses.replace(cfg, cut="paper"))
    with pytest.raises(ValueError, match="selector"):
        study.run(dataclasses.replace(cfg, selector="strict"))


@pytest.mark.slow
def test_figure_from_saved_output(tiny, figure_from_store):
    cfg, out = tiny
    figure_from_store(study, cfg, out)


def test_units_are_listed_as_documented_and_assembled_where_they_belong():
    """Fast, without training: the unit order the docstring states (per setting, per noise seed:
    PD, then LocalSGD per H; the sensitivity setting last), written out by hand, and every unit's
    payload landing in its own method's and seed's place in the output. Each stand-in payload's
    curve is a constant naming its unit (1 + m/10 + seed/100, + 1/2 for the sensitivity
    setting; + γ index/1000) and its own T (20 + 2m), so a unit read in another's place
    shows as a wrong value."""
    cfg = study.Config(objective="logistic_regression", **TINY, **NOISY)
    main = [f"main/seed{s}/{m}" for s in (0, 1) for m in ("PD", "LocalSGD H=1", "LocalSGD H=3")]
    sens = ["sensitivity/seed0/PD", "sensitivity/seed0/LocalSGD H=1", "sensitivity/seed0/LocalSGD H=3"]
    units = study.units(cfg)
    assert [u["key"] for u in units] == main + sens

    def value(u):
        return 1 + u["m"] / 10 + u["seed"] / 100 + (0.5 if u["setting"] == "sensitivity" else 0)

    def payload(u):
        exps = cfg.pd_gamma_exps if u["m"] == 0 else cfg.localsgd_gamma_exps
        gammas = tuning.pow2_grid(*exps)
        T = 20 + 2 * u["m"]
        curve = value(u) + np.arange(len(gammas))[:, None] / 1000 + np.zeros((1, T + 1))
        return dict(
            method="PD" if u["m"] == 0 else "LocalSGD",
            gammas=gammas,
            axis=np.arange(T + 1),
            axis_name="sim_time",
            curve=curve,
            meta={"T": T},
        )

    out = study.assemble(cfg, [payload(u) for u in units])
    for m, key in enumerate(study.method_keys(cfg)):
        for s in (0, 1):
            assert out.arrays[f"{key}_seed_curves"][s, 0, 0] == pytest.approx(1 + m / 10 + s / 100)
        entry = out.summary["methods"][m]
        assert entry["T"] == 20 + 2 * m and entry["H"] == (None, 1, 3)[m]
        for seed_pick in entry["per_seed"]:
            lo = (cfg.pd_gamma_exps if m == 0 else cfg.localsgd_gamma_exps)[0]
            index = seed_pick["gamma_exp"] - lo
            assert seed_pick["f_at_cut"] == pytest.approx(1 + m / 10 + seed_pick["seed"] / 100 + index / 1000)
        picked = out.summary["sensitivity"]["methods"][m]
        lo = (cfg.pd_gamma_exps if m == 0 else cfg.localsgd_gamma_exps)[0]
        assert picked["f_at_cut"] == pytest.approx(1.5 + m / 10 + (picked["gamma_exp"] - lo) / 1000)
