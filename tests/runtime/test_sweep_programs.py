"""Programs a sweep over S compiles (docs/running.md#one-figure-or-all-of-them): PD's
core one per S, since S fixes the block layout, and none again for a rebuilt objective or
another seed; RPD's plan sampler one for the whole sweep (chunks of iterations, S traced), with
the draws of the exact shapes bit for bit."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rpd import objectives as O
from rpd import schedules
from rpd.runtime.compile_cache import count_programs
from rpd.train import methods, plans

SWEEP_S = (2, 4, 8, 16, 32)
GAMMAS = [2.0**-6, 2.0**-4]


def _sweep(seed: int) -> list[int]:
    counts = []
    for S in SWEEP_S:
        obj = O.nesterov_quadratic(48, 32, S, 4, mu=0.05, seed=seed)
        with count_programs() as n:
            methods.pipedream(obj, schedules.pipedream(S, 6), GAMMAS, seed=seed)
        counts.append(n["compiled"])
    return counts


@pytest.mark.slow
def test_a_pd_sweep_over_S_compiles_one_program_per_S_and_none_again():
    assert _sweep(seed=11) == [1] * len(SWEEP_S)
    assert _sweep(seed=12) == [0] * len(SWEEP_S)  # new numbers, the same programs


@functools.partial(
    jax.jit,
    static_argnames=("K", "S", "n_batches", "delays", "block_order", "batch_order"),
    # integer draws, as in the sampler: LLVM's passes change no bit, only the compile time
    compiler_options={"xla_backend_optimization_level": 0},
)
def _exact_draws(seed, delta, K, S, n_batches, delays, block_order, batch_order):
    """The sampler as it was with every shape exact (one program per K, S and batch count)."""
    key = jax.random.fold_in(jax.random.key(seed), 1)
    k = jnp.arange(K)

    def draw(k):
        k_block, k_batch, k_delay = jax.random.split(jax.random.fold_in(key, k), 3)
        cap = jnp.minimum(delta, k)
        d = {
            "uniform": lambda: jax.random.randint(k_delay, (S,), 0, cap + 1),
            "max": lambda: jnp.full((S,), cap),
            "zero": lambda: jnp.zeros((S,), cap.dtype),
        }[delays]()
        return jax.random.randint(k_block, (), 0, S), jax.random.randint(k_batch, (), 0, n_batches), d

    a, b, d = jax.vmap(draw)(k)
    a = k % S if block_order == "cyclic" else a
    b = k % n_batches if batch_order == "cyclic" else b
    return a.astype(jnp.int32), b.astype(jnp.int32), d.astype(jnp.int32)


@pytest.mark.parametrize(
    "seed, delta, K, S, n_batches, delays, block_order, batch_order",
    [
        (0, 9, 40, 5, 6, "uniform", "uniform", "uniform"),
        (3, 60, 1500, 8, 120, "uniform", "uniform", "uniform"),
        (7, 1000, 1025, 3, 7, "uniform", "cyclic", "uniform"),
        (1, 4, 64, 17, 5, "max", "uniform", "cyclic"),
        (2, 0, 300, 32, 150, "zero", "cyclic", "cyclic"),
        (5, 2**31 - 1, 2049, 1, 1, "uniform", "uniform", "uniform"),
        (4, 30, 17000, 3, 9, "uniform", "uniform", "uniform"),  # past 16 chunks: S_b = 4
    ],
)
def test_the_bucketed_sampler_draws_what_the_exact_shapes_draw(
    seed, delta, K, S, n_batches, delays, block_order, batch_order
):
    got = plans._sample_rpd(seed, delta, K, S, n_batches, delays, block_order, batch_order)
    want = _exact_draws(np.int32(seed), delta, K, S, n_batches, delays, block_order, batch_order)
    for g, w in zip(got, want):
        assert g.dtype == np.int32 and g.shape == w.shape
        np.testing.assert_array_equal(g, np.asarray(w))


def test_an_rpd_sweep_over_S_samples_its_plans_with_one_program():
    """The sampler draws chunks of iterations with S, delta, the batch count and the first
    iteration traced: the five plans, K = 100 S as a sweep over S at a fixed N has them, and
    another seed, delta and batch count build one program between them. The sampler's programs
    already in memory (an earlier test's RPD run) are dropped first, and a program loaded from the
    persistent cache counts as built: the count is the same whatever ran before in the process."""
    plans._sample_chunk.clear_cache()
    with count_programs() as n:
        plans_ = [plans.rpd_plan(0, 100 * S, S, 12, S * S) for S in SWEEP_S]
        plans.rpd_plan(1, 1000, 3, 40, 7)
    assert n["compiled"] + n["from_cache"] == 1
    assert [p.read.shape for p in plans_] == [(100 * S, S) for S in SWEEP_S]
