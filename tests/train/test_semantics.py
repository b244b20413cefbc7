"""Every schedule trains with its own weight-version semantics (docs/schedules.md#training-semantics,
rpd.train.semantics)."""

import jax
import numpy as np
import pytest

from rpd import objectives, registry, schedules
from rpd.schedules.machinery.costs import CostModel
from rpd.train import core, methods, plans, semantics
from rpd.train.replay import replay_pipemare

S, M, N, GAMMA = 4, 8, 32, 0.05


@pytest.fixture(scope="module")
def quad():
    return objectives.random_quadratic(n=240, d=24, S=S, batch_size=5, seed=0)


@pytest.fixture(scope="module")
def mlp():
    return objectives.mlp_chain(n=64, width=6, S=S, batch_size=4, seed=1)


def _minibatch_sgd(obj, gamma, Q, stale=False):
    """x_{q+1} = x_q - γ (1/M) Σ_j ∇f_j(x_q) (2BW: at x_{q-1}), by hand."""
    vg = jax.jit(lambda x, b: obj.value_and_grad(obj.data, x, b)[1])
    x = prev = np.asarray(obj.x0)
    for q in range(Q):
        at = prev if stale else x
        g = np.mean([np.asarray(vg(at, (q * M + j) % obj.n_batches)) for j in range(M)], axis=0)
        prev, x = x, x - gamma * g
    return x


SYNC = {
    "gpipe": lambda c: schedules.gpipe(S, N, M, costs=c),
    "1f1b": lambda c: schedules.one_f_one_b(S, N, M, costs=c),
    "interleaved": lambda c: schedules.interleaved(S, N, M, 2, costs=c),
    "zb_h1": lambda c: schedules.zb_h1(S, N, M, costs=c),
    "zb_h2": lambda c: schedules.zb_h2(S, N, M, costs=c, overlapped=True),
    "zb_v": lambda c: schedules.zb_v(S, N, M, costs=c),
    "dualpipe_v": lambda c: schedules.dualpipe_v(S, N, M, costs=c),
    "chimera": lambda c: schedules.chimera(S, N, M, costs=c, values=100),
    "chimera_fd": lambda c: schedules.chimera(S, N, M, costs=c, values=100, concat="forward_doubling"),
}
COSTS = [None, CostModel(F=1, B=2, I=1, W=1, p2p=1, allreduce=(2, 0.01))]


