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
            {"method": "diloco", "optimizer": "adamw", "settings": {"M": 2, "H": 30}, "c": 0.5, "gamma": -0.5,
             "gamma_ci95": [-0.6, -0.4], "n_sizes": 4, "N_range": [1e5, 4e6]},
        ]
    }  # fmt: skip
    (fit,) = simulated.fits_from_payload(payload)
    assert fit.settings == (("H", 30), ("M", 2)) and fit.kappa(1e6) == 1.5
