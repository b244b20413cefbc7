"""The fast half of :mod:`rpd.schedules.machinery.search`: the problem, the evaluation of an order by the one
timer, a greedy list scheduler swept over its rules, and a local search over the best order.

One stage per rank, one flush of M microbatches. Each rank runs its F's, its I's (B's when the
backward is not split) and its W's in microbatch order (FIFO per op kind, sail-sg's ``Graph``
does the same), so an order is the interleaving of three queues per rank. Activation memory is
then a function of the order alone: F(j) allocates when it starts, W(j) (B(j)) frees when it ends,
and a rank runs one op at a time, so F(j + cap) may start only after W(j) has ended.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, FWD, Order, ops
from rpd.schedules.machinery.timer import flatten, op_durations, time_order

NEVER = 1 << 62
HOLD = (NEVER, 9)  # a rank's candidate when it may run nothing yet


@dataclasses.dataclass(frozen=True)
class Problem:
    """One search instance, every duration resolved: ``F``, ``X`` (I when ``split``, else B) and
    ``W`` (zeros unless ``split``) are int64 [S, M] ticks of op (rank, microbatch), stragglers
    included; ``cap[r]`` is the most microbatches rank r may hold (F started, W/B not ended)."""

    S: int
    M: int
    split: bool
    costs: CostModel
    F: np.ndarray
    X: np.ndarray
    W: np.ndarray
    p2p: int
    cap: tuple[int, ...]
    objective: str  # "makespan" | "period"

    @property
    def first_start(self) -> np.ndarray:
        """int64 [S]: when rank r's first op, F(r, 0), starts under the timer (it never waits for
        its rank): the forward chain of microbatch 0 with its latencies."""
        hop = self.F[:, 0] + self.p2p
        return np.concatenate([[0], np.cumsum(hop[:-1])]).astype(np.int64)


def make_problem(S: int, M: int, costs: CostModel, split: bool, cap, objective: str) -> Problem:
    c = costs.resolve(S, split)
    grid = lambda kind: costs.extra_ticks(
        np.full(S * M, kind, np.int8),  # noqa: E731
        np.repeat(np.arange(S, dtype=np.int32), M),
        np.tile(np.arange(M, dtype=np.int32), S),
        S,
        M,
    ).reshape(S, M)
    F = c.F[:, None] + grid(FWD)
    if split:
        X, W = c.I[:, None] + grid(BWD_I), c.W[:, None] + grid(BWD_W)
    else:
        X, W = c.B[:, None] + grid(BWD), np.zeros((S, M), np.int64)
    return Problem(
        S=S,
        M=M,
        split=split,
        costs=costs,
        F=F.astype(np.int64),
        X=X.astype(np.int64),
        W=W.astype(np.int64),
        p2p=int(costs.p2p),
        cap=tuple(int(v) for v in cap),
        objective=objective,
    )


# ---------------------------------------------------------------- evaluation by the one timer


def peak_memory(p: Problem, order: Order) -> np.ndarray:
    """int64 [S]: the most microbatches each rank holds under ``order`` (F(j) counted from its
    start to the end of its W(j), or B(j)); a function of the order alone (module doc)."""
    return np.array([_peak(p, a) for a in order], np.int64)


def times(p: Problem, order: Order) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, start, end) int64 [n] of every op of ``order``, rank-major, by the one timer."""
    flat = flatten(order, p.S, p.M)
    dur = op_durations(flat, p.costs, p.S, p.M, p.split)
    start, end = time_order(flat, dur, p.p2p)
    return flat.rank, start, end


def score(p: Problem, order: Order) -> tuple[int, int]:
    """(objective, tie-break) of ``order``: the makespan or the period (the longest rank span,
    sail-sg's ``best_time``), then the other one."""
    rank, start, end = times(p, order)
    makespan = int(end.max())
    first = np.full(p.S, NEVER, np.int64)
    last = np.zeros(p.S, np.int64)
    np.minimum.at(first, rank, start)
    np.maximum.at(last, rank, end)
    period = int((last - first).max())
    return (makespan, period) if p.objective == "makespan" else (period, makespan)


# ---------------------------------------------------------------- greedy list scheduling


@dataclasses.dataclass(frozen=True)
class Rule:
    """One greedy rule. ``limit[r]``: most microbatches F-started and not I'd (B'd) on rank r
    (the warm-up depth, ZB-H2's 2(S-1-r)+1); ``prefer_f``: F before I when both are ready;
    ``lazy_w``: run a W in an idle gap only if it cannot delay an I or F arriving in the gap."""

    limit: tuple[int, ...]
    prefer_f: bool = False
    lazy_w: bool = False


