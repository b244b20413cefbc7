"""E18's simulated κ law: the constants in rpd.analysis.scale.simulated equal the committed figure's fits."""

import json
from pathlib import Path

import pytest

from rpd.analysis.scale import effective, simulated

FIGURE = Path(__file__).resolve().parents[2] / simulated.FIGURE


def test_constants_equal_the_committed_e18_fits():
    if not FIGURE.exists():
        pytest.skip(f"{simulated.FIGURE} not committed yet (study E18)")
    assert set(simulated.FITS) == set(simulated.fits_from_payload(json.loads(FIGURE.read_text())))
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


def test_a_fit_gives_no_kappa_beyond_ten_times_its_sizes(monkeypatch):
    """E18's law is read at most a factor EXTRAPOLATION = 10 beyond the sizes it trained (PipeDream's
    fit on 2.4k-44k parameters read at 8B gave κ ≈ 215): beyond it, no κ and a reason naming the range."""
    fit = simulated.SimulatedFit(
        "pipedream", "adamw", (), c=0.5, gamma=0.5, gamma_ci95=None, n_sizes=2, N_range=(1e4, 4e4)
    )
    monkeypatch.setattr(simulated, "FITS", (fit,))
    kappa, _ = simulated.simulated_kappa("pipedream", 4e5, "adamw", {})  # 10 x the largest: still read
    assert kappa == pytest.approx(1 + 0.5 * 0.4**0.5, rel=1e-12)
    assert simulated.simulated_kappa("pipedream", 4.01e5, "adamw", {}) is None
    assert simulated.simulated_kappa("pipedream", 0.99e3, "adamw", {}) is None
    with pytest.raises(ValueError, match=r"fits pipedream on N = 1e\+04\.\.4e\+04 only; N = 8e\+09 is beyond 10x"):
        effective.effective_tokens("pipedream", 8e9, 1.6e11, optimizer="adamw")
