"""Op orders of the survey's remaining rows (docs/schedules.md#gems, #ampnet, #wpipe): GEMS, AMPNet and WPipe.

Each generator returns an :data:`rpd.schedules.machinery.ir.Order`; the public constructors
(:mod:`rpd.schedules.family`: ``gems``, ``ampnet``, ``wpipe``) time it with the one timer.
Every rule lives here, once, with what was and was not read:

* **GEMS** (Jain et al., SC'20, "GEMS: GPU-enabled memory-aware model-parallelism system";
  OSU-Nowlab MPI4DL ``GEMS-MASTER``, as docs/schedules.md#gems summarises it, the code itself not re-read
  here): two model replicas mapped in opposite directions on D ranks. Replica 1 runs stage g on
  rank g, replica 2 stage g on rank D-1-g. Microbatches come in pairs: 2i goes to replica 1,
  2i+1 to replica 2. Rank r runs, per pair, F and B of replica 1's stage r, then F and B of
  replica 2's stage D-1-r. Synchronous: the two replicas' gradients of a stage (on ranks r and
  D-1-r) are all-reduced at the end of each step of M microbatches (M/2 pairs). The placement is
  Chimera's (:mod:`rpd.schedules.family.bidirectional`); only the order differs.
* **AMPNet** (Gaunt et al. 2017; fairscale ``experimental/nn/ampnet_pipe/ampnet.py``
  ``AsyncAMPnetEventLoop``, read): one epoch of N microbatches as one asynchronous 1F1B stream.
  Rank s runs D-1-s warm-up forwards (``n_warmup = ranks[-1] - cur_rank``; rank 0 ``N - 1``),
  then (F, B) pairs, then the remaining B's: Megatron's 1F1B order over the whole epoch with
  no flush. No weight stashing; ``optimizer.step()`` when ``num_gradients %
  min_update_interval == 0`` (the gradients of k backwards summed in ``.grad``, then zeroed),
  so a trailing partial group is never applied. The order is
  :func:`rpd.schedules.family.orders.one_f_one_b_order` with M = N.
* **WPipe** (Yang et al., ICLR'22, "Group-based interleaved pipeline parallelism"):
  **reconstruction**, from the abstract and secondary summaries only (docs/schedules.md#wpipe; the paper's
  figures and code were not read). The model is cut into 2S partitions in two groups; rank r
  holds partition r of group 1 (global stage r) and partition r of group 2 (stage S + r), the
  looped placement of interleaved 1F1B with v = 2. The order is Megatron's interleaved 1F1B
  table with microbatch group M (one weight-update period) run as one stream with no flush:
  the forwards of period q+1 in group 1 run ahead of the backwards of period q ("moves the
  forward of the next period to the front of the backward of the current period in the first
  group"), group 2 keeps its order, and each group updates once per period, alternately. The
  semantics are read off this order (:func:`rpd.train.semantics_async.wpipe_plan`): with
  M >= 2S - 2 group 1 gets PipeDream-2BW's one-step delay and two weight versions and group 2
  none (tested); a smaller M makes group 1 lag further (3 versions at M = S = 4), still exact.
  Training needs one objective block per stage (2S).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.schedules.family.orders import interleaved_order, one_f_one_b_order
from rpd.schedules.machinery.ir import BWD, FWD, Order, ops
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_int, required

# ---------------------------------------------------------------- GEMS


def gems_replica(D: int, M: int) -> np.ndarray:
    """int [M]: the replica (0: stage g on rank g, 1: stage g on rank D-1-g) of each microbatch."""
    return np.arange(M) % 2


def gems_order(D: int, M: int) -> Order:
    """GEMS (module doc): per microbatch pair i, rank r runs F(r, 2i), B(r, 2i) of replica 1,
    then F(D-1-r, 2i+1), B(D-1-r, 2i+1) of replica 2. M must be even (whole pairs)."""
    D, M = check_int("D", D, minimum=2), check_int("M", M)
    if M % 2:
        raise ValueError(f"gems runs microbatch pairs: M must be even, got M={M}")
    out = []
    for r in range(D):
        rows = []
        for i in range(M // 2):
            rows += [(FWD, r, 2 * i), (BWD, r, 2 * i), (FWD, D - 1 - r, 2 * i + 1), (BWD, D - 1 - r, 2 * i + 1)]
        out.append(ops(rows))
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class ReplicatedTimeline(Timeline):
    """A Timeline of a synchronous schedule with replicated stages whose kind is not in
    :data:`rpd.schedules.machinery.timeline.SYNCHRONOUS` (GEMS): one optimizer step per flush, after the
    replicas' all-reduce."""

    replicas: int = 2

    @property
    def synchronous(self) -> bool:
        return True


