"""PipeDream: asynchronous 1F1B with weight stashing, by the readiness rule (docs/schedules.md#pipedream): its
constructor, its own parameters (noam) and its entry; the ``naive`` variant (noam = 1)."""

from __future__ import annotations

import dataclasses

from rpd.schedules.family.flushes import costs_of
from rpd.schedules.machinery import readiness
from rpd.schedules.machinery.build import order_of, timed
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, ScheduleEntry, Source, Variant
from rpd.schedules.machinery.timeline import Timeline


@dataclasses.dataclass(frozen=True)
class Params:
    """PipeDream's own parameters."""

    noam: int | None = None  # microbatches in flight at most; None: S (1: naive model parallelism)

    def resolve(self, S: int) -> Params:
        return dataclasses.replace(self, noam=S if self.noam is None else self.noam)


def pipedream(S: int, N: int, noam: int | None = None, costs: CostModel | None = None) -> Timeline:
    """PipeDream asynchronous 1F1B with weight stashing (docs/schedules.md#pipedream).

    At most ``noam`` (default S) microbatches in flight; ``noam=1`` is naive model parallelism.
    Unit costs give T = 2N + 2S - 2 for NOAM >= S and T = 2SN for NOAM = 1. Under ``costs`` the
    order the readiness rule produces is timed by the one timer."""
    tl = readiness.pipedream(S, N, noam)
    c = costs_of(costs)
    if c is None or c.is_unit:
        return tl
    return timed("pipedream", order_of(tl), S=tl.S, N=tl.N, costs=c, noam=tl.noam, stash=True)


ENTRY = ScheduleEntry(
    "pipedream",
    pipedream,
    (),
    params_type=Params,
    synchronous=False,
    semantics="pipedream",
    doc="PipeDream async 1F1B, weight stashing",
    look=Look("PipeDream", "C8", "X"),
    source=Source("Narayanan et al., PipeDream, SOSP 2019", "msr-fiddle/pipedream"),
)

VARIANTS = (Variant("naive", "pipedream", {"noam": 1}, Look("naive PD (1 in flight)", "#000000", "x", short="naive")),)
