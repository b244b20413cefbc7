"""The cost model of simulated time (docs/schedules.md#time-costs-and-the-one-timer): integer ticks per op, p2p latency,
averaging cost, seeded straggler noise, and stochastic time (per-op lognormal jitter and persistent
stragglers, :mod:`rpd.schedules.machinery.jitter`).

Time is counted in integer ticks so every timeline stays exact. A tick is an interval
[t, t + 1); an op of cost c that starts at tick t occupies ticks t .. t + c - 1 and its result
(activation, gradient, block update) exists from tick t + c on. With every cost 1 a tick is the
paper's time step, and every existing timeline is reproduced exactly.

Costs are per *global stage* (a model chunk for the interleaved and V schedules, whose costs are
therefore per chunk): a scalar applies to every stage, a sequence gives one value per stage.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Sequence

import numpy as np

from rpd.schedules.machinery.jitter import Jitter, Slow
from rpd.validation import check_choice, check_int, check_real

Ticks = int | Sequence[int]

# The units a cost may be written in (``CostModel.unit``) and their length in seconds; "tick" is
# the paper's time step, with no length in seconds. Costs stay integers in the unit, so the timer
# stays exact at any resolution (docs/science.md#simulated-time-at-events).
UNITS = {"tick": None, "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


@dataclasses.dataclass(frozen=True)
class Straggler:
    """Seeded straggler noise: each op independently takes ``ticks`` extra ticks with
    probability ``p``. Draws are indexed by (op kind, stage, microbatch), so the same op is slowed
    whatever order a schedule runs it in, and a noisy timeline is reproducible from the seed."""

    p: float
    ticks: int

    def __post_init__(self):
        p = check_real("straggler.p", self.p, allow_zero=True)
        if p > 1:
            raise ValueError(f"straggler.p must be <= 1, got {p}")
        check_int("straggler.ticks", self.ticks, minimum=0)


@dataclasses.dataclass(frozen=True)
class HostLink:
    """Each rank's link to host memory, for activation offload (docs/schedules.md#activation-offload):
    moving one op's activation (one microbatch on one global stage, per chunk like every cost)
    takes ``latency + d2h`` ticks to the host and ``latency + h2d`` back; each direction moves
    one activation at a time per rank. An activation is offloaded when at least ``min_gap``
    ops of its rank run between its forward and its backward (B or I); it comes back while the
    op just before its backward runs (:mod:`rpd.schedules.machinery.offload`)."""

    d2h: int
    h2d: int
    latency: int = 0
    min_gap: int = 2

    def __post_init__(self):
        check_int("costs.host.d2h", self.d2h)
        check_int("costs.host.h2d", self.h2d)
        check_int("costs.host.latency", self.latency, minimum=0)
        check_int("costs.host.min_gap", self.min_gap, minimum=2)


@dataclasses.dataclass(frozen=True)
class Resolved:
    """Per-stage integer costs of one schedule: int64 [n_stages] each."""

    F: np.ndarray
    B: np.ndarray
    I: np.ndarray  # noqa: E741 (the field is named after the op)
    W: np.ndarray
    FB: np.ndarray  # an overlapped F&B pair (torch OVERLAP_F_B), charged to the pair


@dataclasses.dataclass(frozen=True)
class CostModel:
    """Per-op costs in integer ticks (docs/schedules.md#time-costs-and-the-one-timer).

    F, B: forward and full-backward cost; I, W: the two halves of a split backward (I + W = B).
    Defaults: B = I + W when both halves are given, else 1; a split-backward schedule given
    neither half uses I = W = B / 2 when B is given and even, and I = W = 1 (the zero-bubble
    papers' unit, F = I = W) when nothing is given. FB: cost of an overlapped F&B pair
    (DualPipeV), default F + B of the two ops (no overlap gain). ``p2p``: latency added to every
    dependency that crosses ranks. ``allreduce = (alpha, beta)``: an averaging or gradient
    all-reduce of ``values`` numbers takes ceil(alpha + beta * values) ticks. ``straggler``: a
    :class:`Straggler` or a ``(p, ticks)`` pair; ``seed`` seeds its draws. ``unit`` (one of
    :data:`UNITS`: tick, ns, us, ms, s) is what one tick of every cost above stands for: a label
    carried into tables, JSON and axes, which changes no timeline. ``jitter``: a
    :class:`~rpd.schedules.machinery.jitter.Jitter` (per-op-type lognormal CVs) or a tuple of its
    fields; ``slow``: a :class:`~rpd.schedules.machinery.jitter.Slow` (persistent stragglers: ranks
    and factor) or a ``(ranks, factor)`` pair; both drawn from ``seed`` (docs/science.md#stochastic-time).
    """

    F: Ticks = 1
    B: Ticks | None = None
    I: Ticks | None = None  # noqa: E741
    W: Ticks | None = None
    FB: Ticks | None = None
    p2p: int = 0
    allreduce: tuple[float, float] = (0, 0)
    straggler: Straggler | tuple | None = None
    seed: int = 0
    unit: str = "tick"
    host: HostLink | tuple | None = None  # activation offload over a host link per rank; None: none
    jitter: Jitter | tuple | None = None  # per-op lognormal jitter; None: exact durations
    slow: Slow | tuple | None = None  # persistent stragglers (ranks, factor); None: none

    def __post_init__(self):
        check_choice("costs.unit", self.unit, UNITS)
        for name in ("F", "B", "I", "W", "FB"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _ticks(name, value))
        if (self.I is None) != (self.W is None):
            raise ValueError("costs.I and costs.W must be given together (I + W = B)")
        if self.I is not None and self.B is not None:
            if not _broadcast_equal(np.add(self.I, self.W), self.B):
                raise ValueError(f"costs.B must equal I + W, got B={self.B}, I={self.I}, W={self.W}")
        check_int("costs.p2p", self.p2p, minimum=0)
        if not (isinstance(self.allreduce, (tuple, list)) and len(self.allreduce) == 2):
            raise ValueError(f"costs.allreduce must be a pair (alpha, beta), got {self.allreduce!r}")
        object.__setattr__(
            self,
            "allreduce",
            (
                check_real("costs.allreduce[0]", self.allreduce[0], allow_zero=True),
                check_real("costs.allreduce[1]", self.allreduce[1], allow_zero=True),
            ),
        )
        if self.straggler is not None and not isinstance(self.straggler, Straggler):
            if not (isinstance(self.straggler, (tuple, list)) and len(self.straggler) == 2):
                raise ValueError(f"costs.straggler must be Straggler(p, ticks) or (p, ticks), got {self.straggler!r}")
            object.__setattr__(self, "straggler", Straggler(*self.straggler))
        check_int("costs.seed", self.seed, minimum=0)
        if self.host is not None and not isinstance(self.host, HostLink):
            if not (isinstance(self.host, (tuple, list)) and 2 <= len(self.host) <= 4):
                raise ValueError(
                    f"costs.host must be HostLink(d2h, h2d, latency, min_gap) or a tuple of them, got {self.host!r}"
                )
            object.__setattr__(self, "host", HostLink(*self.host))
        if self.jitter is not None and not isinstance(self.jitter, Jitter):
            if not isinstance(self.jitter, (tuple, list)) or not 1 <= len(self.jitter) <= 5:
                raise ValueError(
                    f"costs.jitter must be Jitter(F, B, IW, p2p, allreduce) or a tuple of them, got {self.jitter!r}"
                )
            object.__setattr__(self, "jitter", Jitter(*self.jitter))
        if self.slow is not None and not isinstance(self.slow, Slow):
            if not (isinstance(self.slow, (tuple, list)) and len(self.slow) == 2):
                raise ValueError(f"costs.slow must be Slow(ranks, factor) or (ranks, factor), got {self.slow!r}")
            object.__setattr__(self, "slow", Slow(tuple(self.slow[0]), self.slow[1]))

    @property
    def is_unit(self) -> bool:
        """Every op one tick, no latency, free averaging, no noise: the paper's time model."""
        ones = all(v is None or np.all(np.asarray(v) == 1) for v in (self.F, self.B))
        return (
            ones
            and self.I is None
            and self.FB is None
            and self.p2p == 0
            and self.allreduce == (0.0, 0.0)
            and self.straggler is None
            and self.host is None
            and self.jitter is None
            and self.slow is None
        )

    @property
    def seconds_per_tick(self) -> float | None:
        """The length of one tick in seconds (None for the unit "tick")."""
        return UNITS[self.unit]

    def resolve(self, n_stages: int, split: bool) -> Resolved:
        """Integer costs per global stage for a schedule with ``n_stages`` stages; ``split``:
        whether the schedule uses I and W (their defaults differ, see the class doc)."""
        per = lambda name, v: _per_stage(name, v, n_stages)  # noqa: E731
        F = per("F", self.F)
        if self.I is not None:
            I, W = per("I", self.I), per("W", self.W)
            B = I + W
        elif not split:
            B = per("B", 1 if self.B is None else self.B)
            I = W = np.zeros(n_stages, np.int64)  # unused
        elif self.B is None:
            I = W = np.ones(n_stages, np.int64)
            B = I + W
        else:
            B = per("B", self.B)
            if np.any(B % 2):
                raise ValueError(
                    f"costs.B={self.B} cannot be split into integer I = W = B/2 ticks; "
                    "give costs.I and costs.W for a split-backward schedule"
                )
            I = W = B // 2
        FB = F + B if self.FB is None else per("FB", self.FB)
        return Resolved(F=F, B=B, I=I, W=W, FB=FB)

    def allreduce_ticks(self, values) -> int:
        """Ticks of one averaging / all-reduce of ``values`` numbers: ceil(alpha + beta * values)."""
        alpha, beta = self.allreduce
        return int(math.ceil(alpha + beta * float(values) - 1e-12))

    def extra_ticks(self, kind: np.ndarray, stage: np.ndarray, mb: np.ndarray, n_stages: int, N: int) -> np.ndarray:
        """int64 straggler ticks of each op (kind, stage, microbatch); zeros without noise."""
        s = self.straggler  # a pair was made a Straggler in __post_init__
        if not isinstance(s, Straggler) or s.p == 0 or s.ticks == 0:
            return np.zeros(len(kind), np.int64)
        slowed = np.random.default_rng(self.seed).random((5, n_stages, N)) < s.p
        return slowed[kind, stage, mb].astype(np.int64) * s.ticks


def _ticks(name: str, value):
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return check_int(f"costs.{name}", value)
    try:
        seq = tuple(value)
    except TypeError:
        raise TypeError(
            f"costs.{name} must be an integer number of ticks or a sequence of them, got {value!r}"
        ) from None
    if not seq:
        raise ValueError(f"costs.{name} must not be empty")
    return tuple(check_int(f"costs.{name}[{i}]", v) for i, v in enumerate(seq))


def _per_stage(name: str, value, n_stages: int) -> np.ndarray:
    a = np.asarray(value, np.int64)
    if a.ndim == 0:
        return np.full(n_stages, int(a), np.int64)
    if a.shape != (n_stages,):
        raise ValueError(f"costs.{name} has {a.size} per-stage values, the schedule has {n_stages} stages")
    return a.copy()


def _broadcast_equal(a, b) -> bool:
    try:
        return bool(np.all(np.asarray(a) == np.asarray(b)))
    except ValueError:
        return False
