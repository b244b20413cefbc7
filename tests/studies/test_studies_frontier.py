"""E10 (rpd.studies.frontier): every schedule trained at one budget, against memory."""

import numpy as np
import pytest

from rpd.studies import frontier, make_config

S = 4


@pytest.fixture(scope="module")
def out():
    cfg = make_config(
        frontier.Config,
        "full",
        objectives=("nesterov_quadratic", "mlp_chain"),
        S_values=(S,),
        mb_per_S=8,
        points=16,
        n=120,
        d=16,
        batch_size=5,
        mlp_n=64,
        mlp_width=6,
        mlp_batch=4,
        gamma_exps={"nesterov_quadratic": (-6, -1), "mlp_chain": (-4, 1)},
    )
    return frontier.run(cfg)


def rows(out, objective, costs):
    return {r["schedule"]: r for r in out.table if (r["objective"], r["costs"]) == (objective, costs)}


def test_every_variant_runs_or_says_why(out):
    assert len(out.table) == 2 * 2 * len(frontier.VARIANTS)
    assert all(r["status"] == "ok" for r in out.table), [r.get("reason") for r in out.table]


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


def test_pipemare_is_pipedream_on_a_linear_chain_and_not_on_the_mlp(out):
    for costs in ("F=B", "B=2F+lat"):
        q = rows(out, "nesterov_quadratic", costs)
        assert q["PipeMare"]["loss_stable"] == pytest.approx(q["PipeDream"]["loss_stable"], rel=1e-12)
    key = "mlp_chain/S4/F=B/{}/curve"
    assert not np.allclose(out.arrays[key.format("PipeMare")], out.arrays[key.format("PipeDream")])


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


def test_curves_end_at_the_reported_loss_and_budget(out):
    for r in out.table:
        key = f"{r['objective']}/S{r['S']}/{r['costs']}/{r['schedule']}"
        axis, curve = out.arrays[key + "/axis"], out.arrays[key + "/curve"]
        assert axis[-1] == r["budget"] and curve[-1] == r["loss_stable"]


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
