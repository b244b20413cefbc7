"""Stochastic time in the plan (docs/plan.md#stochastic-time): a persistent straggler's step by hand,
and jitter at CV 0 or a factor of 1 leaving every number of a row as it was."""

from __future__ import annotations

import pytest
from toy_hardware import toy_hardware

from rpd import registry
from rpd.model.layers import Layer, Model
from rpd.model.plan import plan_one
from rpd.schedules.machinery.jitter import Jitter, Slow, Stochastic

MB = 10**6
# eight layers, F = I = W = 1 ms each: S = 4 stages of two layers, F = 2 ms, B = I + W = 4 ms
TOY = Model(
    "toy",
    tuple(Layer(f"l{i}", params=1000, flops_fwd=1e9, flops_i=1e9, flops_w=1e9, act_bytes=MB) for i in range(8)),
    100,
)


def _row(**kw):
    return plan_one(TOY, toy_hardware(), "1f1b", registry.timeline, 4, 8, how="layers", **kw)


def test_a_slow_last_stage_by_hand():
    """1F1B, S = 4, M = 8, free p2p (the toy layers send no bytes): exact, the step is
    (M + S - 1)(F + B) = 66 ms. With the last rank at f = 2 (F = 4, B = 8 ms) it is the bottleneck
    and never waits: the fill F0 + F1 + F2 (6 ms), its M pairs (8 x 12 ms), the drain B2 + B1 + B0
    (12 ms): 114 ms."""
    assert _row().step_time_s == pytest.approx(66e-3, rel=1e-9)
    slow = _row(stochastic=Stochastic(slow=Slow((3,), 2.0)))
    assert slow.step_time_s == pytest.approx(114e-3, rel=1e-9)


def test_cv_zero_and_factor_one_change_nothing():
    base = _row()
    same = _row(stochastic=Stochastic(jitter=Jitter(0.0, 0.0), slow=Slow((1,), 1.0), seed=4))
    assert same == base


def test_jitter_is_seeded_in_the_plan():
    a = _row(stochastic=Stochastic(jitter=Jitter(0.3, 0.3, 0.3), seed=1))
    b = _row(stochastic=Stochastic(jitter=Jitter(0.3, 0.3, 0.3), seed=1))
    c = _row(stochastic=Stochastic(jitter=Jitter(0.3, 0.3, 0.3), seed=2))
    assert a == b and a.step_time_s != c.step_time_s
