"""E11 study: the unit rung is E3 and E6, budgets and timelines follow the cost model, the
crossover is what the rungs say, the summary is recomputable from the saved arrays."""

import math

import numpy as np
import pytest

import rpd  # noqa: F401
from rpd import objectives, schedules
from rpd.analysis import simtime, tuning
from rpd.schedules.machinery.costs import CostModel
from rpd.studies import costs_crossover as study
from rpd.studies import load, make_config, pd_vs_localsgd, scaling
from rpd.train import localsgd, methods

GRIDS = dict(pd_gamma_exps=(-5, -2), localsgd_gamma_exps=(-5, -2))
TINY = dict(
    quad_S=2,
    quad_R=2,
    quad_d=8,
    quad_n=24,
    quad_batch_size=4,
    quad_N=12,
    quad_H=(2,),
    log_S_values=(2,),
    log_T=40,
    log_n=8,
    log_d=8,
    log_seeds=(0,),
    p2p=(1,),
    alphas=(0, 8),
    **GRIDS,
)


@pytest.fixture(scope="module")
def tiny():
    cfg = study.Config(**TINY)
    return cfg, study.run(cfg, workers=1)


def test_registry_and_settings_are_e3_and_e6():
    assert load("e11_costs") is study
    full, e3, e6 = study.Config(), pd_vs_localsgd.config_for("e3_nesterov", "full"), scaling.Config()
    for prefix, other, fields in (
        ("quad_", e3, ("S", "R", "d", "n", "batch_size", "N", "mu", "H", "tail_frac")),
        ("log_", e6, ("S_values", "T", "n", "d", "batch_size", "lam", "grad_noise", "H", "tail_frac")),
    ):
        assert [getattr(full, prefix + f) for f in fields] == [getattr(other, f) for f in fields], prefix
    assert (full.pd_gamma_exps, full.localsgd_gamma_exps) == (e3.pd_gamma_exps, e3.localsgd_gamma_exps)
    assert (full.tF, full.tB, full.p2p, full.alphas[0]) == (1, 2, (0, 1), 0)
    quick, e3q = make_config(study.Config, "quick", quick=study.QUICK), pd_vs_localsgd.config_for("e3_nesterov")
    assert (quick.quad_S, quick.quad_d, quick.quad_n, quick.quad_N) == (e3q.S, e3q.d, e3q.n, e3q.N)
    assert (quick.log_S_values, quick.log_T) == (scaling.QUICK["S_values"], scaling.QUICK["T"])
    assert study.n_steps(quick) == 2 + 4 * 2 + 2 * (2 + 4)  # 2 PD + 4 rungs x 2 H; per S 2 PD + 4 rungs


@pytest.mark.slow
def test_unit_rung_is_e3_and_e6(tiny):
    """At zero extra cost the study is E3 (protocol (i)) and E6 (protocol (ii)) for the same setting
    (E11 selects with the stable rule and cuts at the point after T steps: E3/E6 set so)."""
    cfg, out = tiny
    runs = {r["key"]: r for r in out.summary["runs"]}
    e3 = pd_vs_localsgd.run(
        pd_vs_localsgd.Config(
            objective="nesterov_quadratic",
            **{k.removeprefix("quad_"): v for k, v in TINY.items() if k.startswith("quad_")},  # S=2, R=2, d=8, ...
            selector="stable",
            cut="end",
            **GRIDS,
        )
    )
    for e in e3.summary["methods"]:
        mine = runs[study.run_key("quadratic", 2, "unit", e["method"].lower(), e["H"])]
        assert mine["gamma_exp"] == e["gamma_exp"] and mine["budget"] == e3.summary["T_cut"]
        np.testing.assert_allclose(mine["f_at_budget"], e["f_at_cut"], rtol=1e-12)
        np.testing.assert_allclose(mine["best_final"], e["best_final_any_gamma"], rtol=1e-12)
    e6 = scaling.run(scaling.Config(S_values=(2,), T=40, n=8, d=8, selector="stable", cut="end", **GRIDS))
    (row,) = e6.summary["per_S"]
    for m, key in (("pd", "pd"), ("localsgd", "localsgd")):
        mine = runs[study.run_key("logistic", 2, "unit", key, None if m == "pd" else 5)]
        assert mine["gamma_exp"] == row[m]["gamma_exp"] and mine["N"] == row[f"{m}_N"] and mine["budget"] == 40
        np.testing.assert_allclose(mine["f_at_budget"], row[m]["f_at_T"], rtol=1e-12)


