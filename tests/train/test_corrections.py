"""Correction arms (rpd.train.corrections) against a PipeDream replay written from the formulas."""

import numpy as np
import optax
import pytest
from optax_replay import replay_pd

import rpd  # noqa: F401
from rpd import schedules
from rpd.objectives.linear import random_quadratic
from rpd.train import corrections, methods, optimizers, plans

S, N, LR = 4, 10, 2.0**-5


@pytest.fixture(scope="module")
def quad():
    return random_quadratic(n=120, d=24, S=S, batch_size=10, seed=3)


def test_pd_stage_delays_are_the_closed_form():
    plan, _ = plans.pipedream_plan(schedules.pipedream(S, N), 7)
    assert corrections.block_delays(plan, S) == tuple(S - 1 - s for s in range(S))


def test_pipemare_lr_equals_the_replay(quad):
    """Adam with α / τ_s^(1 - min(k/K, 1)) per stage, τ_s = S - 1 - s, K = 3."""
    tl = schedules.pipedream(S, N)
    opt = optimizers.make("adam", correction={"name": "pipemare_lr", "window": 3})
    res = methods.pipedream(quad, tl, [LR], optimizer=opt)
    ref = replay_pd(
        quad,
        tl,
        lambda s: optax.adam(LR),
        scale_of=lambda s, k: max(S - 1 - s, 1) ** -(1 - min(k / 3, 1)),
    )
    np.testing.assert_allclose(res.x_final[0], ref, rtol=1e-12, atol=1e-14)
    assert res.meta["optimizer"]["correction"] == {"name": "pipemare_lr", "window": 3, "taus": [3, 2, 1, 0]}


def test_delay_beta1_equals_the_replay(quad):
    """Nesterov momentum with β_s = 0.9 + τ_s (0.99 - 0.9) / S per stage."""
    tl = schedules.pipedream(S, N)
    res = methods.pipedream(quad, tl, [LR], optimizer=optimizers.make("nesterov", correction="delay_beta1"))
    beta = lambda s: 0.9 + (S - 1 - s) * (0.99 - 0.9) / S
    ref = replay_pd(quad, tl, lambda s: optax.sgd(LR, momentum=beta(s), nesterov=True))
    np.testing.assert_allclose(res.x_final[0], ref, rtol=1e-12, atol=1e-14)


def test_dc_asgd_equals_the_replay_at_the_stashed_point(quad):
    """Momentum fed g + λ g ⊙ g ⊙ (w_t - w_stale), w_stale the weights block s's gradient read
    (PipeDream's stash); λ large enough to matter."""
    tl = schedules.pipedream(S, N)
    lam = 3.0
    res = methods.pipedream(
        quad, tl, [LR], optimizer={"name": "momentum", "correction": "dc_asgd", "correction_lam": lam}
    )
    ref = replay_pd(
        quad, tl, lambda s: optax.sgd(LR, momentum=0.9), grad_hook=lambda g, w, v: g + lam * g * g * (w - v)
    )
    plain = replay_pd(quad, tl, lambda s: optax.sgd(LR, momentum=0.9))
    np.testing.assert_allclose(res.x_final[0], ref, rtol=1e-12, atol=1e-14)
    assert np.abs(res.x_final[0] - plain).max() > 1e-6  # the correction moved the iterates


@pytest.mark.slow
def test_corrections_are_identities_without_delay(quad):
    """No staleness (minibatch SGD's plan): τ_s = 0, w_t = w_stale: each arm is its optimizer."""
    plain = methods.sgd(quad, 6, [LR], optimizer="adam")
    for c in corrections.NAMES:
        res = methods.sgd(quad, 6, [LR], optimizer=optimizers.make("adam", correction=c))
        np.testing.assert_allclose(res.x_final, plain.x_final, rtol=1e-14)


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda q: optimizers.make("sgd", correction="delay_beta1"),
            "^optimizer.correction=delay_beta1: optimizer sgd",
        ),
        (lambda q: optimizers.make("adam", correction="nag"), "^optimizer.correction"),
        (lambda q: optimizers.make("adam", correction={"name": "dc_asgd", "lam": -1}), "^optimizer.correction_lam"),
        (lambda q: optimizers.resolve({"name": "adam", "correction_lam": 1.0}), "without optimizer.correction"),
        (
            lambda q: methods.local_sgd(
                q, schedules.local_sgd(S, 8, 2, 2), LR, optimizer={"name": "adam", "correction": "dc_asgd"}
            ),
            "^optimizer.correction=dc_asgd: LocalSGD",
        ),
        (
            lambda q: methods.train(
                q, schedules.pipemare(S, 8), LR, optimizer=optimizers.make("adam", correction="dc_asgd")
            ),
            "^optimizer.correction=dc_asgd: this plan's gradient reads two points",
        ),
    ],
)
def test_refused_where_it_does_not_apply(quad, call, match):
    with pytest.raises(ValueError, match=match) as err:
        call(quad)
    assert "\n" not in str(err.value)
