"""E5 study: last-stage forward loss on the time axis, protocol (ii), LM selector, figure from disk.

A tiny text made here and a tiny model (S = 3); never the fetched corpus."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rpd  # noqa: F401
from rpd import schedules
from rpd.analysis import tuning
from rpd.studies import load
from rpd.studies import nanochat as study
from rpd.train import plans

TINY = dict(
    S=3,
    R=3,
    N=12,
    H=(2,),
    H_grid=(2,),
    gamma_exps=(-2, -1),
    batch_size=4,
    seq_len=8,
    width=16,
    heads=2,
    heldout_batches=2,
    heldout_points=8,
    smooth_window=4,
)


def _text() -> str:
    words = ["to", "be", "or", "not", "that", "is", "the", "question", "whether", "tis", "nobler"]
    rng = np.random.default_rng(0)
    return " ".join(rng.choice(words, 900)) + "\n"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "tiny.txt"
    path.write_text(_text(), encoding="utf-8")
    cfg = study.Config(text_path=str(path), **TINY)
    return cfg, study.run(cfg)


@pytest.fixture(scope="module")
def loss_at_x0(tiny):
    """Minibatch loss at x^0 on dataset batch b (one compile for every b)."""
    cfg, _ = tiny
    obj = study.make_objective(cfg)
    vg = jax.jit(obj.value_and_grad)
    return lambda b: float(vg(obj.data, obj.x0, jnp.int32(b))[0])


def test_registry_and_paper_size_defaults():
    assert load("e5_nanochat") is study
    full = study.Config()
    assert (full.S, full.R, full.N, full.H, full.H_grid, full.gamma_exps) == (
        16,
        16,
        1024,
        (1, 4, 8),
        (1, 2, 4, 8, 16),
        (-5, -1),
    )
    assert (full.batch_size, full.seq_len, full.width, full.heads) == (16, 32, 64, 4)
    with pytest.raises(ValueError, match="subset"):
        study.run(dataclasses.replace(full, H=(3,)))


@pytest.mark.slow
def test_runs_end_to_end_with_the_expected_outputs(tiny):
    cfg, out = tiny
    T = 2 * cfg.N + 2 * cfg.S - 2
    assert out.summary["T"] == T
    np.testing.assert_array_equal(out.arrays["time"], np.arange(T))
    G = cfg.gamma_exps[1] - cfg.gamma_exps[0] + 1
    for key in study.method_keys(cfg):
        assert out.arrays[f"{key}_train"].shape == out.arrays[f"{key}_train_smooth"].shape == (G, T)
    ents = {e["key"]: e for e in out.summary["methods"]}
    assert set(ents) == {"pd", "localsgd_H2"}
    for e in ents.values():
        assert e["gamma_exp"] in range(cfg.gamma_exps[0], cfg.gamma_exps[1] + 1)
        assert np.isfinite(e["train_smooth_final"]) and np.isfinite(e["heldout_final"])
        # a char LM from a uniform-ish start: losses between 0 and a few nats
        assert 0 < e["train_smooth_final"] < 10
    claim = [r for r in out.table if r["method"] == "paper claim"]
    assert len(claim) == 1 and claim[0]["paper"].startswith("PD ends below")


@pytest.mark.slow
def test_runs_side_by_side_give_the_numbers_of_runs_one_after_another(tiny, monkeypatch):
    """PD and LocalSGD train on host threads at once (rpd.runtime.concurrency); one worker runs them in
    turn. Every array is bit-identical."""
    cfg, out = tiny
    monkeypatch.setenv("RPD_WORKERS", "1")
    alone = study.run(cfg)
    assert set(alone.arrays) == set(out.arrays)
    for key, value in out.arrays.items():
        np.testing.assert_array_equal(alone.arrays[key], value, err_msg=key)


def _most_recent(f_last_N: np.ndarray, t: int) -> int:
    """Plain loop: the microbatch whose last-stage forward is the latest one at or before t."""
    best = -1
    for m, ft in enumerate(f_last_N):
        if ft <= t and (best < 0 or ft > f_last_N[best]):
            best = m
    return best


@pytest.mark.slow
def test_pd_curve_at_t_is_loss_z_of_the_most_recent_last_stage_forward(tiny, loss_at_x0):
    cfg, out = tiny
    tl = schedules.pipedream(cfg.S, cfg.N)
    loss_z = out.arrays["pd_loss_z"]  # the core's trace [G, K], NaN where the gradient was reused
    assert loss_z.shape[1] == tl.K
    f_last = tl.f_time[:, cfg.S - 1]
    train = out.arrays["pd_train"]
    for t in range(tl.T):
        m = _most_recent(f_last, t)
        if m < 0:
            assert np.all(np.isnan(train[:, t]))
            continue
        k = int(np.nonzero((tl.update_mb == m) & (tl.update_stage == cfg.S - 1))[0][0])
        assert np.all(np.isfinite(loss_z[:, k]))  # the fresh update of m
        others = (tl.update_mb == m) & (np.arange(tl.K) != k)  # m's S - 1 reused-gradient updates
        assert others.sum() == cfg.S - 1 and np.all(np.isnan(loss_z[:, others]))
        np.testing.assert_array_equal(train[:, t], loss_z[:, k])
    # microbatch 0's forward ran entirely on x^0: its loss is the minibatch loss at x^0
    np.testing.assert_allclose(train[:, cfg.S - 1], loss_at_x0(0), rtol=1e-6)


@pytest.mark.slow
def test_localsgd_curve_at_t_is_the_replica_loss_of_the_most_recent_microbatch(tiny, loss_at_x0):
    cfg, out = tiny
    e = {e["key"]: e for e in out.summary["methods"]}["localsgd_H2"]
    tl = schedules.local_sgd(cfg.S, e["N"], cfg.R, 2)
    f_last = tl.f_time[:, cfg.S - 1]
    np.testing.assert_array_equal(out.arrays["localsgd_H2_loss_time"], f_last)
    loss_GxN = out.arrays["localsgd_H2_mb_loss"]
    train = out.arrays["localsgd_H2_train"]
    for t in range(out.summary["T"]):
        m = _most_recent(f_last, t)
        if m < 0:
            assert np.all(np.isnan(train[:, t]))
        else:
            np.testing.assert_array_equal(train[:, t], loss_GxN[:, m])
    # the first microbatch of every replica starts from x^0
    for m in range(cfg.R):
        np.testing.assert_allclose(loss_GxN[:, m], loss_at_x0(m), rtol=1e-6)


@pytest.mark.slow
def test_protocol_ii_localsgd_takes_the_smallest_n_reaching_T(tiny):
    cfg, out = tiny
    T = out.summary["T"]
    for e in out.summary["methods"]:
        if e["method"] == "PD":
            assert e["N"] == cfg.N and e["T_own"] == T
            continue
        length = lambda n: schedules.local_sgd(cfg.S, n, cfg.R, e["H"]).T  # noqa: E731
        assert length(e["N"]) == e["T_own"] >= T > length(e["N"] - 1)


@pytest.mark.slow
def test_selection_uses_the_lm_thresholds_on_the_saved_curves(tiny):
    cfg, out = tiny
    for e in out.summary["methods"]:
        train = out.arrays[f"{e['key']}_train"]
        t0 = e["first_loss_time"]
        assert t0 == cfg.S - 1 and np.all(np.isnan(train[:, :t0])) and not np.any(np.isnan(train[:, t0:]))
        sel, strict = (
            tuning.select_gamma(
                train[:, t0:],
                out.arrays[f"{e['key']}_gammas"],
                tail_frac=cfg.tail_frac,
                thresholds=tuning.LM,
                rule=rule,
            )
            for rule in ("reference", "stable")
        )
        assert sel.index == e["gamma_index"] and sel.rule == e["rule"] == "reference"
        assert e["by_rule"]["stable"]["gamma_exp"] == tuning.log2_exponent(strict.gamma)
        assert e["by_rule"]["stable"]["rule"] == strict.rule


def test_select_is_the_lm_selector_not_the_default():
    """A tail with total variation / net change 7: unstable under the default limit 5, stable
    under the LM limit 10; so the two selectors choose different γ."""
    i = np.arange(40)
    wobbly = 1.6 - 0.01 * i + 0.07 * (i % 2)  # up 0.06, down 0.08: tv/net = 7, mean ≈ 1.4
    flat = np.full(40, 2.0)
    curves = np.stack([wobbly, flat])
    curves = np.concatenate([np.full((2, 3), np.nan), curves], axis=1)  # before the first forward
    gammas = np.array([0.25, 0.5])
    sel, t0 = study.select(curves, gammas, tail_frac=1.0)
    assert t0 == 3 and sel.index == 0 and sel.rule == "stable"
    assert tuning.select_gamma(curves[:, 3:], gammas, tail_frac=1.0).index == 1


def test_trailing_mean_and_last_stage_curve_on_known_values():
    loss = np.array([[1.0, 2.0, 3.0, 4.0]])
    curve = study.last_stage_curve(loss, np.array([2, 3, 5, 8]), 10)
    np.testing.assert_array_equal(curve[0, 2:], [1, 2, 2, 3, 3, 3, 4, 4])
    assert np.all(np.isnan(curve[0, :2]))
    sm = study.trailing_mean(curve, 3)
    np.testing.assert_allclose(sm[0, 2:], [1, 1.5, 5 / 3, 7 / 3, 8 / 3, 3, 10 / 3, 11 / 3])
    with pytest.raises(ValueError, match="increase"):
        study.last_stage_curve(loss, np.array([2, 2, 5, 8]), 10)


def test_pd_ring_holds_at_most_noam_plus_one_versions():
    """The stashed-version memory of E5's PD (S = 16, NOAM = 16): ring rows <= NOAM + 1."""
    tl = schedules.pipedream(16, 64)
    plan, slots = plans.pipedream_plan(tl, 7)
    assert plans.ring_size(plan, 16) <= tl.noam + 1 and slots == tl.noam


@pytest.mark.slow
def test_figure_from_saved_output(tiny, figure_from_store):
    cfg, out = tiny
    figure_from_store(study, cfg, out)
