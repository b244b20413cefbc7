"""The plan's accuracy study (rpd.studies.plan_accuracy): the development set's published
figures turned into step times, leave-one-source-out folds that never see the source they
predict, and the least-compute bound."""

from __future__ import annotations

import dataclasses
import types

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


def test_the_nemo_runs_carry_their_benchmarks_own_settings():
    """dgxc-benchmarking 24.11.1's launch files: gradients reduced in bf16 everywhere; 175B without
    recomputation and 340B with selective, both on Transformer Engine's flash-attention backend
    (NVTE_FUSED_ATTN=0, FlashAttention-2's rate); 15B on cuDNN's fused attention (the preset's)."""
    by = {s: [r for r in D.runs() if r.source == s] for s in D.SOURCES}
    want = {
        "nemo_gpt3_175b": ("none", D.FLASH_ATTENTION_2_H100, True),
        "nemo_nemotron4_340b": ("selective", D.FLASH_ATTENTION_2_H100, True),
        "nemo_nemotron4_15b": ("none", None, False),
    }
    for source, (recompute, attention, p2p) in want.items():
        for r in by[source]:
            assert (r.recompute, r.attention_efficiency, r.overlap.p2p, r.grad_bytes) == (recompute, attention, p2p, 2)
            assert r.overlap.tp_comm and r.overlap.grad_reduce and r.overlap.param_gather and r.SP and r.zero == 1
    assert all(r.attention_efficiency is None for s in ("sc21", "megatron_h100") for r in by[s])


def test_a_runs_attention_kernel_sets_the_attention_rate():
    """A slower kernel slows the step by its attention core alone: the same run at the preset's
    cuDNN rate (0.45 of peak) is faster than at FlashAttention-2's (0.35)."""
    run = [r for r in D.runs() if r.source == "nemo_gpt3_175b"][0]
    hw = hardware.preset("h100_80g")
    slow = P.plan_run(run, hw).step_time_s
    fast = P.plan_run(dataclasses.replace(run, attention_efficiency=None), hw).step_time_s
    same = P.plan_run(run, dataclasses.replace(hw, attention_efficiency=D.FLASH_ATTENTION_2_H100)).step_time_s
    assert fast < slow == pytest.approx(same, rel=1e-12)
    assert slow / fast - 1 < 0.03  # seq 2048 at h 12288: attention is a few per cent of the FLOPs


def test_the_h100_table_is_read_at_its_tflops_column():
    """Megatron's H100 table is judged at its per-GPU TFLOP/s column, of which its MFU column is
    the rounding over 989: the 1.7B row's step is Megatron's FLOPs over 48 GPUs at 408.8 TFLOP/s
    (41.3 % MFU, 0.452 s; at the rounded 41 % it would be 0.456 s)."""
    rows = [r for r in D.runs() if r.source == "megatron_h100"]
    assert [round(r.published / 9.89) for r in rows] == [41, 47, 49, 46, 42, 43, 44, 48, 47]
    assert {r.unit for r in rows} == {"TFLOP/s per GPU"}
    one = rows[0]
    assert one.step_s == pytest.approx(D.megatron_flops(one.model, 192) / (48 * 408.8e12), rel=1e-12)
    assert one.step_s == pytest.approx(0.4519, abs=1e-4)


def test_the_340b_recipe_fits_with_its_bf16_optimizer_state():
    """Nemotron-4 340B on 128 GPUs (TP 8, PP 8, DP 2) keeps the distributed optimizer's copy and
    state in bf16 (``model.optim.dtype: bf16``): under that precision its recipe fits in 80 GiB,
    under Megatron's fp32 state it would not; the step differs by the optimizer step's bytes alone:
    per value of the rank's shard (DP 2) Adam moves 2·4 + 2·2·4 + 2·2 + (4 + 2) = 34 bytes with an
    fp32 copy and state, 2·2 + 2·2·2 + 2·2 + (2 + 2) = 20 with the bf16 copy and state (the copy
    is still written into the model's 16-bit weights, as rpd.model.memory counts both)."""
    hw = P.hardware_at("h100_80g", *hardware.DGX_FIT)
    run = [r for r in D.runs() if r.source == "nemo_nemotron4_340b"][0]
    assert (run.gpus, run.precision) == (128, "bf16")
    own, fp32_state = P.plan_run(run, hw), P.plan_run(dataclasses.replace(run, precision="bf16_mixed"), hw)
    assert own.fits and not fp32_state.fits
    values = max(own.memory["weights"]) / 2 / 2  # 16-bit weights of the fullest rank, its shard of DP 2
    assert fp32_state.step_time_s - own.step_time_s == pytest.approx(values * (34 - 20) / 3.35e12, rel=1e-9)
    assert {r.precision for r in D.runs() if r.source != "nemo_nemotron4_340b"} == {"bf16_mixed"}


