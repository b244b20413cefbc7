"""rpd.analysis.stragglers and rpd.analysis.what_if: a 2-stage 1F1B trace written by hand with
its replay, ideal, S and attribution timed by hand (docs/replay.md), and ST against the paper's
published numbers (docs/replay.md#st-the-development-trace)."""

from pathlib import Path

import pandas as pd
import pytest

from rpd.analysis import stragglers, what_if
from rpd.io import trace
from rpd.model.job_layout import JobLayout

ST = Path(__file__).parent.parent / "data" / "trace_st"

# One step of 1F1B, pp = 2, M = 2, dp = 1: F takes 1 s on stage 0 and 2 s on stage 1, B 2 s and
# 4 s, every p2p transfer 0.5 s, the optimizer 1 s; stage 1 starts F1 0.25 s late (a launch
# delay). (stage, optype, seq_id, mb_id, start, duration), from the Megatron program:
#   stage 0: F0, fsend0, F1, [fsend1 + brecv0], B0, brecv1, B1, optimizer
#   stage 1: frecv0, F0, B0, [bsend0 + frecv1], F1, B1, bsend1, optimizer
HAND = [
    (0, "forward-compute", 0, 0, 0.0, 1.0),
    (0, "forward-send", 0, -1, 1.0, 0.5),
    (0, "forward-compute", 1, 1, 1.5, 1.0),
    (0, "forward-send", 1, -1, 2.5, 5.5),
    (0, "backward-recv", 0, -1, 2.5, 5.5),
    (0, "backward-compute", 0, 0, 8.0, 2.0),
    (0, "backward-recv", 1, -1, 10.0, 4.75),
    (0, "backward-compute", 1, 1, 14.75, 2.0),
    (0, "optimizer", 0, -1, 16.75, 1.0),
    (1, "forward-recv", 0, -1, 0.0, 1.5),
    (1, "forward-compute", 0, 0, 1.5, 2.0),
    (1, "backward-compute", 0, 0, 3.5, 4.0),
    (1, "backward-send", 0, -1, 7.5, 0.5),
    (1, "forward-recv", 1, -1, 7.5, 0.5),
    (1, "forward-compute", 1, 1, 8.25, 2.0),
    (1, "backward-compute", 1, 1, 10.25, 4.0),
    (1, "backward-send", 1, -1, 14.25, 0.5),
    (1, "optimizer", 0, -1, 14.75, 1.0),
]


def hand_trace(step: int = 0) -> pd.DataFrame:
    rows = [
        dict(dp_rank=0, stage=s, rank=s, step=step, optype=op, start_ts=t, duration=d, seq_id=k, mc=0, gmc=s, mb_id=mb)
        for s, op, k, mb, t, d in HAND
    ]
    return pd.DataFrame(rows)


def _attr(df, layout):
    df = trace.check_trace(df, layout)
    df["end_ts"] = df["start_ts"] + df["duration"]
    return df, stragglers.attribute(df, layout)[0]


def test_hand_trace_replay_ideal_and_attribution():
    _, a = _attr(hand_trace(), JobLayout(dp=1, pp=2))
    # measured: the optimizer of stage 0 ends at 17.75; the replay drops stage 1's 0.25 s delay
    assert a.measured_s == pytest.approx(17.75)
    assert a.replay_s == pytest.approx(17.5)
    # ideal: F = mean(1, 1, 2, 2) = 1.5, B = 3, p2p 0.5, optimizer 1 everywhere, timed by hand: 16
    assert a.ideal_s == pytest.approx(16.0)
    assert a.slowdown == pytest.approx(17.5 / 16)
    # stage 1 measured (F 2, B 4), stage 0 ideal: 19 s; stage 0 measured, stage 1 ideal: 14.5 s
    assert list(a.by_stage) == [1, 0]
    assert a.by_stage[1] == pytest.approx(19 / 16)
    assert a.by_stage[0] == pytest.approx(14.5 / 16)
    assert a.by_dp_rank[0] == pytest.approx(17.5 / 16)
    assert a.by_worker[:, 0].tolist() == pytest.approx([14.5 / 16, 19 / 16])


