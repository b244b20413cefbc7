"""V-Half / V-Min orders against the straightforward construction, side by side, and E9's study.

    .venv/bin/python benchmarks/bench_v_memory.py                     # S = 16, M = 64 and 256
    .venv/bin/python benchmarks/bench_v_memory.py --sizes 8:128 --e9  # + E9's quick study, timed

``rpd.schedules.family.v_memory`` makes one flush's order by reordering slot tables; each op
outside the steady state tries the free slots before its own and keeps the first where the
rank's peak memory (``_peak``, a walk over every slot) does not rise. Per size and setup this
times, in this process, alternately:

- ``straightforward``: the order as before the speed-up -- the same reorder with ``_peak``
  walked in Python at every candidate slot (``_FlatRank.peak`` patched back to it);
- ``now``: :func:`rpd.schedules.family.v_memory.v_memory_order` as shipped (the walk compiled),
  uncached (``_flush_order.__wrapped__``);

checks the two orders are equal op for op, and prints best-of-``--repeat`` seconds and their
ratio. A study builds each V timeline at 4 cost settings of N = 2M (E9): before, 8 orders per
(S, M, setup); now one, cached (printed as ``E9 per size``). ``--e9`` also times
``rpd.studies.schedule_table.run`` at its quick config (compiled kernels loaded first). The
machine is shared: the load average is printed beside the numbers.
"""

from __future__ import annotations

import argparse
import os
import time
from unittest import mock

import numpy as np

from rpd.schedules.family import v_memory


def _best(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def straightforward(S: int, M: int, setup: str):
    """The order with the peak walked in Python at every candidate slot (the code before)."""
    with mock.patch.object(v_memory._FlatRank, "peak", lambda self: v_memory._peak(self.rank)):
        return v_memory._flush_order.__wrapped__(S, M, setup)


def now(S: int, M: int, setup: str):
    return v_memory._flush_order.__wrapped__(S, M, setup)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16:64,16:256", help="S:M pairs")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--e9", action="store_true", help="also time E9's quick study")
    args = ap.parse_args()
    now(4, 8, "half")  # the compiled walk loaded (or built) outside the timings
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'S':>3} {'M':>4} {'setup':>5} {'straightforward s':>17} {'now s':>6} {'ratio':>6} {'E9 per size':>11}")
    for pair in args.sizes.split(","):
        S, M = (int(x) for x in pair.split(":"))
        for setup in v_memory.SETUPS:
            before, a = _best(lambda: straightforward(S, M, setup), args.repeat)
            after, b = _best(lambda: now(S, M, setup), args.repeat)
            if not all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)):  # type: ignore[call-overload]
                raise SystemExit(f"S={S} M={M} {setup}: the orders differ")
            print(
                f"{S:>3} {M:>4} {setup:>5} {before:>17.2f} {after:>6.2f} {before / after:>5.0f}x "
                f"{8 * before / after:>10.0f}x",
                flush=True,
            )
    if args.e9:
        from rpd.studies import schedule_table

        t = time.perf_counter()
        schedule_table.run(schedule_table.Config())
        print(f"E9 quick study: {time.perf_counter() - t:.1f} s; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
