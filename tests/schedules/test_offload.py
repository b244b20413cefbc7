"""Activation offload over a host link per rank (rpd.schedules.machinery.offload; docs/schedules.md#activation-offload):
transfers are ops on the timeline, timed with the compute ops; offloaded activations leave the
device's peak; the step grows only where the link cannot keep up; every schedule takes it."""

from __future__ import annotations

import numpy as np
import pytest

from rpd import registry, schedules
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.costs import CostModel, HostLink
from rpd.schedules.machinery.offload import D2H, H2D


def test_worked_case_one_rank():
    """S = 1, GPipe, M = 3, F = B = 2: F's at 0, 2, 4, B's at 6, 8, 10. Every activation has 2
    ops before its B, so all go out: D2H after its F ([2,3), [4,5), [6,7)); H2D once its D2H is
    done and the op before the one before its B has ended: [4,5), [6,7), [8,9). Nothing waits:
    T = 12; the peak is 3 (at tick 4 F2 starts as H2D0 brings microbatch 0 back). A 3-tick
    H2D cannot keep up: B0 waits until 7, B1 until 10, B2 until 13, T = 15."""
    tl = schedules.gpipe(1, 3, 3, costs=CostModel(F=2, B=2, host=HostLink(1, 1)))
    x = tl.transfers
    np.testing.assert_array_equal(x.start[x.kind == D2H], [2, 4, 6])
    np.testing.assert_array_equal(x.start[x.kind == H2D], [4, 6, 8])
    assert tl.T == 12 and memory.peak_activations(tl)[0] == 3
    slow = schedules.gpipe(1, 3, 3, costs=CostModel(F=2, B=2, host=HostLink(1, 3)))
    np.testing.assert_array_equal(slow.b_time[:, 0] + 1 - 2, [7, 10, 13])
    assert slow.T == 15


@pytest.mark.parametrize("name", ["1f1b", "interleaved", "gpipe", "zb_v", "dualpipe_v", "combined_1f1b"])
def test_fast_link_lowers_the_peak_at_no_cost(name):
    """A link that moves an activation in half a forward: the same makespan, every rank's peak
    no higher and the busiest rank's lower; a slow link costs time, never memory."""
    M = 8
    base = registry.make(name, 4, 16, M, CostModel(F=2, B=4))
    fast = registry.make(name, 4, 16, M, CostModel(F=2, B=4, host=HostLink(1, 1)))
    slow = registry.make(name, 4, 16, M, CostModel(F=2, B=4, host=HostLink(6, 6)))
    split = base.split
    peak = lambda tl: memory.peak_activations(tl, until="I" if split else "B")  # noqa: E731
    assert fast.T == base.T and slow.T > base.T
    assert np.all(peak(fast) <= peak(base)) and peak(fast).max() < peak(base).max()
    assert np.all(peak(slow) <= peak(base))
    np.testing.assert_array_equal(fast.f_time, base.f_time)  # the forwards never wait


def test_every_schedule_takes_a_host_link():
    """The option lives in the cost model: every registered schedule times its transfers, each
    offloaded activation goes out after its F and back before its backward, one transfer at a
    time on each link."""
    link = HostLink(2, 2, latency=1)
    for name, entry in registry.SCHEDULES.items():
        S, M = 4, entry.default("M", 4)
        tl = registry.make(name, S, 4 * M, M, CostModel(F=2, B=4, I=2, W=2, host=link))
        x = tl.transfers
        assert x is not None, name
        assert (len(x.kind) == 0) == (name == "gems"), name  # GEMS runs each F right before its B
        out, back = x.kind == D2H, x.kind == H2D
        f_end = tl.f_time + tl.costs.resolve(tl.n_stages, tl.split).F[None, :]
        assert np.all(x.start[out] >= f_end[x.mb[out], x.stage[out]]), name
        assert np.all(x.end - x.start == 3), name
        for lane in (out, back):
            for r in range(S):
                s, e = x.start[lane & (x.rank == r)], x.end[lane & (x.rank == r)]
                o = np.argsort(s)
                assert np.all(s[o][1:] >= e[o][:-1]), name


def test_host_link_checks_its_fields():
    with pytest.raises(ValueError, match=r"costs.host.min_gap must be >= 2"):
        CostModel(host=HostLink(1, 1, min_gap=1))
    with pytest.raises(ValueError, match=r"costs.host must be HostLink"):
        CostModel(host=(1,))
    assert CostModel(host=(3, 4)).host == HostLink(3, 4) and not CostModel(host=(1, 1)).is_unit
