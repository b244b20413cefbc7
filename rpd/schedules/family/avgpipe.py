"""AvgPipe (PPoPP'23, elastic averaging over parallel pipelines): **a reconstruction**.

What was read: the issue's summary (several pipelines share the same devices, each training
its own replica, coupled by elastic averaging to a centre variable; an "advance forward" depth
a in [0, M] moves each pipeline between 1F1B (a = 0) and all-forward-first (a = M); 1.7x over
its baselines) and a second-hand survey entry (docs/schedules.md#avgpipe). Not read: the paper itself, its figures,
its code (none was found in the stored repositories or pages) and its exact elastic rule; the
elastic update below is EASGD's synchronous rule (Zhang, Choromanska and LeCun, NeurIPS 2015),
recalled, not checked against AvgPipe. Every rule of the reconstruction is in this module
(orders) and in :mod:`rpd.train.avgpipe` (the update), so a reader with the paper can correct it.

The reconstruction, on S devices with P pipelines and M microbatches per iteration (m = M/P
per pipeline):

* **placement**: every pipeline places stage s on device s, so all P replicas of stage s and
  its centre live on device s and the elastic averaging needs no communication;
* **microbatches**: iteration q of pipeline i runs microbatches q M + i m + j, j < m (each
  pipeline reads its own data);
* **advance forward** (:func:`rpd.schedules.family.orders.one_f_one_b_order` with ``advance=a``):
  pipeline i's iteration on device s runs w = min(S - 1 - s + a, m) forwards, then pairs (F, B),
  then the remaining B's: a = 0 is 1F1B (Megatron's warm-up), a = m is all forwards first
  (GPipe's order);
* **sharing the devices** (:func:`avgpipe_order`): each device interleaves its pipelines' op
  lists by a readiness rule at unit costs (each tick, the first pipeline, by index, whose next
  op's inputs are ready), and starts an iteration q op only once every pipeline's iteration
  q-1 ops on that device are done (the elastic step of q needs the centre of q-1); the order so
  found is then timed by the one timer under the cost model, as every static order is;
* **no global barrier**: a pipeline's stage steps after its last backward of the iteration,
  locally, like the overlapped zero-bubble flushes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.schedules.family.flushes import flush_entry
from rpd.schedules.family.orders import one_f_one_b_order
from rpd.schedules.machinery.build import timed
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, Source
from rpd.schedules.machinery.ir import FWD, Order, ops
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_int, check_real, required


@dataclasses.dataclass(frozen=True, eq=False)
class AvgPipeTimeline(Timeline):
    """A timeline of P pipelines sharing S devices (module doc); ``M`` is the microbatches of one
    iteration over all pipelines, M / P per pipeline."""

    pipelines: int = 2
    advance: int = 0
    elastic: float | None = None  # EASGD's moving rate α (None: 0.9 / P)

    def held_versions(self) -> np.ndarray:
        """Versions held per stage (rpd.schedules.machinery.memory): one replica per pipeline and the centre."""
        return np.full(self.n_stages, self.pipelines + 1, np.int64)

    def pipeline_of(self) -> np.ndarray:
        """int [N]: the pipeline of each microbatch."""
        M = required("M", self.M)
        return (np.arange(self.N) % M) // (M // self.pipelines)

    def iteration_end(self) -> np.ndarray:
        """int [Q]: the tick at whose end every stage of every pipeline has stepped iteration q."""
        return self.b_time.reshape(self.N // required("M", self.M), -1).max(axis=1)


def avgpipe_order(S: int, N: int, M: int, P: int, a: int) -> Order:
    """The devices' op orders of P pipelines over N microbatches, M per iteration (module doc:
    the readiness rule at unit costs, iterations in turn on each device)."""
    m_per = M // P
    one = one_f_one_b_order(S, m_per, advance=a)  # one pipeline's iteration, advance forward
    Q = N // M
    queues: list[list[list[tuple[int, int, int, int]]]] = [
        [[] for _ in range(P)] for _ in range(S)
    ]  # [device][pipeline] -> rows
    for q in range(Q):
        for i in range(P):
            base = q * M + i * m_per
            for s in range(S):
                queues[s][i] += [(int(k), int(g), int(m) + base, q) for k, g, m, _ in one[s].tolist()]
    never = np.iinfo(np.int64).max
    f_done = np.full((S, N), never, np.int64)
    b_done = np.full((S, N), never, np.int64)
    pos = np.zeros((S, P), np.int64)
    left = np.zeros((S, Q), np.int64)  # ops of iteration q not yet run on device s
    for s in range(S):
        for i in range(P):
            for row in queues[s][i]:
                left[s, row[3]] += 1
    out: list[list[tuple[int, int, int]]] = [[] for _ in range(S)]
    t, total = 0, sum(len(x) for qs in queues for x in qs)
    while total:
        ran = []
        for s in range(S):
            for i in range(P):
                if pos[s, i] >= len(queues[s][i]):
                    continue
                k, g, m, q = queues[s][i][pos[s, i]]
                if q and left[s, q - 1]:
                    continue
                if k == FWD:
                    ready = g == 0 or f_done[g - 1, m] < t
                else:
                    ready = f_done[g, m] < t and (g == S - 1 or b_done[g + 1, m] < t)
                if ready:
                    ran.append((s, i, k, g, m, q))
                    break
        for s, i, k, g, m, q in ran:
            (f_done if k == FWD else b_done)[g, m] = t
            out[s].append((k, g, m))
            pos[s, i] += 1
            left[s, q] -= 1
            total -= 1
        t += 1
        if t > 4 * N * S + 16:
            raise AssertionError("avgpipe_order: the readiness rule made no progress")
    return [ops(rows) for rows in out]


@dataclasses.dataclass(frozen=True)
class Params:
    """AvgPipe's own parameters."""

    pipelines: int = 2  # pipelines sharing the devices
    advance: int = dataclasses.field(default=0, metadata={"minimum": 0})  # advance-forward depth, [0, M / pipelines]
    elastic: float | None = None  # EASGD's moving rate α in (0, 1/pipelines]; None: 0.9 / pipelines


