"""E6 study: protocol (ii) budgets, γ selection recomputed from the saved arrays, figure from disk."""


import numpy as np
import pytest

import rpd  # noqa: F401
from rpd import schedules, tuning
from rpd.studies import load
from rpd.studies import scaling as study

TINY = dict(S_values=(2, 4), T=40, n=8, d=8, pd_gamma_exps=(-4, -2), localsgd_gamma_exps=(-4, -2))


@pytest.fixture(scope="module")
def tiny():
    cfg = study.Config(**TINY)
    return cfg, study.run(cfg)


def test_registry_and_paper_config():
    assert load("e6_scaling") is study
    cfg = study.Config()
    assert cfg.S_values == (2, 4, 8, 16, 32, 64, 128) and cfg.T == 3180
    assert (cfg.n, cfg.d, cfg.batch_size, cfg.lam, cfg.grad_noise, cfg.H, cfg.tail_frac) == (
        50, 512, 1, 1e-4, 0.5, 5, 0.01)


def test_protocol_ii_budgets(tiny):
    cfg, out = tiny
    for e in out.summary["per_S"]:
        S, T = e["S"], cfg.T
        N = e["pd_N"]  # smallest N whose PD timeline reaches T
        assert schedules.pipedream(S, N).T >= T > schedules.pipedream(S, N - 1).T
        assert N == -(-(T - 2 * S + 2) // 2)
        N = e["localsgd_N"]
        assert schedules.local_sgd(S, N, S, cfg.H).T >= T > schedules.local_sgd(S, N - 1, S, cfg.H).T
        pd_tl = schedules.pipedream(S, e["pd_N"])
        assert e["rpd_K"] == int(np.sum(pd_tl.op == schedules.BWD)) == e["pd_N"] * S
        assert e["rpd_delta"] == int(np.floor(S * S - S / 2))
        assert out.arrays[f"pd_S{S}_axis"][-1] == out.arrays[f"localsgd_S{S}_axis"][-1] == T
        assert out.arrays[f"rpd_S{S}_axis"][-1] == e["rpd_K"]


def test_summary_equals_recomputation_from_arrays(tiny):
    cfg, out = tiny
    for i, e in enumerate(out.summary["per_S"]):
        for m in study.METHODS:
            curves, gammas = out.arrays[f"{m}_S{e['S']}_curves"], out.arrays[f"{m}_gammas"]
            sel = tuning.select_gamma(curves, gammas, rule="stable", tail_frac=cfg.tail_frac)
            assert e[m]["gamma_index"] == sel.index == out.arrays[f"{m}_gamma_index"][i]
            assert e[m]["gamma"] == sel.gamma and e[m]["rule"] == sel.rule
            assert e[m]["f_at_T"] == curves[sel.index, -1] == out.arrays[f"{m}_f_at_T"][i]
    checks = {c["statement"]: c["holds"] for c in out.summary["checks"]}
    ls = out.arrays["localsgd_f_at_T"]
    assert checks["LocalSGD improves with S"] == bool(np.all(np.diff(ls) < 0))


def test_figure_from_saved_output(tiny, figure_from_store):
    cfg, out = tiny
    figure_from_store(study, cfg, out)
