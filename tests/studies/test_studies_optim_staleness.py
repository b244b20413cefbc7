"""E13 (rpd.studies.optim_staleness): its counting rules, and the quick study end to end."""

import dataclasses

import numpy as np
import pytest

from rpd.studies import make_config
from rpd.studies import optim_staleness as study


def test_updates_to_target_is_the_first_point_at_or_below_it():
    curve = np.array([[1.0, 0.5, 0.01, 1e-4, 1e-5], [1.0, 2.0, np.nan, np.nan, np.nan], [2.0, 1.0, 1.0, 1.0, 1.0]])
    np.testing.assert_array_equal(study.updates_to_target(curve, 1e-3), [3.0, np.inf, np.inf])


def test_cells_run_s1_once_and_skip_beta1_without_momentum():
    cfg = study.Config(S_values=(1, 2), optimizers=("sgd", "adam"), arms=("none", "delay_beta1"))
    assert study._cells(cfg) == [
        ("sgd", "none", 1),
        ("sgd", "none", 2),
        ("adam", "none", 1),
        ("adam", "none", 2),
        ("adam", "delay_beta1", 2),
    ]


def test_the_objective_follows_rotate_and_align():
    """study.align puts E13's spectrum on the axes (the diagonal control), rotate in a random basis."""
    cfg = study.Config(n=48, d=8, batch_size=6)

    def hessian(obj):
        X = np.asarray(obj.data["X"])
        return X.T @ X / len(X)

    H = hessian(study.objective(cfg, 2))
    A = hessian(study.objective(dataclasses.replace(cfg, align=True), 2))
    R = hessian(study.objective(dataclasses.replace(cfg, rotate=True), 2))
    np.testing.assert_allclose(A, np.diag(np.diag(A)), atol=1e-10)
    np.testing.assert_allclose(np.linalg.eigvalsh(A), np.linalg.eigvalsh(H), rtol=1e-9)
    assert np.sum((R - np.diag(np.diag(R))) ** 2) > 0.1 * np.sum(R**2)


@pytest.mark.slow
def test_quick_study_and_figure(figure_from_store):
    cfg = make_config(study.Config, "quick", study.QUICK)
    out = study.run(cfg)
    for key, m in out.summary["measured"].items():
        assert m["slowdown"][0] == 1.0 and len(m["xz_local_slopes"]) == len(cfg.S_values) - 2
    # at S = 2 PipeDream's stage delays are (1, 0): PipeMare's factor is 1, the runs coincide
    np.testing.assert_array_equal(out.arrays["adam_none_n_target"][:2], out.arrays["adam_pipemare_lr_n_target"][:2])
    figure_from_store(study, cfg, out)


def test_tuned_gamma_falls_back_to_the_lowest_final_value():
    from types import SimpleNamespace

    reach = SimpleNamespace(curve=np.array([[1.0, 0.5, 1e-4], [1.0, 1e-4, 1e-5], [1.0, np.nan, np.nan]]))
    assert study.tuned(reach, 1e-3) == 1
    never = SimpleNamespace(curve=np.array([[1.0, 0.5, 0.4], [1.0, 0.5, 0.2], [1.0, np.nan, np.nan]]))
    assert study.tuned(never, 1e-3) == 1
