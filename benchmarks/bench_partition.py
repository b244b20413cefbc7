"""PipeDream's partitioner (rpd.model.partition.pipedream) against straightforward versions.

    .venv/bin/python benchmarks/bench_partition.py                  # 96 layers, 64 workers
    .venv/bin/python benchmarks/bench_partition.py --L 48 --n 32 --small-L 11 --small-n 6

The objective is the paper's A(j, m) recursion (rpd.model.partition's module doc). Three
implementations on the same random layers (seeded; times and bytes of a GPT-like stack):

* rpd's: the dynamic programme over (prefix, workers), vectorised over the last stage's first
  layer and replication with NumPy;
* ``memoized``: the recursion written as it reads, in plain Python, with ``functools.cache``
  (O(L² n²) evaluations of T), measured at the full size beside rpd's;
* ``memo-less``: the same recursion without the cache. Its calls grow exponentially, so it is
  measured on a small instance (``--small-L`` layers, ``--small-n`` workers) beside rpd's there;
  for the full size the number of calls it would make is counted exactly (a recurrence on
  (j, m)) and its time extrapolated from its measured seconds per call.

Every implementation's bottleneck is checked equal to rpd's. Prints seconds and ratios.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time

import numpy as np

from rpd.model.partition import pipedream, stage_time


def instance(L: int, seed: int = 0):
    """(times s, activation bytes, parameter bytes) of L random GPT-like layers."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(1e-3, 3e-3, L)
    a = rng.uniform(2e6, 8e6, L)
    w = rng.uniform(5e7, 2e8, L)
    return t, a, w


def recursion(t, a, w, n: int, B: float, memo: bool):
    """A(L, n) by the recursion as written, with or without a cache; returns (value, calls)."""
    pt = np.concatenate([[0.0], np.cumsum(t)]).tolist()
    pw = np.concatenate([[0.0], np.cumsum(w)]).tolist()
    cut = (2.0 * np.asarray(a) / B).tolist()
    calls = [0]

    def A(j: int, m: int) -> float:  # layers 0..j-1 on at most m workers
        calls[0] += 1
        best = min(stage_time(pt[j], pw[j], r, B) for r in range(1, m + 1))
        for k in range(1, j):  # last stage k..j-1
            for r in range(1, m):
                v = max(A(k, m - r), cut[k - 1], stage_time(pt[j] - pt[k], pw[j] - pw[k], r, B))
                best = min(best, v)
        return best

    if memo:
        A = functools.cache(A)  # noqa: F811 (the same function, cached)
    return A(len(t), n), calls[0]


def memo_less_calls(L: int, n: int) -> int:
    """Exact number of calls of the memo-less recursion for A(L, n): c(j, m) = 1 + Σ_{k<j, r<m}
    c(k, m − r)."""
    below = [0] * (n + 1)  # below[m] = Σ_{k < j} Σ_{m' <= m} c(k, m'), for the current j
    for j in range(1, L + 1):
        c = [0] + [1 + below[m - 1] for m in range(1, n + 1)]
        running = 0
        for m in range(1, n + 1):
            running += c[m]
            below[m] += running
    return c[n]


def best_of(fn, repeat):
    seen, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        seen.append(time.perf_counter() - t0)
    return min(seen), out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--L", type=int, default=96)
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--small-L", type=int, default=16)
    p.add_argument("--small-n", type=int, default=8)
    p.add_argument("--bandwidth", type=float, default=25e9)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    B = args.bandwidth
    sys.setrecursionlimit(10_000)

    t, a, w = instance(args.L)
    rpd_s, part = best_of(lambda: pipedream(t, a, w, args.n, B), args.repeat)
    memo_s, (memo_v, memo_calls) = best_of(lambda: recursion(t, a, w, args.n, B, memo=True), 1)
    assert math.isclose(memo_v, part.bottleneck, rel_tol=1e-12), (memo_v, part.bottleneck)
    print(f"{args.L} layers, {args.n} workers: bottleneck {part.bottleneck * 1e3:.4f} ms, {part.workers} workers used")
    print(f"  rpd (NumPy DP)          {rpd_s:9.3f} s")
    print(f"  memoized Python         {memo_s:9.3f} s   ratio {memo_s / rpd_s:8.1f}x   ({memo_calls:,} distinct calls)")

    ts, as_, ws = instance(args.small_L, seed=1)
    small_rpd, small_part = best_of(lambda: pipedream(ts, as_, ws, args.small_n, B), args.repeat)
    less_s, (less_v, less_calls) = best_of(lambda: recursion(ts, as_, ws, args.small_n, B, memo=False), 1)
    assert math.isclose(less_v, small_part.bottleneck, rel_tol=1e-12), (less_v, small_part.bottleneck)
    per_call = less_s / less_calls
    print(f"{args.small_L} layers, {args.small_n} workers (memo-less measured):")
    print(f"  rpd (NumPy DP)          {small_rpd:9.4f} s")
    print(
        f"  memo-less Python        {less_s:9.3f} s   ratio {less_s / small_rpd:8.1f}x   "
        f"({less_calls:,} calls, {per_call * 1e6:.1f} µs each)"
    )
    calls = memo_less_calls(args.L, args.n)
    est = calls * per_call
    print(
        f"memo-less at {args.L} layers, {args.n} workers: {calls:.3e} calls, about {est:.2e} s "
        f"({est / 3.156e7:.1e} years) at the measured µs per call; ratio to rpd {est / rpd_s:.1e}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
