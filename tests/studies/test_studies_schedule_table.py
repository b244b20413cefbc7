"""E9 (rpd.studies.schedule_table): the measured table against the closed forms of docs/schedules.md, and the
seeds' claims with verdicts computed from the timelines."""

import json

import pytest

from rpd import registry
from rpd.schedules.machinery.costs import CostModel
from rpd.studies import schedule_table as st


@pytest.fixture(scope="module")
def out():
    return st.run(st.Config(S_values=(4, 8), M_factors=(1, 4)))


def cell(out, name, S, M, costs="B=2F", p2p=0):
    return next(
        r for r in out.table if (r["schedule"], r["S"], r["M"], r["costs"], r["p2p"]) == (name, S, M, costs, p2p)
    )


@pytest.mark.slow
def test_every_schedule_size_cost_and_latency_is_a_row(out):
    assert len(out.table) == len(st.ORDER) * 2 * 2 * 2 * 2
    assert cell(out, "dualpipe_v", 4, 4)["status"] == "n/a" and "M >= 2S" in cell(out, "dualpipe_v", 4, 4)["reason"]
    assert cell(out, "dualpipe_v", 4, 16)["status"] == "ok"


@pytest.mark.slow
@pytest.mark.parametrize("S,M", [(4, 16), (8, 32)])
def test_closed_forms_in_stage_units(out, S, M):
    # docs/schedules.md#reference-makespans (F = 1, B = 2; split I = W = 1; chunks at half cost), two flushes per cell
    assert cell(out, "gpipe", S, M)["T"] == cell(out, "1f1b", S, M)["T"] == 2 * 3 * (M + S - 1)
    assert cell(out, "interleaved", S, M)["T"] == 2 * 1.5 * (2 * M + S - 1)
    assert cell(out, "zb_h1", S, M)["T"] == 2 * (3 * M + S - 1)
    assert cell(out, "zb_v", S, M)["T"] == 2 * (3 * M + (S - 1) / 2)
    assert cell(out, "zb_h2", S, M)["period_overlapped"] == cell(out, "zb_v", S, M)["period_overlapped"] == 3 * M
    assert cell(out, "1f1b", S, M)["act_rank0"] == S and cell(out, "gpipe", S, M)["act_rank0"] == M
    assert cell(out, "zb_h2", S, M)["act_rank0"] == 2 * S - 1
    assert cell(out, "chimera", S, M)["weight_memory"] == 2 and cell(out, "pipedream", S, M)["weight_versions"] == S
    g = cell(out, "gpipe", S, M, "F=B")
    assert g["bubble_f_total"] == pytest.approx((S - 1) / (M + S - 1))
    assert g["bubble_r_ideal"] == pytest.approx((S - 1) / M)


# the survey's rows: registry name, its options, costs per op at F = B in quarter-F ticks
SURVEY_ROWS = {
    "gems": ("gems", {}, dict(F=4, B=4)),
    "ampnet": ("ampnet", {}, dict(F=4, B=4)),
    "avgpipe": ("avgpipe", {}, dict(F=4, B=4)),
    "wpipe": ("wpipe", {}, dict(F=2, B=2)),  # 2S stages, chunks at half a stage
    "zb_h2_pv": ("zb_h2", {"post_validation": True}, dict(F=4, I=2, W=2)),
    "chimera_fd": ("chimera", {"concat": "forward_doubling"}, dict(F=4, B=4)),
    "chimera_bh": ("chimera", {"concat": "backward_halving"}, dict(F=4, B=4)),
}


@pytest.mark.slow
@pytest.mark.parametrize("row", SURVEY_ROWS)
def test_survey_rows_are_the_registry_timelines(out, row):
    name, options, costs = SURVEY_ROWS[row]
    S = M = 4
    tl = registry.build(name, registry.ScheduleParams(S=S, N=2 * M, M=M, params=options), CostModel(**costs))
    got = cell(out, row, S, M, "F=B")
    assert got["status"] == "ok"
    assert got["bubble_f_total"] == tl.bubble_ratio() and got["T"] == tl.T / st.SCALE


@pytest.mark.slow
def test_survey_rows_columns(out):
    S, M = 8, 32
    assert cell(out, "gems", S, M)["act_max"] == 1 and cell(out, "gems", S, M)["weight_memory"] == 2
    assert cell(out, "avgpipe", S, M)["weight_versions"] == 3  # two replicas and the centre
    assert cell(out, "wpipe", S, M)["weight_memory"] == 1.5 and cell(out, "wpipe", S, S)["weight_memory"] == 2
    # post-validation overlaps the flushes: shorter than ZB-H2 with its barrier, never longer
    assert cell(out, "zb_h2_pv", S, M)["T"] < cell(out, "zb_h2", S, M)["T"]
    assert "T_overlapped" not in cell(out, "zb_h2_pv", S, M)


@pytest.mark.slow
def test_latency_costs_1f1b_more_than_gpipe(out):
    g, o = cell(out, "gpipe", 4, 16, p2p=1), cell(out, "1f1b", 4, 16, p2p=1)
    assert g["T"] == 2 * (3 * 19 + 2 * 3)  # + 2(S-1)c per flush
    assert o["T"] > g["T"]


@pytest.mark.slow
def test_claim_verdicts(out):
    verdicts = {c["claim"].split(" ")[0]: c for c in out.summary["claims"]}
    assert [c["holds"] for c in out.summary["claims"]] == [False, False, False, True]
    assert "15.79%" in verdicts["GPipe"]["measured"] and "18.75%" in verdicts["GPipe"]["measured"]
    assert "6.56x" in out.summary["claims"][3]["measured"]
    json.dumps(out.summary)  # stored as JSON


@pytest.mark.slow
def test_claim_verdicts_are_read_from_the_table(out):
    gpipe, one_f1b, inter, speed = out.summary["claims"]
    assert gpipe["verdict"].startswith("18.75% is r_ideal")
    # 1F1B: the number is right, "reduces" is not; counted over the fixture's 8 + 8 cells
    assert one_f1b["number_holds"] and not one_f1b["holds"]
    assert "equal in 8 of 8" in one_f1b["verdict"] and "longer in 8 of 8" in one_f1b["verdict"]
    assert "4 A against GPipe's 16 A" in one_f1b["verdict"]
    # interleaved: the closed form in every latency-free cell, the 5-10% window only at M = 4S
    assert "(S-1)/(vM+S-1) at v = 2 in 8 of 8 cells" in inter["verdict"]
    inside = [r for r in out.table if r["schedule"] == "interleaved" and 0.05 <= r["bubble_f_total"] <= 0.10]
    assert {(r["S"], r["M"], r["p2p"]) for r in inside} == {(4, 16, 0), (8, 32, 0)}
    assert inter["measured"].endswith(f"{len(inside)} inside 5-10%")
    # K = 8, M = 32: KM/(M+K-1) = 256/39; latency costs 1F1B more than GPipe
    assert "6.56x = KM/(M+K-1)" in speed["verdict"] and "GPipe: 6.56x" in speed["verdict"]
    lat = cell(out, "1f1b", 8, 32, "F=B", 1)
    assert f"1F1B {2 * 8 * 32 * 2 / lat['T']:.2f}x" in speed["verdict"]


@pytest.mark.slow
def test_table_figure(out, tmp_path):
    from rpd.plotting.schedules import frontier_table_figure

    path = frontier_table_figure(out.table, tmp_path / "e9.png", claims=out.summary["claims"])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
