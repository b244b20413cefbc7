"""κ's simulated source: the law rpd's own study E18 fitted, κ − 1 = c · (N / 10⁶)^γ per method,
optimizer and settings (docs/scale.md#simulated-source-e18).

The constants are copied from the committed ``paper_figures/e18_scale.json`` (its ``"fits"``, read
by :func:`fits_from_payload`), with the figure's commit as provenance; tests/analysis/test_scale_simulated.py
checks they equal that file. Until E18 is committed, :data:`FITS` is empty and a method with no
published rows has no κ: :func:`simulated_kappa` returns None and the caller refuses in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rpd.validation import check_real

FIGURE = "paper_figures/e18_scale.json"
COMMIT: str | None = "6395e26"  # the commit that wrote FIGURE's fits below (6395e26f4c0258dac4f09148bef908116f3a2b34)


@dataclass(frozen=True)
class SimulatedFit:
    """One E18 fit: κ − 1 = c · (N / 10⁶)^gamma for ``method`` under ``optimizer`` at ``settings``."""

    method: str  # rpd.analysis.scale's method name (E18's local_sgd is localsgd here)
    optimizer: str
    settings: tuple[tuple[str, object], ...]  # sorted (name, value) pairs: what E18 held fixed
    c: float
    gamma: float
    gamma_ci95: tuple[float, float] | None  # None with fewer than 3 sizes
    n_sizes: int
    N_range: tuple[float, float]  # parameters, smallest and largest size fitted

    def kappa(self, N: float) -> float:
        return 1.0 + self.c * (check_real("N", N) / 1e6) ** self.gamma


# paper_figures/e18_scale.json at 6395e26 (E18 at paper size: 2.4k, 9.5k, 44k parameters), its fits with a law
FITS: tuple[SimulatedFit, ...] = (
    SimulatedFit(
        "pipedream",
        "adamw",
        (),
        c=2.858683546156943,
        gamma=0.4799664635387576,
        gamma_ci95=None,
        n_sizes=2,
        N_range=(9536.0, 44064.0),
    ),  # fmt: skip
    SimulatedFit(
        "pipedream_2bw",
        "adamw",
        (("M", 4),),
        c=0.7473929594246432,
        gamma=-0.015158680521845042,
        gamma_ci95=None,
        n_sizes=2,
        N_range=(9536.0, 44064.0),
    ),  # fmt: skip
    SimulatedFit(
        "pipemare",
        "adamw",
        (),
        c=2.733217317597903,
        gamma=0.4691403683316865,
        gamma_ci95=None,
        n_sizes=2,
        N_range=(9536.0, 44064.0),
    ),  # fmt: skip
    SimulatedFit(
        "localsgd",
        "adamw",
        (("H", 8), ("M", 4)),
        c=2.273028449637357,
        gamma=0.3532068151214914,
        gamma_ci95=(-2.543113289118168, 3.2495269193611507),
        n_sizes=3,
        N_range=(2360.0, 44064.0),
    ),  # fmt: skip
    SimulatedFit(
        "pipedream",
        "muon",
        (),
        c=3.1949248196909963,
        gamma=0.49988611260984117,
        gamma_ci95=None,
        n_sizes=2,
        N_range=(9536.0, 44064.0),
    ),  # fmt: skip
)


def settings_key(settings: Mapping[str, object]) -> tuple[tuple[str, object], ...]:
    return tuple(sorted(settings.items()))


def fits_from_payload(payload: Mapping) -> tuple[SimulatedFit, ...]:
    """The usable fits of an E18 figure's JSON (its ``"fits"``: method, optimizer, settings, c,
    gamma, gamma_ci95, n_sizes, N_range) as :class:`SimulatedFit` records, in this package's names:
    E18's ``local_sgd`` is ``localsgd``; a pipeline p under the optimizer ``nesterov_async`` is the
    method ``nesterov_async`` with ``schedule=p``. A fit without a law (c or gamma None: fewer than
    two sizes with a finite κ > 1) is left out. How :data:`FITS` was made."""
    out = []
    for f in payload["fits"]:
        if f["c"] is None or f["gamma"] is None:
            continue
        method, settings = ("localsgd" if f["method"] == "local_sgd" else f["method"]), dict(f["settings"])
        if f["optimizer"] == "nesterov_async":
            method, settings = "nesterov_async", {**settings, "schedule": f["method"]}
        ci = f.get("gamma_ci95")
        out.append(
            SimulatedFit(
                method=method,
                optimizer=f["optimizer"],
                settings=settings_key(settings),
                c=float(f["c"]),
                gamma=float(f["gamma"]),
                gamma_ci95=None if ci is None else (float(ci[0]), float(ci[1])),
                n_sizes=int(f["n_sizes"]),
                N_range=(float(f["N_range"][0]), float(f["N_range"][1])),
            )
        )
    return tuple(out)


def find_fits(method: str, optimizer: str, settings: Mapping[str, object]) -> list[SimulatedFit]:
    """E18's fits of ``method`` under ``optimizer`` that agree with ``settings`` on every setting the
    fit held fixed (a setting the caller leaves out takes the fit's value)."""
    return [
        f
        for f in FITS
        if f.method == method and f.optimizer == optimizer and all(settings.get(k, v) == v for k, v in f.settings)
    ]


# How far E18's law is read beyond the sizes it trained, as a factor in N. E18's LMs have 2.4k-44k
# parameters; a power law fitted on two or three such sizes says nothing about 10⁹ (PipeDream's fit
# read at 8B gives κ ≈ 215), so beyond this factor the simulated source gives no κ and says why.
EXTRAPOLATION = 10.0


def beyond(fit: SimulatedFit, N: float) -> bool:
    lo, hi = fit.N_range
    return not lo / EXTRAPOLATION <= N <= hi * EXTRAPOLATION


def coverage(method: str, N: float, optimizer: str, settings: Mapping[str, object]) -> str | None:
    """Why E18's fit of these settings gives no κ at N (N beyond :data:`EXTRAPOLATION` × its
    sizes), or None."""
    for fit in find_fits(method, optimizer, settings):
        if beyond(fit, N):
            lo, hi = fit.N_range
            return (
                f"rpd's E18 fits {method} on N = {lo:.3g}..{hi:.3g} only; N = {N:.3g} is beyond "
                f"{EXTRAPOLATION:g}x of it"
            )
    return None


def simulated_kappa(method: str, N: float, optimizer: str, settings: Mapping[str, object]) -> tuple[float, str] | None:
    """κ from E18's law at N and its source string (saying which settings E18 did not vary, and
    when N is outside the sizes it trained), or None where E18 has no fit for these settings or N
    lies beyond :data:`EXTRAPOLATION` × its sizes (:func:`coverage` says so); two fits that both
    agree (a distinguishing setting left out): a one-line ValueError naming them."""
    found = find_fits(method, optimizer, settings)
    if not found or all(beyond(f, N) for f in found):
        return None
    found = [f for f in found if not beyond(f, N)]
    if len(found) > 1:
        raise ValueError(
            f"{method} needs one of the settings E18 varied: {'; '.join(str(dict(f.settings)) for f in found)}"
        )
    (fit,) = found
    fixed = dict(fit.settings)
    notes = [f"{k}={v} as E18 trained" for k, v in fit.settings if k not in settings]
    notes += [f"{k}={v} not varied by E18" for k, v in settings.items() if k not in fixed]
    lo, hi = fit.N_range
    if not lo <= N <= hi:
        notes.append(f"N={N:.3g} extrapolated from {lo:.3g}-{hi:.3g}")
    ci = (
        " (no interval)"
        if fit.gamma_ci95 is None
        else f", gamma 95% CI {fit.gamma_ci95[0]:.3g}..{fit.gamma_ci95[1]:.3g}"
    )
    source = (
        f"rpd E18 ({FIGURE} @ {COMMIT}, char LM): kappa-1 = {fit.c:.3g}*(N/1e6)^{fit.gamma:.3g}"
        f"{ci}, {fit.n_sizes} sizes" + ("; " + ", ".join(notes) if notes else "")
    )
    return fit.kappa(N), source


def available(method: str) -> list[str]:
    """The (optimizer, settings) E18 fitted for ``method``, for an error message."""
    return [f"{f.optimizer} {dict(f.settings)}" for f in FITS if f.method == method]
