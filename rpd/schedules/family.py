"""The schedule family (docs/schedules.md): one public constructor per schedule, each returning a timed
:class:`~rpd.schedules.timeline.Timeline`.

Synchronous schedules run N = (number of flushes) * M microbatches, flush after flush with a
barrier between them (``overlapped=True`` for ZB-H2 / ZB-V drops it: each stage steps its
optimizer locally, as sail-sg's optimizer post-validation allows, docs/schedules.md#zb-h2). Asynchronous
ones (PipeDream, 2BW, PipeMare) run one stream. ``costs=None`` is unit cost: F = B = 1, and
F = I = W = 1 for the split-backward schedules; costs of the interleaved and V schedules are per
chunk. Bad parameters raise a ValueError naming the parameter before any work.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.schedules import orders, readiness
from rpd.schedules import post_validation as post_validation_
from rpd.schedules.bidirectional import CONCAT, chimera_concat_order
from rpd.schedules.build import merge_pieces, order_of, timed
from rpd.schedules.costs import CostModel
from rpd.schedules.frontier import ampnet_order, as_wpipe, gems_order, replicated, wpipe_order
from rpd.schedules.ir import concat, shift_mb
from rpd.schedules.timeline import Timeline
from rpd.schedules.v_shape import dualpipe_v_order, zbv_order
from rpd.validation import check_choice, check_int, required

MAX_OPS = 50_000_000  # ~3 GB of op tables: beyond it a timeline is refused before any allocation


def _check(S, N, M, per_mb: int = 2, stages_per_rank: int = 1):
    S, N, M = check_int("S", S), check_int("N", N), check_int("M", M)
    if N % M:
        raise ValueError(f"N must be a whole number of flushes of M microbatches, got N={N}, M={M}")
    if per_mb * N * S * stages_per_rank > MAX_OPS:
        raise ValueError(f"N * S = {N * S} microbatch-stages is too large to simulate (limit {MAX_OPS} ops)")
    return S, N, M


def _costs(costs) -> CostModel | None:
    if costs is not None and not isinstance(costs, CostModel):
        raise TypeError(f"costs must be an rpd.schedules.costs.CostModel or None, got {type(costs).__name__}")
    return costs


def _flushes(kind, one_flush, S, N, M, costs, *, overlapped=False, gap=0, **kw) -> Timeline:
    order = concat([shift_mb(one_flush, q * M) for q in range(N // M)])
    return timed(
        kind,
        order,
        S=S,
        N=N,
        M=M,
        costs=_costs(costs),
        overlapped=overlapped,
        barrier_every=None if overlapped else M,
        gap=gap,
        sync=True,
        **kw,
    )


# ---------------------------------------------------------------- asynchronous streams


@dataclasses.dataclass(frozen=True)
class PipeDreamParams:
    """PipeDream's own parameters."""

    noam: int | None = None  # microbatches in flight at most; None: S (1: naive model parallelism)

    def resolve(self, S: int) -> PipeDreamParams:
        return dataclasses.replace(self, noam=S if self.noam is None else self.noam)


@dataclasses.dataclass(frozen=True)
class LocalSGDParams:
    """LocalSGD's own parameters."""

    R: int | None = None  # replicas; None: S (the paper)
    H: int = 1  # local steps per round

    def resolve(self, S: int) -> LocalSGDParams:
        return dataclasses.replace(self, R=S if self.R is None else self.R)


def pipedream(S: int, N: int, noam: int | None = None, costs: CostModel | None = None) -> Timeline:
    """PipeDream asynchronous 1F1B with weight stashing (docs/schedules.md#pipedream).

    At most ``noam`` (default S) microbatches in flight; ``noam=1`` is naive model parallelism.
    Unit costs give T = 2N + 2S - 2 for NOAM >= S and T = 2SN for NOAM = 1. Under ``costs`` the
    order the readiness rule produces is timed by the one timer."""
    tl = readiness.pipedream(S, N, noam)
    c = _costs(costs)
    if c is None or c.is_unit:
        return tl
    return timed("pipedream", order_of(tl), S=tl.S, N=tl.N, costs=c, noam=tl.noam, stash=True)


