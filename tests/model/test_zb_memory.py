"""ZB-H2's activation peak per rank against the zero-bubble paper's Table 2 and sail-sg's scheduler
(docs/plan.md#zb-h2s-peak-against-the-zero-bubble-paper).

Bytes of one microbatch on one stage: A in all (the paper's M_B, its Table 1 sb(34h + 5as)),
of which A_W (M_W, 32sbh) still waits for W after I. F allocates A at its start, I frees A - A_W
and W frees A_W at their ends (:func:`rpd.model.memory.activation_peak`).
"""

from __future__ import annotations

import numpy as np
import pytest

from rpd import schedules
from rpd.model import hardware, layers
from rpd.model.memory import activation_peak, rank_memory
from rpd.model.stages import partition, stage_costs, stages
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import BWD_I, BWD_W, FWD

# sail-sg/zero-bubble-pipeline-parallelism, megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py
# (main, 39f2c186) and megatron/core/pipeline_parallel/auto_schedule.py (tag zero-bubble-v0.1.0, the
# ICLR code): the order `initial_solution` keeps (best of the eight `Graph.manual_order` settings) at
# p = 4, m = 8, costs F = B = W = 1000, comm 0, mem_f = 34, mem_b = -2, mem_w = -32 (runtime.py's
# f_mem_approx = 34h + 5as at a = 0, w_mem_approx = -32h) and max_mem = k·mem_f, as set by
# `--zero-bubble-max-pending-backward k`. Both files give the same orders; B is rpd's I.
SAIL_SG_2P = (  # k = 2p: the README's ZB2P
    "F0 F1 F2 F3 F4 F5 F6 B0 F7 W0 B1 W1 B2 W2 B3 W3 B4 W4 B5 W5 B6 W6 B7 W7",
    "F0 F1 F2 F3 F4 B0 F5 B1 F6 B2 F7 B3 W0 B4 W1 B5 W2 B6 W3 B7 W4 W5 W6 W7",
    "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 W0 B6 W1 B7 W2 W3 W4 W5 W6 W7",
    "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 W0 W1 W2 W3 W4 W5 W6 W7",
)
SAIL_SG_2P_MINUS_1 = (  # k = 2p - 1: the paper's Table 2 peak
    "F0 F1 F2 F3 F4 F5 F6 B0 W0 F7 B1 W1 B2 W2 B3 W3 B4 W4 B5 W5 B6 W6 B7 W7",
    "F0 F1 F2 F3 F4 B0 F5 B1 F6 B2 W0 F7 B3 B4 W1 W2 B5 B6 W3 W4 B7 W5 W6 W7",
    "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 W0 F7 B5 B6 W1 W2 B7 W3 W4 W5 W6 W7",
    "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 W0 F7 B7 W1 W2 W3 W4 W5 W6 W7",
)
NAMES = {FWD: "F", BWD_I: "B", BWD_W: "W"}


def _order(tl, r: int) -> list[str]:
    """Rank r's ops in time order, named as sail-sg prints them (B for I)."""
    t = tl.table
    k = np.nonzero(t.rank == r)[0]
    k = k[np.argsort(t.start[k], kind="stable")]
    return [f"{NAMES[int(t.kind[i])]}{int(t.mb[i])}" for i in k]


def _peak_of(order: str, a: float, a_w: float) -> float:
    """Most bytes a rank holds running ``order`` one op after another (sail-sg's ``m``)."""
    step = {"F": a, "B": -(a - a_w), "W": -a_w}
    level = np.cumsum([step[op[0]] for op in order.split()])
    return float(level.max())


def _peaks(tl, a: float, a_w: float) -> np.ndarray:
    return activation_peak(tl, np.full(tl.n_stages, a), np.full(tl.n_stages, a_w))


@pytest.mark.parametrize("a_w", [0.0, 0.5, 32 / 34, 1.0])
def test_first_rank_holds_2p_minus_1_activations_and_one_w_residue(a_w):
    """ZB-H2, S = p = 4, M = 8, unit costs, A = 1: rank 0's peak is (2p - 1)·A + A_W = 7 + A_W.

    Derivation. Rank 0's first I can run only at tick 2p - 1 = 7 (F0 reaches the last rank at tick
    3, its I comes back one tick per rank), so ticks 0..6 are the 2p - 1 = 7 warm-up forwards F0..F6
    (the F-not-I cap 2(S - 1 - r) + 1 = 7) and rank 0 then holds 7·A, the paper's (2p - 1)·M_B.
    Tick 7 runs I0: microbatch 0 keeps its W residue A_W. Tick 8 = 2p: I1 is not back yet (it
    reaches rank 0 at tick 9), F7 is ready and allowed (F-not-I 7 - 1 = 6 < 7, F-not-W 7 < 2S = 8),
    and the rule prefers F to W, so F7 starts while W0 waits: microbatches 1..7 hold A each and
    microbatch 0 holds A_W, 7·A + A_W. At tick 9 I1 frees A - A_W, and from then on rank 0 never
    has more than 2p - 1 microbatches before their I and 2p before their W, so 7·A + A_W is the
    peak. Counted in microbatches it is 2p = 8 F-not-W (A_W = A) or 2p - 1 = 7 F-not-I (A_W = 0).
    """
    S, M = 4, 8
    tl = schedules.zb_h2(S, M, M)
    assert _order(tl, 0)[:10] == ["F0", "F1", "F2", "F3", "F4", "F5", "F6", "B0", "F7", "B1"]
    t = tl.table
    at = lambda kind, mb: int(t.start[(t.rank == 0) & (t.kind == kind) & (t.mb == mb)][0])  # noqa: E731
    assert (at(BWD_I, 0), at(FWD, 7), at(BWD_I, 1)) == (2 * S - 1, 2 * S, 2 * S + 1)
    assert at(BWD_W, 0) > at(FWD, 7)  # W0 has not freed microbatch 0's residue when F7 allocates
    assert _peaks(tl, 1.0, a_w)[0] == pytest.approx(2 * S - 1 + a_w)


