"""AvgPipe (rpd.schedules.family.avgpipe, a reconstruction): the advance-forward order between 1F1B and
GPipe, the devices' interleaving of the pipelines, memory, and the timer's independent loop."""

import numpy as np
import pytest

from rpd.schedules.family import orders
from rpd.schedules.family.avgpipe import avgpipe, avgpipe_order
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.build import timed
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import concat, shift_mb
from rpd.schedules.machinery.timer import time_order_reference


def _same(a, b):
    return all(np.array_equal(x[:, :3], y[:, :3]) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("S, m", [(4, 4), (4, 7), (6, 3)])
def test_advance_moves_from_1f1b_to_gpipe(S, m):
    assert _same(orders.one_f_one_b_order(S, m, advance=0), orders.one_f_one_b_order(S, m))
    assert _same(orders.one_f_one_b_order(S, m, advance=m), orders.gpipe_order(S, m))
    for a in range(m + 1):  # rank s: min(S-1-s+a, m) warm-up forwards, then one more before its first B
        for s, rows in enumerate(orders.one_f_one_b_order(S, m, advance=a)):
            assert int(np.argmax(rows[:, 0] != 1)) == min(S - s + a, m)


@pytest.mark.parametrize("P, a", [(2, 0), (2, 2), (3, 1)])
def test_each_device_keeps_every_pipelines_order_and_the_iterations_in_turn(P, a):
    S, m, Q = 4, 4, 3
    M = P * m
    order = avgpipe_order(S, Q * M, M, P, a)
    one = orders.one_f_one_b_order(S, m, advance=a)
    for s, rows in enumerate(order):
        q = rows[:, 2] // M
        assert np.all(np.diff(q) >= 0)  # iteration q-1 done on the device before iteration q starts
        for qq in range(Q):
            for i in range(P):
                mine = rows[(q == qq) & ((rows[:, 2] % M) // m == i)]
                want = one[s].copy()
                want[:, 2] += qq * M + i * m
                assert np.array_equal(mine[:, :3], want[:, :3])


def test_one_pipeline_is_1f1b_without_a_barrier_and_timer_matches_the_reference_loop():
    S, m, Q = 4, 6, 3
    c = CostModel(F=1, B=2, p2p=1)
    tl = avgpipe(S, Q * m, m, c, pipelines=1)
    ref = timed(
        "1f1b", concat([shift_mb(orders.one_f_one_b_order(S, m), q * m) for q in range(Q)]), S=S, N=Q * m, costs=c
    )
    assert np.array_equal(tl.f_time, ref.f_time) and np.array_equal(tl.b_time, ref.b_time)
    tl2 = avgpipe(S, 2 * Q * m, 2 * m, c, pipelines=2, advance=2)
    dur = {1: 1, 2: 2}
    out = time_order_reference(avgpipe_order(S, 2 * Q * m, 2 * m, 2, 2), lambda k, g, mb, f: dur[k], 1, S)
    t = tl2.table
    assert all(
        out[(int(k), int(g), int(mb))] == (int(a), int(b))
        for k, g, mb, a, b in zip(t.kind, t.stage, t.mb, t.start, t.end)
    )


def test_memory_and_the_second_pipeline_filling_bubbles():
    S, m = 4, 4
    one = avgpipe(S, 3 * m, m, pipelines=1)
    two = avgpipe(S, 6 * m, 2 * m, pipelines=2)
    assert np.array_equal(memory.weight_versions(two), np.full(S, 3))  # two replicas and the centre
    assert np.array_equal(memory.peak_activations(one), [min(S - s, m) for s in range(S)])
    assert np.array_equal(memory.peak_activations(avgpipe(S, 3 * m, m, pipelines=1, advance=m)), np.full(S, m))
    assert two.bubble_ratio() < one.bubble_ratio()
    assert np.all(two.iteration_end()[1:] > two.iteration_end()[:-1])
    with pytest.raises(ValueError, match="advance"):
        avgpipe(S, 2 * m, 2 * m, pipelines=2, advance=m + 1)
    with pytest.raises(ValueError, match="whole number"):
        avgpipe(S, 10, 5, pipelines=2)
