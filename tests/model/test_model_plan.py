"""rpd.model.plan and ``python -m experiments.plan``: a tiny plan's rows and JSON (docs/plan.md#the-plan-command)."""

from __future__ import annotations

import json

import pytest
from hydra.errors import ConfigCompositionException
from hydra_helpers import compose

from rpd import registry, schedules
from rpd.cli import plan as entry
from rpd.model import hardware, layers
from rpd.model.plan import max_delay, plan

ROW_FIELDS = {
    "schedule",
    "S",
    "M",
    "D",
    "step_time_s",
    "bubble_total",
    "bubble_ideal",
    "tokens_per_s",
    "mfu",
    "peak_bytes",
    "peak_activation_bytes",
    "static_bytes",
    "fits",
    "p2p_bytes_per_step",
    "allreduce_bytes_per_step",
    "max_delay",
}
HW = hardware.preset("a100_80g_flat")


@pytest.fixture(scope="module")
def tiny():
    m = layers.preset("gpt2_small")
    return m, plan(m, HW, list(registry.SCHEDULES), registry.timeline, 2, 4)


def test_every_schedule_gets_a_row_sorted_by_tokens_per_s_among_those_that_fit(tiny):
    m, rows = tiny
    assert sorted(r.schedule for r in rows) == sorted(registry.SCHEDULES)
    ok = [r for r in rows if r.error is None and r.fits]
    assert [r.tokens_per_s for r in ok] == sorted((r.tokens_per_s for r in ok), reverse=True)
    by = {r.schedule: r for r in rows}
    assert by["dualpipe_v"].error is None  # M = 4 = 2S is allowed
    one = by["1f1b"]
    # step = one flush; tokens/s and MFU follow from it
    assert one.tokens_per_s == pytest.approx(4 * 1024 / one.step_time_s)
    assert one.mfu == pytest.approx(4 * m.model_flops / (one.step_time_s * 2 * HW.peak_flops))
    assert one.bubble_ideal == pytest.approx(one.bubble_total / (1 - one.bubble_total))
    # GPipe and 1F1B: same time, GPipe holds M - S more microbatches on rank 0
    assert by["gpipe"].step_time_s == one.step_time_s
    assert by["gpipe"].peak_bytes[0] > one.peak_bytes[0]
    # the tied embedding's gradient crosses between the two end ranks: h·V fp32 values each way
    assert one.allreduce_bytes_per_step == [4.0 * 768 * 50257] * 2
    # each rank sends M activations of 2sbh forward (rank 0) or M gradients back (rank 1)
    assert one.p2p_bytes_per_step == [4 * 2 * 1024 * 768] * 2
    assert (by["pipedream"].max_delay, by["pipedream_2bw"].max_delay, one.max_delay) == (1, 1, 0)


def test_max_delay_of_pipedream_is_s_minus_one():
    assert max_delay(schedules.pipedream(4, 16)) == 3
    assert max_delay(schedules.pipemare(4, 16)) == 3
    assert max_delay(schedules.zb_h1(4, 8, 4)) == 0


def test_a_memory_cap_turns_rows_into_does_not_fit():
    m = layers.preset("gpt2_small")
    rows = plan(m, HW, ["gpipe", "1f1b"], registry.timeline, 2, 8, memory_cap=3 * 2**30)  # 1F1B 2.4 GiB, GPipe 6.9 GiB
    assert [(r.schedule, r.fits) for r in rows] == [("1f1b", True), ("gpipe", False)]


def test_named_variants_get_rows():
    """A variant (rpd.registry.VARIANTS) is a row like any schedule: Chimera with forward doubling
    holds twice direct concatenation's activations and is faster at M = 2S; backward halving
    needs even ticks, which the plan's costs do not give (a refused row, with the reason)."""
    m = layers.preset("gpt2_small")
    by = {r.schedule: r for r in plan(m, HW, ["chimera", "chimera_fd", "chimera_bh"], registry.timeline, 4, 8)}
    fd, direct = by["chimera_fd"], by["chimera"]
    assert max(fd.peak_activation_bytes) == pytest.approx(2 * max(direct.peak_activation_bytes))
    assert fd.step_time_s < direct.step_time_s and fd.allreduce_bytes_per_step == direct.allreduce_bytes_per_step
    assert "costs.F and costs.B must be even" in by["chimera_bh"].error


