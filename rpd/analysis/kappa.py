"""The effective-token multiplier κ read off loss curves, and its power law in model size
(E18, docs/results.md#e18-the-staleness-cost-against-model-size). Pure NumPy, host side.

κ of a method against its synchronous reference at D tokens (Charles et al. 2025, arXiv 2503.09799,
compare DiLoCo with data-parallel training this way, as a loss at equal tokens):

    L* = L_sync(D)                      the reference's loss at D tokens
    κ  = t_m(L*) / D                    t_m(L) = the first token count at which L_m <= L

Both curves are piecewise linear between their recorded points (tokens, loss): L_sync(D) is
interpolated at D, t_m(L*) is the first downward crossing of L*, interpolated inside the segment
it falls in. A method that never reaches L* within its recorded tokens is *censored*: κ is only
known to exceed t_max / D, reported as such and never given a number. A curve with a NaN or inf
is diverged from its first bad point on (nothing after it is read). The relative loss gap at
equal tokens is (L_m(D) − L_sync(D)) / L_sync(D).

The law κ − 1 = c·(N/10⁶)^γ is fitted by least squares on log(κ − 1) = log c + γ·log(N/10⁶);
the 95 % interval on γ is the t-interval of the slope with n − 2 degrees of freedom
(ŝ² = RSS/(n − 2), se(γ) = ŝ/√Σ(x − x̄)²). Only points with a finite κ > 1 enter the fit (the
log needs κ − 1 > 0): the censored points (κ above a bound) and those with κ <= 1 (no cost) are
counted in the fit's record, never dropped silently.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import stats

N_UNIT = 1e6  # the law's N is in millions of parameters


class Kappa(NamedTuple):
    """κ of one method at D tokens against its reference."""

    kappa: float | None  # t_m(L*) / D; None when censored or diverged before reaching L*
    censored: bool  # L* not reached within the method's recorded tokens
    kappa_bound: float  # censored: κ > kappa_bound (= t_max / D); otherwise equal to kappa
    target: float  # L* = L_sync(D)
    relative_gap: float  # (L_m(D) − L_sync(D)) / L_sync(D); NaN if the method diverged by D
    diverged: bool  # a NaN / inf in the method's curve


def _clean(tokens, loss) -> tuple[np.ndarray, np.ndarray, bool]:
    """The curve up to its first non-finite value (and whether it had one)."""
    t, y = np.asarray(tokens, np.float64), np.asarray(loss, np.float64)
    if t.shape != y.shape or t.ndim != 1 or t.size == 0:
        raise ValueError(f"tokens and loss must be equal 1-D arrays, got {t.shape} and {y.shape}")
    if np.any(np.diff(t) <= 0):
        raise ValueError("tokens must be strictly increasing")
    bad = ~np.isfinite(y)
    if bad.any():
        k = int(np.argmax(bad))
        return t[:k], y[:k], True
    return t, y, False


def loss_at(tokens, loss, D: float) -> float:
    """L(D), linear between the recorded points; NaN outside them (or past a divergence)."""
    t, y, _ = _clean(tokens, loss)
    if t.size == 0 or D < t[0] or D > t[-1]:
        return math.nan
    return float(np.interp(D, t, y))


def tokens_to_reach(tokens, loss, target: float) -> float | None:
    """The first token count at which the piecewise-linear curve is <= ``target`` (None: never)."""
    t, y, _ = _clean(tokens, loss)
    hit = np.nonzero(y <= target)[0]
    if hit.size == 0:
        return None
    k = int(hit[0])
    if k == 0:
        return float(t[0])
    t0, t1, y0, y1 = t[k - 1], t[k], y[k - 1], y[k]
    return float(t0 + (y0 - target) / (y0 - y1) * (t1 - t0))  # y0 > target >= y1


def kappa(ref_tokens, ref_loss, tokens, loss, D: float) -> Kappa:
    """κ of the curve (tokens, loss) against the reference (ref_tokens, ref_loss) at D tokens
    (module docstring). Raises if the reference has no finite loss at D."""
    target = loss_at(ref_tokens, ref_loss, D)
    if not math.isfinite(target):
        raise ValueError(f"the reference has no finite loss at D = {D} tokens")
    t, _, diverged = _clean(tokens, loss)
    reached = tokens_to_reach(tokens, loss, target)
    gap = (loss_at(tokens, loss, D) - target) / target
    t_max = float(t[-1]) if t.size else 0.0
    if reached is None:
        return Kappa(None, not diverged, t_max / D, target, gap, diverged)
    return Kappa(reached / D, False, reached / D, target, gap, diverged)


class PowerFit(NamedTuple):
    """κ − 1 = c·(N/10⁶)^γ fitted on the usable points."""

    c: float | None
    gamma: float | None
    gamma_ci95: tuple[float, float] | None  # None with fewer than 3 points (no residual freedom)
    n_sizes: int  # points in the fit
    n_censored: int  # left out: κ only bounded below
    n_no_cost: int  # left out: κ <= 1 (κ − 1 has no log)
    n_diverged: int  # left out: diverged before reaching the target
    N_range: tuple[float, float] | None  # smallest and largest N fitted


def power_law(N, y) -> tuple[float | None, float | None, tuple[float, float] | None]:
    """(c, γ, γ's 95 % t-interval) of y = c·(N/10⁶)^γ by least squares on the logs of positive y
    (module docstring); (None, None, None) with fewer than 2 distinct N, no interval below 3 points."""
    N, y = np.asarray(N, np.float64), np.asarray(y, np.float64)
    if N.size < 2 or np.ptp(N) == 0:
        return None, None, None
    x, v = np.log(N / N_UNIT), np.log(y)
    slope, intercept = np.polyfit(x, v, 1)
    if N.size < 3:
        return float(math.exp(intercept)), float(slope), None
    rss = float(np.sum((v - (intercept + slope * x)) ** 2))
    se = math.sqrt(rss / (N.size - 2) / float(np.sum((x - x.mean()) ** 2)))
    h = float(stats.t.ppf(0.975, N.size - 2)) * se
    return float(math.exp(intercept)), float(slope), (float(slope - h), float(slope + h))


def fit_power(N, kappas, censored=None, diverged=None) -> PowerFit:
    """κ − 1 = c·(N/10⁶)^γ on the points with a finite κ > 1 (:func:`power_law`); ``kappas`` may
    hold None / NaN for censored or diverged points, which are counted, not fitted."""
    N = np.asarray(N, np.float64)
    k = np.array([math.nan if v is None else float(v) for v in kappas])
    cen = np.zeros(N.shape, bool) if censored is None else np.asarray(censored, bool)
    div = np.zeros(N.shape, bool) if diverged is None else np.asarray(diverged, bool)
    usable = np.isfinite(k) & (k > 1) & ~cen & ~div
    no_cost = np.isfinite(k) & (k <= 1) & ~cen & ~div
    c, gamma, ci = power_law(N[usable], k[usable] - 1)
    N_range = (float(N[usable].min()), float(N[usable].max())) if gamma is not None else None
    return PowerFit(
        c,
        gamma,
        ci,
        n_sizes=int(usable.sum()),
        n_censored=int(cen.sum()),
        n_no_cost=int(no_cost.sum()),
        n_diverged=int((div & ~cen).sum()),
        N_range=N_range,
    )


def diloco_dev_trend(rows: dict[int, tuple[float, float]], N_small: float, N_large: float) -> dict[int, float]:
    """The exponent of the DiLoCo development rows' relative gap in N, per M replicas:
    log(gap_large / gap_small) / log(N_large / N_small), gap = L_DiLoCo / L_DP − 1; ``rows`` maps M to
    (gap at N_small, gap at N_large). NaN where a gap is not positive."""
    out = {}
    for M, (small, large) in rows.items():
        ok = small > 0 and large > 0
        out[M] = math.log(large / small) / math.log(N_large / N_small) if ok else math.nan
    return out
