import os

# Virtual CPU devices for the sharded LocalSGD tests; must be set before jax initialises.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
# On an NVIDIA GPU, XLA's scatter-adds (an embedding's gradient) and some reductions sum in a
# run-dependent order unless told otherwise; the tests compare runs bit for bit, so they ask for
# deterministic kernels there (docs/running.md#gpu). The CPU is deterministic already.
if os.path.exists("/dev/nvidiactl") and "xla_gpu_deterministic_ops" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_gpu_deterministic_ops=true"
# The entry points turn JAX's persistent compilation cache on (rpd.runtime.compile_cache); tests that
# call them in-process must not point this process's cache at a temporary directory.
os.environ.setdefault("RPD_JAX_CACHE", "0")

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_enable_x64", True)


import dataclasses  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture
def figure_from_store(tmp_path):
    """Save a study's output with rpd.io.store, reload it, draw the figure from the reloaded copy
    only, and check a real PNG came out; returns its path."""
    from rpd.io import store
    from rpd.results import StudyOutput

    def draw(study, cfg, out, name="fig.png"):
        run_dir = store.save_run(tmp_path / "run", dataclasses.asdict(cfg), out.arrays, out.summary)
        saved = store.load_run(run_dir)
        png = tmp_path / name
        study.figure(StudyOutput(arrays=saved.curves, summary=saved.summary, table=[]), png)
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        return png

    return draw