def test_the_command_prints_the_table_and_writes_the_json(tmp_path, capsys):
    out = tmp_path / "plan.json"
    cfg = compose(
        [
            "model=gpt2_small",
            "pipeline.S=2",
            "pipeline.M=[4,8]",
            "schedules=[1f1b,zb_h1,chimera]",
            f"out={out}",
            "optimizer=sgd",
            "recompute=selective",
        ],
        "plan",
    )
    entry.run(cfg)
    text = capsys.readouterr().out
    assert "1f1b" in text and "tokens/s" in text
    data = json.loads(out.read_text())
    assert data["model"]["params"] == 124_439_808
    assert set(data["model"]["layers"][1]) == {"name", "params", "flops_fwd", "act_bytes", "out_bytes"}
    assert data["model"]["layers"][1]["act_bytes"] == 34 * 1024 * 768  # selective recomputation
    assert len(data["rows"]) == 6 and ROW_FIELDS <= set(data["rows"][0])
    row = data["rows"][0]
    assert all(
        len(row[k]) == 2
        for k in (
            "peak_bytes",
            "peak_activation_bytes",
            "static_bytes",
            "p2p_bytes_per_step",
            "allreduce_bytes_per_step",
        )
    )
    assert data["settings"]["optimizer"] == "sgd" and row["D"] == 1


def test_bad_input_names_the_field():
    with pytest.raises(ConfigCompositionException):
        compose(["optimizer=lion"], "plan")
    with pytest.raises(ValueError, match=r"pipeline\.M"):
        entry.run(compose(["pipeline.M=0", "out=null"], "plan"))
    with pytest.raises(ValueError, match=r"schedules\[0\]"):
        entry.run(compose(["schedules=[nope]", "out=null"], "plan"))


@pytest.mark.slow
def test_objective_adds_time_to_target(tmp_path, capsys):
    """``objective=mlp_chain`` trains each row (here with momentum, the group's own grid narrowed)."""
    out = tmp_path / "plan.json"
    cfg = compose(
        [
            "model=gpt2_small",
            "pipeline.S=2",
            "pipeline.M=2",
            "schedules=[1f1b,pipedream]",
            "objective=mlp_chain",
            "objective.n=32",
            "objective.width=4",
            "objective.batch_size=4",
            "optimizer=momentum",
            "train.N=8",
            "train.gamma_lo=-6",
            "train.gamma_hi=-4",
            f"out={out}",
        ],
        "plan",
    )
    entry.run(cfg)
    assert "time to loss" in capsys.readouterr().out
    ttt = json.loads(out.read_text())["time_to_target"]
    assert (
        ttt["objective"] == "mlp_chain"
        and ttt["optimizer"] == "momentum"
        and (ttt["gamma_lo"], ttt["gamma_hi"]) == (-6, -4)
    )
    (grp,) = ttt["groups"]
    assert grp["blocks"] == 2 and {e["schedule"] for e in grp["rows"]} == {"1f1b", "pipedream"}
    assert all(e["gamma"] in (2.0**-6, 2.0**-5, 2.0**-4) for e in grp["rows"] if e["gamma"] is not None)
    with pytest.raises(ValueError, match="train.gamma_lo"):
        entry.run(compose(["objective=mlp_chain", "train.gamma_lo=2", "train.gamma_hi=1", "out=null"], "plan"))
    with pytest.raises(ValueError, match=r"train\.rule"):
        entry.run(compose(["objective=mlp_chain", "train.rule=fastest", "out=null"], "plan"))
    with pytest.raises(ValueError, match=r"^objective\.n must be a multiple"):
        entry.run(compose(["objective=mlp_chain", "objective.n=7", "out=null"], "plan"))
