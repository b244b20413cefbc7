"""rpd.schedules family: each schedule's timeline against the closed forms of docs/schedules.md, at unit and
non-unit costs, and the parameter checks."""

import contextlib
import tracemalloc

import numpy as np
import pytest

from rpd import schedules
from rpd.schedules import family
from rpd.schedules.family import orders
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import BWD_I, BWD_W, FWD, check_complete

GRID = [(S, M) for S in (1, 2, 3, 4, 8) for M in (1, 2, S, 2 * S + 1, 4 * S)]
RATIOS = [(1, 1), (1, 2), (2, 3), (1, 3)]


@pytest.mark.parametrize("tF,tB", RATIOS)
@pytest.mark.parametrize("S,M", GRID)
def test_gpipe_and_1f1b_makespan(S, M, tF, tB):
    c = CostModel(F=tF, B=tB)
    for make in (schedules.gpipe, schedules.one_f_one_b):
        tl = make(S, 2 * M, M, c)  # two flushes with a barrier between them
        assert tl.T == 2 * (M + S - 1) * (tF + tB)
        np.testing.assert_array_equal(tl.idle(), 2 * (S - 1) * (tF + tB))
        assert tl.bubble_ratio() == pytest.approx((S - 1) / (M + S - 1))
        assert tl.bubble_overhead() == pytest.approx((S - 1) / M)
        assert tl.flush_time.tolist() == [(M + S - 1) * (tF + tB) - 1, 2 * (M + S - 1) * (tF + tB) - 1]


@pytest.mark.parametrize("S,M", GRID)
def test_activations_gpipe_m_1f1b_min(S, M):
    np.testing.assert_array_equal(memory.peak_activations(schedules.gpipe(S, M, M)), M)
    np.testing.assert_array_equal(
        memory.peak_activations(schedules.one_f_one_b(S, M, M)), np.minimum(S - np.arange(S), M)
    )
    np.testing.assert_array_equal(memory.weight_versions(schedules.one_f_one_b(S, M, M)), 1)


def test_gpipe_p2p_latency_and_1f1b_round_trip():
    for S, M, c in ((4, 8, 1), (4, 8, 2), (3, 5, 1)):
        tl = schedules.gpipe(S, M, M, CostModel(F=1, B=2, p2p=c))
        assert tl.T == (M + S - 1) * 3 + 2 * (S - 1) * c
    # docs/schedules.md#1f1b-with-flush: at S = 4, M = 8, tF = 1, tB = 2, c = 1: 1F1B 49 against GPipe's 39
    c = CostModel(F=1, B=2, p2p=1)
    assert schedules.one_f_one_b(4, 8, 8, c).T == 49
    assert schedules.gpipe(4, 8, 8, c).T == 39
    # c = 1/4 (scaled by 4): 37 against 34.5
    c4 = CostModel(F=4, B=8, p2p=1)
    assert schedules.one_f_one_b(4, 8, 8, c4).T == 37 * 4
    assert schedules.gpipe(4, 8, 8, c4).T == 138


@pytest.mark.parametrize("f,b", [(1, 1), (1, 2), (2, 3)])
@pytest.mark.parametrize("S,M,v", [(2, 4, 2), (4, 8, 2), (4, 16, 3), (8, 16, 4), (4, 4, 2), (8, 32, 2)])
def test_interleaved_makespan_and_rank0_memory(S, M, v, f, b):
    tl = schedules.interleaved(S, M, M, v, CostModel(F=f, B=b))  # chunk costs
    assert tl.T == (v * M + S - 1) * (f + b)
    np.testing.assert_array_equal(tl.idle(), (S - 1) * (f + b))
    assert tl.bubble_ratio() == pytest.approx((S - 1) / (v * M + S - 1))
    assert tl.bubble_overhead() == pytest.approx((S - 1) / (v * M))
    chunks = np.minimum(v * M, 2 * (S - 1 - np.arange(S)) + (v - 1) * S + 1)
    np.testing.assert_array_equal(memory.peak_activations(tl) * v, chunks)


def test_interleaved_group_size_changes_memory_not_makespan():
    base = schedules.interleaved(4, 16, 16, 2)
    for g in (4, 6, 8, 16):
        tl = schedules.interleaved(4, 16, 16, 2, group=g)
        assert tl.T == base.T
        assert memory.peak_activations(tl)[0] * 2 == min(32, 2 * 3 + g + 1)
    assert orders.megatron_table(5, 2, 3) == [
        (0, 0),
        (1, 0),
        (2, 0),
        (0, 1),
        (1, 1),
        (2, 1),
        (3, 0),
        (4, 0),
        (3, 1),
        (4, 1),
    ]  # Megatron's docstring


