"""rpd.schedules: the fast simulation equals a literal reading of docs/science.md#schedules, and its laws."""

import math

import numpy as np
import pytest

from rpd import schedules
from rpd.schedules import BWD, FWD, IDLE


def reference(S, N, noam=None, R=None, H=None):
    """docs/science.md#schedules read literally: one Python decision per (time step, stage). -> op, mb [T, S]."""
    noam = S if noam is None else noam
    never = math.inf
    f_done = [[never] * S for _ in range(N)]
    b_done = [[never] * S for _ in range(N)]
    nxt_f, nxt_b = [0] * S, [0] * S
    steady, prefer_b = [False] * S, [False] * S
    active, t, ops = 0, 0, []
    while b_done[N - 1][0] == never:
        row = []
        for s in range(S):
            m = nxt_f[s]
            f_ok = m < N and (f_done[m][s - 1] < t if s > 0 else (R is not None or active < noam))
            if R is not None and m < N:
                start = (m // (R * H)) * (R * H)
                if m - R >= start:
                    f_ok = f_ok and b_done[m - R][s] < t  # rule (a)
                if start > 0:
                    f_ok = f_ok and b_done[start - 1][0] < t  # rule (b)
            mb = nxt_b[s]
            b_ok = mb < N and f_done[mb][s] < t and (s == S - 1 or b_done[mb][s + 1] < t)
            if b_ok and (not steady[s] or prefer_b[s] or not f_ok):
                row.append((BWD, mb))
                steady[s], prefer_b[s] = True, False
            elif f_ok:
                row.append((FWD, m))
                if steady[s]:
                    prefer_b[s] = True
            else:
                row.append((IDLE, -1))
        for s, (kind, m) in enumerate(row):  # commit at the end of the step
            if kind == FWD:
                f_done[m][s], nxt_f[s] = t, nxt_f[s] + 1
                active += s == 0
            elif kind == BWD:
                b_done[m][s], nxt_b[s] = t, nxt_b[s] + 1
                active -= s == 0
        ops.append(row)
        t += 1
    arr = np.array(ops)  # [T, S, 2]
    return arr[..., 0], arr[..., 1]


def assert_same(tl, op, mb):
    assert tl.T == op.shape[0]
    np.testing.assert_array_equal(tl.op, op)
    np.testing.assert_array_equal(tl.mb, mb)


@pytest.mark.parametrize("S", [1, 2, 3, 4, 5, 7])
def test_pipedream_equals_reference(S):
    for N in sorted({1, 2, 3, S, 2 * S + 1, 3 * S + 2}):
        for noam in sorted({1, 2, 3, S, S + 2}):
            tl = schedules.pipedream(S, N, noam)
            assert_same(tl, *reference(S, N, noam))
            schedules.validate(tl)


@pytest.mark.parametrize("S", [1, 2, 3, 4, 6])
def test_local_sgd_equals_reference(S):
    for R in sorted({1, 2, S, S + 1}):
        for H in (1, 2, 3):
            for N in sorted({1, 5, R * H + 1, 3 * R * H - 1, 2 * R * H}):
                tl = schedules.local_sgd(S, N, R, H)
                assert_same(tl, *reference(S, N, R=R, H=H))
                schedules.validate(tl)


def test_fast_forward_long_runs_equal_reference():
    # long steady phases are skipped by the simulation; they must still be exact
    for S, N, noam in [(6, 90, None), (9, 40, None), (5, 60, 7), (4, 50, 3), (8, 33, 8)]:
        assert_same(schedules.pipedream(S, N, noam), *reference(S, N, noam))


def test_side_by_side_equals_one_by_one():
    specs = [
        schedules.ScheduleSpec(S=4, N=9, R=4, H=2),
        schedules.ScheduleSpec(S=3, N=7, noam=1),
        schedules.ScheduleSpec(S=7, N=50, noam=7),
        schedules.ScheduleSpec(S=5, N=11, R=3, H=1),
        schedules.ScheduleSpec(S=1, N=4, noam=1),
        schedules.ScheduleSpec(S=2, N=30, noam=2),
    ]
    for spec, tl in zip(specs, schedules.simulate_many(specs)):
        op, mb = reference(spec.S, spec.N, spec.noam, spec.R, spec.H)
        assert_same(tl, op, mb)
    Ss = list(range(2, 20))
    for S, tl in zip(Ss, schedules.pipedream_many(Ss, [10 * S for S in Ss])):
        np.testing.assert_array_equal(tl.b_time, schedules.pipedream(S, 10 * S).b_time)
    Hs = [1, 2, 5, 30]
    for H, tl in zip(Hs, schedules.local_sgd_many(6, 97, 4, Hs)):
        one = schedules.local_sgd(6, 97, 4, H)
        for field in ("f_time", "b_time", "sync_time"):
            np.testing.assert_array_equal(getattr(tl, field), getattr(one, field))


@pytest.mark.parametrize("S", range(1, 41))
def test_pipedream_laws(S):
    for N in sorted({1, S, 2 * S + 1, 5 * S}):
        tl = schedules.pipedream(S, N)
        assert tl.T == 2 * N + 2 * S - 2
        assert tl.K == N * S == tl.update_stage.size
        schedules.validate(tl)
        idle = np.sum(tl.op == IDLE)
        assert tl.bubble_ratio() == pytest.approx(idle / (tl.T * S), abs=1e-15)
    naive = schedules.pipedream(S, 3, noam=1)
    assert naive.T == 2 * S * 3
    schedules.validate(naive)


@pytest.mark.parametrize("S", [1, 2, 3, 4, 5, 8])
def test_local_sgd_length_law(S):
    for R in sorted({S, S + 1, 2 * S}):
        for H in (1, 2, 3, 5):
            for N in sorted({1, R * H, R * H + 1, 3 * R * H - 2, 4 * R * H}):
                tl = schedules.local_sgd(S, N, R, H)
                assert tl.T == 2 * N + math.ceil(N / (R * H)) * (2 * S - 2), (S, R, H, N)
                schedules.validate(tl)
                q = math.ceil(N / (R * H))
                np.testing.assert_array_equal(
                    tl.sync_time, tl.b_time[np.minimum(np.arange(1, q + 1) * R * H, N) - 1, 0]
                )


def test_update_order_is_time_then_stage():
    tl = schedules.pipedream(5, 17)
    key = tl.update_time.astype(np.int64) * tl.S + tl.update_stage
    assert np.all(np.diff(key) > 0)
    np.testing.assert_array_equal(tl.b_time[tl.update_mb, tl.update_stage], tl.update_time)
    assert sorted(zip(tl.update_mb.tolist(), tl.update_stage.tolist())) == [(m, s) for m in range(17) for s in range(5)]


def test_validate_rejects_broken_timelines():
    tl = schedules.pipedream(4, 8)
    swapped = tl.f_time.copy()
    swapped[[2, 3], 1] = swapped[[3, 2], 1]  # F(3) before F(2) on stage 1
    early_b = tl.b_time.copy()
    early_b[5, 2] = early_b[5, 3]  # B(5, 2) in the same step as B(5, 3)
    bad_f = tl.f_time.copy()
    bad_f[4, 2] = bad_f[4, 1]  # F(4, 2) in the same step as F(4, 1)
    for f, b, msg in [
        (swapped, tl.b_time, "order"),
        (tl.f_time, early_b, "B\\(m, s\\) before"),
        (bad_f, tl.b_time, "F\\(m, s\\) before"),
    ]:
        broken = schedules.Timeline(kind="pipedream", S=4, N=8, f_time=f, b_time=b, noam=4, stash=True)
        with pytest.raises(ValueError, match=msg):
            schedules.validate(broken)
    one = schedules.pipedream(1, 2)  # F0 B0 F1 B1 on one machine
    clash = schedules.Timeline(
        kind="pipedream", S=1, N=2, f_time=np.array([[0], [1]]), b_time=one.b_time, noam=1, stash=True
    )  # F1 in B0's step
    with pytest.raises(ValueError, match="two ops on one stage in one step"):
        schedules.validate(clash)
    capped = schedules.Timeline(kind="pipedream", S=4, N=8, f_time=tl.f_time, b_time=tl.b_time, noam=2, stash=True)
    with pytest.raises(ValueError, match="NOAM"):
        schedules.validate(capped)
    ls = schedules.local_sgd(3, 12, 3, 2)
    with pytest.raises(ValueError, match="barrier"):
        schedules.validate(
            schedules.Timeline(kind="local_sgd", S=3, N=12, f_time=ls.f_time, b_time=ls.b_time, R=3, H=1)
        )


def test_render_ascii():
    assert schedules.render_ascii(schedules.pipedream(2, 2)) == (
        "machine 1: F1 F2  . B1  . B2\nmachine 2:  . F1 B1 F2 B2  ."
    )


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: schedules.pipedream(0, 4), "S"),
        (lambda: schedules.pipedream(4, 0), "N"),
        (lambda: schedules.pipedream(4, 4, noam=0), "noam"),
        (lambda: schedules.local_sgd(4, 4, 0, 1), "R"),
        (lambda: schedules.local_sgd(4, 4, 4, 0), "H"),
    ],
)
def test_bad_values_name_the_argument(call, name):
    with pytest.raises(ValueError, match=f"^{name} must be"):
        call()


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: schedules.pipedream(4.0, 4), "S"),
        (lambda: schedules.pipedream(4, "8"), "N"),
        (lambda: schedules.pipedream(4, 8, noam=True), "noam"),
        (lambda: schedules.local_sgd(4, 8, 2.5, 1), "R"),
        (lambda: schedules.local_sgd(4, 8, 4, None), "H"),
        (lambda: schedules.pipedream_many([2, 3.0], [4, 6]), "S"),
        (lambda: schedules.local_sgd_many(4, 8, 2, [1, 2.0]), "H"),
    ],
)
def test_non_integers_name_the_argument(call, name):
    with pytest.raises(TypeError, match=f"^{name} must be an integer"):
        call()
