"""A timed pipeline run, :class:`Timeline`, and what every timeline reports (docs/schedules.md#what-a-timeline-reports).

Ticks follow :mod:`rpd.schedules.machinery.costs`: an op occupying ticks start .. end-1 has its result from tick
``end`` on. ``f_time[m, g]`` is the first tick of F(m, g) (when it reads its weights) and
``b_time[m, g]`` the last tick of the op that completes microbatch m's gradient on stage g (B,
or W when the backward is split): its update "lands at the end of tick b_time", exactly the
unit-cost convention of docs/science.md#model-and-words where both are the op's time step. Every downstream consumer
(delay tables, plans, simulated-time axes) reads these two arrays.

Block updates in iteration order -- by ``b_time``, then stage -- are ``update_stage[k]``,
``update_mb[k]``, ``update_time[k]`` for k = 0..K-1, K = N * n_stages.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import numpy as np

from rpd.schedules.machinery.ir import BWD, FWD, IDLE, KIND_CHAR


class OpTable(NamedTuple):
    """Every op of a run, rank-major in each rank's execution order."""

    kind: np.ndarray  # int8 [n]: FWD / BWD / BWD_I / BWD_W
    stage: np.ndarray  # int32 [n]: global stage (model chunk)
    mb: np.ndarray  # int32 [n]
    rank: np.ndarray  # int32 [n]
    start: np.ndarray  # int64 [n]: first tick
    end: np.ndarray  # int64 [n]: first tick after the op
    fused: np.ndarray  # bool [n]: overlapped with the previous op of its rank (same span)