@pytest.mark.parametrize("tF,tI,tW", [(1, 1, 1), (1, 2, 1), (2, 3, 1), (3, 2, 2)])
@pytest.mark.parametrize("S,M", [(2, 4), (4, 8), (4, 16), (8, 32)])
def test_zb_h1_idle(S, M, tF, tI, tW):
    tl = schedules.zb_h1(S, M, M, CostModel(F=tF, I=tI, W=tW))
    np.testing.assert_array_equal(tl.idle(), (S - 1) * (tF + tI - tW))
    np.testing.assert_array_equal(memory.peak_activations(tl), S - np.arange(S))  # F-not-I = S - r
    assert memory.peak_activations(tl, until="W").max() <= S
    if (tF, tI, tW) == (1, 1, 1):
        assert tl.T == 3 * M + S - 1
        one = schedules.one_f_one_b(S, M, M, CostModel(F=1, B=2))
        assert 3 * tl.idle().sum() == one.idle().sum()  # 1/3 of 1F1B's idle


def test_zb_h1_fixed_order_loses_when_w_exceeds_f():
    tl = schedules.zb_h1(4, 8, 8, CostModel(F=1, I=1, W=2))
    assert tl.idle().tolist() == [3, 3, 3, 3]  # (S-1) * 1, not (S-1)(tF + tI - tW) = 0


@pytest.mark.parametrize("S", [2, 3, 4, 6, 8])
def test_zb_h2_greedy(S):
    for M in range(S, 8 * S + 1, max(1, S // 2)):
        tl = schedules.zb_h2(S, M, M)
        spans = tl.spans()[0]
        assert np.all(spans == 3 * M) == (M >= 2 * S - 1), (S, M, spans)
        assert tl.T == 3 * M + S - 1
        assert memory.peak_activations(tl)[0] == min(M, 2 * S - 1)
        # sail-sg's cap counts an activation until its W: the W residues never push a rank past 2S
        assert memory.peak_activations(tl, "W").max() == min(M, 2 * S), (S, M)


def test_zb_h2_without_the_w_cap_holds_every_microbatch():
    """The rule before the F-not-W cap (F-not-I capped, W free to drift): W's pile up at the end
    and every rank holds all M microbatches; the F-not-W cap is what bounds the peak."""
    S, M = 4, 32
    tl = schedules.zb_h2(S, M, M, max_held=M)
    assert memory.peak_activations(tl, "W").tolist() == [M] * S
    assert memory.peak_activations(schedules.zb_h2(S, M, M), "W").tolist() == [2 * S] * S


def test_zb_h2_overlapped_flushes_reach_the_period():
    S, M, n = 4, 8, 5
    barrier = schedules.zb_h2(S, n * M, M)
    free = schedules.zb_h2(S, n * M, M, overlapped=True)
    assert barrier.T == n * (3 * M + S - 1)
    assert free.period() == 3 * M
    assert free.T == n * 3 * M + S - 1
    assert free.flush_time is None
    zb1 = schedules.zb_h1(S, n * M, M)
    assert zb1.T == barrier.T  # ZB-H2's extra warm-up only pays off without the barrier


def test_2bw_pipemare_orders_are_pipedream_stream():
    pd = schedules.pipedream(4, 12)
    for tl in (schedules.pipedream_2bw(4, 12, 3), schedules.pipemare(4, 12)):
        np.testing.assert_array_equal(tl.f_time, pd.f_time)
        np.testing.assert_array_equal(tl.b_time, pd.b_time)
    assert memory.weight_versions(schedules.pipedream_2bw(4, 12, 3)).tolist() == [2, 2, 2, 2]
    assert memory.weight_versions(schedules.pipemare(4, 12)).tolist() == [1, 1, 1, 1]
    # PD's readiness rule (docs/science.md#schedules) warms up greedily: middle stages run one F more than
    # 1F1B-flush's S - s before their first B (machine 3 runs F1 F2 F3 B1), so they hold more
    # activations and, in that transient, one more stashed version than the steady S - s.
    assert memory.peak_activations(pd).tolist() == [4, 4, 3, 1]
    assert memory.weight_versions(pd).tolist() == [4, 3, 3, 1]
    big = schedules.pipedream(8, 64)
    assert np.all(memory.peak_activations(big) >= 8 - np.arange(8)) and memory.peak_activations(big).max() == 8
    with pytest.raises(ValueError, match="M >= S - 1"):
        schedules.pipedream_2bw(8, 12, 6)


def test_local_sgd_holds_r_copies():
    tl = schedules.local_sgd(4, 16, 4, 2)
    assert memory.weight_versions(tl).tolist() == [4] * 4


def test_bubble_conventions_convert():
    for tl in (
        schedules.gpipe(4, 16, 16),
        schedules.zb_h1(4, 16, 16),
        schedules.pipedream(4, 16),
        schedules.interleaved(4, 16, 16, 2, CostModel(F=1, B=2, p2p=1)),
    ):
        f, r = tl.bubble_ratio(), tl.bubble_overhead()
        assert f == pytest.approx(r / (1 + r))


def test_pipedream_bubble_ratio_unchanged():
    tl = schedules.pipedream(4, 10)
    assert tl.bubble_ratio() == pytest.approx(1 - 2 * 10 / tl.T)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: schedules.gpipe(4, 10, 4), "N"),
        (lambda: schedules.gpipe(0, 4, 4), "S"),
        (lambda: schedules.one_f_one_b(4, 4, 0), "M"),
        (lambda: schedules.interleaved(4, 8, 8, 0), "v"),
        (lambda: schedules.interleaved(4, 8, 8, 2, group=3), "group"),
        (lambda: schedules.interleaved(4, 10, 10, 2, group=4), "M mod group"),
        (lambda: schedules.interleaved(4, 2, 2, 2), "group"),
        (lambda: schedules.zb_h1(4, 8, 4, costs="unit"), "costs"),
        (lambda: schedules.local_sgd(4, 8, 2, 2, values=-1), "values"),
        (lambda: schedules.gpipe(10**5, 10**5, 10**5), "too large"),
    ],
)
def test_bad_parameters_name_the_field(call, name):
    with pytest.raises((ValueError, TypeError), match=name):
        call()


