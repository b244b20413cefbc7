"""LocalSGD: sharded replicas on virtual devices, against literal references."""

import jax
import numpy as np
import pytest

import rpd  # noqa: F401
from rpd import schedules
from rpd.analysis import simtime
from rpd.objectives.linear import logistic_regression, random_quadratic
from rpd.train import methods
from rpd.train.localsgd import replica_mesh
from rpd.train.replay import replay


@pytest.fixture(scope="module")
def quad():
    return random_quadratic(n=96, d=12, S=3, batch_size=4, seed=2)


# The sharded tests run on the 8 virtual CPU devices of tests/conftest.py, named explicitly: with a GPU as
# JAX's default device, jax.devices() is the GPU alone.
CPUS = jax.devices("cpu")


def test_virtual_devices_present():
    assert len(CPUS) == 8, "tests/conftest.py sets 8 virtual CPU devices"


@pytest.mark.parametrize("S,N,R,H", [(3, 20, 3, 2), (3, 17, 4, 3), (3, 9, 3, 1)])
def test_equals_literal_replay_every_time_step(quad, S, N, R, H):
    """Per-step replica mean matches the op-by-op replay (local steps stay local, averaging at
    the end of the time step in which a round's last microbatch finishes B on stage 0)."""
    tl = schedules.local_sgd(S, N, R, H)
    res = simtime.on_ticks(methods.local_sgd(quad, tl, [0.05, 0.2]))  # after every tick, off the events
    assert res.axis_name == "sim_time" and len(res.axis) == tl.T + 1
    for gi, g in enumerate([0.05, 0.2]):
        np.testing.assert_allclose(res.curve[gi], replay(quad, tl, g), rtol=1e-11, atol=1e-13)


def test_sharded_equals_single_device():
    tl = schedules.local_sgd(3, 40, 8, 2)
    with jax.default_device(CPUS[0]):  # the objective's arrays on the CPU too, whatever the default device
        quad = random_quadratic(n=96, d=12, S=3, batch_size=4, seed=2)
        many = methods.local_sgd(quad, tl, [0.05, 0.1], mesh=replica_mesh(8, CPUS))
        one = methods.local_sgd(quad, tl, [0.05, 0.1], mesh=replica_mesh(8, CPUS[:1]))
    assert many.meta["devices"] == 8 and one.meta["devices"] == 1
    np.testing.assert_allclose(many.curve, one.curve, rtol=1e-12)
    np.testing.assert_allclose(many.x_final, one.x_final, rtol=1e-12)


