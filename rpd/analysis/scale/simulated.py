"""κ's simulated source: the laws rpd's own studies E18 and E18 at fixed depth fitted,
κ − 1 = c · (N / 10⁶)^γ per method, optimizer and settings (docs/scale.md#simulated-source-e18).

The constants are copied from the committed ``paper_figures/e18_scale.json`` and
``paper_figures/e18_width.json`` (their ``"fits"``, read by :func:`fits_from_payload`), with each
figure's commit as provenance; tests/analysis/test_scale_simulated.py checks they equal those
files. A method no fit covers has no κ: :func:`simulated_kappa` returns None and the caller
refuses in one line. Beyond :data:`EXTRAPOLATION` × a fit's sizes κ is a range (held at the
nearest trained size, and the law read at N: docs/scale.md#beyond-the-trained-sizes-the-range-rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from rpd.validation import check_real

FIGURE = "paper_figures/e18_scale.json"
COMMIT: str | None = "6395e26"  # the commit that wrote FIGURE's fits below (6395e26f4c0258dac4f09148bef908116f3a2b34)
WIDTH_FIGURE = "paper_figures/e18_width.json"  # E18 at fixed depth, wider: fits with S in their settings
WIDTH_COMMIT: str | None = "cd48c9d"  # the commit of WIDTH_FIGURE below (made from a clean tree at 7397e1e)


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
    study: str = "e18_scale"  # the figure the fit came from: e18_scale or e18_width (fixed S)

    def kappa(self, N: float) -> float:
        return 1.0 + self.c * (check_real("N", N) / 1e6) ** self.gamma


# paper_figures/e18_scale.json at 6395e26 (E18 at paper size: 2.4k, 9.5k, 44k parameters), its fits with a law
SCALE_FITS: tuple[SimulatedFit, ...] = (
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


# paper_figures/e18_width.json at WIDTH_COMMIT (E18 at fixed depth: S = 4 at 19k, 113k, 422k parameters; S = 6
# at one width gives no law), its fits with a law: 2BW was censored (κ > 2) at every size, so it keeps E18's fit
WIDTH_FITS: tuple[SimulatedFit, ...] = (
    SimulatedFit(
        "pipedream",
        "adamw",
        (("S", 4),),
        c=0.44612636996723937,
        gamma=-0.20007882871981011,
        gamma_ci95=(-1.6427254477666013, 1.2425677903269812),
        n_sizes=3,
        N_range=(19296.0, 422400.0),
        study="e18_width",
    ),  # fmt: skip
    SimulatedFit(
        "pipemare",
        "adamw",
        (("S", 4),),
        c=0.48470778486403093,
        gamma=-0.18725383313101912,
        gamma_ci95=(-1.1614965204780148, 0.7869888542159766),
        n_sizes=3,
        N_range=(19296.0, 422400.0),
        study="e18_width",
    ),  # fmt: skip
)
FITS: tuple[SimulatedFit, ...] = SCALE_FITS + WIDTH_FITS

# The arms E18 at fixed depth censored at every size it trained (never reached the reference's loss
# within kappa_max·D): (method, optimizer, settings without S) -> (kappa_max, the sizes). Such a method
# has no fixed-depth law and is read from E18's fit, whose κ this measurement says may be too low.
WIDTH_CENSORED: dict[tuple[str, str, tuple[tuple[str, object], ...]], tuple[float, tuple[float, ...]]] = {
    ("pipedream_2bw", "adamw", (("M", 4),)): (2.0, (19296.0, 112896.0, 422400.0)),
}


def censored_from_payload(payload: Mapping) -> dict:
    """:data:`WIDTH_CENSORED` from E18 at fixed depth's JSON: the (method, optimizer, settings but
    S) whose every row at S = the most-trained S is censored (how the constant was made)."""
    rows: dict[tuple, list] = {}
    for r in payload["rows"]:
        settings = {k: v for k, v in r["settings"].items() if k != "S"}
        rows.setdefault((r["method"], r["optimizer"], settings_key(settings), r["settings"].get("S")), []).append(r)
    out = {}
    for (method, optimizer, key, _S), rs in rows.items():
        if len(rs) > 1 and all(r["censored"] for r in rs):
            out[(method, optimizer, key)] = (float(payload["config"]["kappa_max"]), tuple(float(r["N"]) for r in rs))
    return out


def settings_key(settings: Mapping[str, object]) -> tuple[tuple[str, object], ...]:
    return tuple(sorted(settings.items()))


def fits_from_payload(payload: Mapping, study: str = "e18_scale") -> tuple[SimulatedFit, ...]:
    """The usable fits of an E18 figure's JSON (its ``"fits"``: method, optimizer, settings, c,
    gamma, gamma_ci95, n_sizes, N_range) as :class:`SimulatedFit` records, in this package's names:
    E18's ``local_sgd`` is ``localsgd``; a pipeline p under the optimizer ``nesterov_async`` is the
    method ``nesterov_async`` with ``schedule=p``. A fit without a law (c or gamma None: fewer than
    two sizes with a finite κ > 1) is left out. ``study`` names the figure (``e18_scale``,
    ``e18_width``). How :data:`SCALE_FITS` and :data:`WIDTH_FITS` were made."""
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
                study=study,
            )
        )
    return tuple(out)


def _agrees(fit: SimulatedFit, settings: Mapping[str, object], skip: tuple[str, ...] = ()) -> bool:
    return all(settings.get(k, v) == v for k, v in fit.settings if k not in skip)


def find_fits(method: str, optimizer: str, settings: Mapping[str, object]) -> list[SimulatedFit]:
    """The fits of ``method`` under ``optimizer`` that agree with ``settings`` on every setting the
    fit held fixed (a setting the caller leaves out takes the fit's value). Where E18 at fixed depth
    has fits of the method (its settings but S agreeing), they alone: the one at the caller's S
    where it was measured, else the one with the most sizes (then the larger N)."""
    mine = [f for f in FITS if f.method == method and f.optimizer == optimizer]
    fixed = [f for f in mine if f.study == "e18_width" and _agrees(f, settings, skip=("S",))]
    if not fixed:
        return [f for f in mine if f.study != "e18_width" and _agrees(f, settings)]
    at_S = [f for f in fixed if dict(f.settings).get("S") == settings.get("S")]
    return at_S or [max(fixed, key=lambda f: (f.n_sizes, f.N_range[1]))]


# How far a law is read as it is beyond the sizes it was fitted on, as a factor in N. E18's LMs have
# 10³-10⁵ parameters; a power law fitted on two to three such sizes says nothing measured about 10⁹
# (E18's PipeDream fit read at 8B gives κ ≈ 215), so beyond this factor κ is a range: held at the
# nearest trained size (the trend stops) to the law read at N (the trend continues).
EXTRAPOLATION = 10.0


def beyond(fit: SimulatedFit, N: float) -> bool:
    lo, hi = fit.N_range
    return not lo / EXTRAPOLATION <= N <= hi * EXTRAPOLATION


class SimulatedKappa(NamedTuple):
    """κ from a simulated fit at N with its source; beyond :data:`EXTRAPOLATION` × the fit's sizes,
    ``kappa`` is held at the nearest trained size and ``kappa_trend`` is the law read at N (else None)."""

    kappa: float
    source: str
    kappa_trend: float | None = None


def simulated_kappa(method: str, N: float, optimizer: str, settings: Mapping[str, object]) -> SimulatedKappa | None:
    """κ from the simulated law at N and its source string (saying which settings the study did not
    vary or held, and how far N lies outside the sizes it trained), or None where no fit covers
    these settings; two fits that both agree (a distinguishing setting left out): a one-line
    ValueError naming them.

    Within [N_lo / X, X · N_hi] (X = :data:`EXTRAPOLATION`): κ = 1 + c (N / 10⁶)^γ. Beyond it, the
    range rule (docs/scale.md#beyond-the-trained-sizes-the-range-rule): ``kappa`` = 1 + c (N_b / 10⁶)^γ
    at the nearest trained size N_b (N_hi above, N_lo below), ``kappa_trend`` = 1 + c (N / 10⁶)^γ."""
    found = find_fits(method, optimizer, settings)
    if not found:
        return None
    if len(found) > 1:
        raise ValueError(
            f"{method} needs one of the settings E18 varied: {'; '.join(str(dict(f.settings)) for f in found)}"
        )
    (fit,) = found
    fixed = dict(fit.settings)
    notes = [f"{k}={v} as E18 trained" for k, v in fit.settings if k not in settings]
    if "S" in settings and "S" in fixed and settings["S"] != fixed["S"]:
        notes.append(f"S={fixed['S']} as E18 trained (asked S={settings['S']})")
    notes += [f"{k}={v} not varied by E18" for k, v in settings.items() if k not in fixed]
    lo, hi = fit.N_range
    trend = None
    if beyond(fit, N):
        near = hi if N > hi else lo
        notes.append(
            f"N={N:.3g} is {N / near if N > hi else near / N:.2g}x {'beyond the largest' if N > hi else 'below the smallest'}"
            f" size trained ({near:.3g}): kappa held at its value there {fit.kappa(near):.4g} (the trend stops)"
            f" to the law read at N {fit.kappa(N):.4g} (the trend continues)"
        )
        kappa, trend = fit.kappa(near), fit.kappa(N)
    else:
        kappa = fit.kappa(N)
        if not lo <= N <= hi:
            notes.append(f"N={N:.3g} extrapolated from {lo:.3g}-{hi:.3g}")
    censored = WIDTH_CENSORED.get((method, optimizer, tuple((k, v) for k, v in fit.settings if k != "S")))
    if fit.study != "e18_width" and censored is not None:
        kmax, sizes = censored
        notes.append(
            f"E18 at fixed depth censored it at every size it trained ({sizes[0]:.3g}-{sizes[-1]:.3g}: kappa > {kmax:g}),"
            f" so this kappa may be too low"
        )
    ci = (
        " (no interval)"
        if fit.gamma_ci95 is None
        else f", gamma 95% CI {fit.gamma_ci95[0]:.3g}..{fit.gamma_ci95[1]:.3g}"
    )
    figure, commit = (WIDTH_FIGURE, WIDTH_COMMIT) if fit.study == "e18_width" else (FIGURE, COMMIT)
    name = "E18 at fixed depth" if fit.study == "e18_width" else "E18"
    source = (
        f"rpd {name} ({figure} @ {commit}, char LM): kappa-1 = {fit.c:.3g}*(N/1e6)^{fit.gamma:.3g}"
        f"{ci}, {fit.n_sizes} sizes" + ("; " + ", ".join(notes) if notes else "")
    )
    return SimulatedKappa(kappa, source, trend)


def available(method: str) -> list[str]:
    """The (optimizer, settings) E18 fitted for ``method``, for an error message."""
    return [f"{f.optimizer} {dict(f.settings)}" for f in FITS if f.method == method]
