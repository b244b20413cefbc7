"""rpd.schedules.machinery.torch_format: torch.distributed.pipelining's action strings and compute-only CSV,
both ways; torch's own schedules (tests/data/torch_orders, written by torch 2.13.0 through that
folder's generate.py; tests/data/torch, torch's stored test artifacts) parse, are complete, and
equal rpd's generators where docs/schedules.md says the two agree."""

import csv
import io
import re
from pathlib import Path

import numpy as np
import pytest

from rpd import schedules
from rpd.schedules.family import orders
from rpd.schedules.family.bidirectional import chimera_order
from rpd.schedules.family.v_shape import dualpipe_v_order, zbv_order
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.build import timed
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, FWD, check_complete, ops
from rpd.schedules.machinery.torch_format import (
    from_actions,
    from_csv,
    stage_to_rank,
    to_actions,
    to_csv,
)

DATA = Path(__file__).parents[1] / "data"
ARTIFACTS = DATA / "torch"  # torch's stored test artifacts (see its README)
FIXTURES = DATA / "torch_orders"  # written by torch 2.13.0 (see its README / generate.py)
NAME = re.compile(r"(?P<name>.+)_S(?P<S>\d+)_M(?P<M>\d+)(?:_v(?P<v>\d+))?\.csv")


def _fixture(path: Path):
    hit = NAME.fullmatch(path.name)
    assert hit, f"fixture name {path.name} does not follow <name>_S<S>_M<M>[_v<v>].csv"
    S, M, v = int(hit["S"]), int(hit["M"]), int(hit["v"] or 1)
    text = path.read_bytes().decode()
    return hit["name"], S, M, v, text


FIXTURE_FILES = sorted(FIXTURES.glob("*.csv"))
FIXTURE_IDS = [p.stem for p in FIXTURE_FILES]


def _equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == np.int32 and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


def _placement(name: str, S: int, v: int) -> dict[int, int]:
    if name in ("zbv", "dualpipev"):
        return {g: (g if g < S else 2 * S - 1 - g) for g in range(2 * S)}
    return {g: g % S for g in range(S * v)}


# -- torch's own orders ----------------------------------------------------------------------


def test_fixture_set_is_there_and_small():
    names = {_fixture(p)[0] for p in FIXTURE_FILES}
    assert names == {"gpipe", "1f1b", "zb1p", "interleaved_1f1b", "interleaved_zb", "looped_bfs", "zbv", "dualpipev"}
    assert sum(p.stat().st_size for p in FIXTURES.iterdir()) < 200_000
    assert "2.13.0" in (FIXTURES / "README.md").read_text()


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=FIXTURE_IDS)
def test_torch_fixture_parses_and_is_complete(path):
    name, S, M, v, text = _fixture(path)
    order = from_csv(text)
    assert len(order) == S
    # torch's own CSV reader sees the same fields; dropping its idles gives our export exactly
    fields = [[f for f in row if f] for row in csv.reader(io.StringIO(text, newline=""))]
    assert [row for row in csv.reader(io.StringIO(to_csv(order), newline=""))] == fields
    assert list(to_actions(order).values()) == fields
    if name == "1f1b":
        # torch 2.13's Schedule1F1B._get_pipeline_order numbers the last rank's forwards 1..M
        # (its counter is bumped before the first F when there is no warm-up): F(S-1, 0) is
        # missing and F(S-1, M) is out of range. See test_torch_1f1b_last_rank_is_off_by_one.
        with pytest.raises(ValueError, match="out of range"):
            check_complete(order, S * v, M)
        return
    check_complete(order, S * v, M, split=name in ("zb1p", "interleaved_zb", "zbv") or None)
    assert stage_to_rank(order) == _placement(name, S, v)
    if name in ("zb1p", "interleaved_zb", "zbv"):
        assert not any(np.any(a[:, 0] == BWD) for a in order)


