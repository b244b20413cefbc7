"""E14 (rpd.studies.search): the searched makespans against the hand-written schedules under every
activation cap, at the quick size (S = 4, M = 8, three cost models, caps 1..2S)."""

import json

import pytest

from rpd.studies import make_config
from rpd.studies import search as e14


@pytest.fixture(scope="module")
def cfg():
    return make_config(e14.Config, "quick", quick=e14.QUICK)


@pytest.fixture(scope="module")
def out(cfg):
    return e14.run(cfg)


def panel(out, costs):
    return next(p for p in out.summary["panels"] if p["costs"] == costs)


@pytest.mark.slow
def test_every_cost_model_and_cap_is_a_row(out):
    assert [(r["costs"], r["cap"]) for r in out.table] == [(c, k) for c in e14.COST_MODELS for k in range(1, 9)]
    json.dumps(out.summary)  # stored as JSON
    json.dumps(out.table)


@pytest.mark.slow
@pytest.mark.parametrize("costs", e14.COST_MODELS)
def test_exact_le_heuristic_le_every_fitting_hand_written(out, costs):
    p = panel(out, costs)
    for i, cap in enumerate(p["caps"]):
        assert p["bound"][i] <= p["exact"][i] <= p["heuristic"][i]
        assert p["peak_exact"][i] <= cap and p["peak_heuristic"][i] <= cap
        for h in p["hand"].values():
            if h["peak"] <= cap:
                assert p["heuristic"][i] <= h["T"]
    # a larger cap never costs time
    assert all(a >= b for a, b in zip(p["exact"], p["exact"][1:]))


@pytest.mark.slow
def test_exact_proven_optimal_at_s4_m8(out):
    assert all(all(p["optimal"]) for p in out.summary["panels"])
    assert all(r["exact_proven"] and r["exact_bound"] == r["exact"] for r in out.table)


@pytest.mark.slow
def test_hand_written_numbers(out):
    # one flush at unit costs (docs/schedules.md#reference-makespans): GPipe and 1F1B 3(M + S - 1), ZB-H1/H2 3M + S - 1;
    # activations held until W: GPipe M, 1F1B S (rank 0), ZB-H1 S, ZB-H2 2S
    hand = panel(out, "unit")["hand"]
    assert {n: (h["T"], h["peak"]) for n, h in hand.items()} == {
        "gpipe": (33, 8),
        "1f1b": (33, 4),
        "zb_h1": (27, 4),
        "zb_h2": (27, 8),
    }


@pytest.mark.slow
def test_table_gain(out):
    for r in out.table:
        if r["cap"] < 4:  # below S nothing hand-written fits
            assert r["gain"] is None and r["hand_written"] is None
        else:
            assert r["gain"] >= 1 and r["gain_heuristic"] >= 1
            assert r["gain"] == pytest.approx(r["best_hand_written"] / r["exact"], rel=1e-3)
    # with a p2p latency the search beats ZB-H1 between S and 2S - 1: at cap 7, 41 -> 30
    lat = {r["cap"]: r for r in out.table if r["costs"] == "latency"}
    assert (lat[7]["hand_written"], lat[7]["best_hand_written"], lat[7]["exact"]) == ("zb_h1", 41, 30)
    assert lat[8]["gain"] == 1.0  # ZB-H2 fits at 2S and is optimal there
    gains = {g["costs"]: g for g in out.summary["gains"]}
    assert gains["latency"]["max_gain"] == pytest.approx(41 / 30, rel=1e-3) and gains["latency"]["at_cap"] == 7
    assert gains["unit"]["max_gain"] == 1.0 and gains["unit"]["caps_without_hand_written"] == [1, 2, 3]
    # the fastest hand-written schedule at any cap, and the smallest cap where the search is as fast
    assert (gains["unit"]["fastest_hand_written"], gains["unit"]["fastest_hand_written_cap"]) == ("zb_h1", 4)
    assert gains["unit"]["search_same_time_cap"] == 4
    assert (gains["latency"]["fastest_hand_written"], gains["latency"]["fastest_hand_written_cap"]) == ("zb_h2", 8)
    assert gains["latency"]["search_same_time_cap"] == 7


@pytest.mark.slow
def test_imbalanced_costs_come_from_the_model(out):
    p = panel(out, "imbalanced")
    c = p["cost_model"]
    # gpt2_medium in 4 even stages: the head makes the last stage heavier, the rest are equal
    assert len(c["F"]) == 4 and c["F"][0] == c["F"][1] == c["F"][2] < c["F"][3]
    assert c["W"][3] > c["W"][0] and c["p2p"] > 0
    assert p["unit"] == "ms" and 0 < p["unit_per_tick"] < 1


def test_unknown_cost_model_is_refused():
    with pytest.raises(ValueError, match="cost_models"):
        e14.run(e14.Config(sizes=((2, 2),), cost_models=("unit", "bogus")))


@pytest.mark.slow
def test_figure_from_store(out, cfg, figure_from_store):
    figure_from_store(e14, cfg, out, "e14.png")
