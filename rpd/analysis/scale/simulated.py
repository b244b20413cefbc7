"""κ's simulated source: the law rpd's own study E18 fitted, κ − 1 = c · (N / 10⁶)^γ per method,
optimizer and settings (docs/scale.md#simulated-source-e18).

The constants are copied from the committed ``paper_figures/e18_scale.json`` (its ``"fits"``),
with the figure's commit as provenance; tests/analysis/test_scale_simulated.py checks they equal
that file. Until E18 is committed, :data:`FITS` is empty and a method with no published rows has
no κ: :func:`simulated_kappa` returns None and the caller refuses in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rpd.validation import check_real

FIGURE = "paper_figures/e18_scale.json"
COMMIT: str | None = None  # the commit that wrote FIGURE's fits below; None: E18 not yet committed


@dataclass(frozen=True)
class SimulatedFit:
    """One E18 fit: κ − 1 = c · (N / 10⁶)^gamma for ``method`` under ``optimizer`` at ``settings``."""

    method: str
    optimizer: str
    settings: tuple[tuple[str, object], ...]  # sorted (name, value) pairs, the study's config names
    c: float
    gamma: float
    gamma_ci95: tuple[float, float]
    n_sizes: int
    N_range: tuple[float, float]  # parameters, smallest and largest size trained

    def kappa(self, N: float) -> float:
        return 1.0 + self.c * (check_real("N", N) / 1e6) ** self.gamma


FITS: tuple[SimulatedFit, ...] = ()


def fits_from_payload(payload: Mapping) -> tuple[SimulatedFit, ...]:
    """The fits of an E18 figure's JSON (its ``"fits"``: method, optimizer, settings, c, gamma,
    gamma_ci95, n_sizes, N_range), as :class:`SimulatedFit` records; how :data:`FITS` was made."""
    return tuple(
        SimulatedFit(
            method=f["method"],
            optimizer=f["optimizer"],
            settings=settings_key(f["settings"]),
            c=float(f["c"]),
            gamma=float(f["gamma"]),
            gamma_ci95=(float(f["gamma_ci95"][0]), float(f["gamma_ci95"][1])),
            n_sizes=int(f["n_sizes"]),
            N_range=(float(f["N_range"][0]), float(f["N_range"][1])),
        )
        for f in payload["fits"]
    )


def settings_key(settings: Mapping[str, object]) -> tuple[tuple[str, object], ...]:
    return tuple(sorted(settings.items()))


def find_fit(method: str, optimizer: str, settings: Mapping[str, object]) -> SimulatedFit | None:
    """The E18 fit of ``method`` under ``optimizer`` at exactly ``settings``, or None."""
    key = settings_key(settings)
    for fit in FITS:
        if fit.method == method and fit.optimizer == optimizer and fit.settings == key:
            return fit
    return None


def simulated_kappa(method: str, N: float, optimizer: str, settings: Mapping[str, object]) -> tuple[float, str] | None:
    """κ from E18's law at N and its source string (saying when N is outside the sizes trained),
    or None where E18 has no fit for these settings."""
    fit = find_fit(method, optimizer, settings)
    if fit is None:
        return None
    lo, hi = fit.N_range
    where = "" if lo <= N <= hi else f"; N={N:.3g} extrapolated from {lo:.3g}-{hi:.3g}"
    source = (
        f"rpd E18 ({FIGURE} @ {COMMIT}): kappa-1 = {fit.c:.3g}*(N/1e6)^{fit.gamma:.3g} "
        f"(gamma 95% CI {fit.gamma_ci95[0]:.3g}..{fit.gamma_ci95[1]:.3g}, {fit.n_sizes} sizes, char LM){where}"
    )
    return fit.kappa(N), source


def available(method: str) -> list[str]:
    """The (optimizer, settings) E18 fitted for ``method``, for an error message."""
    return [f"{f.optimizer} {dict(f.settings)}" for f in FITS if f.method == method]
