"""ZB-H2 with sail-sg's optimizer post-validation (docs/schedules.md#zb-h2-with-optimizer-post-validation): eager steps,
speculative forwards and, on a rollback, their rerun, timed by the one timer.

Source read: sail-sg/zero-bubble-pipeline-parallelism @39f2c186
(``megatron/core/pipeline_parallel/zerobubble/runtime.py`` ``run_until_post_validation``,
``megatron/core/optimizer/zbpp_optimizer_helper.py`` ``rollback_adamw``). Each iteration's op
list on a rank holds a POST_VALIDATION node at a fixed place; the ops before it (forwards of
the next iteration only, receives flagged ``rollback``) run before the step is validated; when
it fails the runtime resets to the iteration's first node and reruns them.

The model here, per flush q and rank s (S ranks, M microbatches per flush, p2p latency c):

* **eager step**: right after its last W of flush q the rank steps its optimizer (``step``
  ticks, added to that W) and sends its partial grad-norm² on; the chain 0 -> S-1 and the
  validated state's way back S-1 -> 0 arrive at rank s at
  ``v_s = max_{s'} (e_{s'} + c (S-1-s')) + c (S-1-s)``, ``e_{s'}`` the end of rank s''s last W
  (the partial sums are added as they pass; no compute cost);
* **speculative forwards**: rank s runs the first ``n_s = min(2(S-1-s), M-1)`` forwards of
  flush q+1 (fewer if its order has fewer before its first I) before ``v_s``; its next op waits
  for ``v_s``;
* **rollback** of flush q (clipping or a non-finite norm: drawn per flush with probability
  ``rollback_p`` from ``seed``, or given as a ``trace`` of flush indices): every rank redoes
  its step (``step`` ticks after ``v_s``) and reruns its ``n_s`` speculative forwards; the
  first runs, now wasted, stay in the timeline as :attr:`ValidatedTimeline.wasted` (drawn,
  counted as idle by the bubble, not as activations: they are freed at the rollback).

Not modelled: sail-sg lets a stage skip its eager step when its partial sum already shows
clipping (here every stage steps and every stage rolls back); the norm reduction's own cost.
Without post-validation the step needs the global norm first: ``zb_h2`` with its barrier and
``gap`` = the all-reduce of one value plus ``step`` (:func:`baseline_gap`).

Semantics (:func:`rpd.train.semantics.validated_plan`): exactly synchronous, the update of
flush q landing when its step is final; with a clip threshold the clipped mean gradient.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.schedules.family.flushes import check, flushes
from rpd.schedules.family.orders import zb_h2_order
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import BWD_I, BWD_W, FWD, Col, shift_mb
from rpd.schedules.machinery.timeline import OpTable, Timeline
from rpd.schedules.machinery.timer import edge_latency, flatten, op_durations, time_order
from rpd.validation import check_int, check_real

KIND = "zb_h2_pv"


@dataclasses.dataclass(frozen=True, eq=False)
class ValidatedTimeline(Timeline):
    """ZB-H2 with post-validation: a synchronous timeline whose flushes overlap, with the
    eager steps, validation arrivals, rollbacks and wasted speculative forwards."""

    step_end: np.ndarray | None = None  # int [n_flush, S]: tick at whose end rank s's step of flush q is final
    valid_time: np.ndarray | None = None  # int [n_flush, S]: tick the validated state reaches rank s
    rollback: np.ndarray | None = None  # bool [n_flush]: flush q's eager step was rolled back
    speculative: np.ndarray | None = None  # int [S]: forwards rank s runs before validation
    wasted: OpTable | None = None  # the speculative forwards a rollback threw away
    clip: float | None = None  # the global-norm clip threshold the semantics apply

    @property
    def synchronous(self) -> bool:
        return True

    def busy(self) -> np.ndarray:
        return super().busy()  # wasted forwards count as idle: they produce nothing

    def _paint(self, values: np.ndarray, fill: int) -> np.ndarray:
        grid = super()._paint(values, fill)
        w = self.wasted
        if w is None or not len(w.kind):
            return grid
        t = self.table
        src = {id(t.kind): w.kind, id(t.mb): w.mb, id(t.stage): w.stage}.get(id(values))
        if src is None:
            return grid
        for k in range(len(w.kind)):
            grid[w.start[k] : w.end[k], w.rank[k]] = src[k]
        return grid


def speculative_forwards(S: int, M: int) -> np.ndarray:
    """int [S]: min(2(S-1-s), M-1), the forwards of the next flush rank s may run before its
    step is validated (sail-sg's bound; always before its first backward)."""
    return np.minimum(2 * (S - 1 - np.arange(S)), M - 1).astype(np.int64)


def rollbacks(n_flush: int, rollback_p: float = 0.0, seed: int = 0, trace=None) -> np.ndarray:
    """bool [n_flush]: which flushes' eager steps are rolled back: ``trace`` (flush indices;
    those past the run's last flush are not reached) when given, else each with probability
    ``rollback_p`` from ``numpy.random.default_rng(seed)``."""
    out = np.zeros(n_flush, bool)
    if trace is not None:
        idx = np.asarray([check_int("rollback_trace[i]", i, minimum=0) for i in trace], np.int64)
        out[idx[idx < n_flush]] = True
        return out
    p = check_real("rollback_p", rollback_p, allow_zero=True)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"rollback_p must lie in [0, 1], got {p}")
    return np.random.default_rng(seed).random(n_flush) < p


