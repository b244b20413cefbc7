"""Schedules found, not hand-written (docs/schedules.md#schedules-found-by-search): the op order of one flush that
minimises the step time under a per-rank activation-memory cap, as a :class:`~rpd.schedules.machinery.timeline.Timeline` like
every other schedule.

:func:`search` takes the pipeline (S ranks, one stage each, M microbatches), a
:class:`~rpd.schedules.machinery.costs.CostModel` (per-stage F, I, W or B ticks, p2p latency, stragglers)
and a cap on the microbatches each rank holds (F started, W or B not ended: ``memory.
peak_activations(tl, until="W")``, in units of A), and returns the order timed by the one timer
(:mod:`rpd.schedules.machinery.timer`), so its times, memory and every metric come from the same code as
GPipe's. The objective is the makespan of the flush (a barrier ends the step) or the period, the
longest rank span (steps overlap, sail-sg's ``best_time``).

* ``method="heuristic"``: a greedy list scheduler swept over its rules
  (:mod:`rpd.schedules.machinery.search_heuristic`), the hand-written orders the caller passes
  (``hand_written``: the family's one-stage-per-rank schedules that fit the cap, GPipe, 1F1B,
  ZB-H1, ZB-H2 and ZB-H2 with smaller warm-ups, :func:`rpd.schedules.family.searched.hand_written`),
  the best of them improved by a local search. Never worse than any of those hand-written orders.
  The machinery takes them as a value: the orders are the family's, and the family sits above.
* ``method="exact"``: a CP-SAT model (:mod:`rpd.schedules.machinery.search_exact`) started from the
  heuristic's order; it proves optimality on small instances and otherwise returns the best
  order found with the solver's lower bound when ``time_limit`` cuts it.

Both search orders in which each rank runs its F's, I's (B's) and W's in microbatch order, as
sail-sg's ``Graph`` does; the tests check on small instances that a brute force over every order
finds nothing better. What was found is in ``tl.search_info`` (:class:`SearchInfo`).
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import time
from collections.abc import Callable, Hashable

import numpy as np

from rpd.schedules.machinery.build import order_of, timed
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import Order, concat, shift_mb
from rpd.schedules.machinery.search_exact import solve
from rpd.schedules.machinery.search_heuristic import (
    Problem,
    greedy,
    improve,
    make_problem,
    peak_memory,
    rules,
    score,
    tune,
)
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_choice, check_int, check_real

METHODS = ("heuristic", "exact")
OBJECTIVES = ("makespan", "period")
MAX_OPS = 3_000_000  # one flush of S * M microbatch-stages beyond which a search is refused
# The hand-written candidates of a problem, as (name, order of one flush) pairs (module docstring)
HandWritten = Callable[[Problem], list[tuple[str, Order]]]


@dataclasses.dataclass(frozen=True)
class SearchInfo:
    """What a search found. ``value``: the objective of the returned order (ticks, from the
    timer); ``bound``: a proven lower bound on it (``value`` when ``optimal``; the exact method's
    bound, else the trivial one, the busiest rank's work); ``source``: which candidate won
    ("greedy", "local search", a hand-written schedule's name, "cp-sat"); ``status``: the
    solver's status for the exact method, else "heuristic"."""

    method: str
    objective: str
    value: int
    bound: int
    optimal: bool
    status: str
    source: str
    seconds: float
    memory_cap: tuple[int, ...]


@dataclasses.dataclass(frozen=True, eq=False)
class SearchedTimeline(Timeline):
    """A Timeline of a searched order; synchronous (one optimizer step per flush) like the
    hand-written flush schedules, with the search's record in ``search_info``."""

    search_info: SearchInfo = dataclasses.field(kw_only=True)  # always set by the search

    @property
    def synchronous(self) -> bool:
        return True


def search(
    S: int,
    M: int,
    costs: CostModel | None,
    memory_cap,
    method: str = "heuristic",
    time_limit: float = 60.0,
    objective: str = "makespan",
    split: bool | None = None,
    workers: int | None = None,
    hand_written: HandWritten | None = None,
) -> SearchedTimeline:
    """The best order found for one flush of M microbatches on S ranks under ``costs`` with at most
    ``memory_cap`` microbatches held per rank (a number, or one per rank; ``None``: no cap).

    ``split``: F, I, W ops (True) or F, B (False); default: split when ``costs`` gives I and W.
    ``time_limit``: seconds for the exact method's solver (the heuristic, which the exact method
    starts from, is deterministic and takes no limit). ``workers``: the solver's threads (default: up to
    8). ``hand_written``: the problem's hand-written candidates (module docstring; None: none).
    Raises ValueError naming the argument for bad input, or for a cap below one microbatch."""
    t0 = time.perf_counter()
    p = _problem(S, M, costs, memory_cap, objective, split)
    method = check_choice("method", method, METHODS)
    time_limit = check_real("time_limit", time_limit)
    if workers is not None:
        workers = check_int("workers", workers)
    order, value, source = heuristic_order(p, hand_written)
    bound, optimal, status = _trivial_bound(p), False, "heuristic"
    if method == "exact":
        found = solve(p, order, value, time_limit, workers)
        bound, status = max(found.bound, bound), found.status
        if found.order is not None:
            v = score(p, found.order)[0]
            if v < value:
                order, value, source = found.order, v, "cp-sat"
        optimal = found.optimal and value <= found.value
    optimal = optimal or value <= bound
    info = SearchInfo(
        method=method,
        objective=p.objective,
        value=int(value),
        bound=int(min(bound, value)),
        optimal=bool(optimal),
        status=status,
        source=source,
        seconds=time.perf_counter() - t0,
        memory_cap=p.cap,
    )
    return _timeline(p, order, info)


def searched(
    S: int,
    N: int,
    M: int,
    costs: CostModel | None = None,
    overlapped: bool = False,
    memory_cap=None,
    method: str = "heuristic",
    time_limit: float = 60.0,
    hand_written: HandWritten | None = None,
) -> SearchedTimeline:
    """The schedule-family face of :func:`search` (``rpd.registry`` name "searched"): the order
    found for one flush, run for N / M flushes; split backward (F, I, W, like ZB-H1/H2) with the
    cap ``memory_cap`` (default 2S, ZB-H2's budget). ``overlapped=False``: a barrier after each
    flush, minimising the makespan; True: no barrier, minimising the period."""
    S, N, M = check_int("S", S), check_int("N", N), check_int("M", M)
    if N % M:
        raise ValueError(f"N must be a whole number of flushes of M microbatches, got N={N}, M={M}")
    if not isinstance(overlapped, (bool, np.bool_)):
        raise TypeError(f"overlapped must be a bool, got {overlapped!r}")
    cap: Hashable = 2 * S if memory_cap is None else memory_cap
    if not isinstance(memory_cap, numbers.Real) and memory_cap is not None:
        cap = tuple(memory_cap)
    one = _one_flush(S, M, costs, cap, method, time_limit, bool(overlapped), hand_written)
    if N == M:
        return one
    p = _problem(S, M, costs, one.search_info.memory_cap, one.search_info.objective, True)
    return _timeline(p, order_of(one), one.search_info, flushes=N // M)


@functools.lru_cache(maxsize=32)
def _one_flush(S, M, costs, cap, method, time_limit, overlapped, hand_written) -> SearchedTimeline:
    """One search per (instance, method): ``rpd.registry`` builds a schedule for many N (protocol
    (ii)) and the order of a flush does not depend on N."""
    return search(
        S,
        M,
        costs,
        cap,
        method=method,
        time_limit=time_limit,
        objective="period" if overlapped else "makespan",
        split=True,
        hand_written=hand_written,
    )


# ---------------------------------------------------------------- the heuristic


def heuristic_order(p: Problem, hand_written: HandWritten | None = None) -> tuple[Order, int, str]:
    """(order, objective, source): the best of the greedy rules, its warm-up depths tuned rank by
    rank, and the hand-written orders (``hand_written(p)``) that fit the caps, then improved by
    :func:`~rpd.schedules.machinery.search_heuristic.improve`. Deterministic; the tuning and the local
    search take fewer steps on larger instances (a few seconds at S = 16, M = 128)."""
    first, *others = rules(p)
    order, s = greedy(p, first)
    best = (s, order, "greedy", first)
    for rule in others:
        order, s = greedy(p, rule)
        if s < best[0]:
            best = (s, order, "greedy", rule)
    s, order, source, rule = best
    n = p.S * p.M
    order, s = tune(p, rule, order, s, max_runs=int(np.clip(150_000 // n, 4 * p.S, 400)))
    cap = np.asarray(p.cap)
    for name, hand in hand_written(p) if hand_written is not None else []:
        if np.all(peak_memory(p, hand) <= cap):
            s2 = score(p, hand)
            if s2 < s:
                s, order, source = s2, hand, name
    better, s2 = improve(p, order, int(np.clip(700_000 // n, 100, 5000)), s)
    if s2 < s:
        order, s, source = better, s2, "local search"
    return order, int(s[0]), source


# ---------------------------------------------------------------- checks and packaging


def _problem(S, M, costs, memory_cap, objective, split) -> Problem:
    S, M = check_int("S", S), check_int("M", M)
    if costs is None:
        costs = CostModel()
    if not isinstance(costs, CostModel):
        raise TypeError(f"costs must be an rpd.schedules.machinery.costs.CostModel or None, got {type(costs).__name__}")
    objective = check_choice("objective", objective, OBJECTIVES)
    if split is None:
        split = costs.I is not None
    elif not isinstance(split, (bool, np.bool_)):
        raise TypeError(f"split must be a bool or None, got {split!r}")
    if 3 * S * M > MAX_OPS:
        raise ValueError(f"S * M = {S * M} microbatch-stages is too large to search (limit {MAX_OPS // 3})")
    return make_problem(S, M, costs, bool(split), _caps(memory_cap, S, M), objective)


def _caps(memory_cap, S: int, M: int) -> tuple[int, ...]:
    """Per-rank integer caps (microbatches held), each at most M."""
    if memory_cap is None:
        return (M,) * S
    if isinstance(memory_cap, numbers.Real) and not isinstance(memory_cap, bool):
        values = [memory_cap] * S
        names = ["memory_cap"] * S
    else:
        try:
            values = list(memory_cap)
        except TypeError:
            raise TypeError(f"memory_cap must be a number, one number per rank, or None, got {memory_cap!r}") from None
        if len(values) != S:
            raise ValueError(f"memory_cap has {len(values)} values, the pipeline has S={S} ranks")
        names = [f"memory_cap[{r}]" for r in range(S)]
    caps = []
    for name, value in zip(names, values):
        v = check_real(name, value)
        if v < 1:
            raise ValueError(f"{name} must be >= 1 (one microbatch's activations, A), got {v}")
        caps.append(min(int(np.floor(v + 1e-9)), M))
    return tuple(caps)


def _trivial_bound(p: Problem) -> int:
    """The busiest rank's work (period), or its work plus when it can first start (makespan)."""
    work = p.F.sum(axis=1) + p.X.sum(axis=1) + p.W.sum(axis=1)
    if p.objective == "period":
        return int(work.max())
    return int((work + p.first_start).max())


def _timeline(p: Problem, order: Order, info: SearchInfo, flushes: int = 1) -> SearchedTimeline:
    overlapped = p.objective == "period"
    if flushes > 1:
        order = concat([shift_mb(order, q * p.M) for q in range(flushes)])
    tl = timed(
        "searched",
        order,
        S=p.S,
        N=flushes * p.M,
        M=p.M,
        costs=p.costs,
        split=p.split,
        barrier_every=None if overlapped else p.M,
        overlapped=overlapped,
        sync=True,
    )
    fields = {f.name: getattr(tl, f.name) for f in dataclasses.fields(Timeline)}
    return SearchedTimeline(**fields, search_info=info)


__all__ = [
    "METHODS",
    "OBJECTIVES",
    "SearchInfo",
    "SearchedTimeline",
    "HandWritten",
    "heuristic_order",
    "search",
    "searched",
]
