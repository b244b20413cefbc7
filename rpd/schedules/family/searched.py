"""The schedule found by search (docs/schedules.md#schedules-found-by-search): its own parameters
(overlapped), its entry, and the hand-written orders the search starts from (GPipe, 1F1B, ZB-H1,
ZB-H2: :func:`hand_written`), handed to the search (:mod:`rpd.schedules.machinery.search`) as a
value, since the machinery sits below the family whose orders they are."""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.schedules.family import orders
from rpd.schedules.family.flushes import flush_entry
from rpd.schedules.machinery import search as machinery
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, Source
from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, Order, ops
from rpd.schedules.machinery.search_heuristic import Problem


@dataclasses.dataclass(frozen=True)
class Params:
    """The searched schedule's own parameters."""

    overlapped: bool = False  # no barrier between flushes, the period minimised


def hand_written(p: Problem) -> list[tuple[str, Order]]:
    """The hand-written one-stage-per-rank orders of one flush in this problem's op kinds (a full
    backward B is I immediately followed by W when the search splits it). ZB-H1/H2 need a split
    backward; ZB-H2 is also tried with warm-ups 2(S-1-r)+1 capped at each budget below it."""
    S, M = p.S, p.M
    out = [("gpipe", orders.gpipe_order(S, M)), ("1f1b", orders.one_f_one_b_order(S, M))]
    if p.split:
        out = [(name, _split_b(order)) for name, order in out]
        out.append(("zb_h1", orders.zb_h1_order(S, M)))
        out.append(("zb_h2", orders.zb_h2_order(S, M)))
        warm = 2 * (S - 1 - np.arange(S)) + 1
        for k in sorted({min(int(c), M) for c in p.cap}):
            if k < warm.max():
                out.append((f"zb_h2(max_pending<={k})", orders.zb_h2_order(S, M, np.minimum(warm, k))))
    return out


def _split_b(order: Order) -> Order:
    out = []
    for a in order:
        rows: list[tuple[int, int, int]] = []
        for kind, g, m, _ in a.tolist():
            rows += [(BWD_I, g, m), (BWD_W, g, m)] if kind == BWD else [(kind, g, m)]
        out.append(ops(rows))
    return out


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
) -> machinery.SearchedTimeline:
    """The best order found for one flush (:func:`rpd.schedules.machinery.search.search`), never
    worse than the hand-written orders that fit the cap (:func:`hand_written`)."""
    return machinery.search(S, M, costs, memory_cap, method, time_limit, objective, split, workers, hand_written)


def searched(
    S: int,
    N: int,
    M: int,
    costs: CostModel | None = None,
    overlapped: bool = False,
    memory_cap=None,
    method: str = "heuristic",
    time_limit: float = 60.0,
) -> machinery.SearchedTimeline:
    """The schedule "searched" (:func:`rpd.schedules.machinery.search.searched`): the order found for
    one flush under ``memory_cap`` (default 2S), starting from :func:`hand_written`, run for N / M
    flushes."""
    return machinery.searched(S, N, M, costs, overlapped, memory_cap, method, time_limit, hand_written)


ENTRY = flush_entry(
    "searched",
    searched,
    params_type=Params,
    split_backward=True,
    doc="found by search under a 2S cap (rpd.schedules.machinery.search, heuristic)",
    look=Look("searched (2S cap)", "#444444", "*", short="searched"),
    source=Source("rpd's own search (docs/schedules.md#schedules-found-by-search)"),
)