def baseline_gap(costs: CostModel | None, step: int = 0) -> int:
    """Ticks between two flushes without post-validation: the global grad-norm all-reduce (one
    value) and the optimizer step, after the barrier."""
    return (0 if costs is None else costs.allreduce_ticks(1)) + step


def zb_h2_barrier(
    S: int, N: int, M: int, costs: CostModel | None = None, *, step: int = 0, max_pending=None, max_held=None
) -> Timeline:
    """ZB-H2 without post-validation: each flush ends with a barrier, the global grad-norm
    all-reduce and the step (:func:`baseline_gap` ticks) before the next flush's first op."""
    S, N, M = check(S, N, M, per_mb=3)
    gap = baseline_gap(costs, check_int("step", step, minimum=0))
    return flushes("zb_h2", zb_h2_order(S, M, max_pending, max_held), S, N, M, costs, gap=gap, split=True)


def zb_h2_validated(
    S: int,
    N: int,
    M: int,
    costs: CostModel | None = None,
    *,
    rollback_p: float = 0.0,
    trace=None,
    seed: int = 0,
    step: int = 0,
    clip: float | None = None,
    max_pending=None,
    max_held: int | None = None,
) -> ValidatedTimeline:
    """ZB-H2 (the greedy order, docs/schedules.md#zb-h2) over N // M flushes with optimizer post-validation
    (module doc): no barrier; rank s's first non-speculative op of flush q+1 waits for the
    validated state of flush q; a rolled-back flush reruns the speculative forwards."""
    S, N, M = check(S, N, M, per_mb=3)
    step = check_int("step", step, minimum=0)
    costs = CostModel() if costs is None else costs
    Q = N // M
    back = rollbacks(Q, rollback_p, seed, trace)
    one = zb_h2_order(S, M, max_pending, max_held)
    lead = np.array([int(np.argmax(a[:, Col.KIND] != FWD)) if np.any(a[:, Col.KIND] != FWD) else len(a) for a in one])
    n_spec = np.minimum(speculative_forwards(S, M), lead)
    flushes = [shift_mb(one, q * M) for q in range(Q)]
    # (flush q, j) -> ghost microbatch id >= N of a wasted forward of mb q*M + j
    ghost_of: dict[tuple[int, int], int] = {}
    per_rank, wait_at = [], []  # wait_at[r][q]: index in rank r's order of the op that waits
    for r in range(S):
        rows, waits = [], []
        for q in range(Q):
            a = flushes[q][r]
            if q and back[q - 1]:
                ghosts = a[: n_spec[r]].copy()
                for i in range(len(ghosts)):
                    key = (q, int(ghosts[i, 2]) - q * M)
                    ghost_of.setdefault(key, N + len(ghost_of))
                    ghosts[i, 2] = ghost_of[key]
                rows.append(ghosts)
            base = sum(len(x) for x in rows)  # a rerun waits from its first forward on
            waits.append(-1 if q == 0 else base if back[q - 1] else base + n_spec[r])
            rows.append(a)
        per_rank.append(np.concatenate(rows))
        wait_at.append(waits)
    order = per_rank
    n_all = N + len(ghost_of)
    flat = flatten(order, S, n_all)
    dur = op_durations(flat, costs, S, n_all, True)
    # the last W of each flush on each rank (its step rides on it)
    q_of = np.where(flat.mb < N, flat.mb // M, -1)
    last_w = np.full((Q, S), -1, np.int64)
    is_w = (flat.kind == BWD_W) & (q_of >= 0)
    np.maximum.at(last_w, (q_of[is_w], flat.rank[is_w]), np.nonzero(is_w)[0])
    dur[last_w.ravel()] += step
    last_ghost = np.full((Q, S), -1, np.int64)  # a redone step rides on the last wasted forward
    for r in range(S):
        for q in range(1, Q):
            if back[q - 1] and n_spec[r]:
                last_ghost[q, r] = flat.rank_ptr[r] + wait_at[r][q] - 1
    dur[last_ghost[last_ghost >= 0]] += step
    c = int(costs.p2p)
    extra_dep = np.full((len(dur), S), -1, np.int64)
    extra_lat = np.zeros((len(dur), S), np.int64)
    for r in range(S):
        for q in range(1, Q):
            i = flat.rank_ptr[r] + wait_at[r][q]
            if i >= flat.rank_ptr[r + 1]:
                continue
            redo = step if back[q - 1] else 0
            extra_dep[i] = last_w[q - 1]
            extra_lat[i] = c * (2 * S - 2 - r - np.arange(S)) - step + redo
            if redo and not n_spec[r]:  # no wasted forward to carry the redo: after its eager step
                extra_lat[i, r] = max(c * (2 * S - 2 - 2 * r), step) - step + redo
    # p2p jitter on the pipeline's edges; the validation's round trip keeps the mean latency c
    start, end = time_order(flat, dur, edge_latency(flat, costs, S, n_all), extra=(extra_dep, extra_lat))
    e = end[last_w] - step  # [Q, S]: end of each rank's last W (its partial norm is ready)
    reach = (e + c * (S - 1 - np.arange(S))[None, :]).max(axis=1)  # at rank S-1
    valid = reach[:, None] + c * (S - 1 - np.arange(S))[None, :]
    # a redone step starts once the state is back and the rank's wasted forwards are done
    ghost_end = end[last_w].copy()  # no wasted forward: after the eager step
    ghost_end[:-1] = np.where(last_ghost[1:] >= 0, end[np.maximum(last_ghost[1:], 0)] - step, ghost_end[:-1])
    step_end = np.where(back[:, None], np.maximum(valid, ghost_end) + step, end[last_w]) - 1
    real = flat.mb < N
    f_time = np.empty((N, S), np.int64)
    b_time = np.empty((N, S), np.int64)
    i_time = np.full((N, S), -1, np.int64)
    sel = real & (flat.kind == FWD)
    f_time[flat.mb[sel], flat.stage[sel]] = start[sel]
    sel = real & (flat.kind == BWD_W)
    b_time[flat.mb[sel], flat.stage[sel]] = end[sel] - 1 - np.where(np.isin(np.nonzero(sel)[0], last_w), step, 0)
    sel = real & (flat.kind == BWD_I)
    i_time[flat.mb[sel], flat.stage[sel]] = end[sel] - 1
    ghost_mb = np.zeros(n_all, np.int64)
    ghost_mb[:N] = np.arange(N)
    for (q, j), g in ghost_of.items():
        ghost_mb[g] = q * M + j

    def table(sel):
        return OpTable(
            kind=flat.kind[sel],
            stage=flat.stage[sel],
            mb=ghost_mb[flat.mb[sel]].astype(np.int32),
            rank=flat.rank[sel],
            start=start[sel],
            end=end[sel],
            fused=flat.fused[sel],
        )

    return ValidatedTimeline(
        kind=KIND,
        S=S,
        N=N,
        f_time=f_time,
        b_time=b_time,
        M=M,
        table_=table(real),
        costs=costs,
        flush_time=np.full(Q, -1, np.int64),
        overlapped=True,
        i_time=i_time,
        step_end=step_end,
        valid_time=valid - 1,
        rollback=back,
        speculative=n_spec,
        wasted=table(~real),
        clip=None if clip is None else check_real("clip", clip),
    )
