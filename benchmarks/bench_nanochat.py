"""Cost of the small LM's gradient, to budget E5 (S = R = 16, PD with N = 1024 microbatches).

    .venv/bin/python -m benchmarks.bench_nanochat [--S 16] [--repeats 20] [--unrolled]

Reports compile time and the steady-state wall time of one jitted ``value_and_grad`` at the
defaults (batch 16, sequence 32, width 64, 4 heads), of 16 of them under ``vmap`` (R replicas
or 16 step sizes at once), and of the held-out loss; and 5-γ gradients one after another
against the same number on two host threads at once (E5 runs PD and LocalSGD side by side).
Uses the fetched corpus when present, else a synthetic text with the same 84-character
vocabulary (the cost does not depend on it).

Achieved GFLOP/s are printed next to what these cores do: the gradient's floating-point
operations are XLA's count (``cost_analysis``) of the same gradient with the stages unrolled
(XLA counts a ``lax.scan`` body once, so the scanned program's own count is ~S× too low), and
the reference rates are XLA's own float32 matmul, measured here, at a large square size (the
cores' practical peak) and at the model's largest layer shape ([B·T, W] @ [W, 4W]).
"""

from __future__ import annotations

import argparse
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

from rpd.objectives import corpus
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
        vg_R, obj.data, jnp.tile(x, (R, 1)), jnp.arange(R, dtype=jnp.int32), repeats=max(1, repeats // 4)
    )
    res["heldout_loss_compile_s"], res["heldout_loss_s"] = _time(jax.jit(obj.loss), obj.data, x, repeats=repeats)
    params = nc.stage_params(obj, x)
    w = obj.data["train"][1]
    f = jax.jit(jax.value_and_grad(nc.chain_loss), static_argnums=3)
    flops = _flops(f.lower(params, w[:, :-1], w[:, 1:], obj.meta["heads"]).compile())
    res["grad_gflop"] = flops / 1e9
    if unrolled:  # the same chain without lax.scan, for comparison
        res["vg_unrolled_compile_s"], res["vg_unrolled_s"] = _time(
            f, params, w[:, :-1], w[:, 1:], obj.meta["heads"], repeats=repeats
        )
    res["vg_gflops"] = flops / res["vg_s"] / 1e9
    res["vg_vmap16_gflops"] = R * flops / res["vg_vmap16_s"] / 1e9
    res["threads_1_s"], res["threads_2_s"] = _side_by_side(obj, G=5, calls=max(2, repeats // 2))
    BT, W = w[:, :-1].size, obj.meta["width"]
    res["matmul_1024_gflops"] = _matmul_rate(1024, 1024, 1024, repeats)
    res["matmul_model_shape"] = f"{BT} x {W} x {4 * W}"
    res["matmul_model_gflops"] = _matmul_rate(BT, W, 4 * W, repeats)
    return res


def _side_by_side(obj, G: int, calls: int) -> tuple[float, float]:
    """Seconds for ``2 * calls`` gradients of a G-γ grid (``vmap``, as PD and LocalSGD run
    them) one after another, and for ``calls`` of them on each of two host threads at once
    (what E5 does with its independent runs, ``rpd.runtime.concurrency``). Best of 2 rounds each."""
    vg = jax.jit(jax.vmap(obj.value_and_grad, in_axes=(None, 0, None)))
    xs = jnp.tile(obj.x0, (G, 1))
    jax.block_until_ready(vg(obj.data, xs, jnp.int32(0)))

    def work(n: int) -> None:
        for i in range(n):
            jax.block_until_ready(vg(obj.data, xs, jnp.int32(i)))

    one, two = float("inf"), float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        work(2 * calls)
        one = min(one, time.perf_counter() - t0)
        threads = [threading.Thread(target=work, args=(calls,)) for _ in range(2)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        two = min(two, time.perf_counter() - t0)
    return one, two


def _flops(compiled) -> float:
    analysis = compiled.cost_analysis()
    return float((analysis[0] if isinstance(analysis, list) else analysis)["flops"])


def _matmul_rate(m: int, k: int, n: int, repeats: int) -> float:
    """GFLOP/s of XLA's float32 [m, k] @ [k, n], best of 5 × ``repeats`` calls."""
    a = jnp.asarray(np.random.default_rng(0).standard_normal((m, k)), jnp.float32)
    b = jnp.asarray(np.random.default_rng(1).standard_normal((k, n)), jnp.float32)
    mm = jax.jit(jnp.matmul)
    jax.block_until_ready(mm(a, b))
    best = float("inf")
    for _ in range(5 * repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(mm(a, b))
        best = min(best, time.perf_counter() - t0)
    return 2 * m * k * n / best / 1e9


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--S", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--unrolled", action="store_true", help="also time the unrolled (non-scan) chain")
    res = run(**vars(parser.parse_args(argv)))
    for k, v in res.items():
        print(f"{k:24s} {v:.4f}" if isinstance(v, float) else f"{k:24s} {v}")
    print(
        f"gradient: {res['grad_gflop']:.2f} GFLOP, {res['vg_gflops']:.1f} GFLOP/s alone, "
        f"{res['vg_vmap16_gflops']:.1f} GFLOP/s 16 vmapped; these cores' float32 matmul: "
        f"{res['matmul_1024_gflops']:.0f} GFLOP/s at 1024², {res['matmul_model_gflops']:.0f} GFLOP/s at the model's "
        f"{res['matmul_model_shape']}  ->  {res['vg_gflops'] / res['matmul_1024_gflops']:.0%} of the large-matmul peak"
    )
    print(
        f"two runs side by side (E5's runs, rpd.runtime.concurrency): 5-γ gradients one after another "
        f"{res['threads_1_s']:.2f} s vs the same on two host threads {res['threads_2_s']:.2f} s  ->  "
        f"{res['threads_1_s'] / res['threads_2_s']:.2f}x"
    )
    print(
        f"E5 estimate: {1024 * res['vg_s']:.0f} s per 1024 gradients "
        f"({16 * 1024 * res['vg_s']:.0f} s if every one of the K = 16·1024 block updates took one)"
    )


if __name__ == "__main__":
    main()