# rpd's generator for each torch schedule docs/schedules.md says it reproduces (GPipe, 1F1B,
# interleaved 1F1B with torch's group size M / max(1, M // S), ZB-H1, ZB-V, DualPipeV)
RPD = {
    "gpipe": lambda S, M, v: orders.gpipe_order(S, M),
    "1f1b": lambda S, M, v: orders.one_f_one_b_order(S, M),
    "zb1p": lambda S, M, v: orders.zb_h1_order(S, M),
    "interleaved_1f1b": lambda S, M, v: orders.interleaved_order(S, M, v, group=M // max(1, M // S)),
    "zbv": lambda S, M, v: zbv_order(S, M),
    "dualpipev": lambda S, M, v: dualpipe_v_order(S, M),
}
COMPARED = [p for p in FIXTURE_FILES if _fixture(p)[0] in RPD and _fixture(p)[0] != "1f1b"]


@pytest.mark.parametrize("path", COMPARED, ids=[p.stem for p in COMPARED])
def test_rpd_order_equals_torch(path):
    name, S, M, v, text = _fixture(path)
    _equal(RPD[name](S, M, v), from_csv(text))


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("1f1b_*.csv")), ids=lambda p: p.stem)
def test_torch_1f1b_last_rank_is_off_by_one(path):
    """rpd's 1F1B equals torch's Schedule1F1B order on every rank but the last, where torch's
    debug IR (not its runtime, whose _step_microbatches counts from 0) runs F(1..M) in place of
    F(0..M-1); shifting those back gives rpd's order exactly."""
    _, S, M, _v, text = _fixture(path)
    theirs, ours = from_csv(text), orders.one_f_one_b_order(S, M)
    _equal(ours[:-1], theirs[:-1])
    fixed = theirs[-1].copy()
    fixed[fixed[:, 0] == FWD, 2] -= 1
    np.testing.assert_array_equal(fixed, ours[-1])
    assert not np.array_equal(theirs[-1], ours[-1])


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("interleaved_zb_*.csv")), ids=lambda p: p.stem)
def test_torch_interleaved_zero_bubble_times_as_zoo_says(path):
    """No rpd generator for ScheduleInterleavedZeroBubble at v = 2:
    docs/schedules.md#looped-bfs-and-interleaved-zero-bubble at chunk costs
    1:1:1: rank-r span 6M + (S-1-r); F-not-I = 2S - r chunks when torch's group size
    mpr = M / max(1, M // S) is S, and in general its warm-up + 1 = (v-1) mpr + S - r."""
    _, S, M, v, text = _fixture(path)
    tl = timed("interleaved_zb", from_csv(text), S=S, N=M, M=M, costs=None, n_stages=S * v, v=v, split=True)
    r = np.arange(S)
    mpr = M // max(1, M // S)
    assert tl.spans()[0].tolist() == (6 * M + S - 1 - r).tolist()
    assert (memory.peak_activations(tl, until="I") * v).tolist() == np.minimum(v * M, (v - 1) * mpr + S - r).tolist()
    if mpr == S:
        assert (memory.peak_activations(tl, until="I") * v).tolist() == (2 * S - r).tolist()


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("looped_bfs_*.csv")), ids=lambda p: p.stem)
def test_torch_looped_bfs_times_as_zoo_says(path):
    """No rpd generator for ScheduleLoopedBFS: docs/schedules.md#looped-bfs-and-interleaved-zero-bubble at chunk costs F
    = B = 1 and no p2p latency: makespan 2(vM + S - 1), i.e. f_total (S-1)/(vM+S-1); vM chunks in flight on
    every rank."""
    _, S, M, v, text = _fixture(path)
    tl = timed("looped_bfs", from_csv(text), S=S, N=M, M=M, costs=None, n_stages=S * v, v=v)
    assert tl.T == 2 * (v * M + S - 1)
    assert (memory.peak_activations(tl, until="B") * v).tolist() == [v * M] * S


