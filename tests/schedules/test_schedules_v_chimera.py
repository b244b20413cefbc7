"""rpd.schedules.family.v_shape (ZB-V, DualPipeV) and rpd.schedules.family.bidirectional: the orders against their
anchors (torch's DualPipeV test artifact, docs/schedules.md#chimera's listing), completeness, per-rank
op counts, parameter errors, and the timed closed forms of docs/schedules.md#zb-v to #chimera."""

import re
from pathlib import Path

import numpy as np
import pytest

from rpd.schedules.family.bidirectional import chimera_down, chimera_order, chimera_rank_of, chimera_slots
from rpd.schedules.family.v_shape import dualpipe_v_order, v_stage_to_rank, zbv_order
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, CHAR_KIND, FWD, check_complete
from rpd.schedules.machinery.timer import flatten, time_order
from rpd.schedules.machinery.torch_format import from_csv

V_GRID = [(S, M) for S in (1, 2, 3, 4, 8) for M in (1, 2, S, 2 * S - 1, 2 * S, 2 * S + 1, 4 * S)]
DPV_GRID = [(S, M) for S, M in V_GRID if M >= 2 * S]
CHIMERA_GRID = [(D, M) for D in (2, 4, 6, 8) for M in (1, 2, D // 2 + 1, D, D + 1, 2 * D, 3 * D + 1)]


def timed(order, n_stages, M, F=1, B=2, I=1, W=1, FB=None, p2p=0):  # noqa: E741
    """(makespan, per-rank span, per-rank busy ticks) from the one timer; a fused pair's FB
    cost is carried by its second op, as in rpd.schedules.machinery.timer.op_durations."""
    flat = flatten(order, n_stages, M)
    dur = np.array([0, F, B, I, W], np.int64)[flat.kind]
    if FB is not None:
        dur[flat.fused] = FB
    start, end = time_order(flat, dur, p2p)
    first_of_pair = np.roll(flat.fused, -1) & (np.arange(len(dur)) < len(dur) - 1)
    ranks = range(len(order))
    span = np.array([end[flat.rank == r].max() - start[flat.rank == r].min() for r in ranks])
    busy = np.array([dur[(flat.rank == r) & ~first_of_pair].sum() for r in ranks])
    return int(end.max()), span, busy


def counts(a):
    return {k: int(np.sum(a[:, 0] == k)) for k in (FWD, BWD, BWD_I, BWD_W)}


# ------------------------------------------------------------------ V placement


def test_v_stage_to_rank():
    assert v_stage_to_rank(1).tolist() == [0, 0]
    assert v_stage_to_rank(4).tolist() == [0, 1, 2, 3, 3, 2, 1, 0]


@pytest.mark.parametrize("S,M", V_GRID)
def test_zbv_complete_and_counts(S, M):
    order = zbv_order(S, M)
    check_complete(order, 2 * S, M, split=True)
    rank = v_stage_to_rank(S)
    for r, a in enumerate(order):
        assert np.all(rank[a[:, 1]] == r)
        assert counts(a) == {FWD: 2 * M, BWD: 0, BWD_I: 2 * M, BWD_W: 2 * M}
        assert not a[:, 3].any()
        # warm-up: 2(S-r)-1 F's of chunk 0 (fewer when M is smaller)
        w = min(2 * (S - r) - 1, M)
        assert a[:w].tolist() == [[FWD, r, j, 0] for j in range(w)]


@pytest.mark.parametrize("S,M", DPV_GRID)
def test_dualpipe_v_complete_and_counts(S, M):
    order = dualpipe_v_order(S, M)
    check_complete(order, 2 * S, M)
    rank = v_stage_to_rank(S)
    for r, a in enumerate(order):
        assert np.all(rank[a[:, 1]] == r)
        # docs/schedules.md#dualpipev's steps: I (and W) in steps 3, 6 (half of 2(r+1)) and 7; B elsewhere
        n_split = 2 * S - r - 1
        assert counts(a) == {FWD: 2 * M, BWD: 2 * M - n_split, BWD_I: n_split, BWD_W: n_split}
        # steps 4 and 5 overlap F with B: 2(M-2S+r+1) pairs, less one on the last rank, plus S-r-1
        n_fused = 2 * (M - 2 * S + r + 1) + (S - r - 1) - (r == S - 1)
        assert int(a[:, 3].sum()) == n_fused
        fused = np.nonzero(a[:, 3])[0]
        assert np.all(a[fused, 0] == BWD) and np.all(a[fused - 1, 0] == FWD)


def test_dualpipe_v_matches_torch_artifact():
    """torch's test artifact dualpipev_4rank_10mb.csv (pytorch/pytorch @a2af973f, tests/data/torch):
    the expected ScheduleDualPipeV order for 4 ranks, 10 microbatches, op for op."""
    theirs = from_csv((Path(__file__).parents[1] / "data" / "torch" / "dualpipev_4rank_10mb.csv").read_text())
    for a, b in zip(dualpipe_v_order(4, 10), theirs):
        assert a.tolist() == b.tolist()


def test_v_errors():
    for bad in (0, -1):
        with pytest.raises(ValueError, match="S"):
            zbv_order(bad, 4)
        with pytest.raises(ValueError, match="M"):
            zbv_order(2, bad)
        with pytest.raises(ValueError, match="S"):
            dualpipe_v_order(bad, 4)
        with pytest.raises(ValueError, match="S"):
            v_stage_to_rank(bad)
    with pytest.raises(ValueError, match="M"):
        dualpipe_v_order(4, 7)  # torch: M >= 2S
    with pytest.raises(ValueError, match="M"):
        dualpipe_v_order(2, 0)
    with pytest.raises(TypeError, match="S"):
        zbv_order(2.0, 4)


# ------------------------------------------------------------------ Chimera

# docs/schedules.md#chimera, the anchor's per-worker order for D = 4, N = 4 (d/u: direction; the n-th
# microbatch of that direction; s: stage). Here the down microbatches are 0, 1 and the up ones 2, 3.
CHIMERA_4_4 = """\
w0: dF0@s0 dF1@s0 uF0@s3 uB0@s3 uF1@s3 uB1@s3 dB0@s0 dB1@s0
w1: dF0@s1 uF0@s2 dF1@s1 uF1@s2 uB0@s2 dB0@s1 uB1@s2 dB1@s1
w2: uF0@s1 dF0@s2 uF1@s1 dF1@s2 dB0@s2 uB0@s1 dB1@s2 uB1@s1
w3: uF0@s0 uF1@s0 dF0@s3 dB0@s3 dF1@s3 dB1@s3 uB0@s0 uB1@s0
"""


def test_chimera_matches_zoo_listing():
    order = chimera_order(4, 4)
    for w, line in enumerate(CHIMERA_4_4.splitlines()):
        want = []
        for tok in line.split()[1:]:
            d, kind, n, s = re.fullmatch(r"([du])([FB])(\d)@s(\d)", tok).groups()
            want.append([CHAR_KIND[kind], int(s), int(n) + (0 if d == "d" else 2), 0])
        assert order[w].tolist() == want


@pytest.mark.parametrize("D,M", CHIMERA_GRID)
def test_chimera_complete_and_placement(D, M):
    order = chimera_order(D, M)
    check_complete(order, D, M)
    rank_of = chimera_rank_of(D, M)
    down = chimera_down(D, M)
    g = np.arange(D)
    for j in range(M):
        assert rank_of[:, j].tolist() == (g if down[j] else D - 1 - g).tolist()
    for w, a in enumerate(order):
        assert np.all(rank_of[a[:, 1], a[:, 2]] == w)
        assert counts(a) == {FWD: M, BWD: M, BWD_I: 0, BWD_W: 0}  # one stage of every microbatch
    # units of D/2 microbatches alternate down, up, down, ...
    assert down.tolist() == [(j // (D // 2)) % 2 == 0 for j in range(M)]


@pytest.mark.parametrize("D,M", CHIMERA_GRID)
def test_chimera_follows_the_anchor_timetable(D, M):
    """Each worker runs its ops in the anchor's slot order; at F = B = 1 the dependency timer
    starts no op later than its slot, and ends when the anchor's timetable ends."""
    order = chimera_order(D, M)
    f_slot, b_slot = chimera_slots(D, M)
    flat = flatten(order, D, M)
    slot = np.where(flat.kind == FWD, f_slot[flat.stage, flat.mb], b_slot[flat.stage, flat.mb])
    for w in range(D):
        assert np.all(np.diff(slot[flat.rank == w]) > 0)
    start, end = time_order(flat, np.ones(len(slot), np.int64), 0)
    assert np.all(start <= slot)
    assert end.max() == slot.max() + 1


def test_chimera_errors():
    for D in (3, 5):
        with pytest.raises(ValueError, match="D"):
            chimera_order(D, 4)
    for D in (0, 1):
        with pytest.raises(ValueError, match="D"):
            chimera_order(D, 4)
    with pytest.raises(ValueError, match="M"):
        chimera_order(4, 0)
    with pytest.raises(ValueError, match="D"):
        chimera_rank_of(7, 4)
    with pytest.raises(TypeError, match="M"):
        chimera_order(4, 2.5)


# ------------------------------------------------------------------ timed closed forms (docs/schedules.md)


@pytest.mark.parametrize("S,M", [(S, M) for S, M in V_GRID if M >= 2 * S - 1])
def test_zbv_zero_bubble_at_equal_chunk_costs(S, M):
    """docs/schedules.md#zb-v: at chunk costs F = I = W = 1 every rank's span is 6M and T_flush = 6M + S - 1
    (needs M >= 2S - 1: torch pads to that many microbatches; fewer leave warm-up bubbles)."""
    T, span, busy = timed(zbv_order(S, M), 2 * S, M, F=1, I=1, W=1, B=2)
    assert T == 6 * M + S - 1
    np.testing.assert_array_equal(span, 6 * M)
    np.testing.assert_array_equal(busy, 6 * M)


def test_zbv_few_microbatches_leave_bubbles():
    for S in (2, 3, 4, 8):
        T, span, _ = timed(zbv_order(S, 1), 2 * S, 1)
        assert T > 6 + S - 1 and span.max() > 6


def test_dualpipe_v_victarry_reference():
    """docs/schedules.md#dualpipev: p=4, m=16, f=1, b=2, d=w=1, fb=2.75 gives T = 95.5 (Victarry's emulator and
    formula); here every cost is scaled by 4 to integer ticks."""
    T, _, _ = timed(dualpipe_v_order(4, 16), 8, 16, F=4, B=8, I=4, W=4, FB=11)
    assert T == 382


@pytest.mark.parametrize(
    "f,d,w,fb", [(1, 1, 1, 2), (1, 1, 1, 3), (4, 4, 4, 11), (2, 1, 1, 3), (3, 2, 2, 5), (2, 2, 2, 5)]
)
@pytest.mark.parametrize("S,M", [(2, 4), (2, 7), (3, 6), (3, 9), (4, 8), (4, 16), (6, 13)])
def test_dualpipe_v_victarry_formula(S, M, f, d, w, fb):
    """Victarry ``formula.py``: T = (p-1)f + 2pf + (2(m-p)-1+p-1)fb + (2p-1)d + w + 2b + f
    (docs/schedules.md#dualpipev). It holds exactly for these costs, all with I, W <= F; with I or W > F the
    formula underestimates (not tested)."""
    b = d + w
    p, m = S, M
    T, _, _ = timed(dualpipe_v_order(S, M), 2 * S, M, F=f, B=b, I=d, W=w, FB=fb)
    assert T == (p - 1) * f + 2 * p * f + (2 * (m - p) - 1 + p - 1) * fb + (2 * p - 1) * d + w + 2 * b + f


@pytest.mark.parametrize("S,M", DPV_GRID)
def test_dualpipe_v_readme_bubble_without_overlap_gain(S, M):
    """docs/schedules.md#dualpipev: at fb = f + b (unit chunk costs f = d = w = 1) rank 0 idles 2(S-1) chunk
    ticks within its span, the README's (S-1)(F&B + B - 3W)."""
    T, span, busy = timed(dualpipe_v_order(S, M), 2 * S, M, F=1, B=2, I=1, W=1, FB=3)
    assert span[0] - busy[0] == (S - 1) * (3 + 2 - 3)
    np.testing.assert_array_equal(T - busy, 2 * (S - 1))


@pytest.mark.parametrize("D,N", [(4, 4), (4, 8), (8, 8), (8, 16), (6, 6), (4, 16)])
def test_chimera_bubble_at_equal_costs(D, N):
    """docs/schedules.md#chimera: f_total = (D-2)/(2N+D-2) at tF = tB, i.e. T = 2N + D - 2 slots."""
    T, _, busy = timed(chimera_order(D, N), D, N, F=1, B=1)
    assert T == 2 * N + D - 2
    np.testing.assert_array_equal(busy, 2 * N)
    assert 1 - busy.sum() / (D * T) == pytest.approx((D - 2) / (2 * N + D - 2))


@pytest.mark.parametrize("D,N,f", [(4, 4, 0.25), (8, 8, 0.333), (4, 16, 0.172)])
def test_chimera_bubble_at_backward_twice_forward(D, N, f):
    """docs/schedules.md#chimera's table at tB = 2tF; (4, 16) is worse than 1F1B's (S-1)/(M+S-1) = 0.158."""
    T, _, busy = timed(chimera_order(D, N), D, N, F=1, B=2)
    f_total = 1 - busy.sum() / (D * T)
    assert f_total == pytest.approx(f, abs=5e-4)
    if (D, N) == (4, 16):
        assert f_total > (D - 1) / (N + D - 1)


def test_chimera_allreduce_gap_after_every_flush():
    from rpd import schedules
    from rpd.schedules.machinery.costs import CostModel

    free = schedules.chimera(4, 32, 16, CostModel(F=1, B=2))
    paid = schedules.chimera(4, 32, 16, CostModel(F=1, B=2, allreduce=(2, 0.5)), values=4)
    assert paid.T == free.T + 2 * 4  # ceil(2 + 0.5 * 4) = 4 ticks after each of the 2 flushes
    assert memory.weight_memory(paid).tolist() == [2, 2, 2, 2]  # two stage replicas per worker
