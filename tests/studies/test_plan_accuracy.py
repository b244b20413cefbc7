"""The plan's accuracy study (rpd.studies.plan_accuracy): the published metric recomputed from
the predicted iteration time, and the presets' two parameters at a local optimum of the mean error."""

from __future__ import annotations

import numpy as np
import pytest

from rpd.model import hardware
from rpd.model.topology import place
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


@pytest.mark.parametrize("k", range(len(P.H100)))
def test_the_least_compute_bound_holds_for_the_plans_own_steps(k):
    """Fed the plan's own predicted step, the bound is at most the compute rate the plan's first
    rank actually ran at: it is a lower bound, not an estimate (the plan's rank 0 hides at most
    one microbatch's compute under its reduce-scatter and gather)."""
    from rpd import registry
    from rpd.model.plan import staged

    hw = hardware.preset("h100_80g")
    row = P.H100[k]
    r = P.predict_h100(hw, row)
    model = P._h100_model(row)
    TP, PP = row[4], row[5]
    st, costs, tick, _ = staged(model, hw, registry.timeline("1f1b", PP, r["M"], r["M"], None, 0, None))
    # the timeline's own seconds (whole ticks) of one microbatch on the first rank
    rate = st.model_flops[0] / ((costs.F[0] + costs.I[0] + costs.W[0]) * tick) / hw.peak_flops
    first = P.first_stage(model, hw, PP)
    bound = P.least_compute_mfu(first, hw, r["M"], P.H100_DP, place(hw, TP, P.H100_DP, PP), r["step_time_s"])
    assert 0 < bound <= rate * (1 + 1e-9)


def test_the_least_compute_bound_by_hand():
    """The 32B row (TP 8, PP 1, M 4; one DP member per node, a 50 GB/s port): its fp32 gradients
    reduce-scattered and its bf16 weights gathered over 48 ranks, 3/4 of its FLOPs outside the
    one microbatch that can hide them."""
    hw = hardware.preset("h100_80g")
    row = P.H100[3]
    model = P._h100_model(row)
    params = sum(x.params for x in model.layers)  # one stage: the tied head is the embedding, held once
    flops = 4 * model.model_flops
    step = 1.0
    moved = 6.0 * params * 47 / 48  # (4 + 2) bytes, (D-1)/D of them each way
    comm = moved / 50e9 + 2 * hw.collective_link(1, 48)[1]
    want = flops * 3 / 4 / (step - comm) / 989e12
    first, where = P.first_stage(model, hw, 1), place(hw, 8, 48, 1)
    assert P.least_compute_mfu(first, hw, 4, 48, where, step) == pytest.approx(want, rel=1e-9)
    assert P.least_compute_mfu(first, hw, 4, 48, where, comm / 2) == float("inf")