@pytest.mark.slow
@pytest.mark.parametrize("costs", COSTS, ids=["unit", "b2f_latency"])
def test_synchronous_schedules_are_minibatch_sgd_with_batch_MB(quad, costs):
    expect = _minibatch_sgd(quad, GAMMA, N // M)
    finals, times = [], {}
    for name, make in SYNC.items():
        tl = make(costs)
        res = methods.train(quad, tl, [GAMMA, 2 * GAMMA])
        np.testing.assert_allclose(res.x_final[0], expect, rtol=0, atol=1e-13, err_msg=name)
        assert res.axis[-1] == tl.T and res.axis_name == "sim_time"
        finals.append(res.curve[:, -1])
        times[name] = tl.T
    np.testing.assert_allclose(np.ptp(finals, axis=0), 0, atol=1e-12)  # same iterates everywhere
    assert len(set(times.values())) > 3  # ... on different time axes


def test_synchronous_updates_land_at_the_stage_last_backward():
    tl = schedules.zb_h1(S, N, M, costs=CostModel(F=2, B=3, I=2, W=1, p2p=1))
    plan = semantics.synchronous_plan(tl, S, 10)
    q = np.repeat(np.arange(N // M), S)
    for k in range(len(plan.block)):
        flush = plan.read[k, 0]
        s = plan.block[k]
        assert plan.time[k] == tl.b_time[flush * M : (flush + 1) * M, s].max()
    assert sorted(plan.read[:, 0]) == list(q)  # one update per block per flush
    assert np.all(np.diff(plan.time) >= 0) and plan.n_micro == M and plan.fresh.sum() == N // M
    assert np.all(plan.batch[plan.fresh] == (np.arange(N // M) * M) % 10)


def test_chunked_schedule_on_one_block_per_stage(quad):
    """Interleaved with v = 2 on an objective of S*v blocks: same SGD iterates."""
    obj = objectives.random_quadratic(n=240, d=24, S=2 * S, batch_size=5, seed=0)
    tl = schedules.interleaved(S, N, M, 2)
    np.testing.assert_allclose(
        methods.train(obj, tl, [GAMMA]).x_final[0], _minibatch_sgd(obj, GAMMA, N // M), atol=1e-13
    )
    with pytest.raises(ValueError, match="blocks"):
        methods.train(objectives.random_quadratic(n=240, d=24, S=3, batch_size=5), tl, [GAMMA])


def test_chimera_lands_after_its_allreduce():
    tl = schedules.chimera(S, N, M, costs=CostModel(allreduce=(5, 0)), values=1)
    plan, _ = registry.SCHEDULES["chimera"].semantics.plan(tl, S, 10)
    np.testing.assert_array_equal(plan.time, tl.flush_time[plan.read[:, 0]])
    assert np.all(tl.flush_time > tl.b_time.reshape(-1, M, S).max(axis=(1, 2)))  # the all-reduce's gap


def test_chimera_backward_halving_is_minibatch_sgd(quad):
    """Halves of a microbatch are one microbatch to the semantics: one step per flush of M,
    landing after the all-reduce, at the merged timeline's times."""
    tl = schedules.chimera(S, N, M, costs=CostModel(F=2, B=4, allreduce=(3, 0)), values=1, concat="backward_halving")
    res = methods.train(quad, tl, [GAMMA])
    np.testing.assert_allclose(res.x_final[0], _minibatch_sgd(quad, GAMMA, N // M), atol=1e-13)
    plan, _ = registry.SCHEDULES["chimera"].semantics.plan(tl, S, 10)
    np.testing.assert_array_equal(plan.time, tl.flush_time[plan.read[:, 0]])
    assert plan.n_micro == M and res.axis[-1] == tl.T


def test_2bw_is_sgd_with_a_one_step_stale_gradient(quad):
    for costs in COSTS:
        tl = schedules.pipedream_2bw(S, N, M, costs=costs)
        res = methods.train(quad, tl, [GAMMA])
        np.testing.assert_allclose(res.x_final[0], _minibatch_sgd(quad, GAMMA, N // M, stale=True), atol=1e-13)
        assert res.meta["ring_size"] <= 3  # W_k and W_{k-1}, plus the one being written
    with pytest.raises(ValueError, match="M >= S - 1"):
        schedules.pipedream_2bw(8, 16, 4)


@pytest.mark.slow
def test_pipemare_equals_pipedream_on_additive_linear_chains(quad):
    """Forward versions of PipeMare are PD's stashed ones; x^B has no effect on a linear chain."""
    a = methods.train(quad, schedules.pipemare(S, N), [GAMMA, 0.1])
    b = methods.pipedream(quad, schedules.pipedream(S, N), [GAMMA, 0.1])
    np.testing.assert_allclose(a.x_final, b.x_final, atol=1e-14)


@pytest.mark.slow
@pytest.mark.parametrize("costs", COSTS, ids=["unit", "b2f_latency"])
def test_pipemare_equals_the_literal_stage_by_stage_replay(mlp, costs):
    tl = schedules.pipemare(S, 24, costs=costs)
    ref = replay_pipemare(mlp, tl, 0.05)
    res = methods.train(mlp, tl, [0.05])
    np.testing.assert_allclose(res.x_final[0], ref, atol=1e-13)
    pd = methods.pipedream(mlp, schedules.pipedream(S, 24), [0.05])
    assert np.abs(pd.x_final[0] - ref).max() > 1e-4  # stashing matters on a nonlinear chain
    assert res.meta["ring_size"] <= 2 * S  # bounded history: at most the in-flight versions


@pytest.mark.slow
def test_pipemare_options(mlp):
    tl = schedules.pipemare(S, 40)
    plan = semantics.pipemare_plan(tl, mlp.n_batches, t1=True, t1_window=20, t2=True, predict=True)
    m, a = tl.update_mb, tl.update_stage
    steady = m >= 2 * S
    # steady state: forward staleness S - 1 - r, backward extrapolated back by the same
    np.testing.assert_array_equal(plan.horizon[steady], np.broadcast_to(S - 1 - np.arange(S), (steady.sum(), S)))
    later = np.arange(S)[None, :] >= a[:, None]
    np.testing.assert_array_equal(plan.horizon_bwd, -np.where(later, plan.horizon, 0))
    # T1: the last stage (no delay) never scaled; stage 0 (delay S - 1) by τ^-(1 - i/window)
    assert np.all(plan.scale[a == S - 1] == 1.0)
    k0 = np.nonzero((a == 0) & (m == 2 * S))[0][0]
    assert plan.scale[k0] == pytest.approx((S - 1.0) ** -(1 - 2 * S / 20))
    assert plan.scale[np.nonzero(a == 0)[0][0]] == 1.0  # m = 0 saw no delay
    assert np.all(plan.scale[m >= 20] == 1.0)
    base = methods.train(mlp, tl, [0.05]).x_final
    for opts in ({"t1": True}, {"t2": True}, {"predict": True}):
        assert np.abs(methods.train(mlp, tl, [0.05], **opts).x_final - base).max() > 1e-6, opts


@pytest.mark.slow
def test_prediction_with_no_staleness_is_plain(quad):
    one = objectives.random_quadratic(n=60, d=6, S=1, batch_size=5, seed=0)
    tl = schedules.pipedream(1, 10)
    a = methods.train(one, tl, [0.1], predict=True)
    b = methods.pipedream(one, tl, [0.1])
    np.testing.assert_array_equal(a.x_final, b.x_final)
    c = methods.train(quad, schedules.pipedream(S, N), [GAMMA], predict=True, ema=0.5)
    assert np.abs(c.x_final - methods.pipedream(quad, schedules.pipedream(S, N), [GAMMA]).x_final).max() > 1e-8


def test_bad_options_name_the_option(quad):
    with pytest.raises(ValueError, match="t1"):
        methods.train(quad, schedules.gpipe(S, N, M), [GAMMA], t1=True)
    with pytest.raises(ValueError, match="predict"):
        methods.train(quad, schedules.pipedream_2bw(S, N, M), [GAMMA], predict=True)
    with pytest.raises(TypeError, match="stash"):
        methods.train(quad, schedules.pipedream(S, N), [GAMMA], stash=False)
    with pytest.raises(ValueError, match="ema"):
        methods.train(quad, schedules.pipedream(S, N), [GAMMA], predict=True, ema=1.0)
    with pytest.raises(ValueError, match="chain"):
        lm_like = objectives.random_quadratic(n=240, d=24, S=S, batch_size=5)
        import dataclasses

        methods.train(dataclasses.replace(lm_like, chain=None), schedules.pipemare(S, N), [GAMMA])


def test_two_point_ring_is_checked(mlp):
    plan = semantics.pipemare_plan(schedules.pipemare(S, 24), mlp.n_batches)
    C = plans.ring_size(plan, S)
    assert C > plans.ring_size(plan._replace(read_bwd=None), S) - 1
    with pytest.raises(core.RingOverflowError):
        methods.run_plan(mlp, plan, 0.05, ring_size=C - 1)


def test_localsgd_goes_to_local_sgd(quad):
    tl = schedules.local_sgd(S, 16, 4, 2)
    np.testing.assert_array_equal(methods.train(quad, tl, [GAMMA]).curve, methods.local_sgd(quad, tl, [GAMMA]).curve)


def _whole_two_point(plan):
    """The same plan with every update computing its own whole two-point gradient."""
    K = len(plan.block)
    return plan._replace(fresh=np.ones(K, bool), slot=np.zeros(K, np.int32))


@pytest.mark.slow
@pytest.mark.parametrize(
    "opts", [{}, {"t1": True}, {"t2": True}, {"predict": True}], ids=["plain", "t1", "t2", "predict"]
)
def test_pipemare_stage_wise_equals_the_whole_two_point_gradient(mlp, opts):
    """One stage's backward per update, on the microbatch's kept activations, is the gradient
    of a whole two-point chain pass per update."""
    tl = schedules.pipemare(S, 32)
    plan = semantics.pipemare_plan(tl, mlp.n_batches, t1_window=16, **opts)
    assert plans.stage_wise(plan, S) and not plans.stage_wise(_whole_two_point(plan), S)
    # every F of a microbatch precedes its first update, which reads all its forward versions
    current = plans.versions_before(plan.block, S)[:-1]
    assert np.all(plan.read[plan.fresh] <= current[plan.fresh])
    fast = methods.run_plan(mlp, plan, [0.05, 0.1])
    whole = methods.run_plan(mlp, _whole_two_point(plan), [0.05, 0.1])
    scale = np.abs(whole.x_final).max()
    np.testing.assert_allclose(fast.x_final, whole.x_final, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(fast.curve, whole.curve, rtol=1e-12)
    np.testing.assert_allclose(fast.traces["block_grad_norm"], whole.traces["block_grad_norm"], rtol=1e-11)
    # the forward loss is reported once per microbatch, at its fresh update
    loss = fast.traces["loss_z"]
    assert np.all(np.isnan(loss[:, ~plan.fresh])) and np.all(np.isfinite(loss[:, plan.fresh]))
    np.testing.assert_allclose(loss[:, plan.fresh], whole.traces["loss_z"][:, plan.fresh], rtol=1e-12)
    assert fast.meta["ring_size"] <= whole.meta["ring_size"]


@pytest.mark.slow
def test_stage_wise_plans_are_checked(mlp):
    plan = semantics.pipemare_plan(schedules.pipemare(S, 24), mlp.n_batches)
    swapped = plan._replace(block=plan.block.copy())
    k = np.nonzero(~plan.fresh)[0][:2]
    swapped.block[k] = swapped.block[k[::-1]]  # two updates of the first microbatch out of chain order
    with pytest.raises(ValueError, match="down the chain"):
        plans.stage_wise(swapped, S)
    # a stale backward read of the updated block is served by a larger ring, and checked
    k = np.nonzero(plan.block == 0)[0][-1]
    stale = plan._replace(read_bwd=plan.read_bwd.copy())
    stale.read_bwd[k, 0] = 0
    C = plans.ring_size(plan, S)
    assert plans.ring_size(stale, S) > C
    with pytest.raises(core.RingOverflowError):
        methods.run_plan(mlp, stale, 0.05, ring_size=C)


def test_a_reference_on_pds_ring_and_slots_shares_its_program_bit_for_bit(quad):
    """1F1B with a flush every microbatch given PD's ring and gradient slots (``n_slots``) runs in
    PD's program: the same K = N·S updates, records and options, so no program is built after PD's
    (counted), and its curve is the one its own ring and one slot give, bit for bit (a larger ring
    and more slots hold versions and gradients no update reads). Without the slots it is another
    program. E18 (rpd.studies.kappa_scale) runs every reference this way."""
    from rpd.runtime.compile_cache import count_programs

    n = 12
    pd_plan, slots = plans.pipedream_plan(schedules.pipedream(S, n), quad.n_batches)
    ring = plans.ring_size(pd_plan, S)
    at = np.arange(S, n * S + 1, 2 * S)
    grid = [GAMMA / 2, GAMMA]
    ref = schedules.one_f_one_b(S, n, 1)
    methods.train(quad, schedules.pipedream(S, n), grid, axis="block_update", at=at, ring_size=ring, n_slots=slots)
    with count_programs() as shared_count:
        shared = methods.train(quad, ref, grid, axis="block_update", at=at, ring_size=ring, n_slots=slots)
    with count_programs() as own_count:
        own = methods.train(quad, ref, grid, axis="block_update", at=at)
    assert (shared_count["compiled"], shared_count["from_cache"]) == (0, 0)
    assert own_count["compiled"] + own_count["from_cache"] == 1
    # by hand: PD keeps NOAM = S gradients in flight; stage 0 applies S - 1 updates between a
    # microbatch's forward and its backward, so S versions of a block are read
    assert (slots, ring) == (S, S)
    np.testing.assert_array_equal(shared.curve, own.curve)
    with pytest.raises(ValueError, match="n_slots"):
        methods.train(quad, ref, grid, n_slots=0)
