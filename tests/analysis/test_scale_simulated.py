"""E18's simulated κ laws: the constants in rpd.analysis.scale.simulated equal the committed figures'
fits (E18 and E18 at fixed depth), a fit at the plan's S is chosen where one was measured, and the
range rule beyond 10x of the trained sizes, on numbers worked by hand."""

import json
from pathlib import Path

import pytest

from rpd.analysis.scale import effective, simulated

ROOT = Path(__file__).resolve().parents[2]
FIGURE = ROOT / simulated.FIGURE
WIDTH_FIGURE = ROOT / simulated.WIDTH_FIGURE


def test_constants_equal_the_committed_e18_fits():
    if not FIGURE.exists():
        pytest.skip(f"{simulated.FIGURE} not committed yet (study E18)")
    assert set(simulated.SCALE_FITS) == set(simulated.fits_from_payload(json.loads(FIGURE.read_text())))
    assert simulated.COMMIT is not None
    for fit in simulated.FITS:  # every fit is reachable by its config names
        assert fit.method in effective.SETTINGS, fit.method
        assert {k for k, _ in fit.settings} <= effective.SETTINGS[fit.method], (fit.method, fit.settings)


def test_a_fit_is_kappa_minus_one_a_power_of_n():
    fit = simulated.SimulatedFit(
        "pipedream", "adamw", (("S", 4),), c=0.5, gamma=-0.5, gamma_ci95=(-0.6, -0.4), n_sizes=4, N_range=(1e5, 4e6)
    )
    assert fit.kappa(4e6) == pytest.approx(1 + 0.5 / 2, rel=1e-12)  # (4e6/1e6)^-0.5 = 1/2


def test_a_figure_payload_reads_into_fits():
    payload = {
        "fits": [
            {"method": "local_sgd", "optimizer": "adamw", "settings": {"M": 2, "H": 2}, "c": 0.5, "gamma": -0.5,
             "gamma_ci95": [-0.6, -0.4], "n_sizes": 4, "N_range": [1e5, 4e6]},
            {"method": "pipedream", "optimizer": "nesterov_async", "settings": {}, "c": 0.25, "gamma": 0.5,
             "gamma_ci95": None, "n_sizes": 2, "N_range": [1e5, 4e6]},
            {"method": "pipemare", "optimizer": "sgd", "settings": {}, "c": None, "gamma": None,
             "gamma_ci95": None, "n_sizes": 1, "N_range": None},
        ]
    }  # fmt: skip
    local, nesterov = simulated.fits_from_payload(payload)  # the fit without a law is left out
    assert (local.method, local.settings, local.kappa(1e6)) == ("localsgd", (("H", 2), ("M", 2)), 1.5)
    assert (nesterov.method, nesterov.optimizer, nesterov.settings) == (
        "nesterov_async",
        "nesterov_async",
        (("schedule", "pipedream"),),
    )
    assert nesterov.kappa(4e6) == 1.5  # 1 + 0.25 · 4^0.5


def test_constants_equal_the_committed_fixed_depth_fits():
    if not WIDTH_FIGURE.exists():
        pytest.skip(f"{simulated.WIDTH_FIGURE} not committed yet (study e18_width)")
    payload = json.loads(WIDTH_FIGURE.read_text())
    assert set(simulated.WIDTH_FITS) == set(simulated.fits_from_payload(payload, study="e18_width"))
    assert simulated.WIDTH_COMMIT is not None and simulated.WIDTH_FITS
    assert all("S" in dict(f.settings) for f in simulated.WIDTH_FITS)  # every fixed-depth fit says its S
    assert simulated.WIDTH_CENSORED == simulated.censored_from_payload(payload)


def test_a_method_the_fixed_depth_study_censored_says_its_kappa_may_be_too_low(monkeypatch):
    # E18's fit gives κ = 1 + 2·(N/1e6)^0.5 = 1.2 at N = 1e4; the fixed-depth study saw κ > 2 everywhere.
    monkeypatch.setattr(simulated, "FITS", (_fit(),))
    monkeypatch.setattr(simulated, "WIDTH_CENSORED", {("pipedream", "adamw", ()): (2.0, (2e4, 4e5))})
    got = simulated.simulated_kappa("pipedream", 1e4, "adamw", {})
    assert got is not None and got.kappa == pytest.approx(1.2)
    assert "censored it at every size it trained (2e+04-4e+05: kappa > 2)" in got.source
    monkeypatch.setattr(simulated, "WIDTH_CENSORED", {})
    got = simulated.simulated_kappa("pipedream", 1e4, "adamw", {})
    assert got is not None and "censored" not in got.source


