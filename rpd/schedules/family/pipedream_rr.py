"""PipeDream's 1F1B-RR: replicated stages taking microbatches round-robin (docs/schedules.md#pipedream-1f1b-rr).

PipeDream (Narayanan et al., SOSP'19, §3.3) replicates a slow stage over r workers, as data
parallelism inside the stage. Read in msr-fiddle/pipedream (``runtime/runtime.py``,
``runtime/image_classification/main_with_runtime.py``), for meaning:

* **Placement.** Stage g has ``replicas[g]`` = r_g workers; microbatch m runs its forward and its
  backward on replica m mod r_g of every stage (deterministic round-robin, "1F1B-RR"). Ranks are
  numbered stage by stage: stage g's replica i is rank Σ_{h<g} r_h + i.
* **Order.** Each worker runs ``num_warmup = (W_{>=g} - 1) // r_g`` forwards (W_{>=g}: workers of
  stages g..S-1), then (F, B) pairs on the oldest in-flight microbatch, then the remaining
  backwards (``runtime.py``: ``num_warmup_minibatches``). With every r_g = 1 this is PipeDream's
  1F1B order, S - g forwards before the first backward (a test checks its backwards equal rpd's
  ``pipedream`` timeline). That default starves a replicated stage that follows unreplicated ones;
  ``depth="cover"`` (or PipeDream's ``stage_to_depth_map``, one depth per stage) lets the upstream
  stages run further ahead (:func:`warmup`). The orders are timed by the one timer
  (:mod:`rpd.schedules.machinery.build`); neither rule deadlocks in 100 random configurations (a test).
* **Weights.** The replicas of a stage are wrapped in ``DistributedDataParallel``: the j-th
  backward of every replica of stage g meets in one gradient all-reduce, so stage g takes one
  optimizer step per group of r_g consecutive microbatches {j·r_g, .., j·r_g + r_g - 1} with the
  mean of their gradients, and the replicas stay identical. The runtime scales stage g's learning
  rate by r_g / r_0 (``get_adjusted_learning_rate``), so every stage moves γ / r_0 per microbatch.
  Each replica stashes the version its forward read (weight stashing), so a microbatch's
  gradient is the whole model's at the versions its forwards read.
* **All-reduce in time.** rpd charges the all-reduce of stage g's weights
  ``costs.allreduce_ticks(2(r_g - 1)/r_g · values[g])`` ticks (a ring) on a communication channel
  of its own, one group after another: group j's all-reduce starts when its last backward has
  ended and the previous group's all-reduce is over, and the update lands at its end. Compute is
  not blocked (the max in PipeDream's cost model max(compute, all-reduce) / r; PipeDream's runtime
  itself waits in DDP's backward for the all-reduce, which rpd does not model), so the order's
  ticks are the one timer's and the channel only moves when updates land; the run's makespan
  includes the last all-reduce.

N need not be a multiple of every r_g (PipeDream asserts it is): the microbatches of a trailing
partial group of a replicated stage never meet in an all-reduce, and their gradients on that stage
are never applied (as AMPNet's trailing partial group).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from rpd.schedules.machinery.build import timed
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, ScheduleEntry, Source
from rpd.schedules.machinery.ir import BWD, FWD, Col, Order
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_int

KIND = "pipedream_rr"


@dataclasses.dataclass(frozen=True, eq=False)
class RoundRobinTimeline(Timeline):
    """A timeline whose stage g runs on ``replicas[g]`` ranks. ``land[g]`` (int [N / r_g]): the
    tick at whose end stage g's j-th update (its all-reduced group j) lands, int [N // r_g]; ``S`` is the number
    of ranks, ``n_stages`` the number of stages."""

    replicas: tuple = ()
    allreduce: tuple = ()  # ticks of one all-reduce of each stage (0 unless replicated)
    land: tuple = ()  # per stage, int64 [N // r_g]

    def held_versions(self) -> np.ndarray:
        """Versions held per stage (rpd.schedules.machinery.memory): each replica's stash."""
        return stashed_versions(self)

    @functools.cached_property
    def T(self) -> int:
        last = int(self.table.end.max())
        return max(last, *(int(a[-1]) + 1 for a in self.land if len(a)))

    @property
    def first_rank(self) -> np.ndarray:
        """int [n_stages + 1]: stage g's replicas are ranks first_rank[g] .. first_rank[g+1]-1."""
        return np.concatenate([[0], np.cumsum(self.replicas)]).astype(np.int64)


