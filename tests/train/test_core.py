"""The stale block-SGD core and its PD / RPD / SGD front-ends, on cases with known answers."""

import jax
import numpy as np
import pytest

import rpd  # noqa: F401
from rpd import schedules
from rpd.objectives.linear import logistic_regression, random_quadratic
from rpd.train import core, methods, plans, ring_reads
from rpd.train.replay import replay


@pytest.fixture(scope="module")
def quad():
    return random_quadratic(n=120, d=24, S=4, batch_size=10, seed=3)


def _naive_block_sgd(obj, blocks, batches, reads, gamma):
    """Literal stale block SGD with the full iterate history (the reference code's way)."""
    X, y = np.asarray(obj.data["X"]), np.asarray(obj.data["y"])
    B, seg = obj.batch_size, obj.layout.segment_ids
    hist = [np.zeros(obj.D)]
    versions = np.zeros(obj.S, int)
    per_block = [[np.zeros(int(np.sum(seg == r)))] for r in range(obj.S)]
    for a, b, read in zip(blocks, batches, reads):
        z = np.concatenate([per_block[r][read[r]] for r in range(obj.S)])
        Xb, yb = X[b * B : (b + 1) * B], y[b * B : (b + 1) * B]
        g = Xb.T @ (Xb @ z - yb) / B
        x = hist[-1].copy()
        x[seg == a] -= gamma * g[seg == a]
        per_block[a].append(x[seg == a])
        versions[a] += 1
        hist.append(x)
    return np.array([0.5 * np.mean((X @ h - y) ** 2) for h in hist])


def test_three_iterations_by_hand():
    """S = 2 blocks of one coordinate, f(x) = ((x0 + x1 - 1)^2 + (x0 - x1)^2) / 4 on one batch
    of two rows; updates a = 0, 1, 0 with block 1 read one update stale at k = 2."""
    obj = random_quadratic(n=2, d=2, S=2, batch_size=2, seed=0)
    X = np.array([[1.0, 1.0], [1.0, -1.0]])
    y = np.array([1.0, 0.0])
    data = dict(obj.data, X=jax.numpy.asarray(X), y=jax.numpy.asarray(y))
    obj = type(obj)(
        **{**obj.__dict__, "data": data, "loss": lambda d, x: 0.5 * jax.numpy.mean((d["X"] @ x - d["y"]) ** 2)}
    )
    g = 0.5
    plan = plans.UpdatePlan(
        block=np.array([0, 1, 0], np.int32),
        batch=np.zeros(3, np.int32),
        read=np.array([[0, 0], [1, 0], [1, 0]], np.int32),
        fresh=np.ones(3, bool),
        slot=np.zeros(3, np.int32),
        time=np.arange(3, dtype=np.int32),
    )
    res = methods.run_plan(obj, plan, g)
    # grad f(x) = X^T (X x - y) / 2 = (x0 - 1/2, x1 - 1/2) for this X, y.
    # k=0: z=(0,0) -> x0 = 0 - 0.5*(-0.5) = 0.25
    # k=1: z=(0.25,0) -> x1 = 0.25
    # k=2: z=(0.25, 0) (block 1 stale) -> x0 = 0.25 - 0.5*(0.25-0.5) = 0.375
    np.testing.assert_allclose(res.x_final[0], [0.375, 0.25], rtol=0, atol=1e-15)
    f = lambda x: 0.5 * np.mean((X @ x - y) ** 2)  # noqa: E731
    np.testing.assert_allclose(
        res.curve[0], [f(np.zeros(2)), f(np.array([0.25, 0])), f(np.array([0.25, 0.25])), f(np.array([0.375, 0.25]))]
    )


def test_zero_delay_is_block_sgd(quad):
    K = 40
    res = methods.rpd(quad, K, 0.05, delta=5, seed=1, delays="zero")
    plan = plans.rpd_plan(1, K, quad.S, quad.n_batches, 5, delays="zero")
    ref = _naive_block_sgd(quad, plan.block, plan.batch, plan.read, 0.05)
    assert np.all(plan.read == plans.versions_before(plan.block, quad.S)[:-1])
    np.testing.assert_allclose(res.curve[0], ref, rtol=1e-12)


@pytest.mark.slow
def test_uniform_delays_match_full_history_reference(quad):
    K, delta = 60, 12
    res = methods.rpd(quad, K, [0.02, 0.05], delta=delta, seed=2)
    plan = plans.rpd_plan(2, K, quad.S, quad.n_batches, delta)
    for gi, g in enumerate([0.02, 0.05]):
        np.testing.assert_allclose(
            res.curve[gi], _naive_block_sgd(quad, plan.block, plan.batch, plan.read, g), rtol=1e-12
        )
    assert res.meta["ring_size"] <= delta + 1