@pytest.mark.parametrize("S, M", [(2, 4), (3, 6), (4, 8), (4, 16), (6, 20), (8, 32)])
@pytest.mark.parametrize("a_w", [32 / 34, 1672 / 3720])
def test_rank_r_holds_its_f_not_i_cap_and_the_rest_of_2p_as_residues(S, M, a_w):
    """M >= 2S: rank r peaks with its 2(S - 1 - r) + 1 microbatches before I (the F-not-I cap) and
    2r + 1 more before W (up to the F-not-W cap 2S), so (2(S-1-r) + 1)·A + (2r + 1)·A_W; rank 0
    is the heaviest because A_W <= A. A_W/A = 32/34 is Korthikanti's selective recomputation,
    1672/3720 the measured mem_w/mem_f of sail-sg's auto_schedule.py example."""
    r = np.arange(S)
    expect = (2 * (S - 1 - r) + 1) + (2 * r + 1) * a_w
    np.testing.assert_allclose(_peaks(schedules.zb_h2(S, M, M), 1.0, a_w), expect)


def test_rpd_and_sail_sg_hold_the_same_bytes_per_rank():
    """sail-sg's scheduler at --zero-bubble-max-pending-backward 2p puts F(2p-1) before W0 on
    rank 0 as rpd does (ranks 1..3 run the same order op for op; rank 0's steady part differs by
    an I/W tie), so both peak at (2p - 1)·A + A_W on rank 0. With k = 2p - 1 (rpd: ``max_held
    = 2S - 1``) W0 runs before F7 on rank 0 and the peak is the paper's (2p - 1)·A."""
    S, M, a, a_w = 4, 8, 34.0, 32.0
    for sail, held in ((SAIL_SG_2P, 2 * S), (SAIL_SG_2P_MINUS_1, 2 * S - 1)):
        tl = schedules.zb_h2(S, M, M, max_held=held)
        np.testing.assert_allclose(_peaks(tl, a, a_w), [_peak_of(o, a, a_w) for o in sail])
        assert _order(tl, 0)[:9] == sail[0].split()[:9]  # through F7 (2p) or W0 (2p - 1)
    two_p = schedules.zb_h2(S, M, M)
    assert all(_order(two_p, r) == SAIL_SG_2P[r].split() for r in range(1, S))
    assert _peak_of(SAIL_SG_2P[0], a, a_w) == (2 * S - 1) * a + a_w
    assert _peak_of(SAIL_SG_2P_MINUS_1[0], a, a_w) == (2 * S - 1) * a


def test_the_papers_2p_minus_1_costs_a_tick_per_flush_once_p2p_has_latency():
    """The paper's (2p - 1)·M_B is reached with F-not-W capped at 2S - 1: the same step at unit
    costs, one tick longer per flush with p2p = 1 (F7 leaves rank 0 two ticks later). rpd keeps
    sail-sg's 2p. At M = 2p - 1 there is no F(2p - 1) and both caps give the paper's number."""
    S, M = 4, 8
    two_p, paper = schedules.zb_h2(S, M, M), schedules.zb_h2(S, M, M, max_held=2 * S - 1)
    assert _peaks(paper, 1.0, 32 / 34)[0] == pytest.approx(2 * S - 1)
    assert paper.T == two_p.T and np.all(paper.spans()[0] == 3 * M)
    lat = CostModel(F=1, I=1, W=1, p2p=1)
    assert schedules.zb_h2(S, M, M, lat, max_held=2 * S - 1).T == schedules.zb_h2(S, M, M, lat).T + 1
    assert _peaks(schedules.zb_h2(S, 2 * S - 1, 2 * S - 1), 1.0, 32 / 34)[0] == pytest.approx(2 * S - 1)


def test_the_plans_bytes_follow_the_law_with_each_stages_own_bytes():
    """The plan's rank_memory on GPT-2 small (embedding on rank 0, head on rank 3, A_W = 32sbh of
    A = 34sbh + 5as²b per block) gives each rank (2(S-1-r) + 1)·A_r + (2r + 1)·A_W,r."""
    S, M = 4, 8
    hw = hardware.preset("a100_80g_flat")
    m = layers.preset("gpt2_small")
    st = stages(m, partition(m, S, "even", hw), hw)
    costs, _ = stage_costs(st, hw)
    got = rank_memory(schedules.zb_h2(S, M, M, costs), st).activations
    r = np.arange(S)
    np.testing.assert_allclose(got, (2 * (S - 1 - r) + 1) * st.act + (2 * r + 1) * st.act_w)
    assert np.all(st.act_w < st.act)  # so rank 0's 2p microbatches weigh less than 2p·A_0
