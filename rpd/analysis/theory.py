"""The RPD convergence bound (docs/science.md#theory) and log-log slope fits for the S⁴ study. Host-side NumPy.

For RPD with S blocks, K iterations, step γ, smoothness L, block-gradient bound G and delay
bound δ:

    (1/K) Σ_k E‖∇f(x^k)‖² ≤ 2S(f(x⁰) − f*)/(γK)  +  γSLG²  +  γ²L²δ²G²
                             optimisation          noise     stale read

The tuned step γ = min{1/L, √(2(f(x⁰) − f*)/(LG²K))} balances the first two terms; on its
square-root branch the stale term equals 2L(f(x⁰) − f*)δ²/K, i.e. Θ(S⁴/K) for PipeDream's
δ = ⌊S² − S/2⌋.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import stats

from rpd.validation import check_int, check_real


class BoundTerms(NamedTuple):
    """The three terms of the bound and their sum (floats)."""

    optimisation: float  # 2S(f(x⁰) − f*)/(γK)
    noise: float  # γSLG²
    stale: float  # γ²L²δ²G²
    total: float


class RunBound(NamedTuple):
    G: float  # largest block-gradient norm seen in the run
    gamma_tuned: float
    at_gamma: BoundTerms  # the bound at the run's own γ
    at_tuned: BoundTerms  # the bound at the tuned γ


class SlopeFit(NamedTuple):
    """log y = intercept + slope · log x, least squares; CI is t-based (n − 2 dof)."""

    slope: float
    intercept: float
    slope_ci: tuple[float, float]
    stderr: float
    r2: float
    n: int


def pd_delta(S: int) -> int:
    """PipeDream's maximal steady-state delay ⌊S² − S/2⌋ (docs/science.md#delays-and-the-delay-law)."""
    S = check_int("S", S)
    return (2 * S * S - S) // 2


def _gap(f0: float, f_star: float) -> float:
    gap = check_real("f0", f0, positive=False) - check_real("f_star", f_star, positive=False)
    if gap < 0:
        raise ValueError(f"f0 - f_star must be >= 0, got {gap}")
    return gap


def bound(gamma: float, S: int, K: int, L: float, G: float, delta: int, f0: float, f_star: float = 0.0) -> BoundTerms:
    """2S(f(x⁰) − f*)/(γK) + γSLG² + γ²L²δ²G², term by term."""
    gamma, L = check_real("gamma", gamma), check_real("L", L)
    G = check_real("G", G, allow_zero=True)
    S, K, delta = check_int("S", S), check_int("K", K), check_int("delta", delta, 0)
    opt = 2.0 * S * _gap(f0, f_star) / (gamma * K)
    noise = gamma * S * L * G**2
    stale = gamma**2 * L**2 * delta**2 * G**2
    return BoundTerms(opt, noise, stale, opt + noise + stale)


def tuned_gamma(L: float, G: float, K: int, f0: float, f_star: float = 0.0) -> float:
    """γ = min{1/L, √(2(f(x⁰) − f*)/(LG²K))} (1/L when G = 0 or the gap is 0)."""
    L, G, K = check_real("L", L), check_real("G", G, allow_zero=True), check_int("K", K)
    gap = _gap(f0, f_star)
    if G == 0 or gap == 0:
        return 1.0 / L
    return min(1.0 / L, math.sqrt(2.0 * gap / (L * G**2 * K)))


def stale_term_tuned(L: float, delta: int, K: int, f0: float, f_star: float = 0.0) -> float:
    """2L(f(x⁰) − f*)δ²/K: the stale term at the tuned step on its square-root branch."""
    L, delta, K = check_real("L", L), check_int("delta", delta, 0), check_int("K", K)
    return 2.0 * L * _gap(f0, f_star) * delta**2 / K


def bound_from_run(
    block_grad_norms, gamma: float, S: int, K: int, L: float, delta: int, f0: float, f_star: float = 0.0
) -> RunBound:
    """The bound for a finished run, with G = max of the block-gradient norms it saw
    (any array shape; must be finite: a diverged run has no meaningful G)."""
    norms = np.asarray(block_grad_norms, dtype=np.float64)
    if norms.size == 0 or not np.all(np.isfinite(norms)) or np.any(norms < 0):
        raise ValueError("block_grad_norms must be a non-empty array of finite norms >= 0")
    G = float(norms.max())
    g_t = tuned_gamma(L, G, K, f0, f_star)
    return RunBound(G, g_t, bound(gamma, S, K, L, G, delta, f0, f_star), bound(g_t, S, K, L, G, delta, f0, f_star))


def loglog_fit(x, y, confidence: float = 0.95) -> SlopeFit:
    """Fit log y = a + b log x by least squares; the CI on b is b ± t_{(1+c)/2, n−2} · se(b)."""
    lx, ly = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if lx.ndim != 1 or lx.shape != ly.shape or lx.size < 3:
        raise ValueError(f"x and y must be 1-D of equal length >= 3, got {lx.shape}, {ly.shape}")
    if not (np.all(lx > 0) and np.all(ly > 0) and np.all(np.isfinite(lx * ly))):
        raise ValueError("x and y must be finite and > 0 for a log-log fit")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    lx, ly = np.log(lx), np.log(ly)
    n = lx.size
    xc = lx - lx.mean()
    sxx = float(xc @ xc)
    if sxx == 0:
        raise ValueError("x must take at least two distinct values")
    slope = float(xc @ (ly - ly.mean())) / sxx
    intercept = float(ly.mean() - slope * lx.mean())
    resid = ly - intercept - slope * lx
    sse, sst = float(resid @ resid), float(((ly - ly.mean()) ** 2).sum())
    stderr = math.sqrt(sse / (n - 2) / sxx)
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 2)) * stderr
    r2 = 1.0 - sse / sst if sst > 0 else 1.0
    return SlopeFit(slope, intercept, (slope - half, slope + half), stderr, r2, n)
