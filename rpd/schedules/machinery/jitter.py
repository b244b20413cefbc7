"""Stochastic time (docs/science.md#stochastic-time): seeded per-op jitter and persistent stragglers,
read by the one timer through :class:`~rpd.schedules.machinery.costs.CostModel`.

**Jitter.** Every op's duration is its cost-model duration times an independent lognormal factor of
mean 1 and coefficient of variation ``cv`` (one CV per op type: F, B, the split halves I and W, a
p2p latency, an all-reduce or averaging). With X = exp(σZ − σ²/2), Z standard normal,

    E[X] = exp(−σ²/2) · E[exp(σZ)] = exp(−σ²/2) · exp(σ²/2) = 1,
    Var[X] = E[X²] − 1 = exp(σ²) − 1,   so   CV = sqrt(exp(σ²) − 1)   and   σ² = ln(1 + CV²).

(The lognormal's moments: Johnson, Kotz & Balakrishnan, *Continuous Univariate Distributions* 1,
ch. 14.) Durations stay integer ticks: ``round(base · X)``, at least one tick for a compute op, so a
fine tick (a cost of hundreds of ticks) keeps the mean; rounding moves it by at most half a tick.
The draws are indexed by the op, not by when it runs: compute op (kind, stage, microbatch), p2p edge
(kind, stage, microbatch, which dependency), barrier (its index), so every schedule timed with one
seed meets the same slow ops (common random numbers across schedules), and one seed gives one
timeline. The draws are laid out microbatch-major, so a run of N microbatches and a longer one
give their first N microbatches the same draws (the plan's step, a 2M-run minus an M-run, is then
the second step's own ops). Z is drawn once per index whatever the CV, so CV = 0 is the deterministic timeline
exactly (X = exp(0) = 1).

**Persistent stragglers** (:class:`Slow`): the compute ops (F, B, I, W, an overlapped F&B) of the
ranks ``ranks`` take ``factor`` times as long, in every step of the run: Lin et al.'s finding that
a straggler persists across steps (OSDI '25, arXiv 2505.05713; docs/science.md#stochastic-time).
Its latency and all-reduces are not slowed (a slow GPU, not a slow link).

Three independent streams of ``numpy.random.default_rng([seed, 19, stream])`` (ops, p2p edges,
barriers); the Bernoulli straggler ticks of :class:`~rpd.schedules.machinery.costs.Straggler` keep
their own stream ``default_rng(seed)``, so adding jitter moves no existing noisy timeline.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, FWD
from rpd.validation import check_int, check_real

_OPS, _P2P, _BARRIERS = 1, 2, 3  # the streams
_N_KINDS = 5  # IDLE, F, B, I, W (rpd.schedules.machinery.ir.Op)


@dataclasses.dataclass(frozen=True)
class Jitter:
    """Coefficient of variation of the lognormal factor of each op type (0: exact): ``F``
    forward, ``B`` full backward, ``IW`` either half of a split backward, ``p2p`` a
    cross-rank dependency's latency, ``allreduce`` a flush's all-reduce or a round's averaging."""

    F: float = 0.0
    B: float = 0.0
    IW: float = 0.0
    p2p: float = 0.0
    allreduce: float = 0.0

    def __post_init__(self):
        for f in dataclasses.fields(self):
            object.__setattr__(
                self, f.name, check_real(f"costs.jitter_cv_{f.name}", getattr(self, f.name), allow_zero=True)
            )

    @property
    def is_zero(self) -> bool:
        return all(getattr(self, f.name) == 0 for f in dataclasses.fields(self))


@dataclasses.dataclass(frozen=True)
class Slow:
    """Persistent stragglers: the compute ops of ``ranks`` (pipeline ranks, 0-based) take
    ``factor`` times their cost in every step."""

    ranks: tuple[int, ...]
    factor: float

    def __post_init__(self):
        ranks = tuple(check_int(f"costs.slow_ranks[{i}]", r, minimum=0) for i, r in enumerate(self.ranks))
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"costs.slow_ranks must be distinct, got {list(ranks)}")
        object.__setattr__(self, "ranks", ranks)
        object.__setattr__(self, "factor", check_real("costs.slow_factor", self.factor))

    def check(self, n_ranks: int) -> None:
        """Every slow rank is a rank of an ``n_ranks``-rank schedule (ValueError naming it)."""
        for i, r in enumerate(self.ranks):
            if r >= n_ranks:
                raise ValueError(f"costs.slow_ranks[{i}]={r} is not a rank of the {n_ranks}-rank schedule")


