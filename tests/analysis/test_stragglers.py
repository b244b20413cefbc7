"""rpd.analysis.stragglers and rpd.analysis.what_if: a 2-stage 1F1B trace written by hand with
its replay, ideal, S and attribution timed by hand (docs/replay.md), and ST against the paper's
published numbers (docs/replay.md#st-the-development-trace)."""

from pathlib import Path

import numpy as np
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
    df = trace.check_trace(hand_trace(), layout)
    df["end_ts"] = df["start_ts"] + df["duration"]
    a, base = stragglers.attribute(df, layout)
    _, rows = what_if.what_if(df, layout, a, base)
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


def test_interleaved_trace_replays_its_own_timeline():
    # A trace made from Megatron's interleaved program (pp 2, v 2, M 2) with no launch delay and
    # the profiler's no-op forward recvs of stage 0's first chunk: its replay is its measured step.
    from rpd.schedules.family.orders import interleaved_order

    layout = JobLayout(dp=1, pp=2, vpp=2)
    present = {s: set(trace.COMPUTE + trace.P2P + ("optimizer",)) for s in range(2)}
    times = {"forward-compute": 1.0, "backward-compute": 2.0, "optimizer": 0.5}
    df, end = _made_trace(layout, present, interleaved_order(2, 2, 2), 2, lambda o, s, r: times.get(o, 0.25) * (1 + s))
    f0 = df[(df.stage == 0) & (df.optype == "forward-compute") & (df.mc == 0)]
    df = pd.concat([df, f0.assign(optype="forward-recv", duration=0.0, mc=-1, mb_id=-1)], ignore_index=True)
    df["seq_id"] = df.sort_values("start_ts", kind="stable").groupby(["dp_rank", "stage", "optype"]).cumcount()
    df, a = _attr(df, layout)
    assert a.replay_s == pytest.approx(a.measured_s) and a.measured_s == pytest.approx(end)
    # a chunked trace's what-if: its own schedule (the replay), the async stream, LocalSGD
    _, base = stragglers.attribute(df, layout)
    _, rows = what_if.what_if(df, layout, a, base, H=1)
    assert [r.schedule for r in rows] == ["interleaved (replay)", "async stream (1F1B, no flush)", "local_sgd (H=1)"]
    assert rows[0].step_s == pytest.approx(end)


def _made_trace(layout, present, order, M, val_of):
    """A trace made from the Megatron program (no launch delay), one step; returns it with the
    program's step end (the replay of a trace without launch delays is its measured step)."""
    from rpd.model.megatron_step import build_step
    from rpd.schedules.machinery.measured import replay

    step = build_step(layout, order, M, present)
    val = np.array([val_of(o, s, r) for o, s, r in zip(step.half_optype, step.half_stage, step.half_dp)])
    first = np.r_[0, np.nonzero(np.diff(step.half_slot))[0] + 1]
    start, end = replay(step.program, np.maximum.reduceat(val[:, None], first, axis=0))
    hs, he = start[step.half_slot, 0], end[step.half_slot, 0]
    compute = np.isin(step.half_optype, trace.COMPUTE)
    df = pd.DataFrame(
        dict(
            dp_rank=step.half_dp,
            stage=step.half_stage,
            rank=step.half_stage,
            step=0,
            optype=step.half_optype,
            start_ts=hs,
            duration=he - hs,
            seq_id=0,
            mc=np.where(compute, step.half_seq // M, 0),
            gmc=-1,
            mb_id=np.where(compute, step.half_seq % M, -1),
        )
    )
    df["seq_id"] = df.sort_values("start_ts", kind="stable").groupby(["dp_rank", "stage", "optype"]).cumcount()
    return df, float(end[step.optimizer, 0].max())


def test_overlapped_reduce_scatter_trace_replays_its_own_timeline():
    # Megatron's overlapped gradient reduce (separate-grads-all-reduce in the trace): the
    # reduce-scatter on the worker's second stream after its last backward; dp 2, pp 2, M 3, dp
    # rank 1 slower. A trace made from that program without launch delays replays to its step.
    from rpd.schedules.family.orders import one_f_one_b_order

    layout = JobLayout(dp=2, pp=2)
    ops = trace.COMPUTE + trace.P2P + trace.DP_COMM + ("optimizer-clip-main-grad", "optimizer")
    times = {"forward-compute": 1.0, "backward-compute": 2.0, "grads-reduce-scatter": 3.0, "optimizer": 0.5}
    df, end = _made_trace(
        layout,
        {s: set(ops) for s in range(2)},
        one_f_one_b_order(2, 3),
        3,
        lambda o, s, r: times.get(o, 0.25) * (1.5 if r == 1 else 1.0),
    )
    _, a = _attr(df, layout)
    assert a.replay_s == pytest.approx(a.measured_s) and a.measured_s == pytest.approx(end)
    assert a.by_dp_rank[1] > a.by_dp_rank[0]


def test_trace_without_optimizer_ends_with_the_last_op():
    # no optimizer records: the step ends with each worker's last op (here the last backward)
    df = hand_trace()
    df = df[df.optype != "optimizer"]
    _, a = _attr(df, JobLayout(dp=1, pp=2))
    assert a.replay_s == pytest.approx(17.5 - 1.0)
