"""Chimera with M > D microbatches per flush (rpd.schedules.family.bidirectional.chimera_concat_order):
forward doubling and backward halving, a reconstruction of the paper's §3.5. Their orders against
the anchor's timetable at the doubled granularity, the timed laws, memory, and the merged
per-microbatch timeline of backward halving."""

import numpy as np
import pytest

from rpd import schedules
from rpd.model.plan import p2p_bytes
from rpd.schedules.family.bidirectional import chimera_concat_order, chimera_order, chimera_rank_of, chimera_slots
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import FWD, check_complete
from rpd.schedules.machinery.timer import flatten

GRID = [(D, M) for D in (2, 4, 6, 8) for M in (1, 3, D, 2 * D, 2 * D + 1, 4 * D)]


@pytest.mark.parametrize("D,M", GRID)
def test_forward_doubling_runs_the_anchor_timetable_of_double_microbatches(D, M):
    """Every worker runs, in the slot order of the anchor's timetable for ceil(M/2) double
    microbatches, microbatch 2v then 2v + 1 of each slot's double microbatch v, on the worker
    the anchor places v's stage."""
    V = -(-M // 2)
    order = chimera_concat_order(D, M, "forward_doubling")
    check_complete(order, D, M)
    f_slot, b_slot = chimera_slots(D, V)
    rank = chimera_rank_of(D, V)
    for w, a in enumerate(order):
        want = []
        for g in range(D):
            for v in range(V):
                if rank[g, v] != w:
                    continue
                for kind, slot in ((FWD, f_slot[g, v]), (2, b_slot[g, v])):
                    want += [(slot, piece, kind, g, 2 * v + piece) for piece in (0, 1) if 2 * v + piece < M]
        want.sort()
        assert a[:, :3].tolist() == [[k, g, m] for _, _, k, g, m in want]


def test_backward_halving_is_forward_doubling_on_half_microbatches():
    for D, M in [(4, 8), (6, 5)]:
        a = chimera_concat_order(D, M, "backward_halving")
        b = chimera_concat_order(D, 2 * M, "forward_doubling")
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert all(np.array_equal(x, y) for x, y in zip(chimera_concat_order(4, 8), chimera_order(4, 8), strict=True))


@pytest.mark.parametrize("D", [2, 4, 6, 8])
@pytest.mark.parametrize("units", [1, 2, 3])
def test_bubble_laws_at_backward_twice_forward(D, units):
    """At B = 2F, forward doubling with M a multiple of 2D idles exactly as direct concatenation
    does at F = B: f_total = (D-2)/(2M+D-2) (its intermediate bubbles are gone); backward halving
    with M a multiple of D has the anchor's form at 2M half microbatches, (D-2)/(4M+D-2); direct
    concatenation at B = 2F idles more (for D >= 4)."""
    M = 2 * D * units
    fd = schedules.chimera(D, M, M, CostModel(F=1, B=2), concat="forward_doubling")
    bh = schedules.chimera(D, M, M, CostModel(F=2, B=4), concat="backward_halving")
    direct = schedules.chimera(D, M, M, CostModel(F=1, B=2))
    assert fd.bubble_ratio() == pytest.approx((D - 2) / (2 * M + D - 2), abs=1e-12)
    assert bh.bubble_ratio() == pytest.approx((D - 2) / (4 * M + D - 2), abs=1e-12)
    bh_odd = schedules.chimera(
        D, D * (2 * units - 1), D * (2 * units - 1), CostModel(F=2, B=4), concat="backward_halving"
    )
    assert bh_odd.bubble_ratio() == pytest.approx((D - 2) / (4 * bh_odd.M + D - 2), abs=1e-12)
    if D >= 4:
        assert direct.bubble_ratio() > fd.bubble_ratio() > bh.bubble_ratio()


@pytest.mark.parametrize("D,M", [(4, 8), (4, 13), (6, 12), (8, 16), (8, 40)])
def test_memory_doubling_doubles_activations_halving_keeps_them(D, M):
    c = CostModel(F=2, B=4)
    direct = memory.peak_activations(schedules.chimera(D, M, M, c))
    np.testing.assert_array_equal(
        memory.peak_activations(schedules.chimera(D, M, M, c, concat="forward_doubling")), 2 * direct
    )
    np.testing.assert_array_equal(
        memory.peak_activations(schedules.chimera(D, M, M, c, concat="backward_halving")), direct
    )
    for concat in ("direct", "forward_doubling", "backward_halving"):  # two replicas either way
        assert memory.weight_memory(schedules.chimera(D, M, M, c, concat=concat)).tolist() == [2] * D


def test_backward_halving_reports_microbatches():
    """The merged timeline: F(m, g) starts with its first half, its gradient is complete when its
    second half's backward ends; makespan, flush ends and busy ticks are the pieces' own; p2p
    bytes count each half at half a microbatch's values."""
    D, N, M = 4, 16, 8
    c = CostModel(F=2, B=4, p2p=1, allreduce=(3, 0))
    tl = schedules.chimera(D, N, M, c, values=1, concat="backward_halving")
    half = schedules.chimera(
        D, 2 * N, 2 * M, CostModel(F=1, B=2, p2p=1, allreduce=(3, 0)), values=1, concat="forward_doubling"
    )
    assert (tl.N, tl.M, tl.pieces, tl.concat, tl.T) == (N, M, 2, "backward_halving", half.T)
    np.testing.assert_array_equal(tl.f_time, half.f_time[0::2])
    np.testing.assert_array_equal(tl.b_time, half.b_time[1::2])
    np.testing.assert_array_equal(tl.flush_time, half.flush_time)
    np.testing.assert_array_equal(tl.busy(), half.busy())
    assert tl.busy().sum() == N * D * (2 + 4)
    out = np.arange(1.0, D + 1)
    np.testing.assert_allclose(p2p_bytes(tl, out), p2p_bytes(schedules.chimera(D, N, M, c), out))


def test_concat_errors():
    with pytest.raises(ValueError, match="concat must be one of"):
        schedules.chimera(4, 8, 8, concat="halving")
    with pytest.raises(ValueError, match="costs.F and costs.B must be even"):
        schedules.chimera(4, 8, 8, CostModel(F=1, B=2), concat="backward_halving")
    with pytest.raises(ValueError, match="costs.F and costs.B must be even"):
        schedules.chimera(4, 8, 8, None, concat="backward_halving")
    with pytest.raises(ValueError, match="stragglers"):
        schedules.chimera(4, 8, 8, CostModel(F=2, B=4, straggler=(0.1, 2)), concat="backward_halving")
    with pytest.raises(ValueError, match="even number of workers"):
        chimera_concat_order(5, 8, "forward_doubling")


def test_pieces_of_one_microbatch_run_back_to_back():
    """Halves of a microbatch are consecutive ops of one worker (a forward sent in two messages)."""
    tl = schedules.chimera(4, 8, 8, CostModel(F=2, B=4), concat="backward_halving")
    t = tl.table
    for w in range(4):
        mine = t.rank == w
        kind, stage, mb = t.kind[mine], t.stage[mine], t.mb[mine]
        assert np.all(kind[0::2] == kind[1::2]) and np.all(stage[0::2] == stage[1::2]) and np.all(mb[0::2] == mb[1::2])
    assert flatten(chimera_concat_order(4, 8, "backward_halving"), 4, 16).mb.max() == 15
