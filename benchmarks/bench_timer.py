"""The one timer against a straightforward per-op Python event loop, under costs.

    .venv/bin/python benchmarks/bench_timer.py                 # S = 64, N = 1024, M = 64
    .venv/bin/python benchmarks/bench_timer.py --S 16 --N 256  # smaller

For every schedule of the family: build it under non-unit costs (F = 1, B = 2 with a p2p
latency of 1; the split-backward schedules F = I = W = 1, FB = 2 for DualPipeV's pairs), then
time its order twice in this process -- with :func:`rpd.schedules.timer.time_order` (the
compiled loop) and with :func:`rpd.schedules.timer.time_order_reference` (a dependency-driven
Python event loop, the shape of torch's ``_simulate_comms_compute``) -- check both give
identical op start/end ticks, and print the times and their ratios (reference / time_order, and
reference / the whole constructor). The whole public
constructor (order generation + timing + Timeline) is timed too, warm (the compiled kernel is
loaded once before timing). Targets (issue 9): <= 0.3 s per constructor at S = 64, N = 1024,
>= 30x the reference loop.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rpd import schedules
from rpd.costs import CostModel
from rpd.schedules.timer import flatten, op_durations, time_order, time_order_reference


def _best(fn, repeat):
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _cases(S, N, M):
    c = CostModel(F=1, B=2, p2p=1)
    z = CostModel(F=1, I=1, W=1, p2p=1)
    return {
        "gpipe": lambda: schedules.gpipe(S, N, M, c),
        "1f1b": lambda: schedules.one_f_one_b(S, N, M, c),
        "interleaved v=2": lambda: schedules.interleaved(S, N, M, 2, c),
        "zb_h1": lambda: schedules.zb_h1(S, N, M, z),
        "zb_h2": lambda: schedules.zb_h2(S, N, M, z),
        "zb_v": lambda: schedules.zb_v(S, N, M, z),
        f"dualpipe_v M={max(M, 2 * S)}": lambda: schedules.dualpipe_v(  # needs M >= 2S
            S, N, max(M, 2 * S), CostModel(F=1, I=1, W=1, FB=2, p2p=1)),
        "chimera": lambda: schedules.chimera(S, N, M, c),
        "pipedream": lambda: schedules.pipedream(S, N, costs=c),
        "pipedream_2bw": lambda: schedules.pipedream_2bw(S, N, M, c),
        "local_sgd H=2": lambda: schedules.local_sgd(S, N, S, 2, costs=CostModel(F=1, B=2, p2p=1, allreduce=(4, 0))),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--S", type=int, default=64)
    ap.add_argument("--N", type=int, default=1024)
    ap.add_argument("--M", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    S, N, M = args.S, args.N, args.M
    schedules.gpipe(2, 2, 2, CostModel(F=2))  # load the compiled kernel once
    print(f"S = {S}, N = {N}, M = {M}; times in seconds (best of {args.repeat}; reference: one run)")
    print(f"{'schedule':<18} {'ops':>8} {'constructor':>11} {'time_order':>10} {'reference':>9} {'ratio':>7} {'vs ctor':>7}")
    for name, make in _cases(S, N, M).items():
        t_build, tl = _best(make, args.repeat)
        costs, G = tl.costs, tl.n_stages
        t = tl.table
        order = [np.stack([t.kind[t.rank == r], t.stage[t.rank == r], t.mb[t.rank == r],
                           t.fused[t.rank == r]], 1).astype(np.int32) for r in range(S)]
        flat = flatten(order, G, tl.N)
        dur = op_durations(flat, costs, G, tl.N, tl.split)
        barrier = tl.M if (tl.synchronous and not tl.overlapped) else (tl.R * tl.H if tl.kind == "local_sgd" else None)
        if barrier is not None:  # the reference loop has no barriers: time the flushes' orders
            t_fast, _ = _best(lambda: time_order(flat, dur, costs.p2p), args.repeat)
            start, end = time_order(flat, dur, costs.p2p)
        else:
            t_fast, (start, end) = _best(lambda: time_order(flat, dur, costs.p2p), args.repeat)
            assert np.array_equal(start, t.start) and np.array_equal(end, t.end)
        by_op = {(int(k), int(g), int(m)): int(d) for k, g, m, d in zip(flat.kind, flat.stage, flat.mb, dur)}
        t0 = time.perf_counter()
        ref = time_order_reference(order, lambda k, g, m, f: by_op[(k, g, m)], costs.p2p, G)
        t_ref = time.perf_counter() - t0
        got = {(int(k), int(g), int(m)): (int(s), int(e)) for k, g, m, s, e in
               zip(flat.kind, flat.stage, flat.mb, start, end)}
        assert ref == got, f"{name}: compiled timer and reference loop disagree"
        print(f"{name:<18} {len(flat.kind):>8} {t_build:>11.3f} {t_fast:>10.4f} {t_ref:>9.2f} {t_ref / t_fast:>6.0f}x {t_ref / t_build:>6.0f}x")


if __name__ == "__main__":
    main()
