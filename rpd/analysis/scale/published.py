"""κ's published source: DiLoCo's relative loss gap from the development rows
(docs/scale.md#published-source-diloco).

Rows (eval loss on C4, data-parallel reference | DiLoCo with M replicas, H = 30, D = 20N,
AdamW inner, Nesterov outer): Charles et al. 2025, "Scaling Laws for DiLoCo" (arXiv 2503.09799),
35M and 550M at M = 1, 2, 4, 8. The relative gap g = (L_DiLoCo − L_DP) / L_DP is fitted by

    g(N, M) = g₁ + c · (N / 10⁸)^(−a) · (M^b − 1),

four constants shared by every M, least squares in percentage points over the 8 rows: g₁ the
M = 1 term (one replica: the outer Nesterov step alone, no averaging), constant in N because two
rows cannot tell a trend in it from noise of ±0.1 pp; the replicas' cost a power of N (it
shrinks with size in both rows) times M^b − 1 (zero at one replica, a power of M as in
scaling-law fits). H enters only as the rows' H = 30: a DiLoCo at another H has no published
source here except H = 500, M = 8 (Douillard et al. 2023, "DiLoCo", arXiv 2311.08105, 150M on C4:
perplexity 15.02 against data-parallel with 8× batch 15.30, equal tokens), a single row used as
is at every N (its run starts from a pretrained model and trains far past 20N tokens, so it is
not the same protocol as the H = 30 rows; docs/scale.md says so).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from rpd.validation import check_real

N0 = 1e8  # the fit's reference size (parameters): c is the replicas' cost at 100M
# (N, M, L_DP, L_DiLoCo): Charles et al. 2025, H = 30, D = 20N.
CHARLES_ROWS: tuple[tuple[float, int, float, float], ...] = (
    (35e6, 1, 3.485, 3.482),
    (35e6, 2, 3.485, 3.508),
    (35e6, 4, 3.485, 3.554),
    (35e6, 8, 3.485, 3.621),
    (550e6, 1, 2.653, 2.645),
    (550e6, 2, 2.653, 2.657),
    (550e6, 4, 2.653, 2.673),
    (550e6, 8, 2.653, 2.698),
)
CHARLES_H = 30
CHARLES_TOKENS_PER_PARAM = 20.0
CHARLES_SOURCE = "Charles et al. 2025 (DiLoCo scaling laws), 35M/550M rows at H=30, D=20N, fitted (docs/scale.md)"
# Douillard et al. 2023: 150M, 8 workers, H = 500; perplexities, DP with 8x batch.
DOUILLARD_N, DOUILLARD_M, DOUILLARD_H = 150e6, 8, 500
DOUILLARD_PPL_DP, DOUILLARD_PPL_DILOCO = 15.30, 15.02
DOUILLARD_SOURCE = "Douillard et al. 2023 (DiLoCo), one row: 150M, M=8, H=500 (ln ppl 15.02 vs 15.30)"


@dataclass(frozen=True)
class DilocoLaw:
    """g(N, M) = g1 + c · (N / N0)^(−a) · (M^b − 1), fitted on :data:`CHARLES_ROWS`."""

    g1: float  # the M = 1 gap (fraction of L_DP)
    c: float  # the replicas' cost at N0 (fraction)
    a: float  # its power of N
    b: float  # power of M
    max_residual_pp: float  # the largest |fit − row| over the 8 rows, percentage points

    def gap(self, N: float, M: int) -> float:
        return self.g1 + self.c * (N / N0) ** (-self.a) * (M**self.b - 1.0)


def row_gaps() -> list[tuple[float, int, float]]:
    """(N, M, g) of the development rows: g = (L_DiLoCo − L_DP) / L_DP."""
    return [(N, M, (L_m - L_dp) / L_dp) for N, M, L_dp, L_m in CHARLES_ROWS]


@functools.cache
def diloco_law() -> DilocoLaw:
    """The fit of :class:`DilocoLaw` to the 8 rows (least squares in percentage points, from
    g1 = 0, c = 1 pp, a = 0.3, b = 0.8; deterministic)."""
    rows = np.array(row_gaps())
    N, M, g_pp = rows[:, 0], rows[:, 1], 100.0 * rows[:, 2]

    def residual(p: np.ndarray) -> np.ndarray:
        return p[0] + p[1] * (N / N0) ** (-p[2]) * (M ** p[3] - 1.0) - g_pp

    fit = least_squares(residual, np.array([0.0, 1.0, 0.3, 0.8]), xtol=1e-12, ftol=1e-12)
    g1, c, a, b = (float(v) for v in fit.x)
    return DilocoLaw(g1 / 100.0, c / 100.0, a, b, float(np.max(np.abs(fit.fun))))


def douillard_gap() -> float:
    """g of the 2023 row: ln(15.02) / ln(15.30) − 1 (loss is the log of perplexity)."""
    return math.log(DOUILLARD_PPL_DILOCO) / math.log(DOUILLARD_PPL_DP) - 1.0


def diloco_gap(N: float, D: float, M: int, H: int) -> tuple[float, str] | None:
    """DiLoCo's published relative gap at (N, D, M, H) and its source, or None where no published
    row covers H (and M). The source says what is extrapolated (N outside 35M–550M, D ≠ 20N)."""
    N, D = check_real("N", N), check_real("D", D)
    if H == CHARLES_H:
        notes = []
        if not 35e6 <= N <= 550e6:
            notes.append(f"N={N:.3g} extrapolated from 35M-550M")
        if not math.isclose(D / N, CHARLES_TOKENS_PER_PARAM, rel_tol=1e-6):
            notes.append(f"D/N={D / N:.3g} extrapolated from 20")
        return diloco_law().gap(N, M), CHARLES_SOURCE + ("; " + ", ".join(notes) if notes else "")
    if H == DOUILLARD_H and M == DOUILLARD_M:
        return douillard_gap(), DOUILLARD_SOURCE + f"; used as is at N={N:.3g}"
    return None