def greedy(p: Problem, rule: Rule) -> tuple[Order, tuple[int, int]]:
    """The order of an event-driven list scheduler, and its (objective, tie-break): ranks decide
    in time order; a free rank runs the ready op the rule prefers (I, F under the memory cap and
    the rule's warm-up limit), else a pending W, else waits for the next arrival. Every decision
    is at the tick the timer gives the op, so the timer reproduces the scheduler's times."""
    S, M, split, lat = p.S, p.M, p.split, p.p2p
    F, X, W = p.F.tolist(), p.X.tolist(), p.W.tolist()
    cap, limit = p.cap, rule.limit
    end_f = [[NEVER] * M for _ in range(S)]
    end_x = [[NEVER] * M for _ in range(S)]
    nf, nx, nw, free = [0] * S, [0] * S, [0] * S, [0] * S
    first = [NEVER] * S
    rows: list[list[tuple[int, int, int]]] = [[] for _ in range(S)]
    left = (3 if split else 2) * S * M
    args = (F, X, W, end_f, end_x, nf, nx, nw, free, cap, limit, S, M, split, lat, rule.prefer_f)
    cand = [_choose(r, *args, rule.lazy_w) for r in range(S)]
    while left:
        t, kind = min(cand)
        r = cand.index((t, kind))
        if t >= NEVER:  # every rank holds a W back for an arrival that cannot come first: run them
            cand = [_choose(q, *args, False) for q in range(S)]
            if min(cand)[0] >= NEVER:
                raise RuntimeError("search heuristic: no rank can run an op (a bug)")
            continue
        if kind == FWD:
            j = nf[r]
            end = t + F[r][j]
            end_f[r][j] = end
            nf[r] += 1
        elif kind == BWD_W:
            j = nw[r]
            end = t + W[r][j]
            nw[r] += 1
        else:
            j = nx[r]
            end = t + X[r][j]
            end_x[r][j] = end
            nx[r] += 1
        rows[r].append((kind, r, j))
        first[r] = min(first[r], t)
        free[r] = end
        left -= 1
        # who learns something: the rank itself, the neighbour its F or I feeds, and (lazy) every
        # rank holding a W back until it knows when its next I or F arrives
        dirty = {r} if kind == BWD_W else {r, r + 1 if kind == FWD else r - 1}
        if rule.lazy_w and kind != BWD_W:
            dirty.update(q for q in range(S) if cand[q] == HOLD)
        for q in dirty:
            if 0 <= q < S:
                cand[q] = _choose(q, *args, rule.lazy_w)
    makespan = max(free)
    period = max(e - f for e, f in zip(free, first))
    return [ops(rw) for rw in rows], ((makespan, period) if p.objective == "makespan" else (period, makespan))


def _choose(r, F, X, W, end_f, end_x, nf, nx, nw, free, cap, limit, S, M, split, lat, prefer_f, lazy):
    """(tick, kind) of rank r's next op under the rule; (NEVER, 9): nothing it may run yet (a
    lazy W held back for an arrival whose tick is not known yet, or nothing left)."""
    fr = free[r]
    tx = tf = NEVER
    lower_x = lower_f = NEVER  # the earliest an op whose dependency has not started could arrive
    if nx[r] < nf[r]:
        j = nx[r]
        if r == S - 1:
            tx = max(fr, end_f[r][j])
        elif end_x[r + 1][j] < NEVER:
            tx = max(fr, end_f[r][j], end_x[r + 1][j] + lat)
        else:
            lower_x = X[r + 1][j] + lat  # relative to the rank that will run it
    held = nw[r] if split else nx[r]
    if nf[r] < M and nf[r] - held < cap[r] and nf[r] - nx[r] < limit[r]:
        j = nf[r]
        if r == 0:
            tf = fr
        elif end_f[r - 1][j] < NEVER:
            tf = max(fr, end_f[r - 1][j] + lat)
        else:
            lower_f = F[r - 1][j] + lat
    t = min(tx, tf)
    if split and nw[r] < nx[r] and fr < t:
        if not lazy:
            return fr, BWD_W
        w_end = fr + W[r][nw[r]]
        if t < w_end:
            pass  # an op arrives inside the W: wait for it
        elif fr + min(lower_x, lower_f) < w_end:
            return HOLD
        else:
            return fr, BWD_W
    if t == NEVER:
        return HOLD
    if tx <= t and tf <= t:
        return t, (FWD if prefer_f else (BWD_I if split else BWD))
    return t, (FWD if tf <= t else (BWD_I if split else BWD))


