"""Optimizers in the stale block core (rpd.train.optimizers): plain SGD unchanged bit for bit,
every optimizer equal to optax's own loop without delay, one state per block, PipeDream with an
optimizer equal to a literal op-by-op replay, Muon only where weight matrices exist."""

import jax
import numpy as np
import optax
import pytest
from optax_replay import replay_pd

from rpd import registry, schedules
from rpd.objectives.linear import random_quadratic
from rpd.objectives.mlp import mlp_chain
from rpd.registry.schedules import ScheduleParams
from rpd.train import methods, optimizers, plans

GAMMAS = [2.0**-6, 2.0**-4]


@pytest.fixture(scope="module")
def quad():
    return random_quadratic(n=120, d=24, S=4, batch_size=10, seed=3)


def _blocks(obj):
    return [slice(o, o + n) for o, n in zip(obj.layout.offsets, obj.layout.sizes)]


@pytest.mark.slow
def test_plain_sgd_is_bit_identical(quad):
    """None, "sgd" and make("sgd") take the core's original path; optax's sgd(1) as a user's
    transformation goes through the optimizer path (per-block state, γ outside) and still lands
    on the same bits, on PD (stashed, shared gradients) and RPD (stale reads)."""
    tl = schedules.pipedream(4, 12)
    runs = {
        "pd": lambda opt: methods.pipedream(quad, tl, GAMMAS, optimizer=opt),
        "rpd": lambda opt: methods.rpd(quad, 48, GAMMAS, 14, seed=1, optimizer=opt),
    }
    for run in runs.values():
        base = run(None)
        for opt in ("sgd", optimizers.make("sgd"), optax.sgd(1.0)):
            res = run(opt)
            np.testing.assert_array_equal(res.curve, base.curve)
            np.testing.assert_array_equal(res.x_final, base.x_final)
    assert optimizers.resolve("sgd") is None and base.meta["optimizer"] == {"name": "sgd"}


def _optax_loop(obj, tx, N, x0=None):
    """Full-batch-order minibatch training with one optax state: step n on batch n mod nb."""
    grad, update = jax.jit(obj.value_and_grad), jax.jit(tx.update)
    x = np.asarray(obj.x0) if x0 is None else x0
    state = tx.init(x)
    for n in range(N):
        _, g = grad(obj.data, x, n % obj.n_batches)
        u, state = update(g, state, x)
        x = optax.apply_updates(x, u)
    return np.asarray(x)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, reference",
    [
        ("momentum", lambda lr: optax.sgd(lr, momentum=0.9)),
        ("nesterov", lambda lr: optax.sgd(lr, momentum=0.9, nesterov=True)),
        ("adam", lambda lr: optax.adam(lr, b1=0.9, b2=0.999, eps=1e-8)),
        ("adamw", lambda lr: optax.adamw(lr, weight_decay=1e-2)),  # torch's decay, pinned (optax's is 1e-4)
    ],
)
def test_zero_delay_equals_optax_loop(quad, name, reference):
    """Minibatch SGD's plan (every block updated each step from one fresh gradient): each block's
    state advances once per step, so the blocks together are optax's own loop on the whole x."""
    N = 15
    res = methods.sgd(quad, N, GAMMAS, optimizer=name)
    for i, lr in enumerate(GAMMAS):
        np.testing.assert_allclose(res.x_final[i], _optax_loop(quad, reference(lr), N), rtol=1e-13, atol=1e-15)
    assert res.meta["optimizer"]["name"] == name


def test_hyper_parameters_are_pinned_and_checked():
    assert optimizers.make("adamw").params["weight_decay"] == 1e-2
    assert optimizers.make("momentum", beta=0.5).params == {"beta": 0.5}
    with pytest.raises(ValueError, match="no hyper-parameter"):
        optimizers.make("adam", beta=0.9)
    with pytest.raises(ValueError, match="must lie in"):
        optimizers.make("adam", b1=1.0)
    with pytest.raises(ValueError):
        optimizers.resolve("adagrad")
    with pytest.raises(TypeError):
        optimizers.resolve(0.1)


