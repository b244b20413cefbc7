"""LocalSGD on the same pipeline (docs/schedules.md#localsgd): its constructor, its own parameters (R, H)
and its entry."""

from __future__ import annotations

import dataclasses

from rpd.schedules.family.flushes import costs_of
from rpd.schedules.machinery import readiness
from rpd.schedules.machinery.build import order_of, timed
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, ScheduleEntry, Source
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_int, required


@dataclasses.dataclass(frozen=True)
class Params:
    """LocalSGD's own parameters."""

    R: int | None = None  # replicas; None: S (the paper)
    H: int = 1  # local steps per round

    def resolve(self, S: int) -> Params:
        return dataclasses.replace(self, R=S if self.R is None else self.R)


def local_sgd(S: int, N: int, R: int, H: int, costs: CostModel | None = None, values: int = 0) -> Timeline:
    """LocalSGD on the same S-stage pipeline (docs/schedules.md#localsgd).

    R replicas, microbatch m on replica m mod R, rounds of R*H microbatches separated by a
    barrier and an averaging of the replicas that ends with tick ``sync_time[q]``; the averaging
    of ``values`` numbers per stage costs ``costs.allreduce_ticks(values)`` ticks.
    With unit costs and R >= S: T = 2N + ceil(N / (R*H)) * (2S - 2)."""
    tl = readiness.local_sgd(S, N, R, H)
    values = check_int("values", values, minimum=0)
    c = costs_of(costs)
    if c is None or c.is_unit:
        return tl
    R, H = required("R", tl.R), required("H", tl.H)
    return timed(
        "local_sgd",
        order_of(tl),
        averaging=True,
        S=tl.S,
        N=tl.N,
        costs=c,
        R=R,
        H=H,
        versions=R,
        copies=R,
        barrier_every=R * H,
        gap=c.allreduce_ticks(values),
    )


ENTRY = ScheduleEntry(
    "local_sgd",
    local_sgd,
    (),
    params_type=Params,
    allreduce=True,
    synchronous=False,
    semantics="replicas",
    doc="LocalSGD rounds",
    look=Look("LocalSGD", "#8B4513", "d"),
    source=Source("Stich, Local SGD converges fast and communicates little, ICLR 2019"),
)
