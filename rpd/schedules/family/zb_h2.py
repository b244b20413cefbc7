"""ZB-H2 (docs/schedules.md#zb-h2): its constructor (the greedy order of :mod:`rpd.schedules.family.orders`,
post-validation in :mod:`rpd.schedules.family.post_validation`), its own parameters and its entry;
the ``zb_h2_pv`` variant."""

from __future__ import annotations

import dataclasses

from rpd.schedules.family import orders
from rpd.schedules.family import post_validation as post_validation_
from rpd.schedules.family.flushes import check, costs_of, flush_entry, flushes
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import SAIL, Look, Source, Variant
from rpd.schedules.machinery.timeline import Timeline


@dataclasses.dataclass(frozen=True)
class Params:
    """ZB-H2's own parameters (:mod:`rpd.schedules.family.post_validation` for the last four)."""

    overlapped: bool = False  # no barrier between flushes (optimizer post-validation)
    post_validation: bool = False  # time sail-sg's post-validation: eager steps, rollbacks
    clip: float | None = None  # post-validation: the semantics' global-norm clip; None: none
    rollback_p: float = 0.0  # post-validation: probability a flush's eager step is rolled back
    rollback_trace: tuple[int, ...] | None = None  # post-validation: the flushes rolled back (overrides p)


def zb_h2(
    S: int,
    N: int,
    M: int,
    costs: CostModel | None = None,
    overlapped: bool = False,
    max_pending=None,
    max_held: int | None = None,
    post_validation: bool = False,
    clip: float | None = None,
    rollback_p: float = 0.0,
    rollback_trace=None,
) -> Timeline:
    """ZB-H2 by the greedy rule with the 2p memory cap (docs/schedules.md#zb-h2; at most ``max_held``,
    default 2S, microbatches F-not-W per rank, W residues included). Per-rank span 3M iff
    M >= 2S - 1 at unit costs, but T_flush = 3M + S - 1 as ZB-H1: the gain needs
    ``overlapped=True`` (no barrier between flushes, optimizer post-validation).
    ``post_validation=True`` times sail-sg's post-validation itself (eager steps, speculative
    forwards, rollbacks with probability ``rollback_p`` or at the flushes of ``rollback_trace``;
    ``clip``: the global-norm threshold the semantics apply), :mod:`rpd.schedules.family.post_validation`."""
    S, N, M = check(S, N, M, per_mb=3)
    if post_validation:
        return post_validation_.zb_h2_validated(
            S,
            N,
            M,
            costs_of(costs),
            rollback_p=rollback_p,
            trace=rollback_trace,
            clip=clip,
            max_pending=max_pending,
            max_held=max_held,
        )
    return flushes(
        "zb_h2",
        orders.zb_h2_order(S, M, max_pending, max_held),
        S,
        N,
        M,
        costs,
        split=True,
        overlapped=bool(overlapped),
    )


ENTRY = flush_entry(
    "zb_h2",
    zb_h2,
    params_type=Params,
    split_backward=True,
    semantics="zb_h2",
    doc="zero bubble H2 (greedy); post_validation: sail-sg's eager steps and rollbacks",
    look=Look("ZB-H2", "C4", "v"),
    source=Source("Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024", SAIL),
)

VARIANTS = (
    Variant(
        "zb_h2_pv", "zb_h2", {"post_validation": True}, Look("ZB-H2 + post-val.", "#E6AB02", "v", short="ZB-H2+PV")
    ),
)
