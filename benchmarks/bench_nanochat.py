"""Cost of the small LM's gradient, to budget E5 (S = R = 16, PD with N = 1024 microbatches).

    .venv/bin/python -m benchmarks.bench_nanochat [--S 16] [--repeats 20] [--unrolled]

Reports compile time and the steady-state wall time of one jitted ``value_and_grad`` at the
defaults (batch 16, sequence 32, width 64, 4 heads), of 16 of them under ``vmap`` (R replicas
or 16 step sizes at once), and of the held-out loss. Uses the fetched corpus when present,
else a synthetic text with the same 84-character vocabulary (the cost does not depend on it).
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from rpd import corpus
from rpd.objectives import nanochat as nc


def _text() -> tuple[str, str]:
    try:
        return corpus.load_text(), "shakespeare"
    except FileNotFoundError:
        chars = np.array(list(corpus.Vocab.from_text(" \n" + "".join(map(chr, range(33, 115)))).chars))
        return "".join(np.random.default_rng(0).choice(chars, 600_000)), "synthetic"


def _time(fn, *args, repeats: int) -> tuple[float, float]:
    """(compile + first call seconds, mean seconds per later call)."""
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(repeats):
        out = fn(*args)
    jax.block_until_ready(out)
    return first, (time.perf_counter() - t0) / repeats


def run(S: int = 16, repeats: int = 20, unrolled: bool = False) -> dict:
    text, source = _text()
    obj = nc.nanochat(S, text=text)
    x, R = obj.x0, 16
    res = dict(S=S, D=obj.D, vocab=obj.meta["vocab_size"], source=source, devices=jax.device_count())
    vg = jax.jit(obj.value_and_grad)
    res["vg_compile_s"], res["vg_s"] = _time(vg, obj.data, x, jnp.int32(1), repeats=repeats)
    vg_R = jax.jit(jax.vmap(obj.value_and_grad, in_axes=(None, 0, 0)))
    res["vg_vmap16_compile_s"], res["vg_vmap16_s"] = _time(
        vg_R, obj.data, jnp.tile(x, (R, 1)), jnp.arange(R, dtype=jnp.int32), repeats=max(1, repeats // 4))
    res["heldout_loss_compile_s"], res["heldout_loss_s"] = _time(jax.jit(obj.loss), obj.data, x, repeats=repeats)
    if unrolled:  # the same chain without lax.scan, for comparison
        params = nc.stage_params(obj, x)
        w = obj.data["train"][1]
        f = jax.jit(jax.value_and_grad(nc.chain_loss), static_argnums=3)
        res["vg_unrolled_compile_s"], res["vg_unrolled_s"] = _time(
            f, params, w[:, :-1], w[:, 1:], obj.meta["heads"], repeats=repeats)
    return res


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--S", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--unrolled", action="store_true", help="also time the unrolled (non-scan) chain")
    res = run(**vars(parser.parse_args(argv)))
    for k, v in res.items():
        print(f"{k:24s} {v:.4f}" if isinstance(v, float) else f"{k:24s} {v}")
    print(f"E5 estimate: {1024 * res['vg_s']:.0f} s per 1024 gradients "
          f"({16 * 1024 * res['vg_s']:.0f} s if every one of the K = 16·1024 block updates took one)")


if __name__ == "__main__":
    main()
