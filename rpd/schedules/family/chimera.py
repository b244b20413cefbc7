"""Chimera (docs/schedules.md#chimera): its constructor (orders: :mod:`rpd.schedules.family.bidirectional`), its
own parameters (concat) and its entry; the ``chimera_fd`` and ``chimera_bh`` variants."""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.schedules.family.bidirectional import CONCAT, chimera_concat_order
from rpd.schedules.family.flushes import allreduce_gap, check, costs_of, flush_entry, flushes
from rpd.schedules.machinery.build import merge_pieces
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, Source, Variant
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_choice


@dataclasses.dataclass(frozen=True)
class Params:
    """Chimera's own parameters."""

    concat: str = "direct"  # M > S: direct | forward_doubling | backward_halving (a reconstruction)


def chimera(
    S: int, N: int, M: int, costs: CostModel | None = None, values: int = 0, concat: str = "direct"
) -> Timeline:
    """Chimera with two pipelines in opposite directions over S (= D, even) workers
    (docs/schedules.md#chimera). Each worker holds two stage replicas whose gradients are all-reduced at the end of
    each flush: ``costs.allreduce_ticks(values)`` ticks, ``values`` per stage. ``concat``: how
    a flush of M > S microbatches is built, "direct" (the anchor), "forward_doubling" or
    "backward_halving" (a reconstruction, :mod:`rpd.schedules.family.bidirectional`); backward halving
    is timed on 2N half microbatches at half of every op's cost, so costs.F and costs.B must be
    even, and reported per microbatch (:func:`rpd.schedules.machinery.build.merge_pieces`)."""

    S, N, M = check(S, N, M)
    gap = allreduce_gap(costs, values)
    concat = check_choice("concat", concat, CONCAT)
    if concat != "backward_halving":
        return flushes("chimera", chimera_concat_order(S, M, concat), S, N, M, costs, gap=gap, concat=concat, copies=2)
    one_flush = chimera_concat_order(S, M, concat)  # on 2M pieces
    pieces = flushes("chimera", one_flush, S, 2 * N, 2 * M, _halved(costs), gap=gap, copies=2)
    return merge_pieces(pieces, 2, costs, concat=concat)


def _halved(costs: CostModel | None) -> CostModel:
    """The cost model of half a microbatch: F and B at half their cost (linear in the microbatch
    size; the lower efficiency of a smaller microbatch is not modelled), latency and all-reduce
    unchanged."""
    checked = costs_of(costs)
    c = CostModel() if checked is None else checked
    if c.straggler is not None or c.jitter is not None or c.slow is not None:
        raise ValueError(
            "concat='backward_halving' does not model stragglers or jitter (a half microbatch's delay is not defined)"
        )
    F, B = np.asarray(c.F), np.asarray(c.B if c.B is not None else 1)
    if np.any(F % 2) or np.any(B % 2):
        raise ValueError(
            "concat='backward_halving' runs half microbatches at half the cost: costs.F and costs.B must be "
            f"even ticks, got F={c.F}, B={c.B} (scale every cost by 2: costs.F=2 costs.B=4, and costs.I=2 costs.W=2 where I and W are set)"
        )
    half = lambda x: int(x) // 2 if np.ndim(x) == 0 else tuple(int(v) // 2 for v in x)  # noqa: E731
    return dataclasses.replace(c, F=half(F), B=half(B), I=None, W=None, FB=None)  # Chimera runs no I, W or F&B


ENTRY = flush_entry(
    "chimera",
    chimera,
    params_type=Params,
    allreduce=True,
    semantics="replicated",
    aliases={"D": "S"},
    doc="Chimera, two pipelines",
    look=Look("Chimera", "C7", "P"),
    source=Source("Li & Hoefler, Chimera, SC 2021"),
)

VARIANTS = (
    Variant(
        "chimera_fd",
        "chimera",
        {"concat": "forward_doubling"},
        Look("Chimera, fwd doubling", "#1B9E77", "P", short="Chimera FD", reconstruction=True),
    ),
    Variant(
        "chimera_bh",
        "chimera",
        {"concat": "backward_halving"},
        Look("Chimera, bwd halving", "#A6761D", "P", short="Chimera BH", reconstruction=True),
    ),
)
