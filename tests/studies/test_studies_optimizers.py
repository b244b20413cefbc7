"""E12 (rpd.studies.optimizers): the paper's ranking per optimizer at equal simulated time."""

import numpy as np
import pytest
from hydra_helpers import TINY_E12

from rpd import objectives, schedules
from rpd.analysis import simtime
from rpd.studies import make_config
from rpd.studies import optimizers as e12
from rpd.train import methods

S, N = TINY_E12["S"]["nesterov_quadratic"], TINY_E12["N"]["nesterov_quadratic"]


@pytest.fixture(scope="module")
def cfg():
    optimizers = ("sgd", "muon")  # Muon: refused on one vector, no run
    return make_config(
        e12.Config, "full", **TINY_E12, optimizers=optimizers, gamma_exps={"sgd": (-5, -2), "muon": (-6, -3)}
    )


@pytest.fixture(scope="module")
def out(cfg):
    return e12.run(cfg)


@pytest.mark.slow
def test_table_has_one_row_per_cell_and_says_why_not(out):
    labels = e12.method_labels((2,), diloco=False)
    assert labels == ("PD", "RPD", "LocalSGD H=2", "2BW", "GPipe", "1F1B")
    assert [(r["optimizer"], r["method"]) for r in out.table] == [(o, m) for o in ("sgd", "muon") for m in labels]
    T = out.summary["objectives"]["nesterov_quadratic"]["T"]
    assert T == 2 * N + 2 * S - 2  # PD's timeline, the shortest (protocol (i))
    for r in out.table:
        if r["optimizer"] == "muon":  # one parameter vector: refused, with the reason
            assert r["status"] == "n/a" and "matrices" in r["reason"]
            continue
        assert r["status"] == "ok" and r["T"] == T and r["timeline_T"] >= T
        lo, hi = r["grid_exps"]
        assert lo <= r["gamma_exp"] <= hi and r["gamma"] == 2.0 ** r["gamma_exp"]
        finite = {k: v for k, v in r["finals"].items() if v is not None}
        assert r["loss"] == min(finite.values())  # best at T, never a diverged one
        assert (r["gamma_edge"] is None) == (lo < r["gamma_exp"] < hi)


@pytest.mark.slow
def test_rankings_and_verdicts_follow_the_losses(out):
    for c in out.summary["cells"]:
        if c["optimizer"] == "muon":
            assert c["ranking"] == [] and c["verdict"] == "n/a"
            continue
        assert c["losses"] == sorted(c["losses"]) and c["best"] == c["ranking"][0]
        loss = dict(zip(c["ranking"], c["losses"]))
        assert c["holds"] == (loss["PD"] < loss["LocalSGD H=2"])
        assert c["verdict"].startswith("holds" if c["holds"] else "fails")


@pytest.mark.slow
def test_sgd_rows_equal_the_methods_at_the_same_gamma_and_T(cfg, out):
    """The study's SGD cells are the existing front-ends' values at T (cut="end")."""
    row = {r["method"]: r for r in out.table if r["optimizer"] == "sgd"}
    T = row["PD"]["T"]
    obj = objectives.nesterov_quadratic(cfg.n, cfg.d, S, cfg.batch_size, mu=cfg.mu, seed=cfg.seed)
    pd = methods.pipedream(obj, schedules.pipedream(S, N), [row["PD"]["gamma"]])
    np.testing.assert_allclose(row["PD"]["loss"], simtime.value_at_time(pd, T)[0], rtol=1e-12)
    tl = schedules.local_sgd(S, N, S, 2)
    ls = methods.local_sgd(obj, tl, [row["LocalSGD H=2"]["gamma"]])
    np.testing.assert_allclose(row["LocalSGD H=2"]["loss"], simtime.value_at_time(ls, T)[0], rtol=1e-12)
    # the flush schedules are minibatch SGD on their own (longer) time axes: same iterates
    assert row["GPipe"]["loss"] == pytest.approx(row["1F1B"]["loss"], rel=1e-12)


def test_tune_moves_the_window_toward_an_edge_and_never_picks_a_diverged_run():
    calls = []

    def run(grid):  # final value (k + 3)^2 + 1 at γ = 2^k: best at k = -3; k >= 0 diverges
        calls.append(np.log2(grid).astype(int).tolist())
        k = np.log2(grid)
        final = np.where(k >= 0, np.inf, (k + 3) ** 2 + 1.0)
        return np.stack([np.full_like(k, 100.0), final], axis=1)

    r = e12.tune(run, 0, 3, max_shifts=3)  # all diverged -> down; then the low edge -> down
    assert calls == [[0, 1, 2, 3], [-2, -1, 0, 1], [-4, -3, -2, -1]]
    assert r["gamma_exp"] == -3 and r["gamma_edge"] is None and r["shifts"] == 2
    assert r["diverged_exps"] == [0, 1, 2, 3] and r["finals"][0] is None
    stuck = e12.tune(run, -12, -9, max_shifts=0)
    assert stuck["gamma_exp"] == -9 and stuck["gamma_edge"] == "high" and stuck["shifts"] == 0
