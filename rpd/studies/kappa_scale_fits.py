"""E18's fits (:mod:`rpd.studies.kappa_scale`): κ − 1 = c·(N/10⁶)^γ and the relative gap's power law
per (method, optimizer, settings) over the study's rows, and the DiLoCo development rows' gap and
its exponent in N (Charles et al. 2025, 35M and 550M at H = 30, D = 20N) beside them."""

from __future__ import annotations

import numpy as np

from rpd.analysis import kappa as K

# Charles et al. 2025 (arXiv 2503.09799), C4, H = 30, D = 20N, eval loss (the development rows of docs/results.md#e18-the-staleness-cost-against-model-size):
# N -> (data-parallel, DiLoCo M = 1, 2, 4, 8)
DILOCO_DEV = {35e6: (3.485, (3.482, 3.508, 3.554, 3.621)), 550e6: (2.653, (2.645, 2.657, 2.673, 2.698))}
DEV_M = (1, 2, 4, 8)


def _key(r: dict) -> tuple:
    return (r["method"], r["optimizer"], tuple(sorted(r["settings"].items())))


def fits(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """κ − 1 = c·(N/10⁶)^γ and relative gap = c·(N/10⁶)^γ per (method, optimizer, settings)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["status"] in ("ok", "all_diverged"):
            groups.setdefault(_key(r), []).append(r)
    kap, gap = [], []
    for (method, optimizer, st), mine in groups.items():
        N = [r["N"] for r in mine]
        f = K.fit_power(
            N, [r["kappa"] for r in mine], [r["censored"] for r in mine], [r.get("diverged", False) for r in mine]
        )
        head = dict(method=method, optimizer=optimizer, settings=dict(st))
        kap.append(dict(head, **f._asdict()))
        pos = [(r["N"], r["relative_gap"]) for r in mine if r["relative_gap"] is not None and r["relative_gap"] > 0]
        c, g, ci = K.power_law([p[0] for p in pos], [p[1] for p in pos]) if pos else (None, None, None)
        gap.append(dict(head, c=c, gamma=g, gamma_ci95=ci, n_sizes=len(pos), n_not_positive=len(mine) - len(pos)))
    return kap, gap


def dev_trend() -> dict:
    """The DiLoCo development rows' relative gap to data-parallel and its exponent in N, per M."""
    (n0, (dp0, m0)), (n1, (dp1, m1)) = sorted(DILOCO_DEV.items())
    gaps = {M: (a / dp0 - 1, b / dp1 - 1) for M, a, b in zip(DEV_M, m0, m1)}
    expo = K.diloco_dev_trend(gaps, n0, n1)
    return {str(M): dict(gap_35M=g[0], gap_550M=g[1], gamma=finite(expo[M])) for M, g in gaps.items()}


def finite(v) -> float | None:
    """v, or None where it is NaN / inf (the JSON says "no number", not "nan")."""
    return None if v is None or not np.isfinite(v) else float(v)
