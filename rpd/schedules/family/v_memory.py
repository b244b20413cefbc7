"""V-Half and V-Min, the controllable-memory V schedules (Qi et al., Pipeline Parallelism with
Controllable Memory, NeurIPS 2024; docs/schedules.md#v-half-and-v-min).

Read for meaning from ``sail-sg/zero-bubble-pipeline-parallelism:
megatron/core/pipeline_parallel/zerobubble/scheduler/zbv_greedy.py`` (the schedule sail-sg's
runtime runs for ``--zero-bubble-v-schedule-mem-setup half|min``) and written anew. Placement:
the V of ZB-V (rank r holds chunk 0 = stage r and chunk 1 = stage 2S-1-r). Six op types per
rank: F and f (forward of chunk 0 and 1), B (the input backward, I, of chunk 1, the first the
backward meets), b (I of chunk 0), W and w (weight backward of chunk 1 and 0).

1. **Building block**: one microbatch's F, f, B, b on rank r sit at fixed slots of a period of 6
   (V-Min: r, 2S-1-r, 2S+d+r, 4S+d-1-r with d = 2 if 3 | S else 0; V-Half: 2r, 3S-2-r,
   3S+d+2r-1, 6S+d-r-2 with d = 3 if 2 | S else 0); microbatch j adds 6j. The block's lifespan
   (F to W) sets the activation memory: about 1/3 (V-Min) and 1/2 (V-Half) of 1F1B's.
2. **Reorder with W** (:func:`_reorder`): W's fill the gaps after their B's (:func:`_put_w`);
   outside the steady state (from rank 0's first b to rank 0's last F) each op moves to the
   earliest free slot its dependencies allow that does not raise the rank's peak memory; then
   every rank is squeezed (:func:`_squeeze`, unit costs, no latency).
3. **Reorder without W**: the same on F, f, B, b only, warm-up untouched.
4. W's placed again, now per chunk (W before w), and each rank runs its ops in slot order.

The order is made at unit costs (sail-sg's runtime passes equal costs: "use fixed schedule for
now") and timed here under any cost model. Synchronous, one flush per minibatch. The order of
one flush is made once per (S, M, setup) and shared by every cost model and flush count; the
peak-memory walk of step 2, run once per candidate slot, is compiled (numba, as the timer's
loop): S = 16, M = 256 takes well under a second instead of 3-14 s (benchmarks/bench_v_memory.py).
"""

from __future__ import annotations

import functools

import numpy as np

from rpd.schedules.family.flushes import flush_entry, flushes, whole_flushes
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, ScheduleEntry, Source
from rpd.schedules.machinery.ir import BWD_I, BWD_W, FWD, Order, ops
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_choice, check_int

# where both come from (their entries' source): the paper and the code read for meaning
SOURCE = Source(
    "Qi et al., Pipeline Parallelism with Controllable Memory, NeurIPS 2024",
    "sail-sg/zero-bubble-pipeline-parallelism: megatron/core/pipeline_parallel/zerobubble/scheduler/zbv_greedy.py",
)

SETUPS = ("half", "min")
MEMORY = (1, 1, 0, 0, -1)  # F and f allocate, W frees (B and b keep it until their W)


def building_block(setup: str, S: int) -> list[list[int]]:
    """Slots of F, f, B, b of microbatch 0 on each rank (module doc, step 1)."""
    if setup == "min":
        d = 2 if S % 3 == 0 else 0
        return [[r, 2 * S - r - 1, 2 * S + d + r, 4 * S + d - r - 1] for r in range(S)]
    d = 3 if S % 2 == 0 else 0
    return [[2 * r, 3 * S - r - 2, 3 * S + d + 2 * r - 1, 6 * S + d - r - 2] for r in range(S)]


def _next(rank: list[list[int]], ptr: list[int], inf: int) -> tuple[int, int]:
    return min((rank[t][ptr[t]] if ptr[t] < len(rank[t]) else inf, t) for t in range(len(rank)))


def _put_w(rank: list[list[int]], per_chunk: bool = False) -> list[list[int]]:
    """``rank`` (4 slot lists) with its W's: each free slot after a B or b takes a pending W
    (per chunk: W of chunk 1 first, then w), the rest go after the last op."""
    rank = [list(x) for x in rank[:4]] + [[] for _ in range(2 if per_chunk else 1)]
    bound = max(x[-1] for x in rank[:4])
    pending = [0, 0]
    ptr = [0] * 4
    i = 0
    for i in range(bound + 1):
        t_next, kind = _next(rank[:4], ptr, bound + 1)
        if t_next == i:
            ptr[kind] += 1
            if kind >= 2:
                pending[kind - 2 if per_chunk else 0] += 1
            continue
        for w in range(2):
            if pending[w]:
                rank[4 + w].append(i)
                pending[w] -= 1
                break
    for w in range(2):
        while pending[w]:
            i += 1
            rank[4 + w].append(i)
            pending[w] -= 1
    return rank