# -- torch's stored test artifacts (older torch, legacy naming) ------------------------------


def test_torch_dualpipe_v_artifact_imports_as_rpd_order_and_times_identically():
    theirs = from_csv((ARTIFACTS / "dualpipev_4rank_10mb.csv").read_text())
    _equal(theirs, dualpipe_v_order(4, 10))
    costs = CostModel(F=2, I=1, W=1, FB=3, p2p=1)
    imported = timed("dualpipe_v", theirs, S=4, N=10, M=10, costs=costs, n_stages=8, v=2, split=True)
    own = schedules.dualpipe_v(4, 10, 10, costs)
    np.testing.assert_array_equal(imported.f_time, own.f_time)
    np.testing.assert_array_equal(imported.b_time, own.b_time)
    assert imported.T == own.T
    assert stage_to_rank(theirs) == {g: (g if g < 4 else 7 - g) for g in range(8)}


def test_torch_interleaved_zero_bubble_artifact_simulates_as_zoo_says():
    """torch's stored ScheduleInterleavedZeroBubble (2 ranks x 2 chunks, 8 microbatches, legacy
    names): docs/schedules.md#looped-bfs-and-interleaved-zero-bubble gives rank-r span 6M + (S-1-r) at chunk costs
    1:1:1, F-not-I 2S - r."""
    text = (ARTIFACTS / "zb1p_2rank_2stagep_compute.csv").read_text()
    order = from_csv(text, legacy=True)
    check_complete(order, 4, 8)
    assert stage_to_rank(order) == {0: 0, 1: 1, 2: 0, 3: 1}
    # the same schedule as torch 2.13 writes it today, in current naming
    _equal(order, from_csv((FIXTURES / "interleaved_zb_S2_M8_v2.csv").read_text()))
    with pytest.raises(ValueError, match="'I'.*not known in legacy naming"):
        from_csv(to_csv(order), legacy=True)
    tl = timed("interleaved_zb", order, S=2, N=8, M=8, costs=None, n_stages=4, v=2, split=True)
    assert tl.spans()[0].tolist() == [6 * 8 + 1, 6 * 8]
    assert (memory.peak_activations(tl) * 2).tolist() == [4, 3]
    # the same schedule lowered with communication: dropping SEND/RECV gives the compute order
    # with the full backward (legacy BW) on the ranks that did not split
    comms = from_csv((ARTIFACTS / "zb1p_2rank_2stagep_comms.csv").read_text(), legacy=True, compute_only=True)
    check_complete(comms, 4, 8)
    assert {int(k) for k in comms[0][:, 0]} == {FWD, BWD} and {int(k) for k in comms[1][:, 0]} == {FWD, BWD_I, BWD_W}
    with pytest.raises(ValueError, match="not a compute action"):
        from_csv((ARTIFACTS / "zb1p_2rank_2stagep_comms.csv").read_text(), legacy=True)


# -- synthetic round trips -------------------------------------------------------------------

ORDERS = {
    "gpipe": lambda: orders.gpipe_order(4, 8),
    "1f1b": lambda: orders.one_f_one_b_order(4, 8),
    "interleaved": lambda: orders.interleaved_order(4, 8, 2),
    "zb_h1": lambda: orders.zb_h1_order(4, 8),
    "zb_h2": lambda: orders.zb_h2_order(4, 8),
    "zb_v": lambda: zbv_order(4, 8),
    "dualpipe_v": lambda: dualpipe_v_order(4, 8),
    "chimera": lambda: chimera_order(4, 8),
    # hand-made: fused pairs of every kind, a fused chain of three, a rank with no ops,
    # multi-digit stages and microbatches
    "synthetic": lambda: [
        ops(
            [
                (FWD, 0, 0),
                (FWD, 0, 1),
                (BWD, 7, 3, 1),
                (BWD_I, 0, 0),
                (BWD_W, 0, 0, 1),
                (FWD, 12, 105),
                (BWD_I, 3, 2, 1),
                (BWD, 9, 11, 1),
                (BWD_W, 4, 0),
            ]
        ),
        ops([]),
        ops([(BWD_W, 1, 0), (FWD, 1, 1, 1)]),
    ],
}


