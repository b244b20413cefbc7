"""LocalSGD and DiLoCo across D data-parallel pipelines (``local_steps``): LocalSGD's sharded
round runner with one flush per local step, against minibatch SGD, NumPy and optax replays."""

import jax
import numpy as np
import optax
import pytest

from rpd import registry, schedules
from rpd.analysis import simtime
from rpd.objectives.linear import random_quadratic
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.data_parallel import data_parallel
from rpd.train import methods, semantics

S, M, GAMMAS = 3, 2, [0.05, 0.2]
COSTS = CostModel(F=1, B=2, p2p=1, allreduce=(4, 0.5))


@pytest.fixture(scope="module")
def quad():
    return random_quadratic(n=96, d=12, S=S, batch_size=4, seed=2)


def _pipelines(N, D, H, overlap=False, make=schedules.one_f_one_b):
    return data_parallel(make(S, N, M, costs=COSTS), D, COSTS, values=4, overlap=overlap, local_steps=H)


def _replay(obj, tl, gamma):
    """D replicas by hand: replica d's step on flush f is x_d -= γ · mean_j ∇f(x_d; f·D·M + d·M + j);
    block s of its increment reaches the replica mean at the end of tick dp_land[f, s]; after a
    round's last flush the replicas are set to their mean. Returns (f(x̄) - f* after every tick,
    x̄ at the end)."""
    vg = jax.jit(obj.value_and_grad)
    loss = jax.jit(obj.loss)
    grad = lambda x, b: np.asarray(vg(obj.data, x, b % obj.n_batches)[1])
    seg = np.asarray(obj.layout.segment_ids)
    D, H, Mf = tl.D, tl.local_steps, tl.M
    Q = tl.N // Mf
    xbar = np.asarray(obj.x0, float).copy()
    points = []  # x̄ after every tick
    for r0 in range(0, Q, H):
        xs = [xbar.copy() for _ in range(D)]
        start = 0 if r0 == 0 else tl.dp_sync[r0 // H - 1] + 1
        landed = np.zeros((tl.dp_sync[r0 // H] + 1 - start, obj.D))  # Σ_d increments at each tick of the round
        for f in range(r0, min(r0 + H, Q)):
            for d in range(D):
                step = -gamma * np.mean([grad(xs[d], f * D * Mf + d * Mf + j) for j in range(Mf)], axis=0)
                xs[d] = xs[d] + step
                landed[tl.dp_land[f, seg] - start, np.arange(obj.D)] += step
        points += list(xbar + np.cumsum(landed, axis=0) / D)
        xbar = np.mean(xs, axis=0)
    f_star = float(obj.f_star)
    curve = [float(loss(obj.data, x)) - f_star for x in [obj.x0, *points]]
    return np.array(curve), xbar


@pytest.mark.slow
@pytest.mark.parametrize("overlap", [False, True])
def test_one_local_step_is_todays_d_pipelines(quad, overlap):
    """H = 1, inner SGD, plain averaging = the gradient all-reduce (minibatch SGD with batch D·M,
    rpd.train.semantics_parallel.dp_plan) at every tick, for 1F1B and a chunked schedule."""
    for make in (schedules.one_f_one_b, lambda S, N, M, costs: schedules.interleaved(S, N, 3, 2, costs=costs)):
        tl = _pipelines(12, 2, 1, overlap, make)
        today = simtime.on_ticks(methods.train(quad, tl, GAMMAS))  # the stale core's plan, per tick
        rounds = simtime.on_ticks(methods.local_sgd(quad, tl, GAMMAS))  # LocalSGD's runner, D replicas
        assert rounds.method == tl.kind and rounds.meta["R"] == 2 and rounds.meta["H"] == 1
        np.testing.assert_array_equal(rounds.axis, today.axis)
        np.testing.assert_allclose(rounds.x_final, today.x_final, rtol=0, atol=1e-12)
        np.testing.assert_allclose(rounds.curve, today.curve, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(rounds.traces["update_time"], today.traces["update_time"])


@pytest.mark.slow
@pytest.mark.parametrize("D,H,N", [(2, 3, 16), (3, 2, 12)])  # 8 flushes: a partial last round
def test_local_steps_equal_a_replay_by_hand(quad, D, H, N):
    tl = _pipelines(N, D, H)
    res = simtime.on_ticks(methods.train(quad, tl, GAMMAS))  # local_steps > 1: LocalSGD across the pipelines
    assert res.axis[-1] == tl.T and len(res.axis) == tl.T + 1
    for gi, g in enumerate(GAMMAS):
        curve, xbar = _replay(quad, tl, g)
        np.testing.assert_allclose(res.x_final[gi], xbar, rtol=0, atol=1e-12)
        np.testing.assert_allclose(res.curve[gi, tl.dp_sync + 1], curve[tl.dp_sync + 1], rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(res.traces["round_end_curve"][gi], curve[tl.dp_sync + 1], rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(res.curve[gi], curve, rtol=1e-12, atol=1e-13)  # and every tick between
    with pytest.raises(ValueError, match="local_steps"):  # never the all-reduce's plan in silence
        semantics.of(tl).plan(tl, S, quad.n_batches)
    ddp = methods.train(quad, _pipelines(N, D, 1), GAMMAS)
    assert np.abs(res.x_final - ddp.x_final).max() > 1e-3  # local steps are not the all-reduce's


@pytest.mark.slow
@pytest.mark.parametrize("inner_state", ["keep", "reset"])
def test_diloco_inner_adam_outer_nesterov_equals_optax(quad, inner_state):
    """Inner Adam per pipeline replica, DiLoCo's outer Nesterov (0.7, 0.9) on Δ = θ - mean_d x_d:
    θ after the run equals an optax loop (Adam is element-wise: one state per replica over the
    whole vector equals the per-block states)."""
    D, H, N = 2, 3, 14  # 7 flushes: rounds of 3, 3, 1
    tl = _pipelines(N, D, H)
    res = methods.train(quad, tl, GAMMAS, optimizer="adam", outer_optimizer="nesterov", inner_state=inner_state)
    vg = jax.jit(quad.value_and_grad)
    adam, outer = optax.adam(1.0), optax.sgd(0.7, momentum=0.9, nesterov=True)
    for gi, gamma in enumerate(GAMMAS):
        theta = np.asarray(quad.x0, float)
        ost, states = outer.init(theta), [adam.init(theta) for _ in range(D)]
        for r0 in range(0, N // M, H):
            xs = [theta.copy() for _ in range(D)]
            for f in range(r0, min(r0 + H, N // M)):
                for d in range(D):
                    b = [(f * D * M + d * M + j) % quad.n_batches for j in range(M)]
                    g = np.mean([np.asarray(vg(quad.data, xs[d], bj)[1]) for bj in b], axis=0)
                    u, states[d] = adam.update(g, states[d], xs[d])
                    xs[d] = xs[d] + gamma * np.asarray(u)
            u, ost = outer.update(theta - np.mean(xs, axis=0), ost, theta)
            theta = theta + np.asarray(u)
            if inner_state == "reset":
                states = [adam.init(theta) for _ in range(D)]
        np.testing.assert_allclose(res.x_final[gi], theta, rtol=0, atol=1e-10)
    assert res.meta["outer_optimizer"] == {"name": "nesterov", "lr": 0.7, "beta": 0.9}


@pytest.mark.slow
def test_pipeline_method_runs_local_steps_and_diloco():
    """``method=pipeline schedule.D=2 schedule.local_steps=2`` through the hydra config and the
    registry; DiLoCo's options are accepted with D > 1 and refused with D = 1."""
    from rpd.cli import specs
    from rpd.cli.train import run_config
    from tests.hydra_helpers import TINY_LINEAR, compose, resolved

    base = TINY_LINEAR + ["method=pipeline", "schedule=1f1b", "schedule.M=2", "schedule.D=2"]
    spec = specs.run_spec(compose(base + ["schedule.local_steps=2", "optimizer=adam", "outer_optimizer=nesterov"]))
    assert spec.pipeline.params.local_steps == 2
    obj = random_quadratic(n=32, d=12, S=3, batch_size=4, seed=0)
    out = registry.run(spec, obj, [0.01])
    tl = spec.pipeline.timeline(obj)
    assert out.result.axis[-1] == tl.T and out.extra["R"] == 2 and out.extra["H"] == 2
    assert out.block_update[-1] == out.extra["K"] == (8 // 2) * 3  # flushes × blocks
    keys = [run_config(resolved(compose(base + [f"schedule.local_steps={h}"])))["schedule"] for h in (1, 2)]
    assert "local_steps" not in keys[0] and keys[1]["local_steps"] == 2  # H = 1: the key runs had before
    with pytest.raises(ValueError, match="^outer_optimizer=nesterov: applies to LocalSGD"):
        specs.run_spec(
            compose(TINY_LINEAR + ["method=pipeline", "schedule=1f1b", "schedule.M=2", "outer_optimizer=nesterov"])
        )