def test_a_fold_never_fits_on_the_source_it_predicts(monkeypatch):
    seen: list[set] = []
    monkeypatch.setattr(P, "fit", lambda ks: seen.append({D.runs()[k].source for k in ks}) or (0.6, 2.0))
    folds = P.folds(("sc21", "megatron_h100", "nemo_nemotron4_15b"))
    assert folds == {s: (0.6, 2.0) for s in ("sc21", "megatron_h100", "nemo_nemotron4_15b")}
    # one fit per fold, on every run of the other sources, whatever their GPU: with SC'21 out the
    # A100 is predicted from H100 runs through the two measured matmul ceilings
    assert seen == [{"megatron_h100", "nemo_nemotron4_15b"}, {"sc21", "nemo_nemotron4_15b"}, {"sc21", "megatron_h100"}]


def test_a_preset_runs_its_gemms_at_eta_times_its_measured_ceiling():
    """MAMF over peak (ml-engineering's table: A100 SXM 267.9 / 312, H100 SXM 792.1 / 989), times
    the one fitted share: the two GPUs differ by benchmark figures only."""
    assert hardware.MATMUL_CEILING == {"a100_80g": 0.8587, "h100_80g": 0.8009}
    eta, traffic = hardware.DGX_FIT
    for name in ("a100_80g", "h100_80g"):
        hw = P.hardware_at(name, eta, traffic)
        assert hw == hardware.preset(name)
        assert hw.gemm_efficiency == pytest.approx(eta * hardware.MATMUL_CEILING[name], abs=5e-5)
    a, h = P.hardware_at("a100_80g", 0.5, 1.0), P.hardware_at("h100_80g", 0.5, 1.0)
    assert (a.gemm_efficiency, h.gemm_efficiency, a.traffic) == (0.4294, 0.4004, 1.0)


@pytest.mark.slow  # over 4 s on 2 cores (a figure, a subprocess or the study's fits)
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
    bound = P.least_compute_mfu(first, hw, run.M, run.DP, where, r.step_time_s, run.grad_bytes, run.PP)
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
    # 1F1B over 8 stages at M 32: the first microbatch crosses 7 stages before the last starts and
    # the last crosses them back; one microbatch still hides the DP traffic: 38 stage-microbatches
    one = P.least_compute_mfu(first, hw, 4, 48, where, 1.0)
    assert P.least_compute_mfu(first, hw, 32, 48, where, 1.0, PP=8) == pytest.approx(one * 38 / 3, rel=1e-12)


@pytest.mark.slow
def test_the_presets_carry_the_fit_on_every_source():
    assert P.fit(list(range(len(D.runs())))) == hardware.DGX_FIT


def test_each_source_is_predicted_with_its_own_fold(monkeypatch):
    """The cross-validated number rests on this: a source's rows are predicted at the (η, traffic)
    fitted without it, not at the fit on every source. The fit is replaced by a stand-in whose
    answer names the sources it saw (η = 0.1 × how many runs, traffic = sorted sources), so a
    row predicted from the wrong fit is seen by its hardware, whatever the real fit returns."""
    sources = ("sc21", "megatron_h100", "nemo_nemotron4_15b")
    runs = D.runs()

    def fit(ks):
        return (len(ks) / 100, ",".join(sorted({runs[k].source for k in ks})))

    seen: list[tuple[str, object]] = []

    def row_of(run, hw):
        seen.append((run.source, hw.traffic))
        return dict(source=run.source, error=0.0)

    monkeypatch.setattr(P, "fit", fit)
    monkeypatch.setattr(P, "row_of", row_of)
    monkeypatch.setattr(P, "hardware_at", lambda preset, eta, traffic: types.SimpleNamespace(traffic=traffic))
    monkeypatch.setattr(P, "mean_error", lambda ks, eta, traffic: 0.0)
    out = P.run(P.Config(sources=sources))
    counts = {s: sum(r.source == s for r in runs) for s in sources}  # 10, 9 and 8 runs
    for s in sources:
        others = sorted(set(sources) - {s})
        assert {t for src, t in seen if src == s} == {",".join(others)}
        assert out.summary[s]["fitted"] == dict(
            software_efficiency=sum(counts[o] for o in others) / 100, traffic=",".join(others)
        )
    assert [r["fitted_without"] for r in out.table] == [src for src, _ in seen]
    assert out.summary["fit_on_every_source"]["traffic"] == ",".join(sorted(sources))