@pytest.mark.parametrize("name", ORDERS)
def test_round_trip_is_exact(name):
    order = ORDERS[name]()
    for text in (to_csv(order), to_csv(order, lineterminator="\n")):
        _equal(from_csv(text), order)
    _equal(from_actions(to_actions(order)), order)
    _equal(from_actions(list(to_actions(order).values())), order)
    # as a caller holding torch _Action objects would pass them: str() of each, Nones interleaved
    padded = {r: [None, *acts, ""] for r, acts in to_actions(order).items()}
    _equal(from_actions(padded), order)


def test_action_strings_follow_torch():
    acts = to_actions(dualpipe_v_order(4, 10))
    assert acts[0][:3] == ["0F0", "0F1", "0F2"] and "(0F7;7B3)OVERLAP_F_B" in acts[0]
    # rank 1 delays its W by one microbatch (docs/schedules.md#zb-h1)
    assert to_actions(orders.zb_h1_order(2, 2))[1] == ["1F0", "1I0", "1F1", "1I1", "1W0", "1W1"]
    synthetic = to_actions(ORDERS["synthetic"]())
    assert synthetic == {
        0: ["0F0", "(0F1;7B3)OVERLAP_F_B", "(0I0;0W0)OVERLAP_F_B", "(12F105;3I2;9B11)OVERLAP_F_B", "4W0"],
        1: [],
        2: ["(1W0;1F1)OVERLAP_F_B"],
    }
    assert to_csv(ORDERS["synthetic"]()) == (
        "0F0,(0F1;7B3)OVERLAP_F_B,(0I0;0W0)OVERLAP_F_B,(12F105;3I2;9B11)OVERLAP_F_B,4W0\r\n\r\n(1W0;1F1)OVERLAP_F_B\r\n"
    )


def test_legacy_names():
    legacy = [["0F0", "0F1", "0B0", "0W0", "0BW1"], ["(1F0;1BW2)OVERLAP_F_B", "1B0", "1W0"]]
    order = from_actions(legacy, legacy=True)
    assert order[0].tolist() == [[FWD, 0, 0, 0], [FWD, 0, 1, 0], [BWD_I, 0, 0, 0], [BWD_W, 0, 0, 0], [BWD, 0, 1, 0]]
    assert order[1].tolist() == [[FWD, 1, 0, 0], [BWD, 1, 2, 1], [BWD_I, 1, 0, 0], [BWD_W, 1, 0, 0]]
    # exported in current naming, which reads back to the same arrays
    assert to_actions(order)[0] == ["0F0", "0F1", "0I0", "0W0", "0B1"]
    _equal(from_csv(to_csv(order)), order)
    # the same text in current naming means something else (B = full backward) or is refused
    assert from_actions([["0B0"]])[0].tolist() == [[BWD, 0, 0, 0]]
    assert from_actions([["0B0"]], legacy=True)[0].tolist() == [[BWD_I, 0, 0, 0]]
    with pytest.raises(ValueError, match="'BW'.*not known in current naming.*legacy=True"):
        from_actions([["0BW1"]])
    with pytest.raises(ValueError, match="'I'.*not known in legacy naming"):
        from_actions([["0I1"]], legacy=True)