def local_sgd(S: int, N: int, R: int, H: int, costs: CostModel | None = None, values: int = 0) -> Timeline:
    """LocalSGD on the same S-stage pipeline (docs/schedules.md#localsgd).

    R replicas, microbatch m on replica m mod R, rounds of R*H microbatches separated by a
    barrier and an averaging of the replicas that ends with tick ``sync_time[q]``; the averaging
    of ``values`` numbers per stage costs ``costs.allreduce_ticks(values)`` ticks.
    With unit costs and R >= S: T = 2N + ceil(N / (R*H)) * (2S - 2)."""
    tl = readiness.local_sgd(S, N, R, H)
    values = check_int("values", values, minimum=0)
    c = _costs(costs)
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


def pipedream_2bw(S: int, N: int, M: int, costs: CostModel | None = None) -> Timeline:
    """PipeDream-2BW (msr-fiddle/pipedream@pipedream_2bw ``forward_backward_pipelining_no_flushes``):
    PipeDream's 1F1B stream with no flush; every M microbatches one coalesced update
    W_{k+1} = W_k - γ Σ ∇f_j(W_{k-1}) from two weight buffers. W_{k-1} is still held when a
    minibatch's last backward runs only if M >= S - 1 (docs/schedules.md#pipedream-2bw), else ValueError."""
    S, N, M = _check(S, N, M)
    if M < S - 1:
        raise ValueError(f"pipedream_2bw needs M >= S - 1 (two weight versions), got M={M}, S={S}")
    tl = readiness.pipedream(S, N)
    return timed("pipedream_2bw", order_of(tl), S=S, N=N, M=M, costs=_costs(costs), noam=S, versions=2)


def pipemare(S: int, N: int, costs: CostModel | None = None) -> Timeline:
    """PipeMare's order: PipeDream's 1F1B stream without weight stashing (docs/schedules.md#pipemare; one
    weight version per block, forward and backward read different versions)."""
    tl = readiness.pipedream(S, N)
    return timed("pipemare", order_of(tl), S=tl.S, N=tl.N, costs=_costs(costs), noam=tl.noam)


# ---------------------------------------------------------------- synchronous (flush) schedules


@dataclasses.dataclass(frozen=True)
class InterleavedParams:
    """Interleaved 1F1B's own parameters."""

    v: int = 2  # model chunks per rank (costs per chunk; 1: 1F1B)
    group: int | None = None  # Megatron's microbatch group; None: S (S <= group <= M)

    def resolve(self, S: int) -> InterleavedParams:
        return dataclasses.replace(self, group=S if self.group is None else self.group)


@dataclasses.dataclass(frozen=True)
class ZBH2Params:
    """ZB-H2's own parameters (:mod:`rpd.schedules.post_validation` for the last four)."""

    overlapped: bool = False  # no barrier between flushes (optimizer post-validation)
    post_validation: bool = False  # time sail-sg's post-validation: eager steps, rollbacks
    clip: float | None = None  # post-validation: the semantics' global-norm clip; None: none
    rollback_p: float = 0.0  # post-validation: probability a flush's eager step is rolled back
    rollback_trace: tuple[int, ...] | None = None  # post-validation: the flushes rolled back (overrides p)


@dataclasses.dataclass(frozen=True)
class ZBVParams:
    """ZB-V's own parameters."""

    overlapped: bool = False  # no barrier between flushes


@dataclasses.dataclass(frozen=True)
class ChimeraParams:
    """Chimera's own parameters."""

    concat: str = "direct"  # M > S: direct | forward_doubling | backward_halving (a reconstruction)


def gpipe(S: int, N: int, M: int, costs: CostModel | None = None) -> Timeline:
    """GPipe fill-drain: per flush every rank runs F(0..M-1) then B(0..M-1) (docs/schedules.md#gpipe).
    T_flush = (M + S - 1)(tF + tB) for any tF:tB; M activations in flight."""
    S, N, M = _check(S, N, M)
    return _flushes("gpipe", orders.gpipe_order(S, M), S, N, M, costs)


