"""Compiled programs are keyed by what they compute: a rebuilt equal objective, or
one that differs only in its seed, runs the program compiled for the first one, and gets the
same numbers as before programs were shared."""

from pathlib import Path

import jax
import numpy as np
import pytest

from rpd import objectives as O
from rpd import schedules
from rpd.analysis import simtime
from rpd.objectives import nanochat as nc
from rpd.runtime.compile_cache import count_programs
from rpd.train import core, localsgd, methods

TEXT = "".join(
    f"{w} " for w in np.random.default_rng(0).choice(["the", "cat", "sat", "on", "a", "mat", "dog", "ran"], 3000)
)
LM = dict(batch_size=4, seq_len=16, width=32, heads=2, heldout_frac=0.2, heldout_batches=3)

BUILDERS = {
    "random_quadratic": lambda seed: O.random_quadratic(64, 16, 4, 4, seed=seed),
    "nesterov_quadratic": lambda seed: O.nesterov_quadratic(64, 16, 4, 4, mu=0.05, seed=seed),
    "logistic_noisy": lambda seed: O.logistic_regression(64, 16, 4, 4, lam=1e-3, grad_noise=0.3, seed=seed),
    "mlp_chain": lambda seed: O.mlp_chain(32, 6, 4, 4, seed=seed),
    "nanochat": lambda seed: nc.nanochat(4, text=TEXT, seed=seed, **LM),
}


def _runs(obj):
    """A PD run (the core) and a LocalSGD run (the sharded program) of ``obj``."""
    return (
        methods.pipedream(obj, schedules.pipedream(4, 10), [0.01, 0.02], seed=1),
        methods.local_sgd(obj, schedules.local_sgd(4, 8, 2, 2), [0.01], seed=1),
    )


def test_count_programs_counts_what_xla_builds():
    f = jax.jit(lambda x: x * 3.0 - 1.0)
    x = jax.numpy.ones(5)
    with count_programs() as first:
        f(x)
    with count_programs() as again:
        f(x)
    with count_programs() as new_shape:
        f(jax.numpy.ones((2, 5)))
    assert first["compiled"] >= 1 and first["from_cache"] == 0 and first["seconds"] > 0
    assert again == {"compiled": 0, "from_cache": 0, "seconds": 0.0}  # in memory: nothing built
    assert new_shape["compiled"] >= 1


def test_program_key_is_shapes_and_statics():
    key = lambda **kw: O.random_quadratic(**{**dict(n=64, d=16, S=4, batch_size=4, seed=0), **kw}).program_key
    assert key() == key() == key(seed=3)  # numbers are not part of it
    assert key() != key(n=128) and key() != key(S=2) and key() != key(batch_size=8)
    lg = lambda **kw: O.logistic_regression(**{**dict(n=64, d=16, S=4, batch_size=4), **kw}).program_key
    assert lg(grad_noise=0.1) == lg(grad_noise=0.5, seed=2)  # σ_g is an argument; only "noisy" is static
    assert lg(grad_noise=0.0) != lg(grad_noise=0.1) and lg(lam=1e-3) != lg(lam=1e-2)
    mu = lambda m: O.nesterov_quadratic(64, 16, 4, 4, mu=m).program_key
    assert mu(0.01) != mu(0.02)
    prog = O.random_quadratic(64, 16, 4, 4).program()
    assert prog.data is None and prog.f_star is None and isinstance(prog.x0, jax.ShapeDtypeStruct)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "random_quadratic",
        "nesterov_quadratic",
        "logistic_noisy",
        "mlp_chain",
        pytest.param("nanochat", marks=pytest.mark.slow),
    ],
)
def test_rebuilt_objective_does_not_recompile(name):
    build = BUILDERS[name]
    first = build(0)
    _runs(first)  # compiles (unless an earlier test did)
    programs = core._program.cache_info().currsize, localsgd._compiled.cache_info().currsize
    with count_programs() as n:
        same, other_seed = build(0), build(1)
        _runs(same)
        _runs(other_seed)
    assert (n["compiled"], n["from_cache"]) == (0, 0), f"{n} for rebuilt {name} objectives"
    assert (core._program.cache_info().currsize, localsgd._compiled.cache_info().currsize) == programs
    assert same is not first and same.program_key == first.program_key == other_seed.program_key


