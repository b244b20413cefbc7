"""D data-parallel pipelines with local steps (rpd.schedules.machinery.data_parallel): the timeline against
an independent reconstruction from the schedule without any all-reduce."""

import numpy as np
import pytest

from rpd import registry, schedules
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.data_parallel import data_parallel

S, VALUES = 4, 7
COSTS = (
    CostModel(F=1, B=2, I=1, W=1, p2p=1, allreduce=(3, 0.5), straggler=(0.2, 3), seed=1),
    CostModel(F=2, B=4, allreduce=(20, 0)),
)
MAKERS = {
    "1f1b": lambda N, c: schedules.one_f_one_b(S, N, 4, costs=c),
    "gpipe": lambda N, c: schedules.gpipe(S, N, 4, costs=c),
    "zb_h1": lambda N, c: schedules.zb_h1(S, N, 4, costs=c),
    "interleaved": lambda N, c: schedules.interleaved(S, N, 4, 2, costs=c),
}


def expected(base, D, costs, overlap, H):
    """The D-pipeline timeline rebuilt from ``base`` (the schedule alone): each flush's ops keep
    their offsets from the flush's start; after a round's last flush (every H-th, and the last)
    rank r's all-reduce of its values takes a_r ticks from the flush's end (or, overlapped, from
    its own last backward), and the next flush starts when the slowest is over."""
    t, M, G = base.table, base.M, base.n_stages
    Q = base.N // M
    q_op = t.mb // M
    rank_of = np.zeros(G, np.int64)
    rank_of[t.stage] = t.rank
    a = np.array([costs.allreduce_ticks(2 * (D - 1) / D * VALUES * np.sum(rank_of == r)) for r in range(S)])
    bwd = np.isin(t.kind, (schedules.BWD, schedules.BWD_W))
    start, end, flush_time, land, sync_ticks = np.zeros_like(t.start), np.zeros_like(t.end), [], np.zeros((Q, G)), []
    at = 0  # where flush q starts
    for q in range(Q):
        ops = q_op == q
        s0 = t.start[ops].min()
        assert q == 0 or s0 == t.end[q_op == q - 1].max()  # base: back to back at its barriers
        start[ops], end[ops] = t.start[ops] - s0 + at, t.end[ops] - s0 + at
        stop = end[ops].max()
        last = np.array([end[ops & bwd & (t.rank == r)].max() for r in range(S)])
        finish = (last if overlap else stop) + a
        stage_done = np.array([end[ops & bwd & (t.stage == g)].max() for g in range(G)])
        if (q + 1) % H == 0 or q == Q - 1:
            land[q] = finish[rank_of] - 1
            at = max(stop, finish.max())
            sync_ticks.append(at - 1)
        else:
            land[q] = stage_done - 1
            at = stop
        flush_time.append(at - 1)
    return start, end, np.array(flush_time), land, np.array(sync_ticks)


@pytest.mark.parametrize("name", sorted(MAKERS))
@pytest.mark.parametrize("overlap", [False, True])
def test_rounds_match_the_reconstruction(name, overlap):
    """H = 1 (today's gradient all-reduce after every flush) and H = 2, 4 on a partial last round:
    every op's ticks, flush ends, landings and round ends equal the reconstruction exactly."""
    for ci, c in enumerate(COSTS):
        if name == "zb_h1" and ci == 1:
            c = CostModel(F=2, B=4, I=2, W=2, allreduce=(20, 0))
        base = MAKERS[name](24, c)
        for D, H in [(2, 1), (3, 1), (2, 2), (3, 4)]:
            tl = data_parallel(base, D, c, values=VALUES, overlap=overlap, local_steps=H)
            start, end, flush_time, land, sync = expected(base, D, c, overlap, H)
            np.testing.assert_array_equal(tl.table.start, start)
            np.testing.assert_array_equal(tl.table.end, end)
            np.testing.assert_array_equal(tl.flush_time, flush_time)
            np.testing.assert_array_equal(tl.dp_land, land)
            np.testing.assert_array_equal(tl.dp_sync, sync)
            assert tl.local_steps == H and tl.T == flush_time[-1] + 1


def test_gaps_only_at_round_ends_and_fewer_ticks():
    """With H = 3 on 7 flushes the barrier gap follows flushes 2, 5 and 6 only; H > 1 finishes
    sooner than a gradient all-reduce per flush when the all-reduce costs ticks, and equally
    soon when it is free."""
    c = CostModel(F=1, B=2, allreduce=(20, 0))
    base = schedules.one_f_one_b(S, 28, 4, costs=c)
    flush = base.flush_time[0] + 1  # ticks of one flush alone
    tl = data_parallel(base, 4, c, values=VALUES, local_steps=3)
    gap = np.diff(np.concatenate([[-1], tl.flush_time])) - flush
    a = c.allreduce_ticks(2 * 3 / 4 * VALUES)
    np.testing.assert_array_equal(gap, [0, 0, a, 0, 0, a, a])
    np.testing.assert_array_equal(tl.dp_sync, tl.flush_time[[2, 5, 6]])
    ddp = data_parallel(base, 4, c, values=VALUES)
    assert tl.T == ddp.T - 4 * a and tl.T < ddp.T
    free = CostModel(F=1, B=2)
    assert data_parallel(base, 4, free, local_steps=3).T == data_parallel(base, 4, free).T


def test_local_steps_from_the_registry():
    """``schedule.local_steps`` (ScheduleParams.local_steps) reaches the timeline; 1 leaves the
    resolved parameters (a run's key) as they were."""
    c = CostModel(F=1, B=2, allreduce=(5, 0))
    p = registry.ScheduleParams(S=S, N=32, M=4, D=2, local_steps=4)
    tl = registry.build("1f1b", p, c, values=VALUES)
    ref = data_parallel(schedules.one_f_one_b(S, 32, 4, costs=c), 2, c, values=VALUES, local_steps=4)
    assert tl.local_steps == 4 and len(tl.dp_sync) == 2
    np.testing.assert_array_equal(tl.table.start, ref.table.start)
    np.testing.assert_array_equal(tl.dp_land, ref.dp_land)
    one = registry.ScheduleParams(S=S, N=32, M=4, D=2, local_steps=1)
    assert registry.resolve("1f1b", one) == registry.resolve("1f1b", registry.ScheduleParams(S=S, N=32, M=4, D=2))


@pytest.mark.parametrize(
    "name,fields,message",
    [
        ("1f1b", dict(D=2, local_steps=0), "schedule.local_steps must be >= 1, got 0"),
        ("1f1b", dict(local_steps=2), "schedule.local_steps > 1 needs schedule.D > 1 pipelines to average, got D=1"),
        ("1f1b", dict(D=1, local_steps=2), "schedule.local_steps > 1 needs schedule.D > 1"),
        ("pipedream", dict(local_steps=4), "schedule.local_steps > 1 needs a schedule with a flush, got pipedream"),
        (
            "local_sgd",
            dict(D=1, local_steps=2),
            "schedule.local_steps > 1 needs a schedule with a flush, got local_sgd",
        ),
    ],
)
def test_bad_local_steps_name_the_field(name, fields, message):
    with pytest.raises(ValueError) as err:
        registry.check_schedule(name, registry.ScheduleParams(S=S, N=16, M=4, **fields), prefix="schedule.")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="^local_steps > 1 needs D > 1 pipelines"):
        data_parallel(schedules.one_f_one_b(S, 8, 4), 1, local_steps=2)