def test_hand_trace_steps_are_independent():
    layout = JobLayout(dp=1, pp=2)
    slow = hand_trace(1)
    slow.loc[slow.optype == "optimizer", "duration"] = 2.0  # both optimizers 1 s longer in step 1
    _, a = _attr(pd.concat([hand_trace(0), slow], ignore_index=True), layout)
    assert a.replay_steps.tolist() == pytest.approx([17.5, 18.5])
    # ideal optimizer = mean(1, 1, 2, 2) = 1.5 in both steps: 16.5
    assert a.ideal_steps.tolist() == pytest.approx([16.5, 16.5])


def test_hand_trace_what_if_gpipe_equals_1f1b_at_m2():
    # pp = 2, M = 2: GPipe's order and 1F1B's differ on stage 1 only; with asynchronous p2p
    # (0.5 s) both end stage 0's B1 at 16 and its optimizer at 17 (timed by hand below)
    layout = JobLayout(dp=1, pp=2)
    df, a = _attr(hand_trace(), layout)
    _, rows = what_if.what_if(df, layout, a)
    by = {r.schedule: r.step_s for r in rows}
    assert by["1f1b (replay)"] == pytest.approx(17.5)
    # async 1F1B: s0 F0 0-1, F1 1-2; s1 F0 1.5-3.5, B0 3.5-7.5, F1 7.5-9.5 (F1 in at 2.5),
    # B1 9.5-13.5; s0 B0 8-10, B1 14-16, optimizer 16-17. GPipe: s1 F0 1.5-3.5, F1 3.5-5.5,
    # B0 5.5-9.5, B1 9.5-13.5; s0 B0 10-12, B1 14-16, optimizer 16-17
    assert by["1f1b"] == pytest.approx(17.0)
    assert by["gpipe"] == pytest.approx(17.0)


def test_st_matches_the_published_numbers():
    layout = trace.read_meta(ST / "meta-ST.yaml")
    a, _ = stragglers.attribute(trace.read_trace(ST / "trace-ST.parquet", layout), layout)
    # Lin et al. (OSDI 25): measured 2.214 s, replay 2.173 s, ideal 1.843 s, S = 1.179, last stage 1.232
    assert a.measured_s == pytest.approx(2.214, abs=0.0005)
    assert abs(a.replay_s / 2.214 - 1) < 0.03
    assert abs(a.ideal_s / 1.843 - 1) < 0.03
    assert abs(a.slowdown - 1.179) < 0.03
    assert next(iter(a.by_stage)) == 3
    assert abs(a.by_stage[3] - 1.232) < 0.03


def test_hand_trace_dp_collectives_wait_for_the_slowest_rank():
    # pp = 1, dp = 2, M = 1: all-gather 1 s, then F, B, the reduce-scatter (0.5 s once both
    # ranks are in), the clip (0.25 s), the optimizer (1 s). dp 0: F 2, B 4; dp 1: F 1, B 2,
    # launched 0.5 s late; dp 0's optimizer launched 0.1 s late.
    rows = []
    for d, f, b, t_f, t_opt in ((0, 2.0, 4.0, 1.0, 7.85), (1, 1.0, 2.0, 1.5, 7.75)):
        rs = t_f + f + b
        for op, t, dur, mb in (
            ("params-all-gather", 0.0, 1.0, -1),
            ("forward-compute", t_f, f, 0),
            ("backward-compute", t_f + f, b, 0),
            ("grads-reduce-scatter", rs, 7.5 - rs, -1),
            ("optimizer-clip-main-grad", 7.5, 0.25, -1),
            ("optimizer", t_opt, 1.0, -1),
        ):
            rows.append(
                dict(
                    dp_rank=d,
                    stage=0,
                    rank=d,
                    step=0,
                    optype=op,
                    start_ts=t,
                    duration=dur,
                    seq_id=0,
                    mc=0,
                    gmc=0,
                    mb_id=mb,
                )
            )
    _, a = _attr(pd.DataFrame(rows), JobLayout(dp=2, pp=1))
    assert a.measured_s == pytest.approx(8.85)
    assert a.replay_s == pytest.approx(1 + 2 + 4 + 0.5 + 0.25 + 1)
    # ideal: F 1.5, B 3 on both ranks: 1 + 1.5 + 3 + 0.5 + 0.25 + 1
    assert a.ideal_s == pytest.approx(7.25)
    assert a.by_dp_rank[0] == pytest.approx(8.75 / 7.25)
    assert a.by_dp_rank[1] == pytest.approx(1.0)  # its F and B are faster than ideal, the rest waits on dp 0
