"""ZB-H2 with optimizer post-validation (rpd.schedules.family.post_validation): the timed ops against an
independent replay of the rule (an event loop that runs the round trip 0 -> S-1 -> 0 as a chain
and reruns the speculative forwards after a rollback), and the throughput it buys."""

import numpy as np
import pytest

from rpd import schedules
from rpd.schedules.family import post_validation
from rpd.schedules.family.orders import zb_h2_order
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import BWD_I, BWD_W, FWD


def _replay(S, M, Q, costs, back, step=0):
    """{(kind, stage, mb, run): (start, end)}: run 0 the wasted speculative forward, 1 the op kept."""
    c = costs.resolve(S, True)
    dur = {FWD: c.F, BWD_I: c.I, BWD_W: c.W}
    p2p = costs.p2p
    one = zb_h2_order(S, M)
    n_spec = [min(2 * (S - 1 - s), M - 1) for s in range(S)]
    seq = []
    for r in range(S):
        items = []
        for q in range(Q):
            ops_q = [(int(k), int(g), int(m) + q * M) for k, g, m, _ in one[r].tolist()]
            if q == 0:
                items += [("op", *o, 1) for o in ops_q]
            elif back[q - 1]:  # the speculative forwards are wasted, then everything reruns
                items += [("op", *o, 0) for o in ops_q[: n_spec[r]]] + [("wait", q - 1)]
                items += [("op", *o, 1) for o in ops_q]
            else:  # the speculative forwards stand
                items += [("op", *o, 1) for o in ops_q[: n_spec[r]]] + [("wait", q - 1)]
                items += [("op", *o, 1) for o in ops_q[n_spec[r] :]]
        seq.append(items)
    end, out = {}, {}
    last_w = [[max(i for i, o in enumerate(one[r].tolist()) if o[0] == BWD_W) for r in range(S)]]
    pos, free = [0] * S, [0] * S
    w_end = {}  # (q, r) -> end of rank r's last W of flush q, without the step

    def valid_at(q, r):
        if any((q, s) not in w_end for s in range(S)):
            return None
        a = w_end[(q, 0)]
        for s in range(1, S):  # the partial norm's chain 0 -> S-1
            a = max(a + p2p, w_end[(q, s)])
        return a + p2p * (S - 1 - r)  # the validated state's way back

    while any(pos[r] < len(seq[r]) for r in range(S)):
        moved = False
        for r in range(S):
            while pos[r] < len(seq[r]):
                it = seq[r][pos[r]]
                if it[0] == "wait":
                    v = valid_at(it[1], r)
                    if v is None:
                        break
                    free[r] = max(free[r], v) + (step if back[it[1]] else 0)
                    pos[r] += 1
                    continue
                _, k, g, m, run = it
                deps = []
                if k == FWD and g > 0:
                    deps.append((FWD, g - 1, m, run))
                if k == BWD_I:
                    deps += [(FWD, g, m, 1)] + ([(BWD_I, g + 1, m, 1)] if g < S - 1 else [])
                if k == BWD_W:
                    deps.append((BWD_I, g, m, 1))
                if any(d not in end for d in deps):
                    break
                t = max([free[r]] + [end[d] + p2p for d in deps if d[1] != g])
                t = max([t] + [end[d] for d in deps if d[1] == g])
                e = t + dur[k][g]
                q = m // M
                is_last_w = k == BWD_W and (m - q * M) == one[r][last_w[0][r], 2]
                out[(k, g, m, run)] = (t, e)
                end[(k, g, m, run)] = e
                free[r] = e + (step if is_last_w else 0)
                if is_last_w:
                    w_end[(q, r)] = e
                pos[r] += 1
                moved = True
        assert moved or all(pos[r] >= len(seq[r]) for r in range(S)), "replay deadlock"
    return out


def _ops(tl):
    t, w = tl.table, tl.wasted
    got = {
        (int(k), int(g), int(m), 1): (int(s), int(e)) for k, g, m, s, e in zip(t.kind, t.stage, t.mb, t.start, t.end)
    }
    got |= {
        (int(k), int(g), int(m), 0): (int(s), int(e)) for k, g, m, s, e in zip(w.kind, w.stage, w.mb, w.start, w.end)
    }
    return got