def _peak(rank: list[list[int]]) -> int:
    """Most activations held on a rank (W's implied in free slots when not placed)."""
    has_w = len(rank) > 4
    bound = max(x[-1] for x in rank)
    ptr = [0] * len(rank)
    held = peak = owed = 0
    for i in range(bound + 1):
        t_next, kind = _next(rank, ptr, bound + 1)
        if t_next == i:
            ptr[kind] += 1
            held += MEMORY[kind]
            owed += 2 <= kind < 4
        elif not has_w and owed:
            held -= 1
            owed -= 1
        peak = max(peak, held)
    return peak


def _peak_kernel(values: np.ndarray, offsets: np.ndarray, has_w: bool) -> int:  # pragma: no cover
    """:func:`_peak` of the rank whose slot list ``t`` is ``values[offsets[t]:offsets[t + 1]]``:
    the same walk over the slots, for numba (:func:`_compiled_peak`)."""
    n_kinds = len(offsets) - 1
    memory = np.array(MEMORY, np.int64)
    bound = values[offsets[1] - 1]
    for t in range(1, n_kinds):
        bound = max(bound, values[offsets[t + 1] - 1])
    ptr = offsets[:-1].copy()
    held = peak = owed = 0
    for i in range(bound + 1):
        t_next, kind = bound + 1, 0
        for t in range(n_kinds):
            x = values[ptr[t]] if ptr[t] < offsets[t + 1] else bound + 1
            if x < t_next:
                t_next, kind = x, t
        if t_next == i:
            ptr[kind] += 1
            held += memory[kind]
            if 2 <= kind < 4:
                owed += 1
        elif not has_w and owed:
            held -= 1
            owed -= 1
        peak = max(peak, held)
    return peak


@functools.cache
def _compiled_peak():
    """numba-compiled :func:`_peak_kernel`, built on first use, its machine code cached on disk
    (as :func:`rpd.schedules.machinery.timer._compiled_kernel`); plain Python without numba."""
    try:
        import numba
    except ImportError:
        return _peak_kernel
    return numba.njit(cache=True, nogil=True)(_peak_kernel)


class _FlatRank:
    """A rank's slot lists (4, or 5 with W's) and a flat int64 copy of them that
    :func:`_compiled_peak` reads; :meth:`put` moves one op in both."""

    def __init__(self, rank: list[list[int]]):
        if not 4 <= len(rank) <= len(MEMORY) or not all(rank):
            raise ValueError(f"a rank holds 4 or 5 non-empty slot lists, got {[len(x) for x in rank]}")
        self.rank = rank
        self.offsets = np.cumsum([0] + [len(x) for x in rank]).astype(np.int64)
        self.values = np.array([t for x in rank for t in x], np.int64)
        self.has_w = len(rank) > 4

    def put(self, k: int, j: int, t: int) -> None:
        self.rank[k][j] = t
        self.values[self.offsets[k] + j] = t

    def peak(self) -> int:
        return int(_compiled_peak()(self.values, self.offsets, self.has_w))


def _in_slot_order(slots: list[list[list[int]]]):
    """Every op (slot, rank, kind, mb) in the order of its slot, then rank, kind."""
    return sorted((t, s, k, j) for s, rank in enumerate(slots) for k, x in enumerate(rank) for j, t in enumerate(x))


def _squeeze(slots: list[list[list[int]]]) -> list[list[list[int]]]:
    """Each op as early as its dependencies and its rank's previous op allow, at unit cost."""
    S = len(slots)
    end: dict[tuple[int, int, int], int] = {}
    last: list[tuple[int, int] | None] = [None] * S
    out = [[[0] * len(x) for x in rank] for rank in slots]
    for _, s, k, j in _in_slot_order(slots):
        t = 0
        if k in (0, 2) and s > 0:
            t = max(t, end[s - 1, k, j])
        if k in (1, 3) and s + 1 < S:
            t = max(t, end[s + 1, k, j])
        if 0 < k < 4:
            t = max(t, end[s, k - 1, j])
        if j > 0:
            t = max(t, end[s, k, j - 1])
        if last[s] is not None:
            t = max(t, end[(s, *last[s])])
        end[s, k, j] = t + 1
        last[s] = (k, j)
        out[s][k][j] = t
    return out


