"""GEMS, AMPNet and WPipe train with their weight-version semantics (docs/schedules.md#training-semantics,
rpd.train.semantics / semantics_async), each checked against an independent replay by hand."""

import jax
import numpy as np
import pytest

from rpd import objectives, schedules
from rpd.schedules.machinery.costs import CostModel
from rpd.train import methods, semantics
from rpd.train.replay import replay_pipemare

S, GAMMA = 4, 0.05
B2F = CostModel(F=1, B=2, p2p=1)


@pytest.fixture(scope="module")
def quad():
    return objectives.random_quadratic(n=240, d=24, S=S, batch_size=5, seed=0)


def _blocks(obj):
    return [slice(o, o + n) for o, n in zip(obj.layout.offsets, obj.layout.sizes)]


def test_gems_is_minibatch_sgd_landing_after_the_allreduce(quad):
    tl = schedules.gems(S, 32, 8, costs=CostModel(allreduce=(2, 0.0)), values=1)
    res = methods.train(quad, tl, [GAMMA])
    ref = methods.train(quad, schedules.one_f_one_b(S, 32, 8), [GAMMA])
    np.testing.assert_allclose(res.x_final, ref.x_final, atol=1e-14)  # same iterates, other times
    plan, _ = semantics.of(tl).plan(tl, S, quad.n_batches)
    np.testing.assert_array_equal(np.unique(plan.time), tl.flush_time)


@pytest.mark.slow
@pytest.mark.parametrize("k, costs", [(1, None), (3, B2F)], ids=["k1_unit", "k3_b2f"])
def test_ampnet_equals_the_literal_event_loop(k, costs):
    mlp = objectives.mlp_chain(n=64, width=6, S=S, batch_size=4, seed=1)
    tl = schedules.ampnet(S, 18, k, costs=costs)
    res = methods.train(mlp, tl, [0.05])
    np.testing.assert_allclose(res.x_final[0], replay_pipemare(mlp, tl, 0.05, every=k), atol=1e-12)
    plan, _ = semantics.of(tl).plan(tl, S, mlp.n_batches)
    assert np.all(np.asarray(plan.read) % k == 0) and np.all(np.diff(plan.time) >= 0)


def test_wpipe_is_2bw_on_group_one_and_sgd_on_group_two():
    """Period q: x_{q+1} = x_q - γ (1/M) Σ_j ∇f_j(z_q), z_q = (group 1 at x_{q-1}, group 2 at x_q);
    one objective block per stage (2S)."""
    S_, M, Q = 3, 4, 4
    obj = objectives.random_quadratic(n=240, d=24, S=2 * S_, batch_size=5, seed=2)
    tl = schedules.wpipe(S_, Q * M, M, costs=B2F)
    plan, n_slots = semantics.of(tl).plan(tl, obj.S, obj.n_batches)
    res = methods.run_plan(obj, plan, [GAMMA], n_slots=n_slots)
    vg = jax.jit(lambda x, b: obj.value_and_grad(obj.data, x, b)[1])
    blocks = _blocks(obj)
    x = prev = np.asarray(obj.x0, dtype=np.float64)
    for q in range(Q):
        z = x.copy()
        for b in blocks[:S_]:
            z[b] = prev[b]
        g = np.mean([np.asarray(vg(z, (q * M + j) % obj.n_batches)) for j in range(M)], axis=0)
        prev, x = x, x - GAMMA * g
    np.testing.assert_allclose(res.x_final[0], x, atol=1e-13)
    with pytest.raises(ValueError, match="one block per"):
        semantics.of(tl).plan(tl, S_, obj.n_batches)
