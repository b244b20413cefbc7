"""The plan's accuracy study (rpd.studies.plan_accuracy): the published metric recomputed from
the predicted iteration time, and the presets' two parameters at a local optimum of the mean error."""

from __future__ import annotations

import numpy as np
import pytest

from rpd.model import hardware
from rpd.studies import plan_accuracy as P


def test_the_metrics_come_from_the_predicted_time():
    hw = hardware.preset("a100_80g")
    name, h, L, a, TP, PP, v, mbs, gbs, gpus, _ = P.SC21[4]
    r = P.predict_sc21(hw, P.SC21[4])
    flops = 96.0 * gbs * 2048 * L * h * h * (1 + 2048 / (6 * h) + 51200 / (16 * L * h))
    assert r["predicted"] == pytest.approx(flops / (r["step_time_s"] * gpus) / 1e12, rel=1e-12)
    assert (r["DP"], r["M"]) == (gpus // (TP * PP), gbs // (gpus // (TP * PP) * mbs))
    out = P.run(P.Config(presets=("a100_80g",)))
    err = np.abs([x["error"] for x in out.table])
    assert out.summary["a100_80g"]["mean_abs_error"] == pytest.approx(err.mean())
    assert out.summary["a100_80g"]["max_abs_error"] == err.max()


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["a100_80g", "h100_80g"])
def test_the_fitted_pair_is_a_local_optimum(preset):
    """One (gemm_efficiency, traffic) per preset, the fit's: no neighbour at the fit's last steps is better."""
    g, k = hardware.DGX_FIT[preset]
    here = P.mean_error(preset, g, k)
    for dg, dk in ((0.00625, 0), (-0.00625, 0), (0, 0.125), (0, -0.125)):
        assert here <= P.mean_error(preset, round(g + dg, 5), k + dk) + 1e-12
