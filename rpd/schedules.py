"""Pipeline schedules as pure integer simulations (SPEC §2).

A schedule is simulated once on the host and returned as a :class:`Timeline`: which operation
(idle / forward F / backward B) each stage does at each time step, and for which microbatch.
Everything downstream (delay tables, update plans, simulated time) is read off the timeline.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.validation import check_int

IDLE, FWD, BWD = 0, 1, 2
_NEVER = np.iinfo(np.int64).max  # "not finished yet": compares greater than every time step


@dataclasses.dataclass(frozen=True, eq=False)
class Timeline:
    """Ops of one pipeline run, as integer arrays.

    ``op[t, s]`` is IDLE / FWD / BWD and ``mb[t, s]`` the microbatch (-1 when idle).
    ``f_time[m, s]`` / ``b_time[m, s]`` are the time steps of F(m, s) / B(m, s).
    Block updates (backward ops) in iteration order -- by time step, then stage index -- are
    ``update_stage[k]``, ``update_mb[k]``, ``update_time[k]`` for k = 0..K-1, K = N*S.
    ``sync_time`` lists the time steps at whose end LocalSGD replicas are averaged (empty for PD).
    """

    kind: str  # "pipedream" or "local_sgd"
    S: int
    N: int
    op: np.ndarray  # int8 [T, S]
    mb: np.ndarray  # int32 [T, S]
    f_time: np.ndarray  # int32 [N, S]
    b_time: np.ndarray  # int32 [N, S]
    noam: int | None = None  # PD: max microbatches in flight
    R: int | None = None  # LocalSGD: replicas
    H: int | None = None  # LocalSGD: local steps per round
    sync_time: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int32))

    @property
    def T(self) -> int:
        return int(self.op.shape[0])

    @property
    def K(self) -> int:
        return self.N * self.S

    @property
    def update_time(self) -> np.ndarray:
        return np.nonzero(self.op == BWD)[0].astype(np.int32)

    @property
    def update_stage(self) -> np.ndarray:
        return np.nonzero(self.op == BWD)[1].astype(np.int32)

    @property
    def update_mb(self) -> np.ndarray:
        return self.mb[self.op == BWD].astype(np.int32)

    def bubble_ratio(self) -> float:
        return float(np.mean(self.op == IDLE))


def _simulate(S: int, N: int, noam: int | None, R: int | None, H: int | None) -> Timeline:
    """1F1B rules of SPEC §2.1 (PD) plus the LocalSGD rules (a), (b) of §2.2, vectorized over stages."""
    f_time = np.full((N + 1, S), _NEVER, np.int64)  # row N is a sentinel for "no microbatch"
    b_time = np.full((N + 1, S), _NEVER, np.int64)
    next_f = np.zeros(S, np.int64)
    next_b = np.zeros(S, np.int64)
    steady = np.zeros(S, bool)
    prefer_b = np.zeros(S, bool)
    stages = np.arange(S)
    active = 0
    ops, mbs = [], []
    local = R is not None
    if local:
        round_size = R * H
        last_of_round = np.minimum((np.arange(N) // round_size) * round_size - 1, N - 1)
    t = 0
    while b_time[N - 1, 0] == _NEVER:
        mf = np.minimum(next_f, N)
        mbk = np.minimum(next_b, N)
        f_ready = next_f < N
        up = np.empty(S, np.int64)
        up[1:] = f_time[mf[1:], stages[:-1]]
        f_ready[1:] &= up[1:] < t
        if local:
            m = np.minimum(mf, N - 1)
            prev = m - R
            same_round = (prev >= 0) & (prev // round_size == m // round_size)
            f_ready &= ~same_round | (b_time[np.maximum(prev, 0), stages] < t)
            lr = last_of_round[m]
            f_ready &= (lr < 0) | (b_time[np.maximum(lr, 0), 0] < t)
        else:
            f_ready[0] &= active < noam
        b_ready = (next_b < N) & (f_time[mbk, stages] < t)
        down = np.full(S, -1, np.int64)
        down[:-1] = b_time[mbk[:-1], stages[1:]]
        b_ready[:-1] &= down[:-1] < t
        do_b = b_ready & (~steady | prefer_b | ~f_ready)
        do_f = ~do_b & f_ready
        op = np.where(do_b, BWD, np.where(do_f, FWD, IDLE)).astype(np.int8)
        mb = np.where(do_b, next_b, np.where(do_f, next_f, -1)).astype(np.int32)
        f_time[mf[do_f], stages[do_f]] = t
        b_time[mbk[do_b], stages[do_b]] = t
        prefer_b = np.where(do_b, False, np.where(do_f & steady, True, prefer_b))
        steady |= do_b
        next_f += do_f
        next_b += do_b
        active += int(do_f[0]) - int(do_b[0])
        ops.append(op)
        mbs.append(mb)
        t += 1
        if t > 4 * S * N + 4 * S + 8:  # every schedule here finishes in at most 2*S*N steps
            raise RuntimeError("schedule simulation did not terminate")
    sync = np.zeros(0, np.int32)
    if local:
        ends = np.minimum(np.arange(round_size, N + round_size, round_size), N) - 1
        sync = b_time[ends, 0].astype(np.int32)
    return Timeline(
        kind="local_sgd" if local else "pipedream",
        S=S,
        N=N,
        op=np.stack(ops),
        mb=np.stack(mbs),
        f_time=f_time[:N].astype(np.int32),
        b_time=b_time[:N].astype(np.int32),
        noam=None if local else noam,
        R=R,
        H=H,
        sync_time=sync,
    )


def pipedream(S: int, N: int, noam: int | None = None) -> Timeline:
    """PipeDream asynchronous 1F1B with weight stashing; at most ``noam`` (default S) microbatches
    in flight. ``noam=1`` is naive model parallelism (T = 2*S*N)."""
    S = check_int("S", S)
    N = check_int("N", N)
    noam = S if noam is None else check_int("noam", noam)
    return _simulate(S, N, noam, None, None)


def local_sgd(S: int, N: int, R: int, H: int) -> Timeline:
    """LocalSGD on the same S-stage pipeline: R replicas, microbatch m on replica m mod R,
    rounds of R*H microbatches separated by a barrier and an averaging of the replicas."""
    S = check_int("S", S)
    N = check_int("N", N)
    R = check_int("R", R)
    H = check_int("H", H)
    return _simulate(S, N, None, R, H)