def one_f_one_b(S: int, N: int, M: int, costs: CostModel | None = None) -> Timeline:
    """1F1B with flush (PipeDream-Flush / DAPPLE / Megatron, docs/schedules.md#1f1b-with-flush): GPipe's makespan,
    min(S - s, M) activations on rank s."""
    S, N, M = _check(S, N, M)
    return _flushes("1f1b", orders.one_f_one_b_order(S, M), S, N, M, costs)


def interleaved(S: int, N: int, M: int, v: int, costs: CostModel | None = None, group: int | None = None) -> Timeline:
    """Interleaved 1F1B with v chunks per rank and Megatron's microbatch group size ``group``
    (default S; S <= group <= M and M mod group in {0} ∪ [S, group)), docs/schedules.md#interleaved-1f1b.
    Costs are per chunk. v = 1 is 1F1B."""
    v = check_int("v", v)
    S, N, M = _check(S, N, M, stages_per_rank=v)
    if v == 1:
        return one_f_one_b(S, N, M, costs)
    group = S if group is None else check_int("group", group)
    orders.check_interleaved(S, M, v, group)
    return _flushes("interleaved", orders.interleaved_order(S, M, v, group), S, N, M, costs, n_stages=S * v, v=v)


def zb_h1(S: int, N: int, M: int, costs: CostModel | None = None) -> Timeline:
    """ZB-H1 (docs/schedules.md#zb-h1): 1F1B with the backward split into I and W, W delayed by r
    microbatches on rank r. Idle per rank (S - 1)(tF + tI - tW) when tW <= tF."""
    S, N, M = _check(S, N, M, per_mb=3)
    return _flushes("zb_h1", orders.zb_h1_order(S, M), S, N, M, costs, split=True)


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
    ``clip``: the global-norm threshold the semantics apply), :mod:`rpd.schedules.post_validation`."""
    S, N, M = _check(S, N, M, per_mb=3)
    if post_validation:
        return post_validation_.zb_h2_validated(
            S,
            N,
            M,
            _costs(costs),
            rollback_p=rollback_p,
            trace=rollback_trace,
            clip=clip,
            max_pending=max_pending,
            max_held=max_held,
        )
    return _flushes(
        "zb_h2",
        orders.zb_h2_order(S, M, max_pending, max_held),
        S,
        N,
        M,
        costs,
        split=True,
        overlapped=bool(overlapped),
    )


def zb_v(S: int, N: int, M: int, costs: CostModel | None = None, overlapped: bool = False) -> Timeline:
    """ZB-V (torch ``ScheduleZBVZeroBubble``, docs/schedules.md#zb-v): two chunks per rank in a V
    (rank r holds stages r and 2S-1-r), split backward. Chunk costs F = I = W give every rank a
    span of 6M chunk ticks; T_flush = 6M + S - 1."""

    S, N, M = _check(S, N, M, per_mb=3, stages_per_rank=2)
    return _flushes(
        "zb_v", zbv_order(S, M), S, N, M, costs, split=True, n_stages=2 * S, v=2, overlapped=bool(overlapped)
    )


def dualpipe_v(S: int, N: int, M: int, costs: CostModel | None = None) -> Timeline:
    """DualPipeV (torch ``ScheduleDualPipeV``, docs/schedules.md#dualpipev): V placement, overlapped F&B
    pairs (cost ``costs.FB``) and a partly split backward. Needs M >= 2S."""

    S, N, M = _check(S, N, M, per_mb=3, stages_per_rank=2)
    return _flushes("dualpipe_v", dualpipe_v_order(S, M), S, N, M, costs, split=True, n_stages=2 * S, v=2)


def chimera(
    S: int, N: int, M: int, costs: CostModel | None = None, values: int = 0, concat: str = "direct"
) -> Timeline:
    """Chimera with two pipelines in opposite directions over S (= D, even) workers
    (docs/schedules.md#chimera). Each worker holds two stage replicas whose gradients are all-reduced at the end of
    each flush: ``costs.allreduce_ticks(values)`` ticks, ``values`` per stage. ``concat``: how
    a flush of M > S microbatches is built, "direct" (the anchor), "forward_doubling" or
    "backward_halving" (a reconstruction, :mod:`rpd.schedules.bidirectional`); backward halving
    is timed on 2N half microbatches at half of every op's cost, so costs.F and costs.B must be
    even, and reported per microbatch (:func:`rpd.schedules.build.merge_pieces`)."""

    S, N, M = _check(S, N, M)
    values = check_int("values", values, minimum=0)
    concat = check_choice("concat", concat, CONCAT)
    c = _costs(costs)
    gap = 0 if c is None else c.allreduce_ticks(values)
    if concat != "backward_halving":
        return _flushes("chimera", chimera_concat_order(S, M, concat), S, N, M, costs, gap=gap, concat=concat, copies=2)
    one_flush = chimera_concat_order(S, M, concat)  # on 2M pieces
    pieces = _flushes("chimera", one_flush, S, 2 * N, 2 * M, _halved(costs), gap=gap, copies=2)
    return merge_pieces(pieces, 2, costs, concat=concat)


def _halved(costs: CostModel | None) -> CostModel:
    """The cost model of half a microbatch: F and B at half their cost (linear in the microbatch
    size; the lower efficiency of a smaller microbatch is not modelled), latency and all-reduce
    unchanged."""
    checked = _costs(costs)
    c = CostModel() if checked is None else checked
    if c.straggler is not None:
        raise ValueError(
            "concat='backward_halving' does not model stragglers (a half microbatch's delay is not defined)"
        )
    F, B = np.asarray(c.F), np.asarray(c.B if c.B is not None else 1)
    if np.any(F % 2) or np.any(B % 2):
        raise ValueError(
            "concat='backward_halving' runs half microbatches at half the cost: costs.F and costs.B must be "
            f"even ticks, got F={c.F}, B={c.B} (scale every cost by 2: costs.F=2 costs.B=4, and costs.I=2 costs.W=2 where I and W are set)"
        )
    half = lambda x: int(x) // 2 if np.ndim(x) == 0 else tuple(int(v) // 2 for v in x)  # noqa: E731
    return dataclasses.replace(c, F=half(F), B=half(B), I=None, W=None, FB=None)  # Chimera runs no I, W or F&B


# ---------------------------------------------------------------- the survey's remaining rows


def gems(S: int, N: int, M: int, costs: CostModel | None = None, values: int = 0) -> Timeline:
    """GEMS (SC'20; :mod:`rpd.schedules.frontier`): two replicas in opposite directions over S
    ranks, one microbatch pair at a time; synchronous, each step of M (even) microbatches ends
    with the all-reduce of the two replicas of every stage, ``costs.allreduce_ticks(values)``."""
    S, N, M = _check(S, N, M)
    values = check_int("values", values, minimum=0)
    c = _costs(costs)
    gap = 0 if c is None else c.allreduce_ticks(values)
    return replicated(_flushes("gems", gems_order(S, M), S, N, M, costs, gap=gap, copies=2))


def ampnet(S: int, N: int, M: int, costs: CostModel | None = None) -> Timeline:
    """AMPNet (fairscale AMPnetPipe; :mod:`rpd.schedules.frontier`): one asynchronous 1F1B stream
    of N microbatches with no stashing; each stage steps after every M (= min_update_interval)
    backwards, so N is a whole number of M."""
    S, N, M = _check(S, N, M)
    return timed("ampnet", ampnet_order(S, N), S=S, N=N, M=M, costs=_costs(costs), noam=S)


def wpipe(S: int, N: int, M: int, costs: CostModel | None = None) -> Timeline:
    """WPipe (ICLR'22; reconstruction, :mod:`rpd.schedules.frontier`): 2S stages in two groups,
    rank r holding stages r and S + r, Megatron's interleaved order with group M as one stream;
    one update per group per period of M microbatches. Costs are per chunk."""
    S, N, M = _check(S, N, M, stages_per_rank=2)
    return as_wpipe(timed("wpipe", wpipe_order(S, N, M), S=S, N=N, M=M, costs=_costs(costs), n_stages=2 * S, v=2))