@dataclasses.dataclass(frozen=True)
class Stochastic:
    """Stochastic time to lay over a cost model made elsewhere (the plan's stage costs):
    :meth:`fields` are the ``CostModel`` fields it sets (``dataclasses.replace(costs, **fields)``)."""

    jitter: Jitter | None = None
    slow: Slow | None = None
    seed: int = 0

    def fields(self) -> dict:
        return dict(jitter=self.jitter, slow=self.slow, seed=check_int("costs.seed", self.seed, minimum=0))


def sigma(cv: float) -> float:
    """σ of the lognormal factor exp(σZ − σ²/2) with mean 1 and coefficient of variation ``cv``:
    σ = sqrt(ln(1 + cv²))."""
    return float(np.sqrt(np.log1p(cv * cv)))


def factor(cv: float, z: np.ndarray) -> np.ndarray:
    """The lognormal factors exp(σZ − σ²/2) of standard normals ``z`` (mean 1, CV ``cv``; 1 at cv 0)."""
    s = sigma(cv)
    return np.exp(s * z - 0.5 * s * s)


def _rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, 19, stream])


def op_factors(
    jitter: Jitter | None,
    slow: Slow | None,
    kind: np.ndarray,
    stage: np.ndarray,
    mb: np.ndarray,
    rank: np.ndarray,
    n_stages: int,
    N: int,
    seed: int,
) -> np.ndarray:
    """float64 [n]: each compute op's duration factor, slow rank × jitter (1 where neither)."""
    out = np.ones(len(kind))
    if jitter is not None and not jitter.is_zero:
        z = _rng(seed, _OPS).standard_normal((N, _N_KINDS, n_stages))  # microbatch-major: see the module doc
        cvs = {FWD: jitter.F, BWD: jitter.B, BWD_I: jitter.IW, BWD_W: jitter.IW}
        for k, cv in cvs.items():
            at = kind == k
            out[at] = factor(cv, z[mb[at], k, stage[at]])
    if slow is not None and slow.factor != 1:
        out *= np.where(np.isin(rank, slow.ranks), slow.factor, 1.0)
    return out


def scale(base: np.ndarray, factors: np.ndarray) -> np.ndarray:
    """int64 ticks round(base · factor), at least one tick where ``base`` is positive."""
    ticks = np.rint(base * factors).astype(np.int64)
    return np.where(base > 0, np.maximum(ticks, 1), ticks)


def edge_latency(
    jitter: Jitter | None,
    p2p: int,
    kind: np.ndarray,
    stage: np.ndarray,
    mb: np.ndarray,
    n_stages: int,
    N: int,
    seed: int,
) -> int | np.ndarray:
    """The p2p latency of each op's dependency slots: ``p2p`` itself without p2p jitter, else
    int64 [n, 2] round(p2p · X), X drawn per (kind, stage, microbatch, slot)."""
    if jitter is None or jitter.p2p == 0 or p2p == 0:
        return p2p
    z = _rng(seed, _P2P).standard_normal((N, _N_KINDS, n_stages, 2))
    return np.rint(p2p * factor(jitter.p2p, z[mb, kind, stage])).astype(np.int64)


def barrier_gaps(jitter: Jitter | None, gaps: np.ndarray, seed: int) -> np.ndarray:
    """int64 gaps of the barriers (flush all-reduces, LocalSGD averagings), barrier q's times
    its own factor X_q under all-reduce jitter; ``gaps`` as given without."""
    gaps = np.asarray(gaps, np.int64)
    if jitter is None or jitter.allreduce == 0:
        return gaps
    z = _rng(seed, _BARRIERS).standard_normal(len(gaps))
    return np.rint(gaps * factor(jitter.allreduce, z)).astype(np.int64)
