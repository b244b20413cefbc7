"""The plan's accuracy study (rpd.studies.plan_accuracy): the development set's published
figures turned into step times, leave-one-source-out folds that never see the source they
predict, and the least-compute bound."""

from __future__ import annotations

import pytest

from rpd.model import hardware
from rpd.model.topology import place
from rpd.studies import plan_accuracy as P
from rpd.studies import plan_devset as D


def test_published_figures_become_step_times():
    sc21 = D.runs()[4]  # 39B: TP 8, PP 2, 512 GPUs, 138 TFLOP/s per GPU counting recomputation
    h, L = 8192, 48
    flops = 96.0 * 1536 * 2048 * L * h * h * (1 + 2048 / (6 * h) + 51200 / (16 * L * h))
    assert sc21.step_s == pytest.approx(flops / (138e12 * 512), rel=1e-12)
    assert (sc21.DP, sc21.M) == (32, 1536 // (32 * 4))
    nemo = [r for r in D.runs() if r.source == "nemo_nemotron4_340b"]
    assert [(r.gpus, r.DP, r.M, r.step_s) for r in nemo][0] == (128, 2, 16, 4.61)
    assert all(r.grad_bytes == 2 and r.overlap.p2p for r in nemo)  # grad_sync_dtype: bf16, p2p overlapped


def test_a_fold_never_fits_on_the_source_it_predicts(monkeypatch):
    seen: list[set] = []
    monkeypatch.setattr(P, "fit", lambda ks: seen.append({D.runs()[k].source for k in ks}) or (0.6, 2.0))
    folds = P.folds(("sc21", "megatron_h100", "nemo_nemotron4_15b"))
    assert set(folds) == {"sc21", "megatron_h100", "nemo_nemotron4_15b"}
    left = [s for s in folds for _ in folds[s]]  # each fold fits each preset once, in order
    for out, used in zip(left, seen):
        assert out not in used
    # with SC'21 out the A100 preset has no run: it takes the H100 sources' fit
    assert seen[0] == {"megatron_h100", "nemo_nemotron4_15b"}


def test_the_study_reports_the_left_out_errors():
    out = P.run(P.Config(sources=("nemo_nemotron4_15b", "megatron_h100")))
    errs = [abs(r["error"]) for r in out.table]
    assert out.summary["cross_validated"]["mean_abs_error"] == pytest.approx(sum(errs) / len(errs))
    for r in out.table:
        assert r["error"] == pytest.approx(r["predicted_step_s"] / r["published_step_s"] - 1)
        assert r["fitted_without"] == r["source"]


@pytest.mark.parametrize("k", range(9))
def test_the_least_compute_bound_holds_for_the_plans_own_steps(k):
    """Fed the plan's own predicted step, the bound is at most the compute rate the plan's first
    rank ran at in its timeline (whole ticks): a lower bound, not an estimate."""
    from rpd import registry
    from rpd.model.plan import staged

    hw = hardware.preset("h100_80g")
    run = [r for r in D.runs() if r.source == "megatron_h100"][k]
    r = P.plan_run(run, hw)
    model = P.model_of(run)
    st, costs, tick, _ = staged(model, hw, registry.timeline("1f1b", run.PP, run.M, run.M, None, 0, None))
    rate = st.model_flops[0] / ((costs.F[0] + costs.I[0] + costs.W[0]) * tick) / hw.peak_flops
    first = P.first_stage(model, hw, run.PP)
    where = place(hw, run.TP, run.DP, run.PP)
    bound = P.least_compute_mfu(first, hw, run.M, run.DP, where, r.step_time_s, run.grad_bytes)
    assert 0 < bound <= rate * (1 + 1e-9)


def test_the_least_compute_bound_by_hand():
    """The 32B row (TP 8, PP 1, M 4; one DP member per node, a 50 GB/s port): fp32 gradients
    reduce-scattered and bf16 weights gathered over 48 ranks, 3/4 of its FLOPs outside the one
    microbatch that can hide them; bf16 gradients move 4 bytes a value in place of 6."""
    hw = hardware.preset("h100_80g")
    run = [r for r in D.runs() if r.source == "megatron_h100"][3]
    model = P.model_of(run)
    params = sum(x.params for x in model.layers)
    flops = 4 * model.model_flops
    first, where = P.first_stage(model, hw, 1), place(hw, 8, 48, 1)
    for gb in (4, 2):
        comm = (gb + 2) * params * 47 / 48 / 50e9 + 2 * hw.collective_link(1, 48)[1]
        want = flops * 3 / 4 / (1.0 - comm) / 989e12
        assert P.least_compute_mfu(first, hw, 4, 48, where, 1.0, gb) == pytest.approx(want, rel=1e-9)
    assert P.least_compute_mfu(first, hw, 4, 48, where, 0.1) == float("inf")


@pytest.mark.slow
def test_the_presets_carry_the_fit_on_every_source():
    for preset, (g, k) in hardware.DGX_FIT.items():
        ks = [i for i, r in enumerate(D.runs()) if r.preset == preset]
        assert P.fit(ks) == (g, k)