def replicated(tl: Timeline, replicas: int = 2) -> ReplicatedTimeline:
    """``tl`` as a :class:`ReplicatedTimeline` (the same fields)."""
    fields = {f.name: getattr(tl, f.name) for f in dataclasses.fields(Timeline)}
    return ReplicatedTimeline(**fields, replicas=replicas)


# ---------------------------------------------------------------- AMPNet


def ampnet_order(S: int, N: int) -> Order:
    """AMPNet (fairscale ``AsyncAMPnetEventLoop``, module doc): rank s runs min(S-1-s, N)
    warm-up F's, then pairs (F, B), then the remaining B's, over the whole epoch."""
    return one_f_one_b_order(check_int("S", S), check_int("N", N))


def landed_before(land: np.ndarray, ticks: np.ndarray) -> np.ndarray:
    """int [..]: how many of the sorted landing ticks ``land`` are < each of ``ticks`` (an update
    landing at the end of tick L is seen by an op starting at a tick > L)."""
    return np.searchsorted(land, ticks, side="left")


def step_landings(tl: Timeline, k: int) -> list[np.ndarray]:
    """Per stage g: the ticks at whose end its updates land, one per k backwards (the last tick of
    its (j+1)k-th backward); a trailing partial group is never applied (fairscale's AMPNet)."""
    b = np.sort(tl.b_time, axis=0)
    return [b[k - 1 :: k, g] for g in range(tl.n_stages)]


def step_versions(tl: Timeline, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(vF, vB), int [N, n_stages]: the version of stage g (its updates landed, one per k
    backwards) that F(m, g) and the backward of (m, g) run at. AMPNet's 1F1B order gives, at any
    costs, vF = ⌊max(0, m - (S-1-s))/k⌋ and vB = ⌊m/k⌋ (docs/schedules.md#ampnet)."""
    land = step_landings(tl, k)
    G = tl.n_stages
    vF = np.stack([landed_before(land[g], tl.f_time[:, g]) for g in range(G)], axis=1)
    vB = np.stack([landed_before(land[g], tl.b_time[:, g]) for g in range(G)], axis=1)
    return vF.astype(np.int32), vB.astype(np.int32)


# ---------------------------------------------------------------- WPipe


def wpipe_order(S: int, N: int, M: int) -> Order:
    """WPipe (reconstruction, module doc): Megatron's interleaved table with v = 2 and group M
    over the whole stream of N microbatches; stages 0..S-1 are group 1, S..2S-1 group 2."""
    S, N, M = check_int("S", S), check_int("N", N), check_int("M", M)
    if M < S or N % M:
        raise ValueError(
            f"wpipe needs M >= S (Megatron's group constraint) and N a whole number of "
            f"periods of M microbatches, got S={S}, N={N}, M={M}"
        )
    return interleaved_order(S, N, 2, M)


def wpipe_group(S: int) -> np.ndarray:
    """int [2S]: the group (0: input side, 1: output side) of each global stage."""
    return (np.arange(2 * S) >= S).astype(np.int32)


@dataclasses.dataclass(frozen=True, eq=False)
class WPipeTimeline(Timeline):
    """WPipe's timeline: its versions differ by group (:meth:`held_versions`)."""

    def held_versions(self) -> np.ndarray:
        """int [n_stages]: WPipe stashes 1 + the most updates between a microbatch's forward and
        its backward on the stage (group 1: 1 when M >= 2S - 2, group 2: 0)."""
        vF, vB = step_versions(self, required("M", self.M))
        return 1 + (vB - vF).max(axis=0).astype(np.int64)


def as_wpipe(tl: Timeline) -> WPipeTimeline:
    return WPipeTimeline(**{f.name: getattr(tl, f.name) for f in dataclasses.fields(Timeline)})


def weight_versions(tl: Timeline) -> np.ndarray:
    """int [n_stages]: versions kept per stage by these schedules (read through
    :func:`rpd.schedules.machinery.memory.weight_versions`): WPipe's :meth:`WPipeTimeline.held_versions`;
    AMPNet stashes nothing; GEMS's two replicas are two stages held once each: 1."""
    held = getattr(tl, "held_versions", None)
    return np.asarray(held(), np.int64) if held is not None else np.ones(tl.n_stages, np.int64)


def weight_memory(tl: Timeline) -> np.ndarray:
    """float [S]: weights held per rank in units of one full stage (a chunk is 1/v), every version
    of every stage the rank holds: GEMS 2 (two replicas' stages), WPipe 1.5 (2 x 1/2 + 1/2)."""
    t = tl.table
    held = np.zeros((tl.S, tl.n_stages), bool)
    held[t.rank, t.stage] = True
    return (held * weight_versions(tl)[None, :]).sum(axis=1) / tl.v