def test_h1_is_minibatch_sgd_with_batch_RB():
    S, R, B, N = 3, 4, 3, 32
    obj = random_quadratic(n=96, d=12, S=S, batch_size=B, seed=5)
    big = random_quadratic(n=96, d=12, S=S, batch_size=R * B, seed=5)
    res = methods.local_sgd(obj, schedules.local_sgd(S, N, R, 1), 0.1)
    ref = methods.sgd(big, N // R, 0.1, stride=S)  # one point per SGD step
    np.testing.assert_allclose(res.x_final[0], ref.x_final[0], rtol=1e-12)
    np.testing.assert_allclose(res.traces["round_end_curve"][0], ref.curve[0, 1:], rtol=1e-12)


def test_single_replica_long_round_is_plain_sgd(quad):
    N = 25
    res = methods.local_sgd(quad, schedules.local_sgd(3, N, 1, N), 0.1)
    ref = methods.sgd(quad, N, 0.1)
    np.testing.assert_allclose(res.x_final[0], ref.x_final[0], rtol=1e-12)
    assert res.axis[-1] == 2 * 3 * N  # one replica: microbatches run one at a time, as naive MP


def test_local_steps_are_local():
    """Two replicas with different data drift apart inside a round: after one local step the
    mean differs from one synchronous step with an R-times larger step size (the shard_map
    gradient-summing trap would produce exactly that)."""
    obj = random_quadratic(n=8, d=4, S=2, batch_size=2, seed=0)
    tl = schedules.local_sgd(2, 8, 2, 4)
    res = simtime.on_ticks(methods.local_sgd(obj, tl, 0.1, mesh=replica_mesh(2)))
    np.testing.assert_allclose(res.curve[0], replay(obj, tl, 0.1), rtol=1e-12)


@pytest.mark.slow
def test_noise_and_long_run_finish():
    """A noisy run with many rounds finishes in one compiled program (no dispatch loop)."""
    obj = logistic_regression(n=64, d=16, S=4, batch_size=1, grad_noise=0.5, seed=0)
    tl = schedules.local_sgd(4, 2000, 8, 5)
    res = methods.local_sgd(obj, tl, [0.01, 0.05], seed=3)
    again = methods.local_sgd(obj, tl, [0.01, 0.05], seed=3)
    np.testing.assert_array_equal(res.curve, again.curve)
    assert np.all(np.isfinite(res.curve)) and res.curve[0, -1] < res.curve[0, 0]


@pytest.mark.parametrize("S,N,R,H", [(3, 20, 3, 2), (3, 17, 4, 3)])
def test_costs_timeline_equals_literal_replay(quad, S, N, R, H):
    """Under tB = 2tF, a p2p latency and an averaging cost the time axis is in ticks and the
    compiled LocalSGD still equals the op-by-op replay at every tick."""
    from rpd.schedules.machinery.costs import CostModel

    tl = schedules.local_sgd(S, N, R, H, costs=CostModel(F=1, B=2, p2p=1, allreduce=(2, 0.25)), values=4)
    assert tl.T > schedules.local_sgd(S, N, R, H).T
    res = simtime.on_ticks(methods.local_sgd(quad, tl, [0.05, 0.2]))
    assert len(res.axis) == tl.T + 1
    for gi, g in enumerate([0.05, 0.2]):
        np.testing.assert_allclose(res.curve[gi], replay(quad, tl, g), rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("costs", [False, True])
def test_curve_is_flat_exactly_on_ticks_where_nothing_lands(quad, costs):
    """x̄ only moves when a block update lands: on every other tick inside a round the curve
    repeats the previous value bit for bit (the increments are integrated tick by tick; a
    tree-shaped prefix sum would move x̄ by rounding on ticks with a zero increment)."""
    from rpd.schedules.machinery.costs import CostModel

    kw = dict(costs=CostModel(F=1, B=2, p2p=1, allreduce=(2, 0.25)), values=4) if costs else {}
    tl = schedules.local_sgd(3, 160, 4, 20, **kw)  # rounds of > 160 ticks
    events = methods.local_sgd(quad, tl, [0.05, 0.2])
    landing = set(np.asarray(tl.b_time).ravel().tolist())
    round_start = {0, *(np.asarray(tl.sync_time) + 1).tolist()}
    # Recorded only after the ticks in which an increment lands, a round starts or ends (syncs land).
    assert set((events.axis[1:] - 1).tolist()) <= landing | round_start | set(np.asarray(tl.sync_time).tolist())
    res = simtime.on_ticks(events)
    flat = [t for t in range(tl.T) if t not in landing and t not in round_start]
    assert len(flat) >= 4
    for t in flat:  # curve[:, 1 + t] is f(x̄) after tick t
        np.testing.assert_array_equal(res.curve[:, 1 + t], res.curve[:, t])
    moved = [t for t in sorted(landing) if t not in round_start]
    assert np.any(res.curve[:, [1 + t for t in moved]] != res.curve[:, moved])


def test_untracked_runs_share_one_program_across_costs(quad):
    """Without the curve after every tick the round length is not part of the program: a
    timeline under other costs (longer rounds, the same microbatches per round) reuses it, and
    x̄ at the end is the same, since costs move ticks, not the order of the steps."""
    from rpd.runtime.compile_cache import count_programs
    from rpd.schedules.machinery.costs import CostModel
    from rpd.train.localsgd import round_shape

    unit = schedules.local_sgd(3, 24, 4, 2)
    costly = schedules.local_sgd(3, 24, 4, 2, costs=CostModel(F=1, B=2, p2p=1, allreduce=(3, 0)), values=4)
    assert round_shape(costly)[1] > round_shape(unit)[1]
    a = methods.local_sgd(quad, unit, [0.05, 0.2], track_time=False)
    with count_programs() as n:
        b = methods.local_sgd(quad, costly, [0.05, 0.2], track_time=False)
    assert n["compiled"] == 0
    np.testing.assert_array_equal(b.x_final, a.x_final)
    np.testing.assert_array_equal(b.curve[:, -1], a.curve[:, -1])