def test_idles_comments_and_line_ends():
    assert from_actions([[None, "", "  ", " 0F0 "]])[0].tolist() == [[FWD, 0, 0, 0]]
    assert from_actions({0: [None], 1: ["1F0"]})[0].shape == (0, 4)
    text = "# written by torch 2.13.0\r\n0F0,,0B0\r\n,1F0,1B0\n"
    order = from_csv(text)
    assert [a.tolist() for a in order] == [[[FWD, 0, 0, 0], [BWD, 0, 0, 0]], [[FWD, 1, 0, 0], [BWD, 1, 0, 0]]]
    assert from_csv('"0F0","(0F1;1B0)OVERLAP_F_B"\n')[0].tolist() == [[FWD, 0, 0, 0], [FWD, 0, 1, 0], [BWD, 1, 0, 1]]
    # an empty sub-action is skipped, as torch does
    assert from_actions([["(0F1;;1B0)OVERLAP_F_B"]])[0].tolist() == [[FWD, 0, 1, 0], [BWD, 1, 0, 1]]


def test_communication_actions_refused_or_dropped():
    comms = ["0F0", "0SEND_F0", "1RECV_B0", "0B0", "0REDUCE_GRAD", "0UNSHARD", "0RESHARD", "0RECV_F1", "0SEND_B1"]
    with pytest.raises(ValueError, match=r"rank 0, step 1: '0SEND_F0' is not a compute action.*compute_only=True"):
        from_actions([comms])
    assert from_actions([comms], compute_only=True)[0].tolist() == [[FWD, 0, 0, 0], [BWD, 0, 0, 0]]
    with pytest.raises(ValueError, match="not a compute action"):
        from_csv("0F0,0SEND_F0\n")
    # a dropped action inside an overlap leaves the rest of the group as it was
    got = from_actions([["(0F1;0SEND_F1;1B0)OVERLAP_F_B"]], compute_only=True)[0].tolist()
    assert got == [[FWD, 0, 1, 0], [BWD, 1, 0, 1]]


def test_bad_text_is_a_clear_error():
    with pytest.raises(ValueError, match="cannot parse torch action '0X1'"):
        from_actions([["0X1"]])
    with pytest.raises(ValueError, match="cannot parse torch action '0F1x'"):
        from_actions([["0F1x"]])  # torch's re.match would read 0F1 and ignore the tail
    with pytest.raises(ValueError, match="cannot parse torch action '-1F0'"):
        from_actions([["-1F0"]])
    with pytest.raises(ValueError, match="names no microbatch"):
        from_actions([["0F"]])
    with pytest.raises(ValueError, match="'F' in .* is not OVERLAP_F_B"):
        from_actions([["(0F1;1B0)F"]])
    with pytest.raises(ValueError, match="cannot parse torch container"):
        from_actions([["((0F1;1B0)OVERLAP_F_B;2B0)OVERLAP_F_B"]])
    with pytest.raises(ValueError, match="ranks must be 0..n-1"):
        from_actions({1: ["0F0"]})
    with pytest.raises(ValueError, match="kind 0 has no torch name"):
        to_actions([ops([(0, 0, 0)])])
    with pytest.raises(ValueError, match="first op cannot be fused"):
        to_actions([ops([(FWD, 0, 0, 1)])])
    with pytest.raises(ValueError, match="must be >= 0"):
        to_actions([ops([(FWD, 0, -1)])])


def test_stage_to_rank():
    assert stage_to_rank(orders.interleaved_order(4, 8, 2)) == {g: g % 4 for g in range(8)}
    assert stage_to_rank(zbv_order(4, 8)) == {g: (g if g < 4 else 7 - g) for g in range(8)}
    with pytest.raises(ValueError, match="stage 0 runs on ranks 0 and 1"):
        stage_to_rank([ops([(FWD, 0, 0)]), ops([(FWD, 0, 1)])])
    # Chimera: the down pipeline runs stage g on rank g, the up one on rank D-1-g
    with pytest.raises(ValueError, match="replicated=True"):
        stage_to_rank(chimera_order(4, 8))
    assert stage_to_rank(chimera_order(4, 8), replicated=True) == {0: (0, 3), 1: (1, 2), 2: (1, 2), 3: (0, 3)}
    assert stage_to_rank(orders.gpipe_order(3, 2), replicated=True) == {0: (0,), 1: (1,), 2: (2,)}