def avgpipe(
    S: int,
    N: int,
    M: int,
    costs: CostModel | None = None,
    pipelines: int = 2,
    advance: int = 0,
    elastic: float | None = None,
) -> AvgPipeTimeline:
    """AvgPipe (reconstruction, module doc): ``pipelines`` pipelines on S devices, M microbatches
    per iteration (M / pipelines each), advance-forward depth ``advance`` in [0, M / pipelines];
    N is a whole number of iterations. ``elastic``: EASGD's moving rate α in (0, 1/P] (None:
    0.9 / P), read by the semantics."""
    S, N, M = check_int("S", S), check_int("N", N), check_int("M", M)
    P = check_int("pipelines", pipelines)
    a = check_int("advance", advance, minimum=0)
    if M % P:
        raise ValueError(f"M must be a whole number of microbatches per pipeline, got M={M}, pipelines={P}")
    if a > M // P:
        raise ValueError(f"advance must lie in [0, M / pipelines] = [0, {M // P}], got advance={a}")
    if N % M:
        raise ValueError(f"N must be a whole number of iterations of M microbatches, got N={N}, M={M}")
    if elastic is not None and not 0 < check_real("elastic", elastic) <= 1 / P:
        raise ValueError(f"elastic must lie in (0, 1/pipelines] = (0, {1 / P:g}], got {elastic}")
    tl = timed("avgpipe", avgpipe_order(S, N, M, P, a), S=S, N=N, M=M, costs=costs)
    fields = {f.name: getattr(tl, f.name) for f in dataclasses.fields(Timeline)}
    return AvgPipeTimeline(**fields, pipelines=P, advance=a, elastic=None if elastic is None else float(elastic))


ENTRY = flush_entry(
    "avgpipe",
    avgpipe,
    params_type=Params,
    synchronous=False,
    semantics="elastic",
    defaults={"M": lambda S: S + S % 2},
    doc="AvgPipe (reconstruction): parallel pipelines, elastic averaging, advance forward",
    look=Look("AvgPipe", "#D95F02", "H", reconstruction=True),
    source=Source("Chen et al., AvgPipe, IEEE TPDS 2024"),
)
