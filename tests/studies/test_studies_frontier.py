"""E10 (rpd.studies.frontier): every schedule trained at one budget, against memory."""

import dataclasses

import numpy as np
import pytest

from rpd.studies import frontier, make_config

S = 4
SURVEY = ("GEMS", "AMPNet", "AvgPipe", "WPipe", "ZB-H2+PV", "Chimera FD", "Chimera BH")  # the survey's rows


def small(variants, **kw):
    """E10 at a test's size: S = 4, the quadratic and the MLP chain, tiny problems."""
    return make_config(
        frontier.Config,
        "full",
        objectives=("nesterov_quadratic", "mlp_chain"),
        variants=variants,
        S_values=(S,),
        mb_per_S=8,
        points=16,
        n=120,
        d=16,
        batch_size=5,
        gamma_exps={"nesterov_quadratic": (-6, -1), "mlp_chain": (-4, 1)},
        **kw,
    )


@pytest.fixture(scope="module")
def out():
    variants = tuple(v[0] for v in frontier.VARIANTS if v[0] not in SURVEY)
    return frontier.run(small(variants, mlp_n=64, mlp_width=6, mlp_batch=4))


def rows(out, objective, costs):
    """The cell's rows that ran."""
    return {
        r["schedule"]: r
        for r in out.table
        if (r["objective"], r["costs"]) == (objective, costs) and r["status"] == "ok"
    }


@pytest.mark.slow
def test_every_variant_runs_or_says_why(out):
    assert len(out.table) == 2 * 2 * (len(frontier.VARIANTS) - len(SURVEY))
    assert all(r["status"] == "ok" for r in out.table), [r.get("reason") for r in out.table]


@pytest.fixture(scope="module")
def survey():
    """The survey's rows and ZB-H2 on the quadratic (the MLP chain: WPipe's n/a, no training)."""
    cfg = small(("ZB-H2", "Chimera", *SURVEY))
    return frontier.run(dataclasses.replace(cfg, objectives=("nesterov_quadratic",))), cfg


def test_survey_rows_are_in_both_sizes():
    assert set(SURVEY) <= set(make_config(frontier.Config, "quick", quick=frontier.QUICK).variants)
    assert set(SURVEY) <= set(make_config(frontier.Config, "full").variants)


@pytest.mark.slow
def test_wpipe_is_na_where_2S_blocks_are_another_objective(survey):
    _, cfg = survey
    made = {}
    obj, _ = frontier.objective_for("nesterov_quadratic", S, "wpipe", cfg, made)
    assert obj.S == 2 * S and set(made) == {2 * S}  # the same function, cut finer
    with pytest.raises(ValueError, match="8 blocks.*deeper model"):
        frontier.objective_for("mlp_chain", S, "wpipe", cfg, {})
    assert frontier.objective_for("mlp_chain", S, "zb_h2_pv", cfg, {})[0].S == S


@pytest.mark.slow
def test_survey_rows_run_their_own_timelines(survey, tmp_path):
    out, _ = survey
    assert all(r["status"] == "ok" for r in out.table), [r.get("reason") for r in out.table]
    for costs in ("F=B", "B=2F+lat"):
        q = rows(out, "nesterov_quadratic", costs)
        for label in SURVEY:
            assert np.isfinite(q[label]["loss_stable"]), label
        # the same iterates as ZB-H2 (exactly synchronous, no rollback), never later
        assert q["ZB-H2+PV"]["T"] <= q["ZB-H2"]["T"] and q["ZB-H2+PV"]["gamma_stable"] == q["ZB-H2"]["gamma_stable"]
        assert (q["GEMS"]["act_A"], q["GEMS"]["weights_W"]) == (1, 2)  # one input activation, two replicas
        assert q["AvgPipe"]["weights_W"] == 3  # two pipelines' replicas and the centre
        assert q["WPipe"]["weights_W"] == 1.5  # in S-block units: two half-stage chunks, group 1 twice
    q = rows(out, "nesterov_quadratic", "F=B")
    assert q["ZB-H2+PV"]["T"] < q["ZB-H2"]["T"]
    # M = 2S: forward doubling's units are whole; at F = B it times as direct, halving's finer ops
    # gain; at B = 2F with a one-F latency doubling gains most (halving pays the latency twice)
    assert q["Chimera FD"]["T"] == q["Chimera"]["T"] and q["Chimera BH"]["T"] < q["Chimera"]["T"]
    q = rows(out, "nesterov_quadratic", "B=2F+lat")
    assert q["Chimera FD"]["T"] < q["Chimera BH"]["T"] < q["Chimera"]["T"]
    assert q["Chimera FD"]["act_A"] == 2 * q["Chimera"]["act_A"] and q["Chimera BH"]["act_A"] == q["Chimera"]["act_A"]
    frontier.figure(out, tmp_path / "e10.png")  # every row has a marker and a colour


@pytest.mark.slow
def test_memory_of_each_schedule(out):
    for costs in ("F=B", "B=2F+lat"):
        r = rows(out, "mlp_chain", costs)
        M = 2 * S
        A, W = 4 * 6, (6 * 6 + 6)  # B * width, one layer's weights and biases
        assert (r["GPipe"]["act_A"], r["GPipe"]["weights_W"]) == (M, 1)
        assert (r["1F1B"]["act_A"], r["1F1B"]["weights_W"]) == (S, 1)
        assert r["PipeDream"]["weights_W"] == S and r["PipeMare"]["weights_W"] == 1
        assert r["2BW"]["weights_W"] == 2 and r["Chimera"]["weights_W"] == 2
        assert r["PipeDream+pred"]["weights_W"] == S + 1  # the velocity buffer
        for name, x in r.items():
            assert x["memory"] == pytest.approx(x["act_A"] * A + x["weights_W"] * W), name


