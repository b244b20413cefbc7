"""V-Half and V-Min (rpd.schedules.family.v_memory; docs/schedules.md#v-half-and-v-min): the order equals
sail-sg's ``zbv_greedy.py PipelineGraph`` (written out below as that file runs it, on its own
slot tables), and the memory and makespans hold over a grid."""

from __future__ import annotations

import numpy as np
import pytest

from rpd import registry, schedules
from rpd.schedules.family import v_memory
from rpd.schedules.family.v_memory import v_half, v_memory_order, v_min
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import BWD_I, BWD_W, FWD


class SailPipelineGraph:
    """``zbv_greedy.PipelineGraph``'s pattern, ``put_w``, ``mem_of_stage``,
    ``eager_execution_time``, ``reorder`` and ``schedule_from_pattern``, line for line (printing
    and the CSV helpers left out; the scan for the next node, which the last two repeat, once as
    ``next_node``)."""

    def __init__(self, n_stage, n_micro, mem_config):
        self.n_stage, self.n_micro, self.mem_config = n_stage, n_micro, mem_config

    def stable_pattern_v_min(self, num_stages):
        interval = 2 if num_stages % 3 == 0 else 0
        return [
            [i, num_stages * 2 - i - 1, num_stages * 2 + interval + i, num_stages * 4 + interval - i - 1]
            for i in range(num_stages)
        ]

    def stable_pattern_v_half(self, num_stages):
        interval = 3 if num_stages % 2 == 0 else 0
        return [
            [i * 2, num_stages * 3 - i - 2, num_stages * 3 + interval + i * 2 - 1, num_stages * 6 + interval - i - 2]
            for i in range(num_stages)
        ]

    def put_w(self, schedule, split_w=False):
        bound = max([x[-1] for x in schedule])
        inf = bound + 1
        schedule.append([])
        if split_w:
            schedule.append([])
        w_cnt = [0, 0]
        p = [0 for _ in schedule]
        for i in range(bound + 1):
            next_time, next_type = min([(schedule[t][p[t]] if p[t] < len(schedule[t]) else inf, t) for t in range(4)])
            if next_time == i:
                p[next_type] += 1
                if 2 <= next_type < 4:
                    w_cnt[next_type - 2 if split_w else 0] += 1
            else:
                for w in range(2):
                    if w_cnt[w]:
                        schedule[w + 4].append(i)
                        w_cnt[w] -= 1
                        break
        for w in range(2):
            while w_cnt[w] > 0:
                i += 1
                schedule[w + 4].append(i)
                w_cnt[w] -= 1
        return schedule

    def mem_of_stage(self, schedule):
        memory = [1, 1, 0, 0, -1]
        has_w = len(schedule) > 4
        bound = max([x[-1] for x in schedule])
        inf = bound + 1
        w_cnt = cur = res = 0
        p = [0 for _ in schedule]
        for i in range(bound + 1):
            next_time, next_type = min(
                [(schedule[t][p[t]] if p[t] < len(schedule[t]) else inf, t) for t in range(len(schedule))]
            )
            if next_time == i:
                p[next_type] += 1
                cur += memory[next_type]
                if 2 <= next_type < 4:
                    w_cnt += 1
            elif not has_w:
                if w_cnt:
                    cur += memory[4]
                    w_cnt -= 1
            res = max(res, cur)
        return res

    def next_node(self, stage_result, p, num_types, num_stages, inf):
        # the file's earliest-pending-node scan, which it writes out in both of the two methods below
        return min(
            [
                (
                    stage_result[t // num_types][t % num_types][p[t // num_types][t % num_types]]
                    if p[t // num_types][t % num_types] < len(stage_result[t // num_types][t % num_types])
                    else inf,
                    t // num_types,
                    t % num_types,
                    p[t // num_types][t % num_types],
                )
                for t in range(num_types * num_stages)
            ]
        )

    def eager_execution_time(self, stage_result, cost, c_cost):
        num_types = len(cost)
        num_stages = len(stage_result)
        p = [[0 for _ in range(num_types)] for __ in range(num_stages)]
        total_elements = num_stages * sum([len(t) for t in stage_result[0]])
        end_time = {}
        stage_order = [[] for _ in range(num_stages)]
        inf = max([max([max(type) for type in stage]) for stage in stage_result]) + 1
        for _ in range(total_elements):
            next_time, next_stage, next_type, next_mb = self.next_node(stage_result, p, num_types, num_stages, inf)
            p[next_stage][next_type] += 1
            deps = 0
            if next_type in {0, 2} and next_stage > 0:
                deps = max(deps, end_time[(next_stage - 1, next_type, next_mb)] + c_cost)
            if next_type in {1, 3} and next_stage + 1 < num_stages:
                deps = max(deps, end_time[(next_stage + 1, next_type, next_mb)] + c_cost)
            if 4 > next_type > 0:
                deps = max(deps, end_time[(next_stage, next_type - 1, next_mb)])
            if next_mb > 0:
                deps = max(deps, end_time[(next_stage, next_type, next_mb - 1)])
            if stage_order[next_stage]:
                deps = max(deps, end_time[(next_stage, *stage_order[next_stage][-1])])
            deps += cost[next_type]
            end_time[(next_stage, next_type, next_mb)] = deps
            stage_order[next_stage].append((next_type, next_mb))
        node_time = [
            [[end_time[(stage, type, mb)] - cost[type] for mb, _ in enumerate(tc)] for type, tc in enumerate(sc)]
            for stage, sc in enumerate(stage_result)
        ]
        return None, node_time, stage_order

    def reorder(self, stage_result, consider_w):
        num_types = 4
        if consider_w:
            stage_result = [self.put_w(schedule) for schedule in stage_result]
            num_types = 5
        current_mem = max([self.mem_of_stage(s) for s in stage_result])
        num_stages = len(stage_result)
        p = [[0 for _ in range(num_types)] for __ in range(num_stages)]
        occupied = [["" for x in range(stage[-1][-1] + 1)] for stage in stage_result]
        total_elements = num_stages * sum([len(t) for t in stage_result[0]])
        phase = 0
        inf = max([max([max(type) for type in stage]) for stage in stage_result]) + 1
        for _ in range(total_elements):
            next_time, next_stage, next_type, next_mb = self.next_node(stage_result, p, num_types, num_stages, inf)
            p[next_stage][next_type] += 1
            if next_type == 3 and next_stage == 0 and phase == 0:
                phase += 1
            if phase == 1:
                if next_type == 0 and next_mb == len(stage_result[0][0]) - 1:
                    phase += 1
                occupied[next_stage][stage_result[next_stage][next_type][next_mb]] = "x"
                continue
            if phase == 0 and not consider_w:
                occupied[next_stage][stage_result[next_stage][next_type][next_mb]] = "x"
                continue
            deps = -1
            if next_type in {0, 2} and next_stage > 0:
                deps = max(deps, stage_result[next_stage - 1][next_type][next_mb])
            if next_type in {1, 3} and next_stage + 1 < num_stages:
                deps = max(deps, stage_result[next_stage + 1][next_type][next_mb])
            if 4 > next_type > 0:
                deps = max(deps, stage_result[next_stage][next_type - 1][next_mb])
            if 4 == next_type:
                deps = max(deps, sorted(stage_result[next_stage][2] + stage_result[next_stage][3])[next_mb])
            if next_mb > 0:
                deps = max(deps, stage_result[next_stage][next_type][next_mb - 1])
            deps += 1
            ok = False
            for possible_time in range(deps, next_time):
                if not occupied[next_stage][possible_time]:
                    stage_result[next_stage][next_type][next_mb] = possible_time
                    if self.mem_of_stage(stage_result[next_stage]) <= current_mem:
                        ok = True
                        break
            if not ok:
                stage_result[next_stage][next_type][next_mb] = next_time
            occupied[next_stage][stage_result[next_stage][next_type][next_mb]] = "x"
        if not consider_w:
            stage_result = [self.put_w(schedule) for schedule in stage_result]
        return self.eager_execution_time(stage_result, [1, 1, 1, 1, 1], 0)[1]

    def stage_order(self):
        pattern = {"min": self.stable_pattern_v_min, "half": self.stable_pattern_v_half}[self.mem_config](self.n_stage)
        stage_result = [[list(range(x, x + 6 * self.n_micro, 6)) for x in stage] for stage in pattern]
        r1 = self.reorder(stage_result, consider_w=True)
        r1 = [schedule[:4] for schedule in r1]
        r2 = self.reorder(r1, consider_w=False)
        r2 = [schedule[:4] for schedule in r2]
        r2 = [self.put_w(schedule, split_w=True) for schedule in r2]
        return self.eager_execution_time(r2, [1000] * 6, 1)[2]


def sail_order(S, M, setup):
    """``create_schedule``'s local order on each rank as (kind, stage, microbatch) rows: type t
    is F, B or W by t // 2 and chunk t % 2 for F, 1 - t % 2 for B and W; the V puts chunk 0 of
    rank r at stage r and chunk 1 at stage 2S-1-r."""
    out = []
    for r, order in enumerate(SailPipelineGraph(S, M, setup).stage_order()):
        rows = []
        for t, mb in order:
            cat, c = t // 2, t % 2
            chunk = c if cat == 0 else 1 - c
            rows.append(((FWD, BWD_I, BWD_W)[cat], r if chunk == 0 else 2 * S - 1 - r, mb))
        out.append(rows)
    return out


@pytest.mark.parametrize("setup", ["half", "min"])
@pytest.mark.parametrize("S,M", [(2, 4), (3, 6), (4, 4), (4, 8), (4, 12), (6, 12), (8, 16)])
def test_order_equals_sail_sgs_action_for_action(setup, S, M):
    order = v_memory_order(S, M, setup)
    for r, rows in enumerate(sail_order(S, M, setup)):
        assert [tuple(x[:3]) for x in order[r].tolist()] == rows


@pytest.mark.slow
@pytest.mark.parametrize("S", [4, 6, 8, 12, 16])
def test_memory_against_1f1b(S):
    """1F1B holds S·A on rank 0 (2S chunks). V-Half holds S/2 + 1 A on its worst rank: "about
    half" (the ratio (S + 2)/2S falls to 1/2 as S grows); V-Min strictly less, at most half of
    1F1B's (about a third for large S; measured 3/8 at S = 16, 24, 32 in sail-sg's own
    accounting, docs/schedules.md#v-half-and-v-min). Under any costs the order, hence F-not-W, is the same."""
    M = 2 * S
    one = memory.peak_activations(schedules.one_f_one_b(S, M, M)).max()
    assert one == S
    for c in (None, CostModel(F=1, B=2, I=1, W=1), CostModel(F=2, B=3, I=2, W=1, p2p=1)):
        half = memory.peak_activations(v_half(S, M, M, costs=c), until="W")
        vmin = memory.peak_activations(v_min(S, M, M, costs=c), until="W")
        assert half.max() == S / 2 + 1
        assert vmin.max() < half.max() and vmin.max() <= one / 2
    if S == 16:
        assert vmin.max() * 8 == one * 3


@pytest.mark.parametrize("S", [2, 4, 6, 8])
def test_makespan_exceeds_the_work_by_the_bubble_only(S):
    """At F = I = W = 1 per chunk every rank works 6M ticks a flush; the flush exceeds it by a
    bubble that does not grow with M (the steady state is bubble-free), and V-Min's is no
    smaller than V-Half's (memory traded for time)."""
    extra = {}
    for name, f in (("half", v_half), ("min", v_min)):
        e = []
        for M in (2 * S, 3 * S, 4 * S):
            tl = f(S, M, M)
            np.testing.assert_array_equal(tl.busy(), np.full(S, 6 * M))
            e.append(tl.T - 6 * M)
        assert e[1] == e[2], (name, e)
        extra[name] = e[2]
    assert extra["min"] >= extra["half"]


def test_registry_entries_build_on_the_v():
    tl = registry.build("v_min", registry.ScheduleParams(S=4, N=16, M=8))
    held = np.zeros((4, 8), bool)
    held[tl.table.rank, tl.table.stage] = True
    v = np.zeros((4, 8), bool)
    v[np.arange(4), np.arange(4)] = v[np.arange(4), 7 - np.arange(4)] = True
    np.testing.assert_array_equal(held, v)  # stage 0 (embedding) and stage 7 (LM head) on rank 0
    assert tl.synchronous and tl.split and tl.v == 2


def test_a_v_entry_is_a_split_flush_on_two_chunks_from_the_paper():
    e = v_memory.entry("v_toy", v_half, doc="toy", look=registry.Look("toy"))
    assert (e.flush, e.fields, e.split_backward, e.chunks_per_rank) == (True, ("M",), True, 2)
    assert e.source == v_memory.SOURCE and e.source.paper.startswith(
        "Qi et al., Pipeline Parallelism with Controllable"
    )
    for name in ("v_half", "v_min"):  # both registered entries say the same
        r = registry.SCHEDULES[name]
        assert (r.flush, r.split_backward, r.chunks_per_rank, r.source) == (True, True, 2, v_memory.SOURCE)


@pytest.mark.parametrize(
    "S", [4, 6, 8, pytest.param(12, marks=pytest.mark.slow), pytest.param(16, marks=pytest.mark.slow)]
)
def test_the_papers_memory_and_bubble_table(S):
    """The controllable-memory paper's table (sail-sg's Hugging Face space for arXiv 2405.15362;
    docs/schedules.md#v-half-and-v-min), at T_F = T_B = T_W: activation memory in microbatches
    1F1B p, V-Half (p + 2) // 2, V-Min (p + 4) // 3, exactly; bubble about p/m, p/(2m) and 2p/(3m),
    i.e. at most 1/2 and 2/3 of 1F1B's idle time (measured 0.28-0.46 and 0.57-0.66 here)."""
    for M in (2 * S, 4 * S):
        one = registry.make("1f1b", S, M, M, CostModel(F=2, B=4))  # a stage is two chunks of the V
        idle_1f1b = one.T - 6 * M
        for name, mem, share in (("v_half", (S + 2) // 2, 1 / 2), ("v_min", (S + 4) // 3, 2 / 3)):
            tl = registry.make(name, S, M, M, CostModel(F=1, I=1, W=1))
            assert memory.peak_activations(tl, until="W").max() == mem
            assert 0 < tl.T - 6 * M <= share * idle_1f1b
        assert memory.peak_activations(one).max() == S


def _ranks_as_reordered(S, M, setup):
    """Every rank's slot lists as step 2 and step 3 of rpd.schedules.family.v_memory's module
    doc see them (with and without W's), and a few moved ops: the inputs :func:`_peak` judges."""
    block = v_memory.building_block(setup, S)
    slots = [[list(range(x, x + 6 * M, 6)) for x in rank] for rank in block]
    out = [v_memory._put_w(rank) for rank in slots] + [[list(x) for x in rank] for rank in slots]
    rng = np.random.default_rng(S * M)
    for rank in list(out):
        moved = [list(x) for x in rank]
        k = int(rng.integers(len(moved)))
        j = int(rng.integers(len(moved[k])))
        moved[k][j] = int(rng.integers(0, moved[k][-1] + 1))  # may share a slot or break the order
        out.append(moved)
    return out


@pytest.mark.parametrize("setup", ["half", "min"])
@pytest.mark.parametrize("S,M", [(2, 4), (4, 8), (6, 12), (8, 32)])
def test_compiled_peak_equals_the_walk(setup, S, M):
    """The compiled peak (docs/schedules.md#v-half-and-v-min, step 2) reads what ``_peak``
    reads, slot for slot, also for ranks with shared slots or out-of-order lists, and follows a
    moved op."""
    for rank in _ranks_as_reordered(S, M, setup):
        flat = v_memory._FlatRank([list(x) for x in rank])
        assert flat.peak() == v_memory._peak(rank)
        k, j = len(rank) - 1, 0
        flat.put(k, j, rank[k][-1])
        moved = [list(x) for x in rank]
        moved[k][j] = rank[k][-1]
        assert flat.rank == moved and flat.peak() == v_memory._peak(moved)


def test_the_order_is_made_once_per_size(monkeypatch):
    """A flush's order does not depend on the costs or the flush count
    (docs/schedules.md#v-half-and-v-min): building V-Half at two cost models and two flushes makes
    it once (two reorders), and the order handed out is a copy."""
    calls = []
    real = v_memory._reorder
    monkeypatch.setattr(v_memory, "_reorder", lambda *a, **k: calls.append(1) or real(*a, **k))
    v_memory._flush_order.cache_clear()
    one = v_half(4, 16, 8, costs=CostModel(F=1, I=1, W=1))
    two = v_half(4, 16, 8, costs=CostModel(F=2, I=1, W=1, p2p=1))
    assert len(calls) == 2
    np.testing.assert_array_equal(one.table.mb, two.table.mb)
    order = v_memory_order(4, 8, "half")
    order[0][:] = -1
    assert v_memory_order(4, 8, "half")[0].min() >= 0