@pytest.mark.slow
@pytest.mark.parametrize("S,N,noam", [(4, 12, None), (3, 7, 2), (4, 6, 1)])
def test_pipedream_equals_weight_stashing_replay(S, N, noam):
    obj = random_quadratic(n=60, d=12, S=S, batch_size=10, seed=1)
    tl = schedules.pipedream(S, N, noam)
    res = methods.pipedream(obj, tl, [0.03, 0.08], axis="sim_time")
    for gi, g in enumerate([0.03, 0.08]):
        np.testing.assert_allclose(res.curve[gi], replay(obj, tl, g), rtol=1e-12, atol=1e-14)
    assert res.meta["ring_size"] <= tl.noam + 1


def test_pipedream_under_costs_equals_replay_on_ticks():
    """With tB = 2tF and a p2p latency, updates land at the end of their B's last tick and the
    compiled PD equals the weight-stashing replay tick by tick."""
    from rpd.schedules.machinery.costs import CostModel

    obj = random_quadratic(n=60, d=12, S=4, batch_size=10, seed=1)
    tl = schedules.pipedream(4, 12, costs=CostModel(F=1, B=2, p2p=1))
    res = methods.pipedream(obj, tl, [0.03, 0.08], axis="sim_time")
    assert len(res.axis) == tl.T + 1
    for gi, g in enumerate([0.03, 0.08]):
        np.testing.assert_allclose(res.curve[gi], replay(obj, tl, g), rtol=1e-12, atol=1e-14)


def test_rpd_with_pd_plan_reproduces_pd(quad):
    """RPD fed PD's block order, data order and exact delay table is PD."""
    from rpd.schedules.machinery.delays import delay_table

    tl = schedules.pipedream(quad.S, 15)
    pd = methods.pipedream(quad, tl, 0.05, axis="block_update")
    r = methods.rpd(
        quad,
        tl.K,
        0.05,
        delta=0,
        delays=delay_table(tl),
        block_order=tl.update_stage,
        batch_order=tl.update_mb % quad.n_batches,
    )
    np.testing.assert_allclose(r.curve, pd.curve, rtol=1e-12)


def test_sgd_converges_on_quadratic(quad):
    res = methods.sgd(quad, 300, 1.0 / quad.L)
    assert res.curve[0, -1] < 1e-6 * res.curve[0, 0]


def test_pd_converges_at_safe_step(quad):
    res = methods.pipedream(quad, schedules.pipedream(quad.S, 200), 0.2 / quad.L)
    assert res.curve[0, -1] < 1e-3 * res.curve[0, 0]


def test_too_small_ring_raises(quad):
    tl = schedules.pipedream(quad.S, 10)
    plan, slots = plans.pipedream_plan(tl, quad.n_batches)
    C = plans.ring_size(plan, quad.S)
    assert 2 <= C <= tl.noam + 1
    methods.run_plan(quad, plan, 0.1, ring_size=C, n_slots=slots)
    with pytest.raises(core.RingOverflowError, match="ring"):
        methods.run_plan(quad, plan, 0.1, ring_size=C - 1, n_slots=slots)


def test_second_call_does_not_recompile(quad):
    tl = schedules.pipedream(quad.S, 9)
    methods.pipedream(quad, tl, [0.1, 0.2])
    plan, slots = plans.pipedream_plan(tl, quad.n_batches)
    opts = core.CoreOptions(plans.ring_size(plan, quad.S), slots, tl.T)
    fn = core.make_run(quad, opts)
    before = fn._cache_size()
    methods.pipedream(quad, tl, [0.3, 0.05])  # new step sizes, same shapes
    assert fn._cache_size() == before == 1


@pytest.mark.slow
def test_seeds_reproducible_and_distinct(quad):
    a = methods.rpd(quad, 50, 0.05, delta=8, seed=4)
    b = methods.rpd(quad, 50, 0.05, delta=8, seed=4)
    c = methods.rpd(quad, 50, 0.05, delta=8, seed=5)
    np.testing.assert_array_equal(a.curve, b.curve)
    assert not np.allclose(a.curve, c.curve)