def _reorder(slots: list[list[list[int]]], with_w: bool) -> list[list[list[int]]]:
    """Step 2 (``with_w``) or 3 of the module doc."""
    slots = [_put_w(rank) if with_w else [list(x) for x in rank] for rank in slots]
    S, n = len(slots), len(slots[0][0])
    flat = [_FlatRank(rank) for rank in slots]
    cap = max(f.peak() for f in flat)
    taken = [[False] * (rank[-1][-1] + 1) for rank in slots]
    phase = 0
    for t_now, s, k, j in _in_slot_order(slots):
        if k == 3 and s == 0 and phase == 0:
            phase = 1
        if phase == 1 or (phase == 0 and not with_w):
            if phase == 1 and k == 0 and j == n - 1:
                phase = 2
            taken[s][t_now] = True
            continue
        rank = slots[s]
        ready = -1
        if k in (0, 2) and s > 0:
            ready = max(ready, slots[s - 1][k][j])
        if k in (1, 3) and s + 1 < S:
            ready = max(ready, slots[s + 1][k][j])
        if 0 < k < 4:
            ready = max(ready, rank[k - 1][j])
        if k == 4:
            ready = max(ready, sorted(rank[2] + rank[3])[j])
        if j > 0:
            ready = max(ready, rank[k][j - 1])
        moved = False
        for t in range(ready + 1, t_now):
            if not taken[s][t]:
                flat[s].put(k, j, t)
                if flat[s].peak() <= cap:  # _peak(rank), compiled
                    moved = True
                    break
        if not moved:
            flat[s].put(k, j, t_now)
        taken[s][rank[k][j]] = True
    if not with_w:
        slots = [_put_w(rank) for rank in slots]
    return _squeeze(slots)


def v_memory_order(S: int, M: int, setup: str) -> Order:
    """One flush of V-Half (``setup="half"``) or V-Min (``"min"``) on S ranks (module doc)."""
    return [a.copy() for a in _flush_order(S, M, setup)]


@functools.lru_cache(maxsize=64)
def _flush_order(S: int, M: int, setup: str) -> tuple[np.ndarray, ...]:
    """:func:`v_memory_order`, made once per (S, M, setup): the order does not depend on the
    costs or the number of flushes (E9 times each at 4 cost settings, N = 2M). Read-only arrays."""
    block = building_block(setup, S)
    slots = [[list(range(x, x + 6 * M, 6)) for x in rank] for rank in block]
    slots = [rank[:4] for rank in _reorder(slots, with_w=True)]
    slots = [rank[:4] for rank in _reorder(slots, with_w=False)]
    slots = [_put_w(rank, per_chunk=True) for rank in slots]
    out = []
    for r in range(S):
        c0, c1 = r, 2 * S - 1 - r
        kind_stage = [(FWD, c0), (FWD, c1), (BWD_I, c1), (BWD_I, c0), (BWD_W, c1), (BWD_W, c0)]
        rows = sorted((t, k, j) for k, x in enumerate(slots[r]) for j, t in enumerate(x))
        a = ops([(kind_stage[k][0], kind_stage[k][1], j) for _, k, j in rows])
        a.flags.writeable = False
        out.append(a)
    return tuple(out)


def v_memory(S: int, N: int, M: int, setup: str, costs: CostModel | None = None) -> Timeline:
    """V-Half or V-Min on S ranks (2S stages in a V, costs per chunk), N microbatches in flushes
    of M."""
    S, N, M = check_int("S", S, minimum=2), check_int("N", N), check_int("M", M)
    setup = check_choice("setup", setup, SETUPS)
    whole_flushes(N, M)
    return flushes(f"v_{setup}", list(_flush_order(S, M, setup)), S, N, M, costs, n_stages=2 * S, v=2, split=True)


def v_half(S: int, N: int, M: int, costs: CostModel | None = None) -> Timeline:
    """V-Half: about half of 1F1B's activation memory (module doc)."""
    return v_memory(S, N, M, "half", costs)


def v_min(S: int, N: int, M: int, costs: CostModel | None = None) -> Timeline:
    """V-Min: about a third of 1F1B's activation memory (module doc)."""
    return v_memory(S, N, M, "min", costs)


def entry(name: str, build, *, doc: str, look: Look) -> ScheduleEntry:
    """A V schedule's entry: a flush schedule, split backward, two chunks per rank (the V), :data:`SOURCE`."""
    return flush_entry(name, build, split_backward=True, chunks_per_rank=2, doc=doc, look=look, source=SOURCE)
