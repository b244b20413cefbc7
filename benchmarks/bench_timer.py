"""The one timer against a straightforward per-op Python event loop, under costs.

    .venv/bin/python benchmarks/bench_timer.py                 # S = 64, N = 1024, M = 64, then E2
    .venv/bin/python benchmarks/bench_timer.py --S 16 --N 256  # smaller
    .venv/bin/python benchmarks/bench_timer.py --only zb_v,pipemare --profile  # + cProfile of each constructor

For every schedule of the family: build it under non-unit costs (F = 1, B = 2 with a p2p
latency of 1; the split-backward schedules F = I = W = 1, FB = 2 for DualPipeV's pairs), then
time its order twice in this process -- with :func:`rpd.schedules.machinery.timer.time_order` (the
compiled loop) and with :func:`rpd.schedules.machinery.timer.time_order_reference` (a dependency-driven
Python event loop, the shape of torch's ``_simulate_comms_compute``) -- check both give
identical op start/end ticks, and print the times and their ratios (reference / time_order, and
reference / the whole constructor). The whole public
constructor (order generation + timing + Timeline) is timed too, warm (the compiled kernel is
loaded once before timing). Best and median of --repeat runs are printed for the constructor
and for ``time_order``; the reference loop runs --ref-repeat times (best shown).

Last line: E2 (``rpd.studies.delay_law.run(Config())``: PD at unit costs for S = 2..150, N = 10 S,
the ``pipedream_many`` path), CPU time by ``time.process_time`` and wall time, best of
--e2-repeat calls. Targets: <= 0.3 s per constructor at S = 64, N = 1024, >= 30x the
reference loop; E2 <= 2 s CPU.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time

import numpy as np

from rpd import schedules
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.timer import flatten, op_durations, time_order, time_order_reference


def _times(fn, repeat):
    """(best, median) wall seconds of ``repeat`` calls, and the last result."""
    seen = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        seen.append(time.perf_counter() - t)
    return min(seen), float(np.median(seen)), out


def _e2(repeat):
    """Best CPU and wall seconds of rpd.studies.delay_law's E2 at its default Config."""
    from rpd.studies import delay_law

    cpu, wall = [], []
    for _ in range(repeat):
        c, w = time.process_time(), time.perf_counter()
        delay_law.run(delay_law.Config())
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return min(cpu), min(wall)


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
            S, N, max(M, 2 * S), CostModel(F=1, I=1, W=1, FB=2, p2p=1)
        ),
        "chimera": lambda: schedules.chimera(S, N, M, c),
        "pipedream": lambda: schedules.pipedream(S, N, costs=c),
        "pipedream_2bw": lambda: schedules.pipedream_2bw(S, N, M, c),
        "pipemare": lambda: schedules.pipemare(S, N, c),
        "local_sgd H=2": lambda: schedules.local_sgd(S, N, S, 2, costs=CostModel(F=1, B=2, p2p=1, allreduce=(4, 0))),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--S", type=int, default=64)
    ap.add_argument("--N", type=int, default=1024)
    ap.add_argument("--M", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5, help="runs of the constructor and of time_order")
    ap.add_argument("--ref-repeat", type=int, default=1, help="runs of the reference loop")
    ap.add_argument("--e2-repeat", type=int, default=2, help="E2 calls (0: skip E2)")
    ap.add_argument("--only", default=None, help="comma-separated schedule names (prefixes) to run")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of each constructor")
    args = ap.parse_args()
    S, N, M = args.S, args.N, args.M
    schedules.gpipe(2, 2, 2, CostModel(F=2))  # load the compiled kernel once
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; numpy {np.__version__}")
    print(
        f"S = {S}, N = {N}, M = {M}; seconds, best / median of {args.repeat} "
        f"(reference: best of {args.ref_repeat}); ratio = reference / time_order best"
    )
    print(
        f"{'schedule':<18} {'ops':>7} {'constructor':>13} {'time_order':>15} {'reference':>9} "
        f"{'ratio':>6} {'vs ctor':>7}"
    )
    cases = _cases(S, N, M)
    if args.only:
        keep = args.only.split(",")
        cases = {k: v for k, v in cases.items() if any(k.startswith(p) for p in keep)}
    worst_ctor, worst_ratio = 0.0, np.inf
    for name, make in cases.items():
        b_build, m_build, tl = _times(make, args.repeat)
        costs, G = tl.costs, tl.n_stages
        t = tl.table
        order = [
            np.stack([t.kind[t.rank == r], t.stage[t.rank == r], t.mb[t.rank == r], t.fused[t.rank == r]], 1).astype(
                np.int32
            )
            for r in range(S)
        ]
        flat = flatten(order, G, tl.N)
        dur = op_durations(flat, costs, G, tl.N, tl.split)
        # flush schedules: the reference loop has no barriers, so both time the barrier-free
        # order; the others must reproduce the constructor's own ticks as well
        b_fast, m_fast, (start, end) = _times(lambda f=flat, d=dur, c=costs.p2p: time_order(f, d, c), args.repeat)
        barrier = tl.M if (tl.synchronous and not tl.overlapped) else (tl.R * tl.H if tl.kind == "local_sgd" else None)
        if barrier is None:
            assert np.array_equal(start, t.start) and np.array_equal(end, t.end)
        by_op = {(int(k), int(g), int(m)): int(d) for k, g, m, d in zip(flat.kind, flat.stage, flat.mb, dur)}
        t_ref = np.inf
        for _ in range(args.ref_repeat):
            t0 = time.perf_counter()
            ref = time_order_reference(order, lambda k, g, m, f, t=by_op: t[(k, g, m)], costs.p2p, G)
            t_ref = min(t_ref, time.perf_counter() - t0)
        got = {
            (int(k), int(g), int(m)): (int(s), int(e))
            for k, g, m, s, e in zip(flat.kind, flat.stage, flat.mb, start, end)
        }
        assert ref == got, f"{name}: compiled timer and reference loop disagree"
        worst_ctor, worst_ratio = max(worst_ctor, b_build), min(worst_ratio, t_ref / b_fast)
        print(
            f"{name:<18} {len(flat.kind):>7} {b_build:>6.3f} /{m_build:>6.3f} {b_fast:>7.4f} /{m_fast:>7.4f} "
            f"{t_ref:>9.2f} {t_ref / b_fast:>5.0f}x {t_ref / b_build:>6.0f}x"
        )
        if args.profile:
            prof = cProfile.Profile()
            prof.runcall(make)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(15)
    print(
        f"slowest constructor {worst_ctor:.3f} s (target <= 0.3 s); smallest time_order ratio "
        f"{worst_ratio:.0f}x (target >= 30x)"
    )
    if args.e2_repeat:
        cpu, wall = _e2(args.e2_repeat)
        print(
            f"E2 (rpd.studies.delay_law.run(Config()), S = 2..150, N = 10 S, unit costs): "
            f"{cpu:.2f} s CPU, {wall:.2f} s wall, best of {args.e2_repeat} (target <= 2 s CPU)"
        )


if __name__ == "__main__":
    main()