def check_replicas(replicas, S: int | None = None) -> tuple[int, ...]:
    """``replicas`` as a tuple of positive ints (of length S when given); ValueError naming it."""
    try:
        reps = tuple(replicas)
    except TypeError:
        raise TypeError(f"replicas must be a sequence of per-stage replica counts, got {replicas!r}") from None
    if not reps:
        raise ValueError("replicas must name at least one stage")
    reps = tuple(check_int(f"replicas[{g}]", r) for g, r in enumerate(reps))
    if S is not None and len(reps) != S:
        raise ValueError(f"replicas has {len(reps)} entries, one per stage is needed (S={S})")
    return reps


DEPTHS = ("runtime", "cover")


def warmup(replicas, depth="runtime") -> np.ndarray:
    """int [S]: forwards each replica of stage g runs before its first (F, B) pair.

    ``"runtime"``: (W_{>=g} - 1) // r_g, PipeDream's default ``num_warmup_minibatches``. It
    starves a replicated stage behind unreplicated ones (1, 1, 3, 1 with the third stage 3x
    slower runs at 6 ticks per microbatch, not 3), which is why PipeDream ships hand-set
    ``stage_to_depth_map``s with deeper upstream stages (GNMT on 12 GPUs: 12, 11, .., 5, 1, 0).
    ``"cover"``: from the last stage up, stage g keeps in flight (over its replicas) at least
    r_g more microbatches than stage g + 1 does: d_g = ceil((total_{g+1} + r_g) / r_g) - 1,
    total_g = r_g (d_g + 1); equal to the runtime's when no stage is replicated. A sequence:
    PipeDream's ``stage_to_depth_map``, one depth per stage."""
    r = np.asarray(replicas, np.int64)
    if not isinstance(depth, str):
        d = np.asarray([check_int(f"depth[{g}]", x, minimum=0) for g, x in enumerate(depth)], np.int64)
        if d.shape != r.shape:
            raise ValueError(f"depth has {d.size} entries, one per stage is needed ({r.size})")
        return d
    if depth not in DEPTHS:
        raise ValueError(f"depth must be one of {DEPTHS} or one warm-up depth per stage, got {depth!r}")
    if depth == "runtime":
        downstream = np.cumsum(r[::-1])[::-1]  # workers of stages g..S-1
        return (downstream - 1) // r
    d = np.zeros(len(r), np.int64)
    total = 0
    for g in range(len(r) - 1, -1, -1):
        d[g] = -(-(total + r[g]) // r[g]) - 1
        total = r[g] * (d[g] + 1)
    return d


def rr_order(replicas, N: int, depth="runtime") -> Order:
    """One op list per rank (module doc): replica i of stage g runs microbatches i, i + r_g, ..
    in 1F1B order after its warm-up forwards (:func:`warmup`)."""
    out = []
    for g, (r, w) in enumerate(zip(replicas, warmup(replicas, depth))):
        for i in range(r):
            mine = np.arange(i, N, r)
            n, w = len(mine), min(int(w), len(mine))
            seq = [(FWD, m) for m in mine[:w]]
            for k in range(n - w):
                seq += [(FWD, mine[w + k]), (BWD, mine[k])]
            seq += [(BWD, m) for m in mine[n - w :]]
            a = np.zeros((len(seq), 4), np.int32)
            a[:, Col.KIND] = [k for k, _ in seq]
            a[:, Col.STAGE] = g
            a[:, Col.MB] = [m for _, m in seq]
            out.append(a)
    return out


def channel(b_time_g: np.ndarray, r: int, ticks: int) -> np.ndarray:
    """int64 [N // r]: landing ticks of one stage's all-reduced updates (module doc): group j of the
    r microbatches j·r .. j·r + r - 1 is ready after its last backward (b_time = last tick) and
    takes ``ticks`` on a channel that runs one all-reduce at a time."""
    b = np.asarray(b_time_g, np.int64)
    ready = b[: len(b) // r * r].reshape(-1, r).max(axis=1) + 1  # first tick after; partial group: never
    land = np.empty(len(ready), np.int64)
    free = 0
    for j, t in enumerate(ready.tolist()):
        start = max(t, free)
        free = start + ticks
        land[j] = free - 1 if ticks else t - 1
    return land


@dataclasses.dataclass(frozen=True)
class Params:
    """PipeDream 1F1B-RR's own parameters."""

    replicas: tuple[int, ...] | None = None  # workers of each stage (S entries); None: one each (PipeDream)


def pipedream_rr(
    S: int, N: int, replicas=None, costs: CostModel | None = None, values=0, depth="runtime"
) -> RoundRobinTimeline:
    """PipeDream 1F1B-RR (module doc): S stages, stage g replicated over ``replicas[g]`` workers
    (default: none replicated, PipeDream), N microbatches (a trailing partial group never lands).
    ``values``: numbers per stage (an int or one per stage) whose all-reduce costs
    ``costs.allreduce_ticks(2(r-1)/r · values)`` ticks. ``depth``: the warm-up rule
    (:func:`warmup`; PipeDream's runtime default, ``"cover"``, or one depth per stage)."""
    S, N = check_int("S", S), check_int("N", N)
    reps = (1,) * S if replicas is None else check_replicas(replicas, S)
    vals = np.broadcast_to(np.asarray(values, np.int64), (S,))
    if np.any(vals < 0):
        raise ValueError(f"values must be >= 0, got {values!r}")
    costs = CostModel() if costs is None else costs
    if not isinstance(costs, CostModel):
        raise TypeError(f"costs must be an rpd.schedules.machinery.costs.CostModel or None, got {type(costs).__name__}")
    ticks = tuple(
        costs.allreduce_ticks(2 * (r - 1) / r * float(v)) if r > 1 else 0 for r, v in zip(reps, vals.tolist())
    )
    w = warmup(reps, depth)
    tl = timed(KIND, rr_order(reps, N, w), S=int(sum(reps)), N=N, costs=costs, n_stages=S, noam=int(w[0] + 1))
    land = tuple(channel(tl.b_time[:, g], r, a) for g, (r, a) in enumerate(zip(reps, ticks)))
    fields = {f.name: getattr(tl, f.name) for f in dataclasses.fields(Timeline)}
    return RoundRobinTimeline(**fields, replicas=reps, allreduce=ticks, land=land)


def forward_groups(tl: RoundRobinTimeline) -> np.ndarray:
    """int [N, n_stages]: how many of stage g's updates (groups) had landed when F(m, g) read its
    weights (an update landing at the end of tick L is seen from tick L + 1)."""
    return np.stack(
        [np.searchsorted(tl.land[g], tl.f_time[:, g], side="left") for g in range(tl.n_stages)], axis=1
    ).astype(np.int64)


def stashed_versions(tl: RoundRobinTimeline) -> np.ndarray:
    """int [n_stages]: most weight versions one replica of stage g holds at once: the current one
    and every older one a microbatch in flight on it (F started, B not ended) read."""
    vF = forward_groups(tl)
    out = np.ones(tl.n_stages, np.int64)
    for g in range(tl.n_stages):
        f, b = tl.f_time[:, g], tl.b_time[:, g]
        for m in range(tl.N):  # the peak is reached when a forward starts
            t = f[m]
            live = (f <= t) & (b >= t) & (np.arange(tl.N) % tl.replicas[g] == m % tl.replicas[g])
            current = np.searchsorted(tl.land[g], t, side="left")
            out[g] = max(out[g], len(set(vF[live, g].tolist()) | {int(current)}))
    return out


ENTRY = ScheduleEntry(
    "pipedream_rr",
    pipedream_rr,
    (),
    params_type=Params,
    allreduce=True,
    synchronous=False,
    semantics="round_robin",
    doc="PipeDream 1F1B-RR: stage g on replicas[g] workers, microbatches round-robin, weights all-reduced",
    look=Look("PipeDream 1F1B-RR", "#800000", "X", short="PD-RR"),  # maroon: GPipe has the blue
    source=Source("Narayanan et al., PipeDream, SOSP 2019", "msr-fiddle/pipedream"),
)