@pytest.mark.slow
def test_budgets_and_timelines_follow_the_cost_model(tiny):
    cfg, out = tiny
    unit_pd = schedules.pipedream(2, 12).T  # quadratic: T_paper = PD's unit makespan
    for r in out.summary["runs"]:
        costs = next(L.costs for L in study.levels(cfg) if L.key == r["level"])
        if r["panel"] == "quadratic":
            B = unit_pd if costs is None else schedules.pipedream(2, 12, costs=study.pd_only(costs)).T
        else:
            n_paper = -(-(cfg.log_T - 2 * 2 + 2) // 2)
            B = (
                cfg.log_T
                if costs is None
                else math.ceil(
                    cfg.log_T
                    * schedules.pipedream(2, n_paper, costs=study.pd_only(costs)).T
                    / schedules.pipedream(2, n_paper).T
                )
            )
        assert r["budget"] == B
        if costs is not None:  # the averaging cost is ⌈α + β·D⌉, D = ⌈d/S⌉
            D = -(-(cfg.quad_d if r["panel"] == "quadratic" else cfg.log_d) // 2)
            assert r["avg_ticks"] == (0 if r["method"] == "pd" else math.ceil(r["alpha"] + cfg.beta * D))
        if r["panel"] == "logistic":  # protocol (ii): the smallest N reaching the budget
            make = (
                (lambda n: schedules.pipedream(2, n, costs=study.pd_only(costs)))
                if r["method"] == "pd"
                else (lambda n: schedules.local_sgd(2, n, 2, 5, costs=costs, values=4))
            )
            assert r["N"] == simtime.smallest_n_reaching(B, make).N
    # PD never averages: its timeline is the same on every α; LocalSGD's grows by the averaging,
    # once per round: T(α) − T(0) = rounds · (⌈α + βD⌉ − ⌈βD⌉).
    a0, a8 = (CostModel(F=1, B=2, p2p=1, allreduce=(a, cfg.beta)) for a in (0, 8))
    p0, p8 = schedules.pipedream(2, 12, costs=a0), schedules.pipedream(2, 12, costs=a8)
    np.testing.assert_array_equal(p0.b_time, p8.b_time)
    l0, l8 = (schedules.local_sgd(2, 12, 2, 2, costs=c, values=4) for c in (a0, a8))
    assert l8.T - l0.T == len(l0.sync_time) * (a8.allreduce_ticks(4) - a0.allreduce_ticks(4)) > 0
    # The quadratic's LocalSGD skips only rounds that start after the budget: the prefix is the same.
    r = next(x for x in out.summary["runs"] if x["key"] == "quadratic_S2_c1_a8_localsgd_H2")
    full = schedules.local_sgd(2, 12, 2, 2, costs=a8, values=4)
    starts = np.concatenate([[0], full.sync_time[:-1] + 1])
    assert r["N"] == study.reached_rounds(full, r["budget"]) == 4 * int(np.sum(starts < r["budget"])) < 12
    short = schedules.local_sgd(2, r["N"], 2, 2, costs=a8, values=4)
    np.testing.assert_array_equal(short.b_time, full.b_time[: r["N"]])
    np.testing.assert_array_equal(short.f_time, full.f_time[: r["N"]])


@pytest.mark.slow
def test_summary_and_crossover_recomputed_from_saved_arrays(tiny):
    cfg, out = tiny
    for r in out.summary["runs"]:
        tail = out.arrays[f"{r['key']}/tail"]
        gammas = out.arrays["pd_gammas" if r["method"] == "pd" else "localsgd_gammas"]
        sel = tuning.select_gamma(tail, gammas, rule="stable", tail_frac=1.0)  # the stored tail is the selector's
        assert sel.index == r["gamma_index"] and r["f_at_budget"] == tail[sel.index, -1]
        assert r["best_final"] == np.nanmin(np.where(np.all(np.isfinite(tail), axis=1), tail[:, -1], np.nan))
    rows = [x for x in out.table if x["alpha"] != "crossover"]
    for s in out.summary["series"]:
        ladder = s["rungs"][1:]
        assert [r["alpha"] for r in ladder] == list(cfg.alphas)
        for r in s["rungs"]:
            st = r["stable"]
            assert st["winner"] == ("PD" if st["f_pd"] <= st["f_ls_best"] else "LocalSGD")
            assert st["f_ls_best"] == min(v for v in st["f_ls"].values())
        winners = [r["stable"]["winner"] for r in ladder]
        x = s["crossover"]
        assert x["winners"] == winners and x["from"] == winners[0]
        if x["to"] is None:
            assert set(winners) == {winners[0]}
        else:
            i = cfg.alphas.index(x["alpha_hi"])
            assert set(winners[:i]) == {x["from"]} and winners[i] == x["to"] != x["from"]
        mine = [t for t in rows if (t["panel"], t["S"]) == (s["panel"], s["S"]) and t["alpha"] != "unit"]
        assert [t["winner"] for t in mine] == winners
    assert out.summary["claims"][0]["holds"] == all(
        r["stable"]["winner"] == "PD" for s in out.summary["series"] if s["panel"] == "quadratic" for r in s["rungs"]
    )


def test_crossover_bracket_interpolation_and_flags():
    alphas = (0, 4, 16, 64)
    x = study.crossover(alphas, [1.0] * 4, [0.5, 0.8, 2.0, 4.0])
    assert (x["from"], x["to"], x["alpha_lo"], x["alpha_hi"], x["monotone"]) == ("LocalSGD", "PD", 4, 16, True)
    frac = -math.log(0.8) / (math.log(2.0) - math.log(0.8))
    assert x["frac"] == pytest.approx(frac)
    assert x["alpha_star"] == pytest.approx(2 ** (math.log2(5) + frac * (math.log2(17) - math.log2(5))) - 1)
    assert 4 < x["alpha_star"] < 16
    none = study.crossover(alphas, [1.0] * 4, [2.0, 3.0, 4.0, 5.0])
    assert (none["from"], none["to"], none["alpha_star"], none["switches"]) == ("PD", None, None, [])
    back = study.crossover(alphas, [1.0] * 4, [0.5, 2.0, 0.5, 0.5])
    assert back["switches"] == [4, 16] and not back["monotone"] and back["alpha_hi"] == 4
    assert "not monotone" in study.describe(back, alphas)
    inf = study.crossover(alphas, [1.0] * 4, [0.5, math.inf, math.inf, math.inf])
    assert inf["to"] == "PD" and inf["alpha_hi"] == 4 and inf["alpha_star"] is None
    assert study.crossover_grows([{"S": 2, "crossover": x}, {"S": 4, "crossover": none}], alphas) is None
    assert (
        study.crossover_grows(
            [{"S": 2, "crossover": x}, {"S": 4, "crossover": study.crossover(alphas, [1.0] * 4, [0.1] * 4)}], alphas
        )
        is True
    )  # LocalSGD throughout: beyond the ladder


def test_smallest_n_from_a_guess_equals_simtime():
    costs = CostModel(F=1, B=2, p2p=1, allreduce=(16, 0.5))
    for make in (
        lambda n: schedules.pipedream(4, n, costs=costs),
        lambda n: schedules.local_sgd(4, n, 4, 3, costs=costs, values=8),
    ):
        for T in (1, 30, 157, 400):
            want = simtime.smallest_n_reaching(T, make).N
            for guess in (1, 2, want - 1, want, want + 1, 3 * want + 7):
                assert simtime.smallest_n_reaching(T, make, guess).N == want


def test_resample_is_the_identity_at_unit_cost_and_the_budget_grid_otherwise():
    class R:
        axis = np.arange(13)
        curve = np.arange(26, dtype=float).reshape(2, 13)

    np.testing.assert_array_equal(study.resample(R, 12, 12), R.curve)
    got = study.resample(R, 12, 8)  # 9 points over [0, 12]: ticks 0, 1, 3, 4, 6, 7, 9, 10, 12
    np.testing.assert_array_equal(got[0], [0, 1, 3, 4, 6, 7, 9, 10, 12])


@pytest.mark.slow
def test_localsgd_padding_changes_nothing():
    """``pad_to`` (one compiled program for a whole cost ladder) gives the unpadded run, bit for
    bit: f(x̄) is evaluated tick by tick, so padded ticks and rounds change no shape it sees."""
    obj = objectives.nesterov_quadratic(n=12, d=6, S=2, batch_size=2, seed=0)
    tl = schedules.local_sgd(2, 9, 2, 2, costs=CostModel(F=1, B=2, p2p=1, allreduce=(3, 0)))
    Q, T_round = localsgd.round_shape(tl)
    assert Q == 3 and T_round == int(np.max(np.diff(np.concatenate([[-1], tl.sync_time]))))
    a = methods.local_sgd(obj, tl, [0.05, 0.2])
    b = methods.local_sgd(obj, tl, [0.05, 0.2], pad_to=(Q + 2, T_round + 5))
    np.testing.assert_array_equal(b.curve, a.curve)
    np.testing.assert_array_equal(b.x_final, a.x_final)
    np.testing.assert_array_equal(b.traces["loss_z"], a.traces["loss_z"])
    assert b.traces["round_end_curve"].shape == a.traces["round_end_curve"].shape == (2, Q)
    with pytest.raises(ValueError, match="pad_to"):
        methods.local_sgd(obj, tl, [0.05], pad_to=(Q - 1, T_round))


@pytest.mark.slow
def test_figure_from_saved_output(tiny, figure_from_store):
    cfg, out = tiny
    figure_from_store(study, cfg, out)
