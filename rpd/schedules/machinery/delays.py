"""Exact delays read off a timeline, their closed forms, and the delay law (docs/science.md#delays-and-the-delay-law).

With weight stashing, the backward of microbatch m on stage a -- global iteration k -- computes
∇_a f(z^k; ξ_m), where block r of the mixed point z^k is block r of x^{j_k^(r)} and

    j_k^(r) = j[m, r] = number of updates ordered before F(m, r),
    d_k^(r) = k - j_k^(r).

"Before" uses the iteration order itself (time step, then stage index): a B at the same step
on a lower stage counts. That is the convention under which the table equals the closed forms
of docs/science.md#delays-and-the-delay-law on every steady-state entry; counting only strictly earlier steps does not
(it gives larger delays for r > 0). Block r of x^{j} is then exactly the version of block r that F(m, r)
read, since stage r itself does no B in the step of F(m, r).

All functions are NumPy on [N, S] / [K, S] integer arrays; nothing loops over time steps.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.schedules.machinery.readiness import pipedream_many
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_int, required


def _indices_SxN(tl: Timeline) -> tuple[np.ndarray, np.ndarray]:
    """int32 [S, N] j (forward index) and k (update index), stage-major: the layout in which a
    Timeline stores its op times, so every pass here streams through memory.

    With is_b[s, t] = 1 if stage s does a B at step t, the number of updates ordered before
    slot (t, s) is  Σ_{t' < t} Σ_a is_b[a, t']  +  Σ_{a < s} is_b[a, t]. At the slot of
    F(m, r) that is j[m, r]; at the slot of B(m, a) it is k[m, a].
    """
    S, T = tl.S, tl.T
    idx: type[np.signedinteger] = np.int32 if S * T < 2**31 else np.int64
    row = (np.arange(S, dtype=idx) * idx(T))[:, None]
    f_slot = tl.f_time.T.astype(idx) + row  # [S, N], increasing along each row
    b_slot = tl.b_time.T.astype(idx) + row
    is_b = np.zeros((S, T), np.int8)
    is_b.ravel()[b_slot] = 1
    # Σ_{a <= s} is_b[a, t] <= S: int16 halves the traffic of the largest array here
    upto_s = np.cumsum(is_b, axis=0, dtype=np.int16 if S < 2**15 else np.int32)
    before_t = np.zeros(T, np.int32)
    np.cumsum(upto_s[-1, :-1], out=before_t[1:])  # updates in steps < t
    upto_s = upto_s.ravel()
    j = before_t[tl.f_time.T]
    j += upto_s[f_slot]  # no B in an F slot: "a <= r" counts the same as "a < r"
    k = before_t[tl.b_time.T]
    k += upto_s[b_slot]
    k -= 1
    return j, k


def forward_index(tl: Timeline) -> np.ndarray:
    """int32 [N, S]: j[m, r] = number of global updates ordered before F(m, r)."""
    return np.ascontiguousarray(_indices_SxN(tl)[0].T)


def update_index(tl: Timeline) -> np.ndarray:
    """int32 [N, S]: k[m, a] = global iteration of B(m, a)."""
    return np.ascontiguousarray(_indices_SxN(tl)[1].T)


def delay_table(tl: Timeline) -> np.ndarray:
    """int32 [K, S]: d[k, r] = k - j_k^(r), the delay of block r in iteration k."""
    j_SxN, k_SxN = _indices_SxN(tl)
    j_NxS = np.ascontiguousarray(j_SxN.T)
    mb_K = np.empty(tl.K, np.int64)  # microbatch of iteration k
    mb_K[k_SxN.ravel()] = np.tile(np.arange(tl.N), tl.S)
    k_K = np.arange(tl.K, dtype=np.int32)[:, None]
    d_KxS = np.empty((tl.K, tl.S), np.int32)
    step = max(1, 2**17 // tl.S)  # rows per chunk: the gathered rows stay in cache
    for lo in range(0, tl.K, step):
        hi = min(lo + step, tl.K)
        np.subtract(k_K[lo:hi], j_NxS[mb_K[lo:hi]], out=d_KxS[lo:hi])
    return d_KxS


def forward_versions(tl: Timeline) -> np.ndarray:
    """int32 [N, S]: v[m, r] = number of updates block r had received when F(m, r) ran."""
    is_b = np.zeros((tl.T, tl.S), np.int8)
    is_b[tl.b_time, np.arange(tl.S)] = 1
    b_before = np.cumsum(is_b, axis=0, dtype=np.int32) - is_b
    return b_before[tl.f_time, np.arange(tl.S)]


def read_versions(tl: Timeline) -> np.ndarray:
    """int32 [K, S]: v[k, r] = version of block r that update k reads, i.e. the version block r
    had when F(m_k, r) ran (weight stashing: B(m, a) uses exactly what F(m, a) used)."""
    return forward_versions(tl)[tl.update_mb]


def local_staleness(tl: Timeline) -> np.ndarray:
    """int32 [N, S]: updates to microbatch m's own copy of block s between F(m, s) and B(m, s).

    PD (one copy): m - v[m, s], since B(m, s) is the (m+1)-th B of stage s; S - 1 - s in
    steady state. LocalSGD: only B's of m's replica (m' ≡ m mod R) count, i.e. earlier
    microbatches of the replica whose B had not run on s when F(m, s) did; rules (a), (b) make
    it 0.
    """
    if tl.stash:
        return np.arange(tl.N, dtype=np.int32)[:, None] - forward_versions(tl)
    out = np.empty((tl.N, tl.S), np.int32)
    R = required("R", tl.R)
    for rho in range(min(R, tl.N)):
        f, b = tl.f_time[rho::R], tl.b_time[rho::R]  # one replica, in order
        for s in range(tl.S):
            done = np.searchsorted(b[:, s], f[:, s], side="left")
            out[rho :: tl.R, s] = np.arange(f.shape[0]) - done
    return out


def stashed_versions(tl: Timeline) -> np.ndarray:
    """int32 [S]: most versions of block s that stage s holds at once (end of a step) under PD
    weight stashing: the current block plus the distinct versions stashed by microbatches in
    flight on s (F(m, s) done, B(m, s) not). At most NOAM + 1. (LocalSGD stashes nothing:
    its local staleness is 0, so each replica only keeps its current block.)"""
    if not tl.stash:
        raise ValueError(f"stashed_versions is defined for a stashing timeline (PipeDream's), got {tl.kind}")
    S = tl.S
    stages = np.arange(S)
    v = forward_versions(tl)  # nondecreasing in m
    changes = np.zeros((tl.N, S), np.int32)
    changes[1:] = v[1:] != v[:-1]
    distinct_upto = np.cumsum(changes, axis=0)  # distinct values in v[0..m] minus 1
    done_f = np.zeros((tl.T, S), np.int32)
    done_b = np.zeros((tl.T, S), np.int32)
    done_f[tl.f_time, stages] = 1
    done_b[tl.b_time, stages] = 1
    nf = np.cumsum(done_f, axis=0)  # F's done by the end of step t
    nb = np.cumsum(done_b, axis=0)  # = current version
    busy = nf > nb
    newest = np.maximum(nf - 1, 0)
    oldest = np.minimum(nb, tl.N - 1)
    stashed = distinct_upto[newest, stages] - distinct_upto[oldest, stages] + 1
    current_is_new = v[newest, stages] != nb
    return np.max(np.where(busy, stashed + current_is_new, 1), axis=0).astype(np.int32)


def bubble_ratio(tl: Timeline) -> float:
    """Idle slots / (T * S)."""
    return tl.bubble_ratio()


# ---------------------------------------------------------------- closed forms
# (docs/science.md#delays-and-the-delay-law)


def steady_state_delay(S: int, a, r) -> np.ndarray:
    """Steady-state PD delay (NOAM = S) of read block r in an update of block a (0-indexed):

    S even: d(a, r) = (S/2)(2S - 2 - a - r) + ⌊(S - r)/2⌋ + ⌊a/2⌋
    S odd:  d(a, r) = S² - (S+1)/2 - a(S-1)/2 - r(S+1)/2
    """
    S = check_int("S", S)
    a, r = np.asarray(a), np.asarray(r)
    for name, x in (("a", a), ("r", r)):
        if not np.issubdtype(x.dtype, np.integer) or np.any((x < 0) | (x >= S)):
            raise ValueError(f"{name} must be integer stage indices in 0..S-1, got {x!r}")
    a, r = a.astype(np.int64), r.astype(np.int64)
    if S % 2 == 0:
        return (S // 2) * (2 * S - 2 - a - r) + (S - r) // 2 + a // 2
    return S * S - (S + 1) // 2 - a * ((S - 1) // 2) - r * ((S + 1) // 2)


def steady_state_delays(S: int) -> np.ndarray:
    """int64 [S, S]: ``steady_state_delay(S, a, r)`` for every (a, r)."""
    a, r = np.meshgrid(np.arange(S), np.arange(S), indexing="ij")
    return steady_state_delay(S, a, r)


def max_delay(S: int) -> int:
    """⌊S² - S/2⌋ = d(0, 0)."""
    S = check_int("S", S)
    return S * S - (S + 1) // 2


def mean_delay(S: int) -> float:
    """(S² - 1)/2, the mean of d(a, r) over all (a, r)."""
    S = check_int("S", S)
    return (S * S - 1) / 2


def min_delay(S: int) -> int:
    """⌈S/2⌉ - 1 = d(S-1, S-1)."""
    S = check_int("S", S)
    return (S + 1) // 2 - 1


def steady_state_mask(tl: Timeline) -> np.ndarray:
    """bool [K]: iteration k is in steady state, i.e. its microbatch m has S <= m < N - S."""
    m = tl.update_mb
    return (m >= tl.S) & (m < tl.N - tl.S)


def table_summary(d_KxS: np.ndarray) -> dict[str, float]:
    """Mean, 10th percentile and max of every entry of a delay table (all iterations, all
    blocks), under the names a run's summary uses: ``delay/mean``, ``delay/p10``, ``delay/max``."""
    d = np.asarray(d_KxS, np.float64).ravel()
    return {"delay/mean": float(d.mean()), "delay/p10": float(np.percentile(d, 10)), "delay/max": float(d.max())}


# ---------------------------------------------------------------- the delay law (E2)


@dataclasses.dataclass(frozen=True)
class DelayStats:
    """Statistics of the delays d_k^(r) over the second half of the iterations, k >= K/2, all r."""

    S: int
    N: int
    mean: float
    p10: float  # 10th percentile, NumPy's default (linear) interpolation
    max: int
    min: int
    steady_entries: int  # steady-state (k, r) entries checked against the closed form
    closed_form_ok: bool  # every one of them equals steady_state_delay(S, a, r)


def delay_stats(tl: Timeline) -> DelayStats:
    """Mean, 10th percentile, max and min of ``delay_table(tl)[K//2:]`` and the closed-form check,
    without building the table.

    Per microbatch m the entries are d = k[m, a] - j[m, r]. The closed form is separable,
    d(a, r) = f(a) + g(r) with f(a) = d(a, 0), g(r) = d(0, r) - d(0, 0), so microbatch m matches
    it on all S² entries iff k[m, a] - f(a) and j[m, r] + g(r) are one and the same constant for
    every a and r -- an O(S) test per microbatch. Matching microbatches contribute the known
    multiset {d(a, r)}; the others (warm-up, cool-down) are counted exactly by binary search.
    The closed form is only tried for PD with NOAM = S (else ``closed_form_ok`` is False).
    """
    S, N, K = tl.S, tl.N, tl.K
    j, k = _indices_SxN(tl)  # [S, N]
    first_sel = np.sum(k < K // 2, axis=1)  # [S]: stage a's B's run in microbatch order
    closed = np.zeros(N, bool)
    D = None
    if tl.stash and tl.noam == S:
        D = steady_state_delays(S)
        f, g = D[:, :1], D[:1, :].T - D[0, 0]
        if not np.array_equal(D, f + g.T):
            raise AssertionError("closed form is not separable")
        x = k[:, S : N - S] - f.astype(np.int32)
        closed[S : N - S] = np.all(x == x[:1], axis=0) & np.all(j[:, S : N - S] + g == x[:1], axis=0)
    ok = D is not None and bool(np.all(closed[S : N - S]))
    n_closed = np.concatenate([[0], np.cumsum(closed)])  # closed microbatches below m
    w = n_closed[N] - n_closed[first_sel]  # closed microbatches updating block a in 2nd half
    hist = np.zeros(1, np.int64)
    total, hi, lo = 0.0, -np.inf, np.inf
    if D is not None and w.any():  # w counts closed microbatches: none without D
        hist = np.bincount(D.ravel(), weights=np.repeat(w, S)).astype(np.int64)
        total += float(np.dot(w, D.sum(axis=1)))
        hi, lo = float(D[w > 0, 0].max()), float(D[w > 0, -1].min())
    rows = np.nonzero(~closed)[0]
    a_q, i_q = np.nonzero(rows[None, :] >= first_sel[:, None])  # explicit (a, row) queries
    k_q = k[a_q, rows[i_q]].astype(np.int64)
    j_rows = j[:, rows].astype(np.int64)  # [S, n_rows]
    if k_q.size:
        total += float(np.sum(S * k_q - j_rows.sum(axis=0)[i_q]))
        hi = max(hi, float(np.max(k_q - j_rows.min(axis=0)[i_q])))
        lo = min(lo, float(np.min(k_q - j_rows.max(axis=0)[i_q])))
    explicit = _ExplicitCounts(j_rows, i_q, k_q, K)
    cum = np.cumsum(hist)
    n = (K - K // 2) * S

    def count_le(x: int) -> int:
        cf = 0 if x < 0 else int(cum[min(x, cum.size - 1)])
        return cf + explicit.count_le(x)

    def order_stat(rank: int) -> int:
        # count_le(x) lies in [cf(x), cf(x) + explicit entries]: bracket with the histogram
        upper = int(np.searchsorted(cum, rank, side="right"))
        hi_x = int(hi) if upper == cum.size else min(int(hi), upper)
        lo_x = max(int(lo), int(np.searchsorted(cum, rank - k_q.size * S, side="right")))
        return _order_stat(count_le, rank, lo_x, max(lo_x, hi_x))

    h = 0.1 * (n - 1)
    below = int(np.floor(h))
    p_lo = order_stat(below)
    p_hi = p_lo if count_le(p_lo) > below + 1 or below + 1 >= n else order_stat(below + 1)
    return DelayStats(
        S=S,
        N=N,
        mean=total / n,
        p10=float(_lerp(p_lo, p_hi, h - below)),
        max=int(hi),
        min=int(lo),
        steady_entries=max(N - 2 * S, 0) * S * S,
        closed_form_ok=ok,
    )


class _ExplicitCounts:
    """count_le(x) = #{(query q, r): k_q - j[r, row_q] <= x}, one vectorized binary search."""

    def __init__(self, j_rows: np.ndarray, row: np.ndarray, k: np.ndarray, K: int):
        self.S = j_rows.shape[0]
        self.big = 3 * K + 1  # k - x + K lies in [0, 3K) for |x| <= K
        offs = np.arange(j_rows.shape[1], dtype=np.int64)[:, None] * self.big
        self.keys = (np.sort(j_rows.T, axis=1) + K + offs).ravel()
        self.base = row * self.big + k + K
        self.ends = (row + 1) * self.S

    def count_le(self, x: int) -> int:
        if self.base.size == 0:
            return 0
        # entries <= x  <=>  j >= k - x
        pos = np.searchsorted(self.keys, self.base - x, side="left")
        return int(np.sum(self.ends - pos))


def _order_stat(count_le, rank: int, lo: int, hi: int) -> int:
    """Smallest integer x in [lo, hi] with count_le(x) > rank (the 0-based rank-th value), by
    bisection interleaved with interpolation steps (count_le is nearly linear locally)."""
    c_lo, c_hi = None, None
    step = 0
    while lo < hi:
        if step % 2 == 0 and c_lo is not None and c_hi is not None and c_hi > c_lo:
            mid = lo + int((rank - c_lo) * (hi - lo) / (c_hi - c_lo))
            mid = min(max(mid, lo), hi - 1)
        else:
            mid = (lo + hi) // 2
        step += 1
        c = count_le(mid)
        if c > rank:
            hi, c_hi = mid, c
        else:
            lo, c_lo = mid + 1, c
    return lo


def _lerp(a: float, b: float, t: float) -> float:
    # NumPy's percentile interpolation, term for term, so the numbers match np.percentile.
    d = b - a
    return b - d * (1 - t) if t >= 0.5 else a + d * t


@dataclasses.dataclass(frozen=True)
class DelayLaw:
    """Per-S delay statistics of PD (NOAM = S, N = n_per_stage * S) and degree-2 fits in S."""

    S: np.ndarray  # int [n]
    N: np.ndarray  # int [n]
    mean: np.ndarray  # float [n]
    p10: np.ndarray  # float [n]
    max: np.ndarray  # int [n]
    min: np.ndarray  # int [n]
    steady_entries: np.ndarray  # int [n]
    closed_form_ok: np.ndarray  # bool [n]
    max_fit: np.ndarray  # [3] coefficients of S², S, 1 (least squares)
    mean_fit: np.ndarray  # [3]

    def rows(self) -> list[dict]:
        keys = ("S", "N", "mean", "p10", "max", "min", "steady_entries", "closed_form_ok")
        return [{key: getattr(self, key)[i].item() for key in keys} for i in range(self.S.size)]


def delay_law(S_values, n_per_stage: int = 10) -> DelayLaw:
    """E2: ``delay_stats`` of ``pipedream(S, n_per_stage * S)`` for every S (simulated side by
    side), plus least-squares fits max ≈ c₂S² + c₁S + c₀ and mean ≈ c₂S² + c₁S + c₀."""
    S_values = [check_int("S", S) for S in S_values]
    n_per_stage = check_int("n_per_stage", n_per_stage)
    timelines = pipedream_many(S_values, [n_per_stage * S for S in S_values])
    stats = [delay_stats(tl) for tl in timelines]
    col = {f.name: np.array([getattr(s, f.name) for s in stats]) for f in dataclasses.fields(DelayStats)}
    S_arr = col["S"].astype(np.float64)
    fit = (lambda y: np.polyfit(S_arr, y, 2)) if len(stats) >= 3 else (lambda y: np.full(3, np.nan))
    return DelayLaw(**col, max_fit=fit(col["max"]), mean_fit=fit(col["mean"]))
