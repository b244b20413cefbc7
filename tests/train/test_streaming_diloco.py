"""Streaming DiLoCo (rpd.train.streaming_diloco): P = 1, τ = 0 is rpd's DiLoCo (LocalSGD with an
outer optimizer) bit for bit; fragments synced in turn with their update τ steps late, on a case
worked by hand in exact binary fractions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rpd  # noqa: F401
from rpd import schedules
from rpd.objectives.base import BlockLayout, Objective
from rpd.objectives.linear import random_quadratic
from rpd.train import diloco, methods
from rpd.train.localsgd import replica_mesh
from rpd.train.streaming_diloco import fragment_of_step, streaming_diloco

GAMMAS = [0.02, 0.1]


@pytest.fixture(scope="module")
def quad():
    return random_quadratic(n=96, d=12, S=3, batch_size=4, seed=2)


@pytest.mark.parametrize("inner", [None, pytest.param("adamw", marks=pytest.mark.slow)])
def test_one_fragment_no_overlap_is_diloco_bit_for_bit(quad, inner):
    S, N, R, H = 3, 24, 4, 3
    # LocalSGD's DiLoCo on one device (sharded, its pmean sums the replicas in another order)
    one = replica_mesh(R, jax.devices("cpu")[:1])
    tl = schedules.local_sgd(S, N, R, H)
    ref = methods.local_sgd(quad, tl, GAMMAS, optimizer=inner, outer_optimizer="nesterov", track_time=False, mesh=one)
    res = streaming_diloco(quad, R, H, N, GAMMAS, optimizer=inner, outer_optimizer="nesterov")
    np.testing.assert_array_equal(res.x_final, ref.x_final)
    # f(θ) at the round ends (after local steps 3 and 6): LocalSGD evaluates them in one batch of
    # rounds, which XLA rounds by its shape (rpd.train.localsgd._round_values): equal to 1e-12
    np.testing.assert_allclose(res.curve[:, [3, 6]], ref.traces["round_end_curve"], rtol=1e-12)


def half_square() -> Objective:
    """f(x) = ½‖x‖² on two blocks of one value each, one batch: g = x, so an SGD step at γ = ½
    halves every coordinate; x⁰ = (1, 1)."""
    vg = lambda data, x, b: (0.5 * jnp.sum(x * x), x)  # noqa: E731
    return Objective(
        "half_square",
        BlockLayout((1, 1)),
        1,
        jnp.ones(2),
        {},
        vg,
        lambda data, x: 0.5 * jnp.sum(x * x),
    )


def test_fragments_in_turn_land_tau_steps_late_by_hand():
    # H = 4, P = 2: fragment 0 (x[0]) syncs after steps 1, 5, ...; fragment 1 (x[1]) after 3, 7;
    # τ = 1: each lands one step later. One replica, γ = ½, outer sgd at lr ½: θ_f <- θ_f − ½ Δ_f.
    # t=0: x = (.5, .5)          t=1: x = (.25, .25), Δ0 = 1 − .25 = .75
    # t=2: x = (.125, .125); θ0 = 1 − .375 = .625, x0 <- .625
    # t=3: x = (.3125, .0625), Δ1 = 1 − .0625 = .9375
    # t=4: x = (.15625, .03125); θ1 = 1 − .46875 = .53125, x1 <- .53125
    # t=5: x = (.078125, .265625), Δ0 = .625 − .078125 = .546875
    # t=6: x = (.0390625, .1328125); θ0 = .625 − .2734375 = .3515625
    np.testing.assert_array_equal(fragment_of_step(np.arange(8), 4, 2), [-1, 0, -1, 1, -1, 0, -1, 1])
    outer = diloco.make_outer("sgd", lr=0.5)
    res = streaming_diloco(half_square(), 1, 4, 7, 0.5, P=2, tau=1, outer_optimizer=outer)
    np.testing.assert_array_equal(res.x_final[0], [0.3515625, 0.53125])
    theta = [(1, 1), (1, 1), (1, 1), (0.625, 1), (0.625, 1), (0.625, 0.53125), (0.625, 0.53125), (0.3515625, 0.53125)]
    np.testing.assert_array_equal(res.curve[0], [0.5 * (a * a + b * b) for a, b in theta])
    # τ = 0: each fragment lands at its own sync: θ0 = 1 − ½(1 − .25) = .625 after step 1, ...
    now = streaming_diloco(half_square(), 1, 4, 2, 0.5, P=2, tau=0, outer_optimizer=outer)
    np.testing.assert_array_equal(now.x_final[0], [0.625, 1.0])


def test_mixing_keeps_part_of_the_local_fragment():
    # α = ½ at the first landing above (after step 2): x0 <- ½ · .125 + ½ · .625 = .375, so step 3
    # starts at (.375, .125): ½‖x‖² = ½(.140625 + .015625) = .078125; θ is not mixed
    outer = diloco.make_outer("sgd", lr=0.5)
    res = streaming_diloco(half_square(), 1, 4, 4, 0.5, P=2, tau=1, alpha=0.5, outer_optimizer=outer)
    np.testing.assert_array_equal(res.x_final[0], [0.625, 1.0])
    np.testing.assert_array_equal(res.traces["loss_z"][0], [1.0, 0.25, 0.0625, 0.078125])  # before each step


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(P=2), "diloco.P=2 must divide H=3"),
        (dict(P=3, H=3, tau=1), "diloco.tau=1 must be < H / P = 1"),
        (dict(P=4, H=4), "diloco.P=4 must be at most the objective's 3 blocks"),
        (dict(alpha=1.0), "diloco.alpha"),
    ],
)
def test_bad_settings_name_the_field(quad, kw, match):
    args = dict(H=3)
    args.update(kw)
    H = args.pop("H")
    with pytest.raises(ValueError, match=match):
        streaming_diloco(quad, 2, H, 8, 0.1, **args)


@pytest.mark.slow  # about 8 s: the LocalSGD timeline's objective compiled afresh
def test_experiments_train_runs_it_as_localsgd_with_fragments(quad):
    """``method=localsgd method.fragments=2 method.overlap=1`` resolves to Streaming DiLoCo's options
    and trains the same θ as the library call with the timeline's R, H, N; another method
    refuses the options in one line."""
    from rpd import registry
    from rpd.cli import specs
    from tests.hydra_helpers import TINY_LINEAR, compose

    tiny = TINY_LINEAR + ["schedule.R=2", "schedule.H=4", "method=localsgd", "outer_optimizer=nesterov"]
    spec = specs.run_spec(compose(tiny + ["method.fragments=2", "method.overlap=1"]))
    assert (spec.options.fragments, spec.options.overlap, spec.options.mixing) == (2, 1, 0.0)
    tl = spec.pipeline.timeline(quad)
    run = registry.run(spec, quad, GAMMAS)
    direct = streaming_diloco(quad, 2, 4, tl.N, GAMMAS, P=2, tau=1, outer_optimizer="nesterov")
    np.testing.assert_array_equal(run.result.x_final, direct.x_final)
    assert run.result.axis_name == "sim_time" and run.result.axis[-1] <= tl.T + 1
    with pytest.raises(ValueError, match="apply to method=localsgd only, not to method=pd"):
        specs.run_spec(compose(TINY_LINEAR + ["method=pd", "method.fragments=2"]))