@pytest.mark.slow
def test_gradient_noise_is_per_block_and_seeded():
    obj = logistic_regression(n=40, d=8, S=2, batch_size=4, grad_noise=0.5, seed=0)
    a = methods.rpd(obj, 30, 0.1, delta=2, seed=0)
    b = methods.rpd(obj, 30, 0.1, delta=2, seed=0)
    quiet = logistic_regression(n=40, d=8, S=2, batch_size=4, grad_noise=0.0, seed=0)
    c = methods.rpd(quiet, 30, 0.1, delta=2, seed=0)
    np.testing.assert_array_equal(a.curve, b.curve)
    assert not np.allclose(a.curve, c.curve)


def test_divergence_is_recorded_not_raised(quad):
    res = methods.sgd(quad, 200, [1.0 / quad.L, 50.0 / quad.L])
    assert list(res.diverged) == [False, True]


def test_bad_arguments_name_the_field(quad):
    with pytest.raises(ValueError, match="gamma"):
        methods.sgd(quad, 5, -0.1)
    with pytest.raises(ValueError, match="delta"):
        methods.rpd(quad, 5, 0.1, delta=-1)
    with pytest.raises(ValueError, match="S="):
        methods.pipedream(quad, schedules.pipedream(3, 4), 0.1)
    with pytest.raises(ValueError, match="delays"):
        methods.rpd(quad, 5, 0.1, delta=2, delays="gaussian")


def test_rpd_draws_follow_spec_order():
    """Iteration k draws, from fold_in(key, k) split in three: block ~ U{0..S-1}, batch
    ~ U{0..nb-1}, then S delays ~ U{0..min(delta, k)} -- checked against eager jax.random."""
    K, S, nb, delta = 40, 5, 6, 9
    a, b, d = map(np.asarray, plans._sample_rpd(7, delta, K, S, nb, "uniform", "uniform", "uniform"))
    key = jax.random.fold_in(jax.random.key(7), 1)
    for k in (0, 1, 2, 9, 10, 39):
        kb, kbatch, kd = jax.random.split(jax.random.fold_in(key, k), 3)
        assert a[k] == int(jax.random.randint(kb, (), 0, S))
        assert b[k] == int(jax.random.randint(kbatch, (), 0, nb))
        np.testing.assert_array_equal(d[k], jax.random.randint(kd, (S,), 0, min(delta, k) + 1))
    assert d[0].max() == 0 and d.max() <= delta and a.max() < S and b.max() < nb


def test_gamma_that_is_not_a_number_names_gamma(quad):
    tl = schedules.pipedream(4, 4)
    for bad in (["a"], "fast", {"g": 1}):
        with pytest.raises(TypeError, match=r"^gamma must be a number or a 1-d array of numbers, got "):
            methods.pipedream(quad, tl, bad)
    with pytest.raises(TypeError, match=r"^gamma must be a finite number, got nan$"):  # None -> NaN
        methods.pipedream(quad, tl, [0.1, None])


@pytest.mark.parametrize("sizes", [(5, 5, 5, 5), (6, 6, 5, 5, 5), (1,), (3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2)])
@pytest.mark.parametrize("velocity", [False, True])
def test_the_two_ring_reads_are_the_same_values_bit_for_bit(sizes, velocity):
    """The core reads a mixed point with a dynamic slice per block (few blocks) or one gather of
    the block windows (many): the same numbers, for even and uneven layouts, with and without
    the prediction along the velocity ring."""
    from rpd.objectives.base import BlockLayout

    layout = BlockLayout(sizes)
    rng = np.random.default_rng(len(sizes))
    C, D, P = 7, layout.D, max(sizes)
    ring = rng.standard_normal((C, D + P))
    vel = rng.standard_normal((C, D + P)) if velocity else None
    horizon = rng.uniform(0, 3, layout.S) if velocity else None
    for _ in range(5):
        version = rng.integers(0, 50, layout.S).astype(np.int32)
        reads = [
            jax.jit(read, static_argnums=2)(ring, version, layout, vel, horizon)
            for read in (ring_reads.gather_slices, ring_reads.gather_windows)
        ]
        assert reads[0].shape == (D,)
        np.testing.assert_array_equal(reads[0], reads[1])
        rows = version % C
        w = np.concatenate([ring[rows[r], o : o + s] for r, (o, s) in enumerate(zip(layout.offsets, sizes))])
        hu = np.concatenate(
            [
                horizon[r] * vel[rows[r], o : o + s] if velocity else np.zeros(s)
                for r, (o, s) in enumerate(zip(layout.offsets, sizes))
            ]
        )
        # w - h u to one rounding of its terms (XLA may fuse it into a multiply-add)
        assert np.all(np.abs(reads[0] - (w - hu)) <= 2 * np.finfo(float).eps * (np.abs(w) + np.abs(hu)))
