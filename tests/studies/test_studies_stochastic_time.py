"""E19 (rpd.studies.stochastic_time): step times against hand-computed makespans, the references at
f = 1 and CV 0, and refusals naming the field."""

import numpy as np
import pytest

from rpd.studies import stochastic_time

# S = 2, M = 4, one flush, F = 2, B = 4 ticks, no latency: 1F1B's makespan is 30 ticks (GPipe's
# (M + S - 1)(F + B)); one straggler at f = 1.5 on rank 1 gives 6 + 4(3 + 6) = 42 (rank 1 runs its
# four F, B pairs back to back after F0(0)), on rank 0 gives 39: F0(0) [0, 3), F0(1) [3, 6),
# B0(0) [9, 15), F0(2) [15, 18), B0(1) [18, 24), F0(3) [24, 27), B0(2) [27, 33), B0(3) [33, 39)
# (each B0(j) after rank 1's B1(j), which ends 6 ticks after its F1(j) starts).
TINY = dict(
    S=2,
    M_factor=2,
    flushes=1,
    factors=(1.0, 1.5),
    cvs=(0.0, 0.3),
    seeds=3,
    tF=2,
    tB=4,
    p2p=0,
    avg=0,
    schedules=("1f1b",),
    train=False,
)


def test_step_times_by_hand():
    cfg = stochastic_time.Config(**TINY)
    rows = stochastic_time.step_rows(cfg)
    by_rank = {x["rank"]: x["step"] for x in rows if x["kind"] == "straggler" and x["f"] == 1.5}
    assert by_rank == {0: 39 / 2, 1: 42 / 2}  # makespan x M / N in units of F = 2 ticks
    base = next(x["step"] for x in rows if x["kind"] == "straggler" and x["f"] == 1.0)
    assert base == 30 / 2
    s = stochastic_time.summarise(cfg, rows, [])["schedules"]["1f1b"]
    assert s["straggler"]["1.5"]["ratio_mean"] == pytest.approx((42 / 30 + 39 / 30) / 2, rel=1e-12)
    assert s["straggler"]["1.5"]["worst_rank"] == 1
    assert s["straggler"]["1"]["ratio_mean"] == 1.0 and s["jitter"]["0"]["ratio_mean"] == 1.0


def test_jitter_rows_are_seeded_and_differ_by_seed():
    cfg = stochastic_time.Config(**TINY)
    a = [x["step"] for x in stochastic_time.step_rows(cfg) if x["kind"] == "jitter" and x["cv"] == 0.3]
    b = [x["step"] for x in stochastic_time.step_rows(cfg) if x["kind"] == "jitter" and x["cv"] == 0.3]
    assert a == b and len(set(a)) == 3 and np.all(np.isfinite(a))


@pytest.mark.parametrize(
    "bad, field",
    [
        (dict(factors=(1.5, 2.0)), "factors"),
        (dict(cvs=(0.1,)), "cvs"),
        (dict(schedules=("gpipe", "nope")), "schedules"),
        (dict(tB=3), "tB"),
        (dict(train_rank=2), "train_rank"),
        (dict(train_schedules=("gpipe",)), "train_schedules"),
    ],
)
def test_bad_config_names_its_field(bad, field):
    with pytest.raises(ValueError, match=field):
        stochastic_time.check(stochastic_time.Config(**{**TINY, **bad}))
