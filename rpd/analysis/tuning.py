"""Step-size selection over power-of-two grids (docs/science.md#step-sizes). Pure NumPy, host side.

Input everywhere: ``curves`` of shape [G, n_points] (one row per γ, NaN/inf allowed) and the
matching ``gammas`` [G]. A *diverged* row (``rpd.results.diverged``: a NaN/inf, or a value above
``DIVERGENCE_FACTOR`` = 10⁶ times the run's start, by default the row's first point) is
reported, never selected by any rule, and never raises.

"stable" selector. For each γ take the tail y = the last max(min_tail, ⌈tail_frac·n⌉) points
(all points if the curve is shorter) and, with Δ_i = y_{i+1} − y_i and m = mean(y):

    cv        = std(y) / |m|                       ≤ max_cv
    up_frac   = #{Δ_i > 0} / #Δ                    ≤ max_up_frac
    max_up    = max(0, max Δ_i) / |m|              ≤ max_up_step
    tv_ratio  = Σ|Δ_i| / |y_last − y_first|        ≤ max_tv_ratio
    log_slope = slope of the least-squares line through (i, log y_i)   ≤ max_log_slope

Edge cases (the spec is silent; chosen so that flat curves are stable and oscillations are
not): 0/0 counts as 0 (cv of a constant-zero tail, tv_ratio of a constant tail) and x/0 with
x > 0 as +inf (a tail that oscillates and returns exactly to its start is not stable); values
≤ 0 (f − f* with an approximate f*) are clipped to the smallest positive float before the log.
Among stable γ keep those with tail mean ≤ best + 0.05·|best| (= 1.05·best for best > 0) and
take the smallest γ; if none is stable, take the smallest tail mean over non-diverged γ.

"reference" selector (docs/science.md#step-sizes, "what the paper actually used"): the rule every published γ was
chosen by. The authors' code computes the five statistics above but never applies them: it
builds each row as ``{"lr": lr, "stable": stable, **metrics}`` and ``metrics`` carries its own
``"stable": True`` for every finite curve, which overwrites the verdict. So: over the
non-diverged γ, keep those whose tail mean (same tail as above) is ≤ 1.05 × the smallest tail
mean and take the smallest γ. The statistics are still computed and reported (``reports``), so
a figure made with this rule shows which of its γ the strict test would have rejected.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from rpd.results import DIVERGENCE_FACTOR, diverged
from rpd.validation import check_choice, check_int, check_real


@dataclasses.dataclass(frozen=True)
class StableThresholds:
    """Limits of the "stable" test; see the module docstring for the quantities."""

    max_cv: float = 0.15
    max_up_frac: float = 0.45
    max_up_step: float = 0.05  # relative to |tail mean|
    max_tv_ratio: float = 5.0
    max_log_slope: float = 1e-4  # per point, natural log
    near_best: float = 1.05  # keep stable γ whose tail mean is within this factor of the best
    min_tail: int = 10


DEFAULT = StableThresholds()
LM = StableThresholds(max_cv=0.25, max_up_frac=0.55, max_up_step=0.10, max_tv_ratio=10.0, max_log_slope=1e-3)


class GammaReport(NamedTuple):
    """Why one γ was (not) stable. Statistics are NaN for a diverged curve."""

    gamma: float
    diverged: bool
    stable: bool
    tail_mean: float
    final: float
    cv: float
    up_frac: float
    max_up: float  # largest upward step / |tail mean|
    tv_ratio: float
    log_slope: float
    reasons: tuple[str, ...]  # failed criteria, e.g. ("cv 0.31 > 0.15",); empty when stable


class Selection(NamedTuple):
    """The chosen γ. ``index`` is None (and ``gamma`` NaN) only when every run diverged."""

    index: int | None  # type: ignore[assignment]  # a field named like tuple.index: typeshed's NamedTuple clash
    gamma: float
    rule: str  # "stable", "min_tail_mean" (no γ stable), "reference", "best_final", or "all_diverged"
    reports: tuple[GammaReport, ...]

    @property
    def all_diverged(self) -> bool:
        return self.index is None


MIN_EXP, MAX_EXP = -1074, 1023  # 2^k is a positive finite float64 for k in [MIN_EXP, MAX_EXP]


def check_exponent(name: str, k) -> int:
    """An integer k with 2^k a positive finite float64 (the error names ``name``)."""
    k = check_int(name, k, MIN_EXP)
    if k > MAX_EXP:
        raise ValueError(f"{name} must be <= {MAX_EXP} (2^{name} must be a finite float64), got {k}")
    return k


def pow2_grid(lo_exp: int, hi_exp: int) -> np.ndarray:
    """float64 [hi_exp − lo_exp + 1]: 2^lo_exp, ..., 2^hi_exp."""
    lo, hi = check_exponent("lo_exp", lo_exp), check_exponent("hi_exp", hi_exp)
    if hi < lo:
        raise ValueError(f"hi_exp must be >= lo_exp, got lo_exp={lo}, hi_exp={hi}")
    return np.ldexp(1.0, np.arange(lo, hi + 1))


def log2_exponent(gamma: float) -> int:
    """k with gamma = 2^k (for legends "γ = 2^k"); raises if gamma is not a power of two."""
    mant, exp = math.frexp(check_real("gamma", gamma))
    if mant != 0.5:
        raise ValueError(f"gamma must be a power of two, got {gamma}")
    return exp - 1


def tail_length(n_points: int, tail_frac: float, min_tail: int = 10) -> int:
    """max(min_tail, ⌈tail_frac·n⌉), capped at n."""
    return min(n_points, max(min_tail, math.ceil(tail_frac * n_points)))


def _ratio(num: float, den: float) -> float:
    if den != 0:
        return num / den
    return 0.0 if num == 0 else math.inf


def gamma_report(
    curve, gamma: float, tail_frac: float = 0.2, thresholds: StableThresholds = DEFAULT, start: float | None = None
) -> GammaReport:
    """Apply the stable test to one curve [n_points]. ``start``: the run's starting value, the
    scale of the divergence test (default: the curve's first point; pass it when the curve is
    a slice that does not begin at x⁰)."""
    y_all = np.asarray(curve, dtype=np.float64)
    if y_all.ndim != 1 or y_all.size < 2:
        raise ValueError(f"curve must be 1-D with >= 2 points, got shape {y_all.shape}")
    if diverged(y_all, start):
        nan = math.nan
        s = y_all[0] if start is None else float(start)
        why = (
            "diverged (NaN/inf)"
            if not np.all(np.isfinite(y_all)) or not math.isfinite(s)
            else f"diverged (max {y_all.max():.3g} > {DIVERGENCE_FACTOR:g} x start {s:.3g})"
        )
        return GammaReport(float(gamma), True, False, nan, nan, nan, nan, nan, nan, nan, (why,))
    th = thresholds
    y = y_all[-tail_length(y_all.size, tail_frac, th.min_tail) :]
    # A curve below the divergence bound can still be large enough to overflow the moments;
    # the statistics then come out inf and the curve fails the test, which is the right call.
    with np.errstate(over="ignore", invalid="ignore"):
        d = np.diff(y)
        mean = float(y.mean())
        cv = _ratio(float(y.std()), abs(mean))
        up_frac = float(np.mean(d > 0))
        max_up = _ratio(max(0.0, float(d.max())), abs(mean))
        tv_ratio = _ratio(float(np.abs(d).sum()), abs(float(y[-1] - y[0])))
        log_y = np.log(np.maximum(y, np.finfo(np.float64).tiny))
        log_slope = float(np.polyfit(np.arange(y.size, dtype=np.float64), log_y, 1)[0])
    checks = (
        ("cv", cv, th.max_cv),
        ("up_frac", up_frac, th.max_up_frac),
        ("max_up", max_up, th.max_up_step),
        ("tv_ratio", tv_ratio, th.max_tv_ratio),
        ("log_slope", log_slope, th.max_log_slope),
    )
    reasons = tuple(f"{name} {val:.3g} > {lim:.3g}" for name, val, lim in checks if not val <= lim)
    return GammaReport(
        float(gamma), False, not reasons, mean, float(y_all[-1]), cv, up_frac, max_up, tv_ratio, log_slope, reasons
    )


def _check_inputs(curves, gammas) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(curves, dtype=np.float64)
    g = np.asarray(gammas, dtype=np.float64)
    if c.ndim != 2 or g.ndim != 1 or c.shape[0] != g.shape[0] or c.shape[0] == 0:
        raise ValueError(
            f"curves must be [G, n_points] and gammas [G] with G >= 1, got curves {c.shape}, gammas {g.shape}"
        )
    return c, g


RULES = ("stable", "reference", "best_final")


def select_gamma(
    curves, gammas, rule: str = "stable", tail_frac: float = 0.2, thresholds: StableThresholds = DEFAULT, start=None
) -> Selection:
    """Choose a γ from curves [G, n_points]. ``rule``: "stable" (docs/science.md#step-sizes, the rule as
    written), "reference" (the rule the paper's γ were chosen by: the smallest γ whose tail mean
    is within ``near_best`` of the smallest over non-diverged γ, stability not required) or
    "best_final" (smallest last value; ties go to the smaller γ). Never selects a diverged row;
    every rule reports every γ's statistics. ``start`` (scalar or [G]): the runs' starting
    values when ``curves`` do not begin at x⁰."""
    check_choice("rule", rule, set(RULES))
    check_real("tail_frac", tail_frac)
    if tail_frac > 1:
        raise ValueError(f"tail_frac must be <= 1, got {tail_frac}")
    c, g = _check_inputs(curves, gammas)
    s = np.broadcast_to(c[:, 0] if start is None else np.asarray(start, np.float64), g.shape)
    reports = tuple(gamma_report(c[i], g[i], tail_frac, thresholds, s[i]) for i in range(len(g)))
    alive = [i for i, r in enumerate(reports) if not r.diverged]
    if not alive:
        return Selection(None, math.nan, "all_diverged", reports)
    if rule == "best_final":
        i = min(alive, key=lambda j: (reports[j].final, g[j]))
        return Selection(i, float(g[i]), "best_final", reports)
    if rule == "reference":
        return Selection(*_smallest_near_best(alive, reports, g, thresholds), "reference", reports)
    stable = [i for i in alive if reports[i].stable]
    if not stable:
        i = min(alive, key=lambda j: (reports[j].tail_mean, g[j]))
        return Selection(i, float(g[i]), "min_tail_mean", reports)
    return Selection(*_smallest_near_best(stable, reports, g, thresholds), "stable", reports)


def _smallest_near_best(candidates, reports, g, thresholds) -> tuple[int, float]:
    """(index, γ): the smallest γ among ``candidates`` whose tail mean is ≤ best + (near_best −
    1)·|best| (= near_best·best for best > 0), best = the smallest tail mean among them."""
    best = min(reports[i].tail_mean for i in candidates)
    cutoff = best + (thresholds.near_best - 1.0) * abs(best)
    i = min((j for j in candidates if reports[j].tail_mean <= cutoff), key=lambda j: g[j])
    return i, float(g[i])


def format_reports(selection: Selection) -> str:
    """A plain-text table, one line per γ, for logs and the figure script."""
    lines = [f"rule={selection.rule} chosen gamma={selection.gamma:g}"]
    for i, r in enumerate(selection.reports):
        mark = "*" if i == selection.index else " "
        why = "stable" if r.stable else "; ".join(r.reasons)
        lines.append(f"{mark} gamma={r.gamma:<10g} tail_mean={r.tail_mean:<11.4g} {why}")
    return "\n".join(lines)


# Which rule chose a figure's γ (docs/science.md#step-sizes), said in the figure and its JSON (no section numbers:
# these strings are printed in figure titles).
AUTHORS_OVERRIDE = (
    "the authors' code computes the stability statistics but never applies them: "
    'rows.append({"lr": lr, "stable": stable, **metrics}) lets metrics["stable"] = True '
    "overwrite the verdict (minibatch_sgd.ipynb, different_delta_quadratic_multiple_deltas.ipynb, "
    "llm_experiments.py, llm_pd_vs_sgd.py), so every published γ was chosen by the reference rule"
)
RULE_TEXT = {
    "reference": "reference rule (the paper's: smallest γ within 5 % of the best tail mean)",
    "stable": "strict stable rule (as the spec writes it)",
    "best_final": "best-final rule",
}


def selector_rules(selector: str) -> tuple[str, ...]:
    """The configured selector rule first, then the other rules of ``rpd.analysis.RULES``: every
    study reports each rule's pick, the first one is drawn."""
    check_choice("selector", selector, RULES)
    return (selector,) + tuple(r for r in RULES if r != selector)