@pytest.mark.slow
def test_shared_program_gives_the_same_numbers_as_a_fresh_one():
    build = BUILDERS["logistic_noisy"]  # f*, σ_g and the data all differ between the seeds
    _runs(build(0))
    shared = _runs(build(1))
    core._program.cache_clear()
    localsgd._compiled.cache_clear()
    jax.clear_caches()
    with count_programs() as n:
        fresh = _runs(build(1))
    assert n["compiled"] > 0
    for a, b in zip(shared, fresh):
        np.testing.assert_array_equal(a.curve, b.curve)
        np.testing.assert_array_equal(a.x_final, b.x_final)
        np.testing.assert_array_equal(a.traces["loss_z"], b.traces["loss_z"])
    assert not np.array_equal(_runs(build(0))[0].curve, shared[0].curve)  # the seeds' numbers differ


def _reference_runs():
    """The runs whose results ``tests/data/compile_once_reference.npz`` holds, computed by the
    code before programs were keyed by program_key (objectives' numbers baked in as constants)."""
    g = [0.05, 0.1]
    lg = O.logistic_regression(64, 16, 4, 4, lam=1e-3, grad_noise=0.3, seed=3)
    lm = nc.nanochat(3, text=TEXT, seed=1, **LM)
    ls = schedules.local_sgd(4, 16, 2, 2)
    return {
        "q_pd": methods.pipedream(O.random_quadratic(64, 16, 4, 4, seed=1), schedules.pipedream(4, 12), g, seed=1),
        "lg_rpd": methods.rpd(lg, 40, g, delta=5, seed=2),
        "lg_ls": simtime.per_tick(methods.local_sgd(lg, ls, g, seed=1), ls),  # events read per tick
        "ml_pm": methods.train(
            O.mlp_chain(32, 6, 4, 4, seed=4), schedules.pipemare(4, 12), g, seed=1, t1=True, t2=True
        ),
        "lm_pd": methods.pipedream(lm, schedules.pipedream(3, 6), [0.01], seed=1),
    }


@pytest.mark.slow
def test_numbers_unchanged_from_before_programs_were_shared():
    """Bit-identical on the machine that made the reference (checked on 192 arrays of every
    method, objective and plan option when the change was made); here to float rounding, as
    another CPU may round differently."""
    ref = np.load(Path(__file__).parents[1] / "data" / "compile_once_reference.npz")
    runs = _reference_runs()
    for key in ref.files:
        run, field = key.split(".")
        res = runs[run]
        got = {"curve": res.curve, "x": res.x_final}.get(field)
        got = res.traces[field] if got is None else got
        rtol = 1e-5 if ref[key].dtype == np.float32 or run.startswith("lm") else 1e-11
        np.testing.assert_allclose(got, ref[key], rtol=rtol, atol=0, err_msg=key)


_CACHED_RUN = """
import sys
from rpd import schedules, objectives as O
from rpd.runtime import compile_cache
from rpd.train import methods
from rpd.runtime import programs
path = compile_cache.enable()
with compile_cache.count_programs() as n:
    res = methods.pipedream(O.random_quadratic(64, 16, 4, 4, seed=int(sys.argv[2])), schedules.pipedream(4, 10), [0.01])
print(path, n["from_cache"], n["compiled"], repr(float(res.curve[0, -1])), programs.COUNTS["loaded"])
"""


@pytest.mark.slow
def test_persistent_cache_in_the_user_cache(tmp_path):
    """A second process (another seed: the same program) loads the compiled run from
    ``$RPD_CACHE/jax`` (the core's program from rpd's store in its ``rpd``
    subdirectory); ``RPD_JAX_CACHE=0`` turns the cache off."""
    import os
    import subprocess
    import sys

    from rpd.runtime import compile_cache

    root = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k != compile_cache.ENV} | {"RPD_CACHE": str(root)}
    run = lambda seed, **extra: subprocess.run(
        [sys.executable, "-c", _CACHED_RUN, str(root), str(seed)],
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.split()
    path, hits, compiled, _, stored = run(0)
    assert Path(path) == root / "jax" and int(hits) == 0 and any((root / "jax").iterdir())
    assert int(compiled) >= 1 and int(stored) == 0 and any((root / "jax" / "rpd").glob("*.exe"))
    path, hits, compiled, _, stored = run(1)
    assert int(hits) >= 1 and int(compiled) == 0  # every program came from disk,
    assert int(stored) == 1  # the core's from rpd's store (rpd.runtime.programs), not traced
    path, hits, compiled, _, stored = run(1, RPD_JAX_CACHE="0")
    assert path == "None" and int(hits) == 0 and int(compiled) >= 1 and int(stored) == 0
    elsewhere = tmp_path / "elsewhere"
    path, _, _, _, _ = run(1, RPD_JAX_CACHE=str(elsewhere))
    assert Path(path) == elsewhere and any(elsewhere.iterdir())