def rules(p: Problem) -> list[Rule]:
    """The rules the heuristic sweeps: warm-up depths from 1F1B's (S - r) to filling the whole
    first round trip of rank r with F's, each with I or F first and eager or lazy W's."""
    S = p.S
    f = p.F[:, 0].astype(float)
    x = p.X[:, 0].astype(float)
    w = p.W[:, 0].astype(float)
    # ticks from F(r, 0)'s start until I(r, 0) can start: the forward and backward chains below r
    trip = np.array([f[r:].sum() + x[r + 1 :].sum() + 2 * (S - 1 - r) * p.p2p for r in range(S)])
    cycle = f + x + w
    depths = set()
    for alpha in (0.0, 0.25, 0.5, 0.75, 1.0):
        for beta in (0, 1, 2):
            depths.add(tuple(int(math.floor(s + alpha * (fl - s))) + beta for s, fl in zip(trip / cycle + 1, trip / f)))
    for a in (1, 2):
        depths.add(tuple(a * (S - 1 - r) + 1 for r in range(S)))
    out = []
    for d in sorted(depths):
        limit = tuple(max(1, min(v, p.M)) for v in d)
        for prefer_f in (False, True):
            for lazy_w in (False, True) if p.split else (False,):
                out.append(Rule(limit, prefer_f, lazy_w))
    return out


def tune(p: Problem, rule: Rule, order: Order, best: tuple, max_runs: int) -> tuple[Order, tuple]:
    """Coordinate descent on the warm-up depth of each rank (+-1, +-2) from ``rule`` while it
    improves (objective, tie-break), for at most ``max_runs`` greedy runs."""
    limit = list(rule.limit)
    runs = 0
    improved = True
    while improved and runs < max_runs:
        improved = False
        for r in range(p.S):
            for step in (-1, 1, -2, 2):
                v = limit[r] + step
                if not 1 <= v <= p.M or runs >= max_runs:
                    continue
                trial = dataclasses.replace(rule, limit=tuple(limit[:r] + [v] + limit[r + 1 :]))
                o, s = greedy(p, trial)
                runs += 1
                if s < best:
                    best, order, limit, rule, improved = s, o, list(trial.limit), trial, True
                    break
    return order, best


# ---------------------------------------------------------------- local search


def improve(p: Problem, order: Order, max_evals: int, best: tuple | None = None) -> tuple[Order, tuple]:
    """First-improvement descent over adjacent swaps of two ops of different kinds and
    microbatches on one rank (which keeps every queue FIFO), each candidate timed by the one timer
    and kept only if it respects the memory caps and lowers (objective, tie-break). Stops at a
    local optimum or after ``max_evals`` timings."""
    order = [a.copy() for a in order]
    best = score(p, order) if best is None else best
    cap = np.asarray(p.cap)
    evals = 0
    improved = True
    while improved and evals < max_evals:
        improved = False
        for r in _critical_ranks(p, order):
            a = order[r]
            for i in range(len(a) - 1):
                if evals >= max_evals:
                    break
                if a[i, 0] == a[i + 1, 0] or not _swappable(a[i], a[i + 1]):
                    continue
                a[[i, i + 1]] = a[[i + 1, i]]
                s = None
                if _peak(p, a) <= cap[r]:
                    s = _score_or_none(p, order)
                    evals += 1
                if s is not None and s < best:
                    best, improved = s, True
                else:
                    a[[i, i + 1]] = a[[i + 1, i]]
    return order, best


def _swappable(x, y) -> bool:
    """Whether ops x then y of one rank may run as y then x: not the same microbatch's chain."""
    return x[2] != y[2]


def _score_or_none(p: Problem, order: Order):
    try:
        return score(p, order)
    except ValueError:  # the swap put an op before its dependency
        return None


def _peak(p: Problem, a: np.ndarray) -> int:
    free_kind = BWD_W if p.split else BWD
    return int(np.cumsum(np.where(a[:, 0] == FWD, 1, np.where(a[:, 0] == free_kind, -1, 0))).max(initial=0))


def _critical_ranks(p: Problem, order: Order) -> list[int]:
    """Ranks by decreasing span (makespan: by decreasing last end)."""
    rank, start, end = times(p, order)
    first = np.full(p.S, NEVER, np.int64)
    last = np.zeros(p.S, np.int64)
    np.minimum.at(first, rank, start)
    np.maximum.at(last, rank, end)
    key = last - first if p.objective == "period" else last
    return np.argsort(-key, kind="stable").tolist()
