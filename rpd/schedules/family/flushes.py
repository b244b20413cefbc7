"""What the flush schedules' constructors share: the checks of S, N and M (N a whole number of
flushes, the op-count limit), the cost model's type, the all-reduce that ends a flush of
replicated stages, N / M flushes of one flush's order timed with a barrier between them
(none when ``overlapped``), and the part of their entries that says so (:func:`flush_entry`)."""

from __future__ import annotations

from rpd.schedules.machinery.build import timed
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import ScheduleEntry
from rpd.schedules.machinery.ir import concat, shift_mb
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_int

MAX_OPS = 50_000_000  # ~3 GB of op tables: beyond it a timeline is refused before any allocation


def check(S, N, M, per_mb: int = 2, stages_per_rank: int = 1):
    S, N, M = check_int("S", S), check_int("N", N), check_int("M", M)
    whole_flushes(N, M)
    if per_mb * N * S * stages_per_rank > MAX_OPS:
        raise ValueError(f"N * S = {N * S} microbatch-stages is too large to simulate (limit {MAX_OPS} ops)")
    return S, N, M


def whole_flushes(N: int, M: int) -> None:
    if N % M:
        raise ValueError(f"N must be a whole number of flushes of M microbatches, got N={N}, M={M}")


def costs_of(costs) -> CostModel | None:
    if costs is not None and not isinstance(costs, CostModel):
        raise TypeError(f"costs must be an rpd.schedules.machinery.costs.CostModel or None, got {type(costs).__name__}")
    return costs


def allreduce_gap(costs, values) -> int:
    """The ticks between flushes of replicated stages: their gradients' all-reduce,
    ``costs.allreduce_ticks(values)`` (``values`` per stage); none without a cost model."""
    values = check_int("values", values, minimum=0)
    c = costs_of(costs)
    return 0 if c is None else c.allreduce_ticks(values)


def flushes(kind, one_flush, S, N, M, costs, *, overlapped=False, gap=0, **kw) -> Timeline:
    order = concat([shift_mb(one_flush, q * M) for q in range(N // M)])
    return timed(
        kind,
        order,
        S=S,
        N=N,
        M=M,
        costs=costs_of(costs),
        overlapped=overlapped,
        barrier_every=None if overlapped else M,
        gap=gap,
        sync=True,
        **kw,
    )


def flush_entry(name: str, build, **facts) -> ScheduleEntry:
    """The entry of a flush schedule: N a whole number of flushes of M microbatches, M the shared
    field it reads; ``facts``: its other :class:`ScheduleEntry` fields."""
    return ScheduleEntry(name, build, ("M",), flush=True, **facts)