def test_each_block_keeps_its_own_state(quad):
    """RPD with zero delays and random blocks: block a's Adam state (moments and the step count of
    its bias correction) advances only at block a's updates. Reference: S optax states, each on its
    own block, updated in the plan's order."""
    K = 40
    plan = plans.rpd_plan(5, K, quad.S, quad.n_batches, 0, delays="zero")
    assert len(set(np.bincount(plan.block, minlength=quad.S))) > 1  # the blocks' counts differ
    res = methods.rpd(quad, K, GAMMAS, 0, seed=5, delays="zero", optimizer="adam")
    blocks = _blocks(quad)
    grad = jax.jit(quad.value_and_grad)
    for i, lr in enumerate(GAMMAS):
        tx = optax.adam(lr)
        update = jax.jit(tx.update)
        x = np.asarray(quad.x0).copy()
        states = [tx.init(x[blk]) for blk in blocks]
        for a, b in zip(plan.block, plan.batch):
            _, g = grad(quad.data, x, int(b))
            u, states[a] = update(np.asarray(g)[blocks[a]], states[a], x[blocks[a]])
            x[blocks[a]] += np.asarray(u)
        np.testing.assert_allclose(res.x_final[i], x, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize(
    "name, reference",
    [
        ("momentum", lambda lr: optax.sgd(lr, momentum=0.9)),
        ("adam", lambda lr: optax.adam(lr)),
    ],
)
def test_pipedream_equals_the_literal_replay(quad, name, reference):
    """The core's plan (shared stashed gradients, updates in (time, stage) order) against the op-by-op
    replay: the state advances at each B in arrival order, never stashed with the weights."""
    tl = schedules.pipedream(4, 10)
    res = methods.pipedream(quad, tl, GAMMAS[:1], optimizer=name)
    np.testing.assert_allclose(
        res.x_final[0], replay_pd(quad, tl, lambda s: reference(GAMMAS[0])), rtol=1e-12, atol=1e-14
    )


@pytest.mark.slow
def test_muon_sees_weight_matrices():
    """Refused on a flat vector (it would silently be Adam); on the MLP chain each block is (W, b):
    zero delay equals optax.contrib.muon's loop on the list of every block's leaves."""
    quad = random_quadratic(n=20, d=8, S=2, batch_size=10, seed=0)
    with pytest.raises(ValueError, match="flat parameter vector"):
        methods.sgd(quad, 2, GAMMAS, optimizer="muon")
    w, S, N = 4, 2, 6
    mlp = mlp_chain(n=32, width=w, S=S, batch_size=8, seed=0)
    res = methods.sgd(mlp, N, GAMMAS, optimizer="muon")
    sizes = [w * w, w] * S
    cuts = np.cumsum(sizes)[:-1]
    shapes = [(w, w), (w,)] * S
    to_tree = lambda v: [p.reshape(sh) for p, sh in zip(jax.numpy.split(v, cuts), shapes)]  # noqa: E731
    grad = jax.jit(lambda x, b: mlp.value_and_grad(mlp.data, jax.numpy.concatenate([p.ravel() for p in x]), b)[1])
    for i, lr in enumerate(GAMMAS):
        tx = optax.contrib.muon(lr)
        step = jax.jit(lambda x, state, b, tx=tx: tx.update(to_tree(grad(x, b)), state, x))
        x = to_tree(mlp.x0)
        state = tx.init(x)
        for n in range(N):
            u, state = step(x, state, n % mlp.n_batches)
            x = optax.apply_updates(x, u)
        np.testing.assert_allclose(res.x_final[i], np.concatenate([np.ravel(p) for p in x]), rtol=1e-11, atol=1e-13)


@pytest.mark.slow
def test_registry_passes_the_optimizer(quad):
    """MethodOptions.optimizer reaches the method (LocalSGD: the replicas' inner optimizer, with
    DiLoCo's outer one); the outer optimizer is refused on every other schedule."""
    params = ScheduleParams(S=4, N=8)
    spec = registry.prepare("pd", None, params, registry.MethodOptions(optimizer={"name": "momentum", "beta": 0.5}))
    out = registry.run(spec, quad, GAMMAS[:1])
    assert out.result.meta["optimizer"] == {"name": "momentum", "beta": 0.5}
    lp = ScheduleParams(S=4, N=8, params={"R": 2, "H": 2})
    opts = registry.MethodOptions(optimizer="adam", outer_optimizer="nesterov", inner_state="reset")
    meta = registry.run(registry.prepare("localsgd", None, lp, opts), quad, GAMMAS[:1]).result.meta
    assert meta["optimizer"]["name"] == "adam" and meta["outer_optimizer"]["name"] == "nesterov"
    assert meta["inner_state"] == "reset"
    with pytest.raises(ValueError, match="^outer_optimizer=nesterov: applies to LocalSGD"):
        registry.prepare("pipeline", "gpipe", params, registry.MethodOptions(outer_optimizer="nesterov"))
    with pytest.raises(ValueError, match="optimizer"):
        registry.prepare("pd", None, params, registry.MethodOptions(optimizer="adagrad"))
