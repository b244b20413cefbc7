"""rpd.schedules.torch_format: torch.distributed.pipelining's action strings and compute-only CSV,
both ways, against torch's own stored schedules (tests/data/torch, see its README)."""

from pathlib import Path

import numpy as np
import pytest

from rpd import schedules
from rpd.costs import CostModel
from rpd.schedules import orders
from rpd.schedules.build import timed
from rpd.schedules.bidirectional import chimera_order
from rpd.schedules.ir import BWD, BWD_I, BWD_W, FWD, check_complete, ops
from rpd.schedules.torch_format import from_actions, from_csv, stage_to_rank, to_actions, to_csv
from rpd.schedules.v_shape import dualpipe_v_order, zbv_order

DATA = Path(__file__).parent / "data" / "torch"

ORDERS = {
    "gpipe": lambda: orders.gpipe_order(4, 8),
    "1f1b": lambda: orders.one_f_one_b_order(4, 8),
    "interleaved": lambda: orders.interleaved_order(4, 8, 2),
    "zb_h1": lambda: orders.zb_h1_order(4, 8),
    "zb_h2": lambda: orders.zb_h2_order(4, 8),
    "zb_v": lambda: zbv_order(4, 8),
    "dualpipe_v": lambda: dualpipe_v_order(4, 8),
    "chimera": lambda: chimera_order(4, 8),
}


@pytest.mark.parametrize("name", ORDERS)
def test_round_trip_is_exact(name):
    order = ORDERS[name]()
    for back in (from_actions(to_actions(order)), from_csv(to_csv(order))):
        assert len(back) == len(order)
        for a, b in zip(order, back):
            np.testing.assert_array_equal(a, b)


def test_action_strings_follow_torch():
    acts = to_actions(dualpipe_v_order(4, 10))
    assert acts[0][:3] == ["0F0", "0F1", "0F2"] and "(0F7;7B3)OVERLAP_F_B" in acts[0]
    # rank 1 delays its W by one microbatch (ZOO.md §3.6)
    assert to_actions(orders.zb_h1_order(2, 2))[1] == ["1F0", "1I0", "1F1", "1I1", "1W0", "1W1"]


def test_torch_dualpipe_v_imports_as_rpd_order_and_times_identically():
    theirs = from_csv((DATA / "dualpipev_4rank_10mb.csv").read_text())
    ours = dualpipe_v_order(4, 10)
    for a, b in zip(theirs, ours):
        np.testing.assert_array_equal(a, b)
    costs = CostModel(F=2, I=1, W=1, FB=3, p2p=1)
    imported = timed("dualpipe_v", theirs, S=4, N=10, M=10, costs=costs, n_stages=8, v=2, split=True)
    own = schedules.dualpipe_v(4, 10, 10, costs)
    np.testing.assert_array_equal(imported.f_time, own.f_time)
    np.testing.assert_array_equal(imported.b_time, own.b_time)
    assert imported.T == own.T
    assert stage_to_rank(theirs) == {g: (g if g < 4 else 7 - g) for g in range(8)}


def test_torch_interleaved_zero_bubble_artifact_simulates_as_zoo_says():
    """torch's stored ScheduleInterleavedZeroBubble (2 ranks x 2 chunks, 8 microbatches, legacy
    names): ZOO.md §3.8 gives rank-r span 6M + (S-1-r) at chunk costs 1:1:1, F-not-I 2S - r."""
    order = from_csv((DATA / "zb1p_2rank_2stagep_compute.csv").read_text(), legacy=True)
    check_complete(order, 4, 8)
    assert stage_to_rank(order) == {0: 0, 1: 1, 2: 0, 3: 1}
    tl = timed("interleaved_zb", order, S=2, N=8, M=8, costs=None, n_stages=4, v=2, split=True)
    assert tl.spans()[0].tolist() == [6 * 8 + 1, 6 * 8]
    assert (tl.peak_activations() * 2).tolist() == [4, 3]
    # the same schedule lowered with communication: dropping SEND/RECV gives the compute order
    # with the full backward (legacy BW) on the ranks that did not split
    comms = from_csv((DATA / "zb1p_2rank_2stagep_comms.csv").read_text(), legacy=True, compute_only=True)
    check_complete(comms, 4, 8)
    assert {int(k) for k in comms[0][:, 0]} == {FWD, BWD} and {int(k) for k in comms[1][:, 0]} == {FWD, BWD_I, BWD_W}


def test_bad_text_is_a_clear_error():
    with pytest.raises(ValueError, match="not a compute action"):
        from_csv("0F0,0SEND_F0\n")
    with pytest.raises(ValueError, match="cannot parse"):
        from_actions([["0X1"]])
    with pytest.raises(ValueError, match="'BW' is not known in current"):
        from_actions([["0BW1"]])
    with pytest.raises(ValueError, match="ranks must be 0..n-1"):
        from_actions({1: ["0F0"]})
    with pytest.raises(ValueError, match="stage 0 runs on ranks 0 and 1"):
        stage_to_rank([ops([(FWD, 0, 0)]), ops([(FWD, 0, 1)])])
    assert from_actions([[None, "", "0F0"]])[0].tolist() == [[FWD, 0, 0, 0]]
    assert from_actions([["0B0"]], legacy=True)[0].tolist() == [[BWD_I, 0, 0, 0]]