@pytest.mark.parametrize(
    "S, M, costs, trace, step",
    [
        (4, 8, CostModel(), [1], 0),
        (4, 8, CostModel(F=1, I=1, W=1, p2p=1), [0, 2], 0),
        (3, 6, CostModel(F=2, I=2, W=1, p2p=2), [1, 2], 0),
        (4, 4, CostModel(F=1, I=1, W=1, p2p=1), [], 0),
        (4, 8, CostModel(F=1, I=1, W=1, p2p=1), [0, 1], 2),
        (3, 6, CostModel(), [0, 2], 3),
    ],
)
def test_post_validation_matches_an_independent_replay(S, M, costs, trace, step):
    Q = 4
    tl = post_validation.zb_h2_validated(S, Q * M, M, costs, trace=trace, step=step)
    back = np.zeros(Q, bool)
    back[trace] = True
    want = _replay(S, M, Q, costs, back, step)
    if step:  # the model carries a step on the op before it; the replay keeps ops their own length
        got = _ops(tl)
        carried = {k for k in got if got[k][1] - got[k][0] != want[k][1] - want[k][0]}
        assert all(got[k][0] == want[k][0] for k in got) and all(got[k][1] - want[k][1] == step for k in carried)
        return
    got = _ops(tl)
    assert got == want
    assert len(tl.wasted.kind) == sum(min(2 * (S - 1 - s), M - 1) for s in range(S)) * int(back[:-1].sum())
    assert np.array_equal(tl.rollback, back)


def test_no_rollback_hides_the_round_trip_at_zero_latency_and_beats_the_barrier():
    S, M, Q = 4, 8, 5
    pv = schedules.zb_h2(S, Q * M, M, post_validation=True)
    assert pv.T == schedules.zb_h2(S, Q * M, M, overlapped=True).T  # = the ideal overlap (no wait)
    assert pv.T < schedules.zb_h2(S, Q * M, M).T  # the barrier's S - 1 per flush
    assert len(pv.wasted.kind) == 0 and not pv.rollback.any()
    # memory: the rerun reallocates what the rollback freed, so the peaks are ZB-H2's
    assert np.array_equal(
        memory.peak_activations(pv), memory.peak_activations(schedules.zb_h2(S, Q * M, M, overlapped=True))
    )
    assert np.array_equal(memory.weight_versions(pv), np.ones(S))


def test_rollbacks_cost_the_rerun_and_are_drawn():
    S, M, Q = 4, 8, 6
    a = schedules.zb_h2(S, Q * M, M, post_validation=True, rollback_trace=[])
    b = schedules.zb_h2(S, Q * M, M, post_validation=True, rollback_trace=[2])
    assert b.T > a.T and b.bubble_ratio() > a.bubble_ratio()
    assert (b.op[:, 0] == FWD).sum() == (a.op[:, 0] == FWD).sum() + 6  # rank 0 draws its 6 wasted forwards
    p = post_validation.rollbacks(10_000, 0.1, seed=3)
    assert abs(p.mean() - 0.1) < 0.01 and np.array_equal(p, post_validation.rollbacks(10_000, 0.1, seed=3))
    assert np.array_equal(post_validation.rollbacks(3, trace=[1, 7]), [False, True, False])  # 7: not reached
    with pytest.raises(ValueError, match="rollback_trace"):
        schedules.zb_h2(S, Q * M, M, post_validation=True, rollback_trace=[-1])


def test_step_lands_at_the_eager_step_or_after_the_redo():
    S, M = 4, 8
    c = CostModel(F=1, I=1, W=1, p2p=1)
    tl = schedules.zb_h2(S, 3 * M, M, c, post_validation=True, rollback_trace=[1])
    last_w = tl.b_time.reshape(3, M, S).max(axis=1)
    assert np.array_equal(tl.step_end[[0, 2]], last_w[[0, 2]])  # eager steps are final
    assert np.all(tl.step_end[1] >= tl.valid_time[1])  # the redo waits for the validated state


def test_redone_step_ends_where_the_replay_frees_the_rank():
    S, M, c, step = 4, 8, CostModel(F=1, I=1, W=1, p2p=1), 2
    tl = post_validation.zb_h2_validated(S, 3 * M, M, c, trace=[0], step=step)
    want = _replay(S, M, 3, c, np.array([True, False, False]), step)
    for r in range(S):  # the rank's first op kept in flush 1 starts once its redone step is over
        first = min(want[k][0] for k in want if k[3] == 1 and k[2] // M == 1 and k[1] == r)
        assert tl.step_end[0, r] + 1 <= first
        assert tl.step_end[0, r] >= tl.valid_time[0, r] + step - 1


def test_barrier_baseline_is_zb_h2_plus_the_norm_all_reduce():
    S, M, Q = 4, 8, 6
    assert post_validation.zb_h2_barrier(S, Q * M, M).T == schedules.zb_h2(S, Q * M, M).T == Q * (3 * M + S - 1)
    c = CostModel(F=1, I=1, W=1, p2p=1, allreduce=(4, 0))
    lost = post_validation.zb_h2_barrier(S, Q * M, M, c).T - schedules.zb_h2(S, Q * M, M, c).T
    assert lost == (Q - 1) * 4 + 4  # one all-reduce of the norm after every flush, the last included
    pv = schedules.zb_h2(S, Q * M, M, c, post_validation=True)
    assert pv.T == schedules.zb_h2(S, Q * M, M, c, overlapped=True).T  # the round trip stays hidden
