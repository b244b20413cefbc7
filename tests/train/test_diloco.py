"""DiLoCo in LocalSGD: inner optimizers per replica, an outer optimizer on the pseudo-gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rpd  # noqa: F401
from rpd import schedules
from rpd.analysis import simtime
from rpd.objectives.linear import random_quadratic
from rpd.train import diloco, methods
from rpd.train.localsgd import replica_mesh

GAMMAS = [0.02, 0.1]


@pytest.fixture(scope="module")
def quad():
    return random_quadratic(n=96, d=12, S=3, batch_size=4, seed=2)


def reference(obj, S, N, R, H, gamma, inner, outer, inner_state):
    """A literal loop: replica r takes microbatch q·R·H + h·R + r at local step h of round q,
    with its own optax state over the whole vector (the optimizers are element-wise, so one
    state equals the per-block states), then θ <- θ + outer(θ - mean_r x_r)."""
    grad, update = jax.jit(obj.value_and_grad), jax.jit(inner.update)
    theta = jnp.asarray(obj.x0)
    ost = outer.init(theta)
    states = [inner.init(theta) for _ in range(R)]
    for q in range(-(-N // (R * H))):
        xs = [theta] * R
        for h in range(H):
            for r in range(R):
                m = q * R * H + h * R + r
                if m < N:
                    _, g = grad(obj.data, xs[r], jnp.int32(m % obj.n_batches))
                    u, states[r] = update(g, states[r], xs[r])
                    xs[r] = xs[r] + gamma * u
        u, ost = outer.update(theta - sum(xs) / R, ost, theta)
        theta = theta + u
        if inner_state == "reset":
            states = [inner.init(theta) for _ in range(R)]
        elif inner_state == "average":
            mean = jax_tree_mean(states)
            states = [mean] * R
    return np.asarray(theta)


def jax_tree_mean(states):
    def avg(*leaves):
        return leaves[0] if not jnp.issubdtype(leaves[0].dtype, jnp.floating) else sum(leaves) / len(leaves)

    return jax.tree.map(avg, *states)


def test_outer_sgd_lr1_is_todays_averaging_bit_for_bit(quad):
    tl = schedules.local_sgd(3, 20, 3, 2)
    plain = methods.local_sgd(quad, tl, GAMMAS)
    for outer in ("sgd", {"name": "sgd", "lr": 1.0}, diloco.make_outer("sgd")):
        assert diloco.resolve_outer(outer) is None  # the averaging path
        same = methods.local_sgd(quad, tl, GAMMAS, outer_optimizer=outer)
        np.testing.assert_array_equal(same.curve, plain.curve)
        np.testing.assert_array_equal(same.x_final, plain.x_final)
    assert "outer_optimizer" not in plain.meta  # plain LocalSGD's meta unchanged


@pytest.mark.slow
def test_stateless_inner_sgd_coincides_for_every_inner_state(quad):
    """optax.sgd(1) as the inner optimizer (through the optimizer path, no state) equals plain
    LocalSGD bit for bit under keep, average and reset, at every tick."""
    tl = schedules.local_sgd(3, 17, 4, 3)
    plain = methods.local_sgd(quad, tl, GAMMAS)
    for inner_state in diloco.INNER_STATES:
        res = methods.local_sgd(quad, tl, GAMMAS, optimizer=optax.sgd(1.0), inner_state=inner_state)
        np.testing.assert_array_equal(res.curve, plain.curve)
        np.testing.assert_array_equal(res.x_final, plain.x_final)


@pytest.mark.slow
@pytest.mark.parametrize("inner_state", diloco.INNER_STATES)
def test_diloco_equals_a_literal_loop(quad, inner_state):
    """Inner AdamW per replica, DiLoCo's outer Nesterov (0.7, 0.9): x̄ after the run and f(x̄)
    at every round end equal an independent loop with optax, under each inner-state rule."""
    S, N, R, H = 3, 22, 4, 3
    tl = schedules.local_sgd(S, N, R, H)
    kw = dict(optimizer="adamw", outer_optimizer="nesterov", inner_state=inner_state, track_time=inner_state == "keep")
    res = methods.local_sgd(quad, tl, GAMMAS, **kw)
    adamw = optax.adamw(1.0, b1=0.9, b2=0.999, eps=1e-8, weight_decay=1e-2)
    for gi, g in enumerate(GAMMAS):
        ref = reference(quad, S, N, R, H, g, adamw, optax.sgd(0.7, momentum=0.9, nesterov=True), inner_state)
        np.testing.assert_allclose(res.x_final[gi], ref, rtol=1e-12, atol=1e-14)
    assert res.meta["outer_optimizer"] == {"name": "nesterov", "lr": 0.7, "beta": 0.9}
    if inner_state == "keep":  # the round's last tick is θ after the outer step
        ticks = simtime.on_ticks(res)
        np.testing.assert_array_equal(ticks.curve[:, np.asarray(tl.sync_time) + 1], res.traces["round_end_curve"])


@pytest.mark.slow
def test_sharded_equals_single_device_with_diloco():
    tl = schedules.local_sgd(3, 32, 8, 2)
    kw = dict(optimizer="adam", outer_optimizer="nesterov", inner_state="average")
    cpus = jax.devices("cpu")  # tests/conftest.py's 8 virtual CPU devices, whatever the default device
    with jax.default_device(cpus[0]):
        quad = random_quadratic(n=96, d=12, S=3, batch_size=4, seed=2)
        many = methods.local_sgd(quad, tl, GAMMAS, mesh=replica_mesh(8, cpus), **kw)
        one = methods.local_sgd(quad, tl, GAMMAS, mesh=replica_mesh(8, cpus[:1]), **kw)
    assert many.meta["devices"] == 8 and one.meta["devices"] == 1
    np.testing.assert_allclose(many.x_final, one.x_final, rtol=1e-12)


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(outer_optimizer="adam"), "outer_optimizer"),
        (dict(outer_optimizer={"name": "nesterov", "beta": 1.5}), "outer_optimizer.beta"),
        (dict(outer_optimizer={"name": "sgd", "lr": -1}), "outer_optimizer.lr"),
        (dict(optimizer="adam", inner_state="mean"), "inner_state"),
        (dict(inner_state="mean"), "inner_state"),
    ],
)
def test_bad_values_name_the_field(quad, kw, match):
    with pytest.raises(ValueError, match=match) as err:
        methods.local_sgd(quad, schedules.local_sgd(3, 6, 2, 1), 0.1, **kw)
    assert "\n" not in str(err.value)


def test_hydra_localsgd_outer_nesterov_inner_state():
    """``method=localsgd outer_optimizer=nesterov inner_state=keep`` composes into DiLoCo's
    options; the default group is plain averaging; a non-LocalSGD method refuses them."""
    from rpd.cli import checks, specs
    from tests.hydra_helpers import TINY_LINEAR, compose

    tiny = TINY_LINEAR + ["schedule.R=2", "schedule.H=2"]
    spec = specs.run_spec(compose(tiny + ["method=localsgd", "outer_optimizer=nesterov", "inner_state=keep"]))
    assert diloco.resolve_outer(spec.options.outer_optimizer) == diloco.Outer("nesterov", 0.7, 0.9)
    assert spec.options.inner_state == "keep"
    plain = specs.run_spec(compose(tiny + ["method=localsgd"]))
    assert diloco.resolve_outer(plain.options.outer_optimizer) is None
    with pytest.raises(ValueError, match="^outer_optimizer=nesterov: applies to method=localsgd"):
        checks.validate(compose(TINY_LINEAR + ["method=pd", "outer_optimizer=nesterov"]))
