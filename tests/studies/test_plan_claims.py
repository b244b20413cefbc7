"""rpd.studies.plan_claims: the seeds' memory / communication claims, on small settings."""

from __future__ import annotations

import pytest

from rpd import registry
from rpd.model import hardware, layers
from rpd.model.plan import plan_one
from rpd.studies import plan_claims as pc

CFG = pc.Config(sizes=((2, 2), (4, 4), (4, 8)), eff_M=(4, 16), stage_counts=(2, 4), fixed_M=4)


@pytest.fixture(scope="module")
def out():
    return pc.run(CFG)


def test_verdicts_follow_the_numbers(out):
    claims = {c["claim"]: c for c in out.summary["claims"]}
    assert len(claims) == 4
    act = next(c for c in out.summary["claims"] if c["claim"].startswith("GPipe keeps"))
    assert act["holds"] is True
    comm = next(c for c in out.summary["claims"] if c["claim"].startswith("communication"))
    assert comm["holds"] is True and "[2.0]" in comm["measured"]  # interleaved v = 2: twice the boundaries
    for r in out.table:
        if r["claim"] == "activations":
            assert r["held"] == pytest.approx(r["claimed"], abs=1e-9)


def test_rows_are_the_plans_numbers(out):
    """The efficiency and stage rows are the plan's own bubble for that (S, M, partition)."""
    model, hw = layers.preset(CFG.model), hardware.preset(CFG.hardware)
    for r in out.table:
        if r["claim"] not in ("efficiency", "stages"):
            continue
        row = plan_one(model, hw, "1f1b", registry.timeline, r["S"], r["M"], how=r["partition"])
        got = r["efficiency"] if r["claim"] == "efficiency" else 1 - r["bubble"]
        assert got == pytest.approx(1 - row.bubble_total, rel=1e-12)
        # a whole-layer partition with the head on the last stage cannot beat balanced stages
        assert 1 - got >= (r["S"] - 1) / (r["M"] + r["S"] - 1) - 1e-12


def test_p2p_counts_two_values_per_microbatch_and_boundary():
    """Independent count: 1F1B at S = 4, M = 8 on GPT-2 small: an interior rank sends M activations
    (s·h values each) forward and M gradients back, 16-bit."""
    model, hw = layers.preset("gpt2_small"), hardware.preset("a100_80g_flat")
    row = plan_one(model, hw, "1f1b", registry.timeline, 4, 8)
    assert row.p2p_bytes_per_step[1] == row.p2p_bytes_per_step[2] == 2 * 8 * 1024 * 768 * 2
    assert row.p2p_bytes_per_step[0] == row.p2p_bytes_per_step[3] == 8 * 1024 * 768 * 2  # one neighbour


def test_stage_counts_beyond_the_layers_are_refused():
    with pytest.raises(ValueError, match="stage_counts"):
        pc.run(pc.Config(stage_counts=(64,)))
