"""rpd.schedules.machinery.measured: the float event-time replay on programs timed by hand."""

import numpy as np
import pytest

from rpd.schedules.machinery.measured import Program, replay


def _program(stream, group, deps=()):
    d = np.array(deps, np.int64).reshape(-1, 3)
    return Program(np.array(stream), np.array(group), d[:, 0], d[:, 1], d[:, 2])


def test_rendezvous_ends_at_latest_start_plus_own_transfer():
    # stream 0: a (3 s) then x; stream 1: y; x and y meet. x starts at 3, y at 0: both end at
    # 3 + own transfer (1 and 2), then b (1 s) after x: 4 .. 5
    p = _program([0, 0, 1, 0], [-1, 7, 7, -1])
    start, end = replay(p, np.array([[3.0], [1.0], [2.0], [1.0]]))
    assert start[:, 0].tolist() == [0, 3, 0, 4]
    assert end[:, 0].tolist() == [3, 4, 5, 5]


def test_latency_edges_and_batch():
    # b (stream 1) waits for a (stream 0) plus latency row 0; two batch columns at once
    p = _program([0, 1], [-1, -1], [(0, 1, 0)])
    _, end = replay(p, np.array([[2.0, 1.0], [1.0, 1.0]]), latency=np.array([[0.5, 3.0]]))
    assert end[1].tolist() == [3.5, 5.0]


def test_deadlock_is_named():
    # x waits for y's rendezvous partner, which comes after a slot that waits for x
    p = _program([0, 0, 1, 1], [5, -1, -1, 5], [(0, 2, -1)])
    with pytest.raises(ValueError, match="program deadlocks"):
        replay(p, np.ones((4, 1)))