def _fit(S: int | None = None, study: str = "e18_scale", **kw):
    base = dict(c=2.0, gamma=0.5, gamma_ci95=None, n_sizes=2, N_range=(1e4, 1e5))
    return simulated.SimulatedFit("pipedream", "adamw", () if S is None else (("S", S),), **{**base, **kw}, study=study)


def test_the_range_rule_by_hand(monkeypatch):
    """κ − 1 = 2 (N/10⁶)^0.5 fitted on 10⁴..10⁵: read as it is up to 10⁶ (10x); beyond, κ held at
    10⁵, 1 + 2·0.1^0.5 = 1.632456, and the trend read at N = 10⁷, 1 + 2·10^0.5 = 7.324555; below
    10³ (10x under 10⁴), held at 10⁴, 1 + 2·0.01^0.5 = 1.2, trend at 10², 1 + 2·0.01 = 1.02."""
    monkeypatch.setattr(simulated, "FITS", (_fit(),))
    inside = simulated.simulated_kappa("pipedream", 5e5, "adamw", {})
    assert inside.kappa == pytest.approx(1 + 2 * 0.5**0.5, rel=1e-12) and inside.kappa_trend is None
    assert "extrapolated from 1e+04-1e+05" in inside.source
    edge = simulated.simulated_kappa("pipedream", 1e6, "adamw", {})  # 10x exactly: still read
    assert edge.kappa == pytest.approx(3.0, rel=1e-12) and edge.kappa_trend is None
    far = simulated.simulated_kappa("pipedream", 1e7, "adamw", {})
    assert far.kappa == pytest.approx(1.632456, abs=1e-6) and far.kappa_trend == pytest.approx(7.324555, abs=1e-6)
    assert "N=1e+07 is 1e+02x beyond the largest size trained (1e+05)" in far.source
    small = simulated.simulated_kappa("pipedream", 1e2, "adamw", {})
    assert (small.kappa, small.kappa_trend) == pytest.approx((1.2, 1.02), rel=1e-12)
    assert "below the smallest size trained (1e+04)" in small.source


def test_the_range_reaches_tokens_and_the_loss(monkeypatch):
    """tokens_to_loss beyond the guard: D = κ_held · tokens_sync, tokens_trend = κ_trend · tokens_sync."""
    monkeypatch.setattr(simulated, "FITS", (_fit(),))
    t = effective.tokens_to_loss("pipedream", 1e7, 4.0, optimizer="adamw")
    # Chinchilla at N = 10⁷: tokens_sync = (410.7 / (4 − 1.69 − 406.4 / 10⁷^0.34))^(1 / 0.28)
    sync = (410.7 / (4.0 - 1.69 - 406.4 / 1e7**0.34)) ** (1 / 0.28)
    assert t.tokens_sync == pytest.approx(sync, rel=1e-9)
    assert t.D == pytest.approx(1.632456 * sync, rel=1e-6) and t.tokens_trend == pytest.approx(
        7.324555 * sync, rel=1e-6
    )


def test_the_fit_at_the_plans_S_else_the_one_with_most_sizes(monkeypatch):
    """Fixed-depth fits at S = 4 (3 sizes) and S = 6 (2 sizes) come before E18's depth-confounded
    one; S = 6 asked: the S = 6 fit; S = 32 asked or none: the S = 4 fit, the source saying so."""
    s4 = _fit(4, "e18_width", c=1.0, n_sizes=3)
    s6 = _fit(6, "e18_width", c=3.0)
    monkeypatch.setattr(simulated, "FITS", (_fit(c=5.0), s4, s6))
    assert simulated.simulated_kappa("pipedream", 1e5, "adamw", {"S": 6}).kappa == pytest.approx(1 + 3 * 0.1**0.5)
    got = simulated.simulated_kappa("pipedream", 1e5, "adamw", {"S": 32})
    assert got.kappa == pytest.approx(1 + 0.1**0.5) and "S=4 as E18 trained (asked S=32)" in got.source
    got = simulated.simulated_kappa("pipedream", 1e5, "adamw", {})
    assert got.kappa == pytest.approx(1 + 0.1**0.5) and "S=4 as E18 trained" in got.source
    assert "rpd E18 at fixed depth" in got.source