@dataclasses.dataclass(frozen=True, eq=False)
class Timeline:
    """Ops of one pipeline run. PD and LocalSGD (``kind`` "pipedream" / "local_sgd") keep the
    original fields; the schedule family adds flushes, chunks and split backward.

    ``S`` is the number of ranks (devices) and ``n_stages`` the number of global stages (S * v
    for the chunked schedules). ``sync_time`` lists the ticks at whose end LocalSGD replicas are
    averaged; ``flush_time[q]`` the tick at whose end flush q is over everywhere (synchronous
    schedules: the optimizer step; -1 per flush when flushes overlap).
    """

    kind: str
    S: int
    N: int
    f_time: np.ndarray  # int [N, n_stages]
    b_time: np.ndarray  # int [N, n_stages]
    noam: int | None = None  # PD: max microbatches in flight
    R: int | None = None  # LocalSGD: replicas
    H: int | None = None  # LocalSGD: local steps per round
    sync_time: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int32))
    M: int | None = None  # microbatches per flush / minibatch (synchronous schedules, 2BW)
    v: int = 1  # model chunks per rank
    n_stages_: int | None = None  # global stages; None: S
    table_: OpTable | None = None  # None: one unit op per F/B, built from f_time/b_time on use
    costs: object | None = None  # the rpd.schedules.machinery.costs.CostModel it was timed with (None: unit)
    flush_time: np.ndarray | None = None  # int [n_flush]
    overlapped: bool = False  # flushes may overlap (optimizer post-validation)
    i_time: np.ndarray | None = None  # int [N, n_stages]: last tick of I (split backward)
    concat: str | None = None  # Chimera: how a flush of M > S microbatches is built (bidirectional.CONCAT)
    pieces: int = 1  # ops per (microbatch, stage) in the table: Chimera's backward halving runs halves
    sync: bool = False  # set by the constructor: each flush is one minibatch step at one weight version
    transfers: OpTable | None = (
        None  # activation offload: D2H / H2D ops on the host links (rpd.schedules.machinery.offload)
    )
    stash: bool = False  # PipeDream's weight stashing: a version per microbatch in flight (delays, memory)
    versions: int = 1  # weight versions of each block held at once otherwise (2BW: 2; LocalSGD: R replicas)
    copies: int = 1  # copies of each stage's weights kept equal by an all-reduce (Chimera, GEMS: 2; LocalSGD: R)

    # ------------------------------------------------------------------ shape and ops

    @property
    def n_stages(self) -> int:
        return self.S if self.n_stages_ is None else self.n_stages_

    @property
    def split(self) -> bool:
        return self.i_time is not None

    @property
    def synchronous(self) -> bool:
        return self.sync

    @property
    def averaged(self) -> bool:
        """Replicas averaged every H local steps (LocalSGD's rounds, ``sync_time``)."""
        return self.R is not None and self.H is not None

    @functools.cached_property
    def T(self) -> int:
        if self.table_ is None:
            return int(self.b_time[self.N - 1, 0]) + 1
        last = int(self.table_.end.max())  # a barrier's gap after the last group (averaging,
        for marks in (self.sync_time, self.flush_time):  # all-reduce) belongs to the run
            if marks is not None and len(marks):
                last = max(last, int(np.max(marks)) + 1)
        return last

    @property
    def K(self) -> int:
        return self.N * self.n_stages

    @functools.cached_property
    def table(self) -> OpTable:
        """Every op with its rank and [start, end) ticks."""
        if self.table_ is not None:
            return self.table_
        N, S = self.N, self.S
        kind = np.repeat(np.array([FWD, BWD], np.int8), N * S).reshape(2, N, S)
        times = np.stack([self.f_time, self.b_time]).astype(np.int64)  # [2, N, S]
        stage = np.broadcast_to(np.arange(S, dtype=np.int32), (2, N, S))
        mb = np.broadcast_to(np.arange(N, dtype=np.int32)[:, None], (2, N, S))
        o = np.lexsort((times.ravel(), stage.ravel()))
        start = times.ravel()[o]
        return OpTable(
            kind=kind.ravel()[o],
            stage=stage.ravel()[o],
            mb=mb.ravel()[o],
            rank=stage.ravel()[o],
            start=start,
            end=start + 1,
            fused=np.zeros(len(o), bool),
        )

    # ------------------------------------------------------------------ grids (pictures)

    @functools.cached_property
    def _flat_slots(self) -> tuple[np.ndarray, np.ndarray]:
        stages = np.arange(self.S, dtype=np.int64)
        return (self.f_time * self.S + stages).ravel(), (self.b_time * self.S + stages).ravel()

    @functools.cached_property
    def op(self) -> np.ndarray:
        """int8 [T, S]: IDLE / FWD / BWD / BWD_I / BWD_W on each rank at each tick."""
        if self.table_ is None:
            f, b = self._flat_slots
            op = np.zeros(self.T * self.S, np.int8)
            op[f] = FWD
            op[b] = BWD
            return op.reshape(self.T, self.S)
        return self._paint(self.table.kind, IDLE).astype(np.int8)

    @functools.cached_property
    def mb(self) -> np.ndarray:
        """int32 [T, S]: microbatch of the op, -1 when idle."""
        if self.table_ is None:
            f, b = self._flat_slots
            m = np.repeat(np.arange(self.N, dtype=np.int32), self.S)
            mb = np.full(self.T * self.S, -1, np.int32)
            mb[f] = m
            mb[b] = m
            return mb.reshape(self.T, self.S)
        return self._paint(self.table.mb, -1).astype(np.int32)

    @functools.cached_property
    def stage(self) -> np.ndarray:
        """int32 [T, S]: global stage of the op, -1 when idle."""
        if self.table_ is None:
            return np.where(self.op != IDLE, np.arange(self.S, dtype=np.int32), -1)
        return self._paint(self.table.stage, -1).astype(np.int32)

    def _paint(self, values: np.ndarray, fill: int) -> np.ndarray:
        t = self.table
        length = t.end - t.start
        ticks = np.repeat(t.start, length) + _ranges(length)
        grid = np.full((self.T, self.S), fill, np.int64)
        grid[ticks, np.repeat(t.rank, length)] = np.repeat(values, length)
        return grid

    # ------------------------------------------------------------------ updates

    @functools.cached_property
    def _updates(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.table_ is None:  # a readiness timeline (PD, LocalSGD at unit cost): one op per tick
            # np.nonzero walks [T, S] in row-major order: by time, then stage = iteration order.
            t, s = np.nonzero(self.op == BWD)
            return t.astype(np.int32), s.astype(np.int32), self.mb[t, s].astype(np.int32)
        G = self.n_stages
        time = self.b_time.ravel()
        stage = np.tile(np.arange(G, dtype=np.int32), self.N)
        o = np.lexsort((stage, time))
        return time[o].astype(np.int64), stage[o], (o // G).astype(np.int32)  # times: int64 (µs, ns costs)

    @property
    def update_time(self) -> np.ndarray:
        return self._updates[0]

    @property
    def update_stage(self) -> np.ndarray:
        return self._updates[1]

    @property
    def update_mb(self) -> np.ndarray:
        return self._updates[2]

    # ------------------------------------------------------------------ metrics
    # (docs/schedules.md#what-a-timeline-reports)

    def busy(self) -> np.ndarray:
        """int64 [S]: ticks each rank computes (a fused pair counts once)."""
        t = self.table
        once = ~t.fused
        return np.bincount(t.rank[once], weights=(t.end - t.start)[once], minlength=self.S).astype(np.int64)

    def idle(self) -> np.ndarray:
        """int64 [S]: idle ticks of each rank within the makespan [0, T)."""
        return self.T - self.busy()

    def bubble_ratio(self) -> float:
        """f_total = idle / (T * S): the share of wall time the ranks are idle (docs/schedules.md#conventions)."""
        return float(self.idle().sum() / (self.T * self.S))

    def bubble_overhead(self) -> float:
        """r_ideal = idle / ideal compute (Megatron's (1/v)(S-1)/M form; f = r / (1 + r))."""
        return float(self.idle().sum() / self.busy().sum())

    def spans(self) -> np.ndarray:
        """int64 [n_flush, S]: each rank's span (first op start to last op end) in each flush;
        one row for schedules without flushes."""
        t = self.table
        q = t.mb // self.M if (self.M is not None and self.synchronous) else np.zeros_like(t.mb)
        n_flush = int(q.max(initial=0)) + 1
        key = q.astype(np.int64) * self.S + t.rank
        first = np.full(n_flush * self.S, np.iinfo(np.int64).max)
        last = np.full(n_flush * self.S, np.iinfo(np.int64).min)
        np.minimum.at(first, key, t.start)
        np.maximum.at(last, key, t.end)
        return np.where(last >= first, last - first, 0).reshape(n_flush, self.S)

    def period(self) -> int:
        """Steady-state period P: the longest span of any rank in any flush. When flushes may
        overlap (each stage steps locally) this is the time per minibatch; with a barrier the
        time per minibatch is the flush makespan (docs/schedules.md#conventions)."""
        return int(self.spans().max())


def _ranges(length: np.ndarray) -> np.ndarray:
    """concatenate(arange(n) for n in length), without a Python loop."""
    total = int(length.sum())
    ends = np.cumsum(length)
    return np.arange(total) - np.repeat(ends - length, length)


def render_ascii(tl: Timeline, first: int = 0, last: int | None = None) -> str:
    """One line per machine: ``F3`` / ``B3`` / ``I3`` / ``W3`` for an op of microbatch 3
    (1-based, as in the paper), ``.`` for idle; ticks ``first..last-1``. Chunked schedules
    append the chunk's stage (``F3s5``)."""
    op, mb, st = tl.op[first:last], tl.mb[first:last], tl.stage[first:last]
    chunked = tl.n_stages != tl.S
    width = len(str(tl.N)) + 1 + (len(str(tl.n_stages)) + 1 if chunked else 0)
    lines = []
    for s in range(tl.S):
        cells = [
            ("." if o == IDLE else KIND_CHAR[o] + str(m + 1) + (f"s{g}" if chunked else "")).rjust(width)
            for o, m, g in zip(op[:, s].tolist(), mb[:, s].tolist(), st[:, s].tolist())
        ]
        lines.append(f"machine {s + 1:>{len(str(tl.S))}}: " + " ".join(cells))
    return "\n".join(lines)
