"""The exact half of :mod:`rpd.schedules.machinery.search`: a CP-SAT model (OR-Tools) of one flush.

One interval per op (fixed length: its ticks under the cost model), no overlap per rank, the
timer's dependencies with the p2p latency on every cross-rank edge, each rank's F's, I's (B's) and
W's in microbatch order, and the memory cap as the precedence "F(r, j + cap) starts after W(r, j)
(B(r, j)) ends" -- with FIFO queues this is exactly "at most cap microbatches held". Every rank's
first op, F(r, 0), starts when the timer would start it (it never waits for its rank), so the
timer, which starts every op as early as the order allows, times the solver's order to at most
the solver's objective, for the makespan and for the period alike.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, FWD, Order, ops
from rpd.schedules.machinery.search_heuristic import Problem, times


@dataclasses.dataclass(frozen=True)
class Found:
    """The solver's answer: ``order`` None when it found nothing in time; ``value`` its objective,
    ``bound`` its proven lower bound, ``status`` OPTIMAL, FEASIBLE, UNKNOWN, ..."""

    order: Order | None
    value: int
    bound: int
    optimal: bool
    status: str


def solve(p: Problem, hint: Order, hint_value: int, time_limit: float, workers: int | None) -> Found:
    """Minimise ``p.objective`` with CP-SAT within ``time_limit`` seconds, from the order ``hint``
    whose objective is ``hint_value`` (also the model's upper bound)."""
    from ortools.sat.python import cp_model  # imported on use: a heavy extension module

    S, M, split, lat = p.S, p.M, p.split, p.p2p
    F, X, W = p.F.tolist(), p.X.tolist(), p.W.tolist()
    first = p.first_start.tolist()
    m = cp_model.CpModel()
    # every op of rank r lies in [first[r], first[r] + hint_value] (period) or [0, hint_value]
    hi = [first[r] + hint_value if p.objective == "period" else hint_value for r in range(S)]
    kinds = [FWD, BWD_I if split else BWD] + ([BWD_W] if split else [])
    dur = {FWD: F, BWD_I: X, BWD: X, BWD_W: W}
    start, end, iv = {}, {}, {}
    for r in range(S):
        for kind in kinds:
            for j in range(M):
                d = dur[kind][r][j]
                s = m.new_int_var(first[r], hi[r] - d, f"s{kind}_{r}_{j}")
                start[kind, r, j], end[kind, r, j] = s, s + d
                iv[kind, r, j] = m.new_fixed_size_interval_var(s, d, f"i{kind}_{r}_{j}")
        m.add_no_overlap([iv[kind, r, j] for kind in kinds for j in range(M)])
    xk = kinds[1]
    last = kinds[-1]
    for r in range(S):
        m.add(start[FWD, r, 0] == first[r])
        for j in range(M):
            if r > 0:
                m.add(start[FWD, r, j] >= end[FWD, r - 1, j] + lat)
            m.add(start[xk, r, j] >= end[FWD, r, j])
            if r < S - 1:
                m.add(start[xk, r, j] >= end[xk, r + 1, j] + lat)
            if split:
                m.add(start[BWD_W, r, j] >= end[xk, r, j])
            if j > 0:
                for kind in kinds:
                    m.add(start[kind, r, j] >= end[kind, r, j - 1])
            if j + p.cap[r] < M:
                m.add(start[FWD, r, j + p.cap[r]] >= end[last, r, j])
    horizon = max(hi)
    obj = m.new_int_var(0, horizon, "objective")
    for r in range(S):
        done = end[last, r, M - 1]
        m.add(obj >= (done - first[r] if p.objective == "period" else done))
    m.add(obj <= hint_value)
    m.minimize(obj)
    _add_hint(m, p, hint, start)

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.num_workers = workers or max(1, min(8, os.cpu_count() or 1))
    solver.parameters.random_seed = 0
    status = solver.solve(m)
    name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Found(
            order=None,
            value=hint_value,
            bound=int(np.ceil(solver.best_objective_bound - 1e-9)) if status == cp_model.UNKNOWN else hint_value,
            optimal=False,
            status=name,
        )
    order = []
    for r in range(S):
        rows = sorted((solver.value(start[kind, r, j]), kind, j) for kind in kinds for j in range(M))
        order.append(ops([(kind, r, j) for _, kind, j in rows]))
    value = int(round(solver.objective_value))
    bound = int(np.ceil(solver.best_objective_bound - 1e-9))
    return Found(order=order, value=value, bound=min(bound, value), optimal=status == cp_model.OPTIMAL, status=name)


def _add_hint(m, p: Problem, hint: Order, start: dict) -> None:
    """The hint's timer start ticks as the solver's first solution."""
    rank, s, _ = times(p, hint)
    rows = np.concatenate(hint)
    for (kind, _, j, _), r, t in zip(rows.tolist(), rank.tolist(), s.tolist()):
        m.add_hint(start[kind, r, j], int(t))