@pytest.mark.slow
def test_pipemare_is_pipedream_on_a_linear_chain_and_not_on_the_mlp(out):
    for costs in ("F=B", "B=2F+lat"):
        q = rows(out, "nesterov_quadratic", costs)
        assert q["PipeMare"]["loss_stable"] == pytest.approx(q["PipeDream"]["loss_stable"], rel=1e-12)
    key = "mlp_chain/S4/F=B/{}/curve"
    assert not np.allclose(out.arrays[key.format("PipeMare")], out.arrays[key.format("PipeDream")])


@pytest.mark.slow
def test_synchronous_schedules_only_differ_in_time(out):
    """Same iterates: a schedule that finishes more flushes by the budget is never worse
    than one that finishes fewer, at the same selected step size."""
    r = rows(out, "nesterov_quadratic", "F=B")
    sync = [r[k] for k in ("GPipe", "1F1B", "ZB-H1", "ZB-V", "Chimera")]
    assert len({x["gamma_stable"] for x in sync}) == 1
    for a in sync:
        for b in sync:
            if a["T"] < b["T"]:  # a's flushes land earlier: its state at the budget is later
                assert a["loss_stable"] <= b["loss_stable"] + 1e-12


@pytest.mark.slow
def test_curves_end_at_the_reported_loss_and_budget(out):
    for r in (r for r in out.table if r["status"] == "ok"):
        key = f"{r['objective']}/S{r['S']}/{r['costs']}/{r['schedule']}"
        axis, curve = out.arrays[key + "/axis"], out.arrays[key + "/curve"]
        assert axis[-1] == r["budget"] and curve[-1] == r["loss_stable"]


@pytest.mark.slow
def test_pareto_front_and_time_to_target(out):
    for objective in ("nesterov_quadratic", "mlp_chain"):
        for costs in ("F=B", "B=2F+lat"):
            cell = [x for x in rows(out, objective, costs).values() if np.isfinite(x["loss_stable"])]
            front = [x for x in cell if x.get("pareto")]
            for x in cell:
                beaten = [
                    y
                    for y in cell
                    if y["memory"] <= x["memory"]
                    and y["loss_stable"] < x["loss_stable"]
                    or y["memory"] < x["memory"]
                    and y["loss_stable"] <= x["loss_stable"]
                ]
                assert bool(x.get("pareto")) == (not beaten), x["schedule"]
            assert front
            times = [x["time_to_target"] for x in cell if x.get("time_to_target") is not None]
            assert min(times) <= cell[0]["budget"] / 2 + cell[0]["budget"] / 16  # the best reaches it by half
            for x in cell:
                if x.get("time_to_target") is None:
                    assert x["loss_stable"] > x["target"]


@pytest.mark.slow
def test_summary_and_figure(out, tmp_path):
    s = out.summary
    assert len(s["cells"]) == 4 and sum(s["wins"].values()) >= 4
    for c in s["cells"]:
        best = min((x for x in rows(out, c["objective"], c["costs"]).values()), key=lambda x: x["loss_stable"])
        assert best["schedule"] in c["best"] and c["best_loss"] == best["loss_stable"]
        if c["objective"] == "nesterov_quadratic" and "PipeMare" in c["best"]:  # PipeMare = PD here
            assert "PipeDream" in c["best"]
    frontier.figure(out, tmp_path / "e10.png")
    assert (tmp_path / "e10.png").stat().st_size > 10_000 and (tmp_path / "e10_time.png").exists()


def test_bad_config_names_the_field():
    with pytest.raises(ValueError, match="variants"):
        frontier.run(make_config(frontier.Config, "full", variants=("GPipe", "Nope")))
    with pytest.raises(ValueError, match="costs"):
        frontier.run(make_config(frontier.Config, "full", costs=("free",)))


def _gpipe_after_2bw():
    """GPipe's row built right after 2BW's, the programs built for it counted, and what it needs."""
    from rpd.analysis import tuning
    from rpd.runtime.compile_cache import count_programs

    cfg = small(("2BW",))
    grid = tuning.pow2_grid(-6, -5)
    made: dict = {}
    frontier._cell(cfg, made, "nesterov_quadratic", S, "F=B", grid)  # 2BW's program
    with count_programs() as n:
        (row,) = frontier._cell(
            dataclasses.replace(cfg, variants=("GPipe",)), made, "nesterov_quadratic", S, "F=B", grid
        )
    return row, n, cfg, grid, made


def test_the_flushes_run_in_2bws_program():
    """Every plan-run schedule gets at least 2BW's two gradient slots: GPipe (one slot of its own)
    then runs in 2BW's compiled program (the same M-microbatch updates and records), building none."""
    _, n, *_ = _gpipe_after_2bw()
    assert (n["compiled"], n["from_cache"]) == (0, 0)


@pytest.mark.slow
def test_the_flushes_in_2bws_program_keep_their_own_numbers():
    """GPipe's curve in 2BW's program is the one its own program (one slot, its own ring) gives, bit for bit."""
    from rpd.train import methods

    row, _, cfg, grid, made = _gpipe_after_2bw()
    N, M = cfg.mb_per_S * S, cfg.M_factor * S
    budget = N * 2 * frontier.SCALE
    at = np.unique(np.linspace(budget / cfg.points, budget, cfg.points).round().astype(np.int64))
    own = methods.train(made[S][0], frontier.timeline("gpipe", S, N, M, cfg.H, "F=B"), grid, at=at)
    i = int(np.flatnonzero(grid == row["gamma_stable"])[0])
    np.testing.assert_array_equal(row["_curve"], own.curve[i])
