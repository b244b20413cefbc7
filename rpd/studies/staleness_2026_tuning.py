"""E17's protocol pieces (rpd.studies.staleness_2026): γ tuned per arm over seeds on a grid whose
edges are never chosen, updates to a target, and a schedule's delay in both units.

Tuning: every seed runs the arm's whole γ grid (one vmapped scan); the arm's γ is the one with
the lowest mean over seeds of log(score) (a diverged or non-finite score is +inf); when that γ
sits on the grid's lowest or highest exponent, the grid is widened by ``step`` exponents on that
side (on both when no γ has a finite score), the new γ run for every seed, and the choice made again (at most ``max_widen`` times). A
choice still on an edge after that is reported (``edge``), never hidden.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rpd.schedules import Timeline
from rpd.schedules.machinery import delays
from rpd.train import corrections, plans


def updates_to_target(curve_GP: np.ndarray, target) -> np.ndarray:
    """float [G]: per γ, the first recorded point whose value is at or below ``target`` (a number,
    or [G] per γ); inf where none is (NaN never is)."""
    c = np.asarray(curve_GP, np.float64)
    hit = np.isfinite(c) & (c <= np.reshape(target, (-1, 1)))
    return np.where(hit.any(axis=1), np.argmax(hit, axis=1), np.inf).astype(np.float64)


def tune(
    run: Callable[[int, np.ndarray], np.ndarray],
    score: Callable[[int, np.ndarray], np.ndarray],
    seeds,
    lo: int,
    hi: int,
    *,
    step: int = 2,
    max_widen: int = 3,
) -> dict:
    """``run(seed, gammas) -> curves [G, P]``; ``score(seed, curves) -> [G]`` (lower is better).
    Returns the chosen exponent, every seed's curve and score at it, the exponents tried and how
    often the grid was widened."""
    curves: dict[int, dict[int, np.ndarray]] = {s: {} for s in seeds}
    scores: dict[int, dict[int, float]] = {s: {} for s in seeds}

    width = hi - lo + 1

    def add(exps):  # padded to the first grid's length: one compiled program per arm (G is a shape)
        padded = list(exps) + [exps[-1]] * (width - len(exps))
        for s in seeds:
            c = np.asarray(run(s, np.ldexp(1.0, np.asarray(padded))), np.float64)
            for k, row, sc in zip(exps, c, score(s, c)):
                curves[s][k], scores[s][k] = row, float(sc)

    add(list(range(lo, hi + 1)))
    widened = 0
    while True:
        ks = sorted(scores[seeds[0]])
        logs = np.array(
            [[np.log(v) if np.isfinite(v) and v > 0 else np.inf for v in (scores[s][k] for s in seeds)] for k in ks]
        )
        mean = logs.mean(axis=1)
        i = int(np.argmin(mean)) if np.isfinite(mean).any() else 0
        edge = "low" if i == 0 else "high" if i == len(ks) - 1 else None
        if not np.isfinite(mean).any():
            edge = "none finite"
        if edge is None or widened >= max_widen:
            break
        new = []
        if edge in ("low", "none finite"):
            new += list(range(ks[0] - step, ks[0]))
        if edge in ("high", "none finite"):
            new += list(range(ks[-1] + 1, ks[-1] + 1 + step))
        add(new)
        widened += 1
    k = ks[i]
    return dict(
        exp=int(k),
        edge=edge,
        widened=widened,
        exps=[int(ks[0]), int(ks[-1])],
        curves=np.stack([curves[s][k] for s in seeds]),
        scores=np.array([scores[s][k] for s in seeds]),
    )


def block_update_delays(plan: plans.UpdatePlan, S: int) -> np.ndarray:
    """int [K, S]: k - j, x^j the first iterate holding the version of block r that update k read
    (rpd's delay in block updates of the whole model, read off the plan's versions; for PipeDream
    the timeline's read times give the exact table, :func:`rpd.schedules.machinery.delays.delay_table`)."""
    block = np.asarray(plan.block)
    K = len(block)
    read = np.asarray(plan.read)
    out = np.empty((K, S), np.int64)
    for r in range(S):
        w = np.concatenate([[-1], np.flatnonzero(block == r)])  # version v was written by update w[v]
        out[:, r] = np.arange(K) - (w[read[:, r]] + 1)
    return out


def delay_units(plan: plans.UpdatePlan, S: int, tl: Timeline | None = None) -> dict:
    """A plan's delay in both units, steady state: rpd's block-update delay (max and mean of
    d_k^(r); from PipeDream's timeline ``tl`` its exact table over the steady-state updates, the
    delay law's ⌊S² − S/2⌋; otherwise :func:`block_update_delays` over the middle half of the
    updates) and each stage's delay in its own optimizer steps (the median own-block delay τ_s,
    :func:`rpd.train.corrections.block_delays`: PipeDream S − 1 − s, 2BW 1, synchronous 0)."""
    if tl is not None and tl.stash:  # PipeDream: its exact delay table
        mid = delays.delay_table(tl)[delays.steady_state_mask(tl)]
    else:
        d = block_update_delays(plan, S)
        K = d.shape[0]
        mid = d[K // 4 : max(K // 4 + 1, 3 * K // 4)]
    return {
        "block_updates_max": int(mid.max()),
        "block_updates_mean": round(float(mid.mean()), 3),
        "optimizer_steps_per_stage": list(corrections.block_delays(plan, S)),
    }