@pytest.mark.parametrize("S,M", [(1, 1), (2, 3), (4, 8), (5, 2)])
def test_orders_are_complete(S, M):
    check_complete(orders.gpipe_order(S, M), S, M)
    check_complete(orders.one_f_one_b_order(S, M), S, M)
    check_complete(orders.zb_h1_order(S, M), S, M)
    if M >= S:
        check_complete(orders.interleaved_order(S, M, 2), 2 * S, M)


def test_split_timeline_fields():
    tl = schedules.zb_h1(4, 8, 8)
    t = tl.table
    assert tl.split and set(np.unique(t.kind)) == {FWD, BWD_I, BWD_W}
    # b_time is the end of W (the gradient is complete), i_time the end of I
    assert np.all(tl.b_time > tl.i_time)
    assert tl.K == 8 * 4 and len(tl.update_time) == tl.K
    assert np.all(np.diff(tl.update_time) >= 0)
    assert tl.op.shape == (tl.T, 4) and set(np.unique(tl.op)) <= {0, FWD, BWD_I, BWD_W}
    assert "I1" in schedules.render_ascii(tl)


@pytest.mark.parametrize(
    "build",
    [
        family.looped_bfs.looped_bfs,
        family.interleaved_zb.interleaved_zb,
        family.combined_1f1b.combined_1f1b,
        family.post_validation.zb_h2_barrier,
        family.post_validation.zb_h2_validated,
    ],
)
def test_flush_schedules_refuse_a_timeline_over_the_op_limit_before_any_work(build):
    """rpd.schedules.family.flushes.check: S, N, M checked and N * S ops bounded in one place."""
    with allocated_at_most(2**20):  # 10⁸ ops built first would be gigabytes: refused from S, N, M alone
        with pytest.raises(ValueError, match="too large to simulate"):
            build(1000, 10**5, 1000)
    with pytest.raises(ValueError, match="N must be a whole number of flushes"):
        build(4, 10, 4)


def test_huge_readiness_runs_are_refused_before_allocating():
    with allocated_at_most(2**20):
        with pytest.raises(ValueError, match="S=100000, N=100 is too large"):
            schedules.pipedream(10**5, 100)
        with pytest.raises(ValueError, match="too large"):
            schedules.local_sgd(10**5, 100, 4, 2)


@contextlib.contextmanager
def allocated_at_most(limit: int):
    """The block's peak of traced allocations (tracemalloc sees numpy's buffers) stays under
    ``limit`` bytes: a refusal made before the work allocates only its message. Bytes, not
    seconds, so a loaded machine cannot flake it."""
    tracemalloc.start()
    try:
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < limit, f"allocated {peak} bytes before refusing"


def test_a_memoised_order_is_a_fresh_copy_each_call():
    """The order builders are memoised (the plan's fits time one order under many costs); an
    order edited in place by its caller must not change the next caller's. 1F1B at S = M = 2,
    by hand: rank 0 runs F0, F1, B0, B1 (one warm-up F), rank 1 F0, B0, F1, B1."""
    F, B = 1, 2  # ir.Op's ints
    want = [[(F, 0, 0), (F, 0, 1), (B, 0, 0), (B, 0, 1)], [(F, 1, 0), (B, 1, 0), (F, 1, 1), (B, 1, 1)]]
    first = orders.one_f_one_b_order(2, 2)
    first[0][:, 2] += 7  # a caller shifting microbatches in place
    for _ in range(2):
        got = orders.one_f_one_b_order(2, 2)
        assert [[tuple(int(x) for x in row[:3]) for row in a] for a in got] == want
