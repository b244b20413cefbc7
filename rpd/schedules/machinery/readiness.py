"""Pipeline schedules as pure integer simulations (docs/science.md#schedules).

A schedule is simulated once on the host and returned as a :class:`Timeline`: which operation
(idle / forward F / backward B) each stage does at each time step, and for which microbatch.
Everything downstream (delay tables, update plans, simulated time) is read off the timeline.

Simulation. With unit-cost F and B and "a result made at step t is usable at step t+1", every
readiness test of docs/science.md#schedules is a comparison of per-stage counters, because each stage
runs its F's and its B's in microbatch order. With nf_s / nb_s = number of F / B done on stage
s before step t, and m = nf_s the next forward microbatch:

    F(m, s) ready  <=>  m < N  and  (s = 0 ? nf_0 - nb_0 < NOAM : nf_{s-1} > m)
                        [LocalSGD: nb_s >= m - R + 1 if m - R is in m's round,
                                   nb_0 >= first microbatch of m's round]
    B(nb_s, s) ready <=> nf_s > nb_s  and  (s = S - 1  or  nb_{s+1} > nb_s)

The 1F1B choice "B if ready and (not steady, or preference B, or no F ready)" only needs one
bit per stage, ``last_b`` = "the last op done was a B" (steady with preference F):
do B <=> B ready and not (last_b and F ready). So a time step is a handful of vectorized
comparisons over stages, and many independent schedules run side by side as one long row of
"lanes" separated by ghost lanes (see :func:`simulate_many`). Under a cost model the order
these rules produce at unit costs is timed by the one timer (:mod:`rpd.schedules.machinery.build`), as a
runtime executing that order would run it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_int, required

_BIG = np.iinfo(np.int32).max // 2  # counter value of a ghost lane: "always done"


@dataclasses.dataclass(frozen=True)
class ScheduleSpec:
    """One schedule to simulate: PD if ``R`` is None (cap ``noam``), else LocalSGD (R, H)."""

    S: int
    N: int
    noam: int | None = None
    R: int | None = None
    H: int | None = None


def _round_tables(N: int, R: int, H: int) -> tuple[np.ndarray, np.ndarray]:
    """For m = 0..N (m = N: never asked, padded): B-count thresholds of LocalSGD rules (a), (b).

    (a) own stage must have done B(m - R) when m - R is in m's round: nb_s >= m - R + 1;
    (b) stage 0 must have finished every earlier round: nb_0 >= q * R * H, q = m's round.
    """
    m = np.arange(N + 1)
    start = (m // (R * H)) * (R * H)
    need_own = np.where(m - R >= start, m - R + 1, 0)
    return need_own, start


def simulate_many(specs: list[ScheduleSpec]) -> list[Timeline]:
    """Simulate independent schedules side by side in one vectorized time loop (module doc).

    Lanes: ``[ghost, stages of spec 0, ghost, stages of spec 1, ..., ghost]``. A ghost has
    nf = nb = BIG and N = 0, so it never acts, and it makes "F done upstream" true for every
    stage 0 and "B done downstream" true for every stage S-1 without special cases. Running
    schedules stay a prefix of the lanes, which shrinks as schedules finish. Each op's time is
    written straight into per-lane [N] slots of flat F / B time arrays.

    Fast-forward (PD only): the step rule reads only counter differences (nf_{s-1} - nf_s,
    nf_s - nb_s, nb_{s+1} - nb_s), the bit ``last_b`` and whether nf_s < N. When every stage of
    a schedule did exactly one F and one B in the last two steps and ``last_b`` is unchanged,
    the state two steps ago equals the current one up to +1 on every counter, so the next steps
    repeat that two-step period exactly until some stage runs out of forwards. Those periods
    are added to the counters at once, their op times filled in arithmetically, and the
    schedule's clock shifted (``shift``: own time = loop step + shift).
    """
    order = sorted(range(len(specs)), key=lambda i: -_loop_length_guess(specs[i]))
    sp_ = [specs[i] for i in order]
    S_ = np.array([sp.S for sp in sp_])
    first = np.concatenate([[1], 1 + np.cumsum(S_[:-1] + 1)])  # lane of each spec's stage 0
    end_of = first + S_  # each spec's trailing ghost lane
    L = int(end_of[-1] + 1)
    lane_N = np.zeros(L, np.int32)
    cap = np.full(L, _BIG, np.int32)  # NOAM cap, only on PD stage-0 lanes
    may_skip = np.ones(L, bool)  # PD and ghost lanes
    for pos, sp in enumerate(sp_):
        lanes = slice(first[pos], end_of[pos])
        lane_N[lanes] = sp.N
        if sp.R is None:
            cap[first[pos]] = sp.S if sp.noam is None else sp.noam
        else:
            may_skip[lanes] = False
    local = not may_skip.all()
    if local:
        need_own, need_sync, stage0, base, is_local = _local_tables(sp_, first, L)
    # F(m) of a lane is stored at f_flat[slot + m]; a lane has N + 1 slots, and every step
    # writes the step's time into slot nf (nb): the slot of the next F (B), which keeps the time
    # of the step that finally does it. Ghosts write into the last slot, (-BIG) + BIG.
    slot = np.concatenate([[0], np.cumsum(lane_N + 1)[:-1]]).astype(np.int64)
    trash = int(np.sum(lane_N + 1))
    slot[lane_N == 0] = trash - _BIG
    f_flat = np.zeros(trash + 1, np.int32)
    b_flat = np.zeros(trash + 1, np.int32)
    shift = np.zeros(L, np.int32)
    nf = np.where(lane_N > 0, 0, _BIG).astype(np.int32)
    nb = nf.copy()
    last_b = np.zeros(L, bool)
    bound = max(_length_bound(sp) for sp in sp_)
    running = len(sp_)
    e = int(end_of[-1])  # lanes 1..e-1 can still act
    t, snap = 0, None
    hist: list[tuple[np.ndarray, np.ndarray]] = []
    while running:
        c = slice(1, e)
        nf_c, nb_c, lb_c = nf[c], nb[c], last_b[c]
        f_ready = nf_c < lane_N[c]
        f_ready &= nf[0 : e - 1] > nf_c
        f_ready &= (nf_c - nb_c) < cap[c]
        if local:
            m = base[c] + nf_c * is_local[c]
            f_ready &= nb_c >= need_own[m]
            f_ready &= nb[stage0[c]] >= need_sync[m]
        b_ready = nb_c < nf_c
        b_ready &= nb[2 : e + 1] > nb_c
        do_b = b_ready & ~(lb_c & f_ready)
        do_f = f_ready & ~do_b
        now = shift[c] + np.int32(t)
        f_flat[slot[c] + nf_c] = now
        b_flat[slot[c] + nb_c] = now
        nf_c += do_f
        nb_c += do_b
        lb_c &= ~do_f
        lb_c |= do_b
        hist = [hist[-1], (do_f, do_b)] if hist else [(do_f, do_b)]
        t += 1
        if t % 8 == 6:
            snap = (e, nf[: e + 1].copy(), nb[: e + 1].copy(), last_b[: e + 1].copy())
        elif t % 8 == 0:
            if snap is not None and snap[0] == e:
                state = (nf, nb, last_b, shift, f_flat, b_flat, slot)
                _fast_forward(snap, state, hist, lane_N, may_skip, first[:running], t)
            while running and nb[first[running - 1]] >= lane_N[first[running - 1]]:
                running -= 1
            e = int(end_of[running - 1]) if running else 0
        if t > bound:
            raise RuntimeError("schedule simulation did not terminate")
    out: dict[int, Timeline] = {}
    for pos, i in enumerate(order):
        sp = sp_[pos]
        cut = slice(int(slot[first[pos]]), int(slot[first[pos]]) + sp.S * (sp.N + 1))
        # [N, S] views of the lane-major storage (stage s's times are contiguous)
        f_time = f_flat[cut].reshape(sp.S, sp.N + 1)[:, : sp.N].T
        b_time = b_flat[cut].reshape(sp.S, sp.N + 1)[:, : sp.N].T
        out[i] = _timeline(sp, f_time, b_time)
    return [out[i] for i in range(len(specs))]


def _fast_forward(snap, state, hist, lane_N, may_skip, first, t) -> None:
    """Skip whole two-step periods of schedules whose state repeated since ``snap`` (see above)."""
    nf, nb, last_b, shift, f_flat, b_flat, slot = state
    e, nf0, nb0, lb0 = snap
    n = e + 1
    ok = (nf[:n] - nf0 == 1) & (nb[:n] - nb0 == 1) & (last_b[:n] == lb0) & (nf[:n] < lane_N[:n])
    ok |= lane_N[:n] == 0  # ghosts
    ok &= may_skip[:n]
    (f2, b2), _ = hist  # ops of the period's first step, on lanes 1..e-1
    for pos in np.nonzero(np.logical_and.reduceat(ok, first))[0]:
        s0 = int(first[pos])
        S = int(np.argmax(lane_N[s0:] == 0))
        periods = int(lane_N[s0] - 1 - nf[s0])  # stage 0 has done the most F's
        if periods <= 0:
            continue
        lanes = slice(s0, s0 + S)
        block = slice(int(slot[s0]), int(slot[s0]) + S * (int(lane_N[s0]) + 1))
        m = np.arange(int(lane_N[s0]) + 1, dtype=np.int32)
        for flat, cnt, first_step in ((f_flat, nf, f2), (b_flat, nb, b2)):
            # repeat j of the m0-th op of a lane, m = m0 + j, runs at own time t + shift + 2j + phase
            m0 = cnt[lanes][:, None]
            phase = (~first_step[s0 - 1 : s0 - 1 + S]).astype(np.int32)[:, None]
            times = 2 * m + (shift[lanes][:, None] + np.int32(t) + phase - 2 * m0)
            fill = (m >= m0) & (m < m0 + periods)
            np.copyto(flat[block].reshape(S, -1), times, where=fill)
            cnt[lanes] += periods
        shift[lanes] += 2 * periods


def _loop_length_guess(sp: ScheduleSpec) -> int:
    fast = sp.R is None and (sp.noam is None or sp.noam >= sp.S)
    return 8 * sp.S if fast else _length_bound(sp)


def _length_bound(sp: ScheduleSpec) -> int:
    # Naive (NOAM = 1) is the slowest possible schedule: 2*S*N steps; LocalSGD is faster.
    return 2 * sp.S * sp.N + 8


def _local_tables(specs, first, L):
    """Per-lane lookups for LocalSGD lanes: thresholds indexed by base[lane] + m."""
    need_own, need_sync, off = [np.zeros(1, np.int32)], [np.zeros(1, np.int32)], 1
    base = np.zeros(L, np.int64)  # PD and ghost lanes always read entry 0: threshold 0
    is_local = np.zeros(L, np.int64)
    stage0 = np.zeros(L, np.int64)  # ghost lane 0 has nb = BIG >= 0
    for pos, sp in enumerate(specs):
        lanes = slice(first[pos], first[pos] + sp.S)
        stage0[lanes] = first[pos]
        if sp.R is None:
            continue
        own, sync = _round_tables(sp.N, sp.R, sp.H)
        need_own.append(own.astype(np.int32))
        need_sync.append(sync.astype(np.int32))
        base[lanes] = off
        is_local[lanes] = 1
        off += sp.N + 1
    return np.concatenate(need_own), np.concatenate(need_sync), stage0, base, is_local


def _timeline(sp: ScheduleSpec, f_time: np.ndarray, b_time: np.ndarray) -> Timeline:
    sync = np.zeros(0, np.int32)
    if sp.R is not None:
        RH = sp.R * required("H", sp.H)
        round_ends = np.minimum(np.arange(RH, sp.N + RH, RH), sp.N) - 1
        sync = b_time[round_ends, 0].copy()
    return Timeline(
        kind="pipedream" if sp.R is None else "local_sgd",
        S=sp.S,
        N=sp.N,
        f_time=f_time,
        b_time=b_time,
        noam=(sp.S if sp.noam is None else sp.noam) if sp.R is None else None,
        R=sp.R,
        H=sp.H,
        sync_time=sync,
        stash=sp.R is None,
        versions=1 if sp.R is None else sp.R,
        copies=1 if sp.R is None else sp.R,
    )


def pipedream(S: int, N: int, noam: int | None = None) -> Timeline:
    """PipeDream asynchronous 1F1B with weight stashing (docs/science.md#schedules).

    At most ``noam`` (default S) microbatches in flight; ``noam=1`` is naive model parallelism.
    Unit costs give T = 2N + 2S - 2 for NOAM >= S and T = 2SN for NOAM = 1.
    """
    return simulate_many([_pd_spec(S, N, noam)])[0]


def pipedream_many(S_values, N_values, noam: int | None = None) -> list[Timeline]:
    """``[pipedream(S, N, noam) for S, N in zip(S_values, N_values)]``, simulated side by side."""
    return simulate_many([_pd_spec(S, N, noam) for S, N in zip(S_values, N_values, strict=True)])


def local_sgd(S: int, N: int, R: int, H: int) -> Timeline:
    """LocalSGD on the same S-stage pipeline (docs/science.md#schedules).

    R replicas, microbatch m on replica m mod R, rounds of R*H microbatches separated by a
    barrier and an averaging of the replicas at the end of step ``sync_time[q]``.
    With R >= S: T = 2N + ceil(N / (R*H)) * (2S - 2).
    """
    return local_sgd_many(S, N, R, [H])[0]


def local_sgd_many(S: int, N: int, R: int, H_values) -> list[Timeline]:
    """``[local_sgd(S, N, R, H) for H in H_values]``, simulated side by side in one loop."""
    S, N, R = check_int("S", S), check_int("N", N), check_int("R", R)
    specs = [ScheduleSpec(S=S, N=N, R=R, H=check_int("H", H)) for H in H_values]
    _check_size(S, N)
    return simulate_many(specs)


MAX_STAGE_STEPS = 2 * 10**9  # ~1 min of the vectorised loop; far above every study (E2: 5e5)


def _check_size(S: int, N: int, noam: int | None = None) -> None:
    """Refuse before any allocation a run whose loop would touch more than MAX_STAGE_STEPS
    (stage, step) cells: T <= 2SN / min(NOAM, S) + 2S steps of S lanes."""
    cells = (2 * S * N // min(noam or S, S) + 2 * S) * S
    if cells > MAX_STAGE_STEPS:
        raise ValueError(
            f"S={S}, N={N} is too large to simulate: about {cells:.3g} stage-steps > {MAX_STAGE_STEPS:.0e}"
        )


def _pd_spec(S, N, noam) -> ScheduleSpec:
    S = check_int("S", S)
    N = check_int("N", N)
    noam = S if noam is None else check_int("noam", noam)
    _check_size(S, N, noam)
    return ScheduleSpec(S=S, N=N, noam=noam)


def validate(tl: Timeline) -> None:
    """Raise ValueError unless ``tl`` is a consistent schedule.

    Checks: every microbatch does F then B on every stage, each stage in microbatch order;
    F(m, s-1) < F(m, s), B(m, s+1) < B(m, s), F(m, S-1) < B(m, S-1) (dependencies; a result
    is usable one step after it is made); one op per stage per step; the run ends with
    B(N-1, 0); PD: at most NOAM microbatches in flight; LocalSGD: rules (a) and (b).
    """
    S, N = tl.S, tl.N
    f, b = tl.f_time.astype(np.int64), tl.b_time.astype(np.int64)
    _require(f.shape == (N, S) and b.shape == (N, S), "f_time/b_time must be [N, S]")
    _require(f.min() >= 0, "op times must be >= 0")
    _require(
        np.all(np.diff(f, axis=0) > 0) and np.all(np.diff(b, axis=0) > 0),
        "each stage must run its F's and its B's in microbatch order",
    )
    _require(np.all(f[:, 1:] > f[:, :-1]), "F(m, s) before F(m, s-1) finished")
    _require(np.all(b[:, :-1] > b[:, 1:]), "B(m, s) before B(m, s+1) finished")
    _require(np.all(b > f), "B(m, s) before F(m, s) finished")
    both = np.sort(np.concatenate([f, b]), axis=0)
    _require(np.all(np.diff(both, axis=0) > 0), "two ops on one stage in one step")
    _require(b[N - 1, 0] == b.max(), "the run must end with B(N-1, 0)")
    if tl.stash:
        # in flight at step t on stage 0: F(m, 0) <= t < B(m, 0)
        in_flight = np.zeros(tl.T + 1, np.int64)
        np.add.at(in_flight, f[:, 0], 1)
        np.add.at(in_flight, b[:, 0], -1)
        _require(np.cumsum(in_flight).max() <= tl.noam, f"more than NOAM={tl.noam} in flight")
    else:
        R = required("R", tl.R)
        RH = R * required("H", tl.H)
        m = np.arange(N)
        same = (m - R) >= (m // RH) * RH
        _require(np.all(f[same] > b[m[same] - R]), "LocalSGD rule (a) violated")
        later = m >= RH
        last_prev = (m[later] // RH) * RH - 1
        _require(np.all(f[later] > b[last_prev, 0][:, None]), "LocalSGD barrier (b) violated")


def _require(ok, message: str) -> None:
    if not ok:
        raise ValueError(f"invalid timeline: {message}")
