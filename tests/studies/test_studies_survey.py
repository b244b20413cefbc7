"""E16 (rpd.studies.survey): the survey's rows measured against closed forms, and the verdicts
read from the rows."""

import json

import numpy as np
import pytest

from rpd.studies import load, make_config, survey


def _rows(S=4, M=8):
    return [survey.measure(label, name, kw, opts, S, M, steps=2) for label, name, kw, opts in survey.SYSTEMS]


def test_rows_hold_the_closed_forms():
    assert load("e16_survey") is survey
    S, M = 4, 8
    t = {r["system"]: r for r in _rows(S, M)}
    assert len(t) == 17
    gp = (S - 1) / (M + S - 1)  # fill-drain, per flush, at any tF:tB
    assert t["GPipe"]["bubble_F=B"] == pytest.approx(gp) and t["GPipe"]["bubble_B=2F"] == pytest.approx(gp)
    assert t["GPipe"]["activations"] == M and t["DAPPLE / 1F1B"]["activations"] == S
    # D - 2 idle slots (docs/schedules.md#chimera)
    assert t["Chimera"]["bubble_F=B"] == pytest.approx((S - 2) / (2 * M + S - 2))
    assert t["GEMS"]["activations"] == 1 and t["GEMS"]["weights"] == 2 and t["Chimera"]["weights"] == 2
    fd, bh = (
        t["Chimera, forward doubling"],
        t["Chimera, backward halving"],
    )  # M = 2S (rpd.schedules.family.bidirectional)
    assert fd["bubble_B=2F"] == pytest.approx((S - 2) / (2 * M + S - 2))
    assert fd["bubble_B=2F"] < t["Chimera"]["bubble_B=2F"]
    assert bh["bubble_B=2F"] == pytest.approx((S - 2) / (4 * M + S - 2))
    assert fd["activations"] == 2 * t["Chimera"]["activations"] and bh["activations"] == t["Chimera"]["activations"]
    assert t["PipeDream"]["weights"] == S and t["XPipe / SpecTrain"]["weights"] == S + 1
    assert t["PipeDream-2BW"]["weights"] == 2 and t["WPipe"]["weights"] == 1.5 and t["AvgPipe"]["weights"] == 3
    assert t["ZB-H2"]["bubble_B=2F"] < t["ZB-H1"]["bubble_B=2F"] < t["DAPPLE / 1F1B"]["bubble_B=2F"]


def test_verdicts_follow_the_rows():
    rows = _rows()
    for r in rows:
        r["loss"] = 1.0
    rows[[r["system"] for r in rows].index("PipeDream")]["loss"] = 0.5
    out = {c["claim"].split(":")[0]: c for c in survey.claims(rows, 0.08)}
    assert out["convergence"]["verdict"] == "disagrees"  # an asynchronous row is best
    assert out["activations"]["verdict"] == "agrees"  # GEMS holds one microbatch
    assert out["ZB"]["verdict"] == "agrees"
    assert out["weights"]["verdict"] == "depends"  # prediction keeps a velocity buffer
    json.dumps(out)


@pytest.mark.slow
def test_quick_study_runs_and_every_system_trains():
    out = survey.run(make_config(survey.Config, "quick", survey.QUICK))
    assert len(out.table) == 17 + 7 and all(np.isfinite(r["loss"]) for r in out.table)
    assert sum(r["in_survey"] for r in out.table) == 17  # the 2024-26 schedules beside the survey's
    assert {c["verdict"] for c in out.summary["claims"]} <= {"agrees", "disagrees", "depends"}
    json.dumps(out.summary)
