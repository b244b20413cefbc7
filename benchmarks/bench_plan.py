"""The plan command's cost: GPT-3 1.3B on A100s at S = 8, every registered schedule,
M in {8, 16, 32, 64}, against a straightforward implementation, side by side in one process.

"rpd": :func:`rpd.model.plan.plan` as ``python -m experiments.plan`` runs it (each schedule
timed twice under the model's stage costs, bytes per rank from the timeline by one sorted
running sum per rank, p2p bytes by array masks).

"straightforward": the same rows computed the way one would first write them, on the same
timelines (the timer is shared: it is benchmarked in ``bench_timer.py``): for every rank, at every
tick where one of its forwards starts (the only ticks where its level can rise), the activation
bytes live then, summed over its forwards minus what their I / W / B freed by then (the peak is
the max), and p2p bytes by a Python loop over the ops with a dict of where each (stage,
microbatch) ran. The two are checked equal on every row before any time is printed.

Prints the cold plan (first call: ``schedule=searched`` runs its heuristic search, about 6 s of it,
then cached per (S, M, costs)), then both warm times (median of ``--repeats``, interleaved; the
timelines are rebuilt on every call by both) and the ratio; the target is the whole plan in
seconds, not minutes.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_plan.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rpd import registry
from rpd.model import hardware, layers
from rpd.model.plan import plan, staged
from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, FWD

S, MS = 8, (8, 16, 32, 64)


make = registry.timeline


def straightforward_row(model, hw, name: str, M: int) -> dict | None:
    """Peak activation bytes and p2p bytes per rank of ``name`` at (S, M), by loops."""
    try:
        unit = make(name, S, M, M, None, 0)
    except (ValueError, TypeError):
        return None
    st, costs, _, values = staged(model, hw, unit)
    one, two = make(name, S, M, M, costs, values), make(name, S, 2 * M, M, costs, values)
    ops = list(zip(*(two.table.kind, two.table.stage, two.table.mb, two.table.rank, two.table.start, two.table.end)))
    # every (stage, mb)'s allocation at F's start and its frees at the end of I / W / B
    alloc, frees = {}, {}
    for kind, g, m, r, start, end in ops:
        if kind == FWD:
            alloc[(g, m)] = (r, start, st.act[g])
        elif kind == BWD:
            frees.setdefault((g, m), []).append((end, st.act[g]))
        elif kind == BWD_I:
            frees.setdefault((g, m), []).append((end, st.act[g] - st.act_w[g]))
        elif kind == BWD_W:
            frees.setdefault((g, m), []).append((end, st.act_w[g]))
    peak = np.zeros(two.S)
    for r in range(two.S):
        mine = [(key, start, nbytes) for key, (rank, start, nbytes) in alloc.items() if rank == r]
        for t in sorted({start for _, start, _ in mine}):  # the level can only rise when an F starts
            live = 0.0
            for key, start, nbytes in mine:
                if start <= t:
                    live += nbytes - sum(b for end, b in frees.get(key, []) if end <= t)
            peak[r] = max(peak[r], live)
    where = {}
    for kind, g, m, r, *_ in zip(*(one.table.kind, one.table.stage, one.table.mb, one.table.rank)):
        if kind == FWD:
            where[(g, m)] = r
    sent = np.zeros(one.S)
    for kind, g, m, r, *_ in zip(*(one.table.kind, one.table.stage, one.table.mb, one.table.rank)):
        if kind == FWD and g < one.n_stages - 1 and where[(g + 1, m)] != r:
            sent[r] += st.out[g]
        if kind in (BWD, BWD_I) and g > 0 and where[(g - 1, m)] != r:
            sent[r] += st.out[g - 1]
    return {"peak_activation_bytes": peak, "p2p_bytes_per_step": sent}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    model, hw = layers.preset("gpt3_1.3b"), hardware.preset("a100_80g_flat")
    names = list(registry.SCHEDULES)
    t0 = time.perf_counter()
    plan(model, hw, names, make, S, list(MS))  # cold: the searched schedule's search runs here (then cached)
    cold = time.perf_counter() - t0
    fast_t, slow_t = [], []
    for rep in range(args.repeats):
        order = ("fast", "slow") if rep % 2 == 0 else ("slow", "fast")
        for which in order:
            t0 = time.perf_counter()
            if which == "fast":
                rows = plan(model, hw, names, make, S, list(MS))
                fast_t.append(time.perf_counter() - t0)
            else:
                slow = {(n, M): straightforward_row(model, hw, n, M) for M in MS for n in names}
                slow_t.append(time.perf_counter() - t0)
    checked = 0
    for r in rows:
        ref = slow[(r.schedule, r.M)]
        if r.error is not None:
            continue
        # frees at ``end <= t`` before the allocations at ``start <= t``: the running sum's convention
        np.testing.assert_allclose(r.peak_activation_bytes, ref["peak_activation_bytes"], rtol=1e-12)
        np.testing.assert_allclose(r.p2p_bytes_per_step, ref["p2p_bytes_per_step"], rtol=1e-12)
        checked += 1
    f, s = float(np.median(fast_t)), float(np.median(slow_t))
    print(f"plan: gpt3_1.3b on a100_80g, S = {S}, M = {list(MS)}, {len(names)} schedules -> {len(rows)} rows")
    print(f"rows equal to the straightforward implementation: {checked} of {sum(r.error is None for r in rows)}")
    print(f"rpd plan, cold    {cold:8.3f} s  (the searched schedule's heuristic search included)")
    print(f"rpd plan          {f:8.3f} s  (median of {args.repeats}: {', '.join(f'{x:.3f}' for x in fast_t)})")
    print(f"straightforward   {s:8.3f} s  (median of {args.repeats}: {', '.join(f'{x:.3f}' for x in slow_t)})")
    print(f"ratio             {s / f:8.1f}x")


if __name__ == "__main__":
    main()
