"""Schedules and delays: rpd's vectorized simulation against a per-(time step x stage) Python loop.

    .venv/bin/python benchmarks/bench_schedules.py            # full: naive E2 takes ~1-2 min
    .venv/bin/python benchmarks/bench_schedules.py --quick    # naive E2 only up to S = 60

Both implementations run side by side in this process on the same inputs, their results are
compared (they must be equal), and wall and CPU times (best of --repeat for rpd, one run for the
loop) are printed with the speed-up. Targets: E2 for S = 2..150 in <= 2 s; timeline +
delay table for S = 150, N = 1500 in <= 0.2 s.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from rpd import schedules

# ---------------------------------------------------------------- the straightforward loop
from rpd.schedules.machinery import delays


def loop_pipedream(S, N, noam=None):
    """PipeDream's readiness rule (docs/science.md#schedules) as a Python loop over time steps and stages; returns a
    list of steps, each a list with (kind, m) or None per stage."""
    noam = S if noam is None else noam
    f_done = [[-1] * N for _ in range(S)]
    b_done = [[-1] * N for _ in range(S)]
    steady, prefer = [False] * S, ["F"] * S
    next_f, next_b = [0] * S, [0] * S
    active, t, timeline = 0, 0, []
    while b_done[0][N - 1] == -1:
        step = [None] * S
        for s in range(S):
            ready_f = ready_b = None
            m = next_f[s]
            if m < N:
                if s == 0:
                    if active < noam:
                        ready_f = m
                elif f_done[s - 1][m] != -1 and f_done[s - 1][m] < t:
                    ready_f = m
            m = next_b[s]
            if m < N and f_done[s][m] != -1 and f_done[s][m] < t:
                if s == S - 1 or (b_done[s + 1][m] != -1 and b_done[s + 1][m] < t):
                    ready_b = m
            if ready_b is not None and (not steady[s] or prefer[s] == "B" or ready_f is None):
                step[s] = ("B", ready_b)
                steady[s], prefer[s] = True, "F"
            elif ready_f is not None:
                step[s] = ("F", ready_f)
                if steady[s]:
                    prefer[s] = "B"
        for s, op in enumerate(step):
            if op is None:
                continue
            kind, m = op
            if kind == "F":
                f_done[s][m] = t
                next_f[s] += 1
                active += s == 0
            else:
                b_done[s][m] = t
                next_b[s] += 1
                active -= s == 0
        timeline.append(step)
        t += 1
    return timeline


def loop_delay_table(timeline, N, S):
    """Walk the ops in iteration order: F(m, r) records the number of updates so far, B is an update."""
    j = -np.ones((N, S), dtype=int)
    rows, count = [], 0
    for step in timeline:
        for s, op in enumerate(step):
            if op is None:
                continue
            kind, m = op
            if kind == "F":
                j[m, s] = count
            else:
                rows.append(m)
                count += 1
    table = np.zeros((count, S), dtype=int)
    for k, m in enumerate(rows):
        table[k] = k - j[m]
    return table


def loop_delay_law(S_values):
    out = []
    for S in S_values:
        N = 10 * S
        half = loop_delay_table(loop_pipedream(S, N), N, S)[N * S // 2 :].ravel()
        out.append((float(np.mean(half)), float(np.percentile(half, 10)), int(np.max(half))))
    return out


# ---------------------------------------------------------------- timing


def timed(fn, repeat):
    best_wall = best_cpu = float("inf")
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        result = fn()
        best_wall = min(best_wall, time.perf_counter() - w)
        best_cpu = min(best_cpu, time.process_time() - c)
    return result, best_wall, best_cpu


def report(label, fast, slow):
    (_, fw, fc), (_, sw, sc) = fast, slow
    print(
        f"{label}\n  rpd : wall {fw:8.3f} s  cpu {fc:8.3f} s\n  loop: wall {sw:8.3f} s  "
        f"cpu {sc:8.3f} s\n  speed-up: wall x{sw / fw:.0f}, cpu x{sc / fc:.0f}"
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="naive E2 only up to S = 60")
    ap.add_argument("--repeat", type=int, default=5, help="best of this many rpd runs")
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; numpy {np.__version__}")

    S, N = 150, 1500

    def fast_table():
        tl = schedules.pipedream(S, N)
        return tl, delays.delay_table(tl)

    def slow_table():
        tl = loop_pipedream(S, N)
        return tl, loop_delay_table(tl, N, S)

    fast = timed(fast_table, args.repeat)
    fast_tl = timed(lambda: schedules.pipedream(S, N), args.repeat)
    slow = timed(slow_table, 1)
    assert np.array_equal(fast[0][1], slow[0][1]), "delay tables differ"
    report(f"timeline + delay table, S = {S}, N = {N} (K x S = {N * S} x {S})", fast, slow)
    print(f"  (rpd timeline alone: wall {fast_tl[1]:.3f} s)")

    S_max = 60 if args.quick else 150
    fast = timed(lambda: delays.delay_law(range(2, S_max + 1)), max(1, args.repeat // 2))
    slow = timed(lambda: loop_delay_law(range(2, S_max + 1)), 1)
    law = fast[0]
    ref = np.array(slow[0])
    assert np.allclose(law.mean, ref[:, 0], rtol=1e-12) and np.array_equal(law.p10, ref[:, 1])
    assert np.array_equal(law.max, ref[:, 2]) and law.closed_form_ok.all()
    report(f"E2 delay law, S = 2..{S_max}, N = 10 S (stats + closed-form check + fits)", fast, slow)


if __name__ == "__main__":
    main()
