"""E18's simulated κ law: the constants in rpd.analysis.scale.simulated equal the committed figure's fits."""

import json
from pathlib import Path

import pytest

from rpd.analysis.scale import simulated

FIGURE = Path(__file__).resolve().parents[2] / simulated.FIGURE


def test_constants_equal_the_committed_e18_fits():
    if not FIGURE.exists():
        pytest.skip(f"{simulated.FIGURE} not committed yet (study E18)")
    fits = json.loads(FIGURE.read_text())["fits"]
    want = {
        (f["method"], f["optimizer"], simulated.settings_key(f["settings"])): (
            f["c"],
            f["gamma"],
            tuple(f["gamma_ci95"]),
        )
        for f in fits
    }
    have = {(f.method, f.optimizer, f.settings): (f.c, f.gamma, f.gamma_ci95) for f in simulated.FITS}
    assert have == want
    assert simulated.COMMIT is not None


def test_a_fit_is_kappa_minus_one_a_power_of_n():
    fit = simulated.SimulatedFit(
        "pipedream", "adamw", (("S", 4),), c=0.5, gamma=-0.5, gamma_ci95=(-0.6, -0.4), n_sizes=4, N_range=(1e5, 4e6)
    )
    assert fit.kappa(4e6) == pytest.approx(1 + 0.5 / 2, rel=1e-12)  # (4e6/1e6)^-0.5 = 1/2
