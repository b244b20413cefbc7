"""The n_workers search's cost: GPT-3 175B (96 layers, h 12288, 96 heads, sequence 2048, vocabulary
51,200, micro-batch 1, selective recomputation, sequence parallelism with TP) on 1024 GPUs of DGX
A100 nodes, a global batch of 1536 microbatches, every TP in {1, 2, 4, 8}, every PP dividing the
rest up to 96, DP the rest, 1F1B / interleaved (v = 2) / ZB-H1 and PipeDream where DP = 1.

"rpd": :func:`rpd.model.search3d.search` as ``python -m experiments.plan n_workers=1024`` runs it
(candidates ordered by an upper bound of their tokens/s, those whose static bytes cannot fit and,
once one fits, those whose bound is below the best skipped). "straightforward": every candidate
timed by :func:`rpd.model.plan.plan_one` (:func:`rpd.model.search3d.brute_force`). Both answers
(the fastest synchronous and the fastest overall that fit) are checked equal before any time is
printed.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_plan_search.py
"""

from __future__ import annotations

import time

from rpd import registry
from rpd.model import hardware, search3d
from rpd.model.layers import GPTConfig, Parallel, gpt_model

CFG = GPTConfig(n_layer=96, d_model=12288, n_head=96, seq=2048, vocab=51200, micro_batch=1)
N, B = 1024, 1536


def main() -> None:
    hw = hardware.preset("a100_80g")
    cache = {}

    def models(t):
        if t not in cache:
            cache[t] = gpt_model(CFG, "selective", par=Parallel(TP=t, SP=t > 1))
        return cache[t]

    kw = dict(shape=(96, 12288), margin=0.05, recompute="selective")
    cap = float(hw.memory_bytes)
    for t in (1, 2, 4, 8):  # the models per TP rank, built once for both
        models(t)
    times = {"search": [], "loop": []}
    for _ in range(2):  # interleaved; the second of each is reported (the first warms imports and caches)
        t0 = time.perf_counter()
        found = search3d.search(models, hw, registry.timeline, N, B, cap, **dict(kw))
        fast, timed = found.rows, found.timed
        times["search"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        slow = search3d.brute_force(models, hw, registry.timeline, N, B, cap, **dict(kw))
        times["loop"].append(time.perf_counter() - t0)
    t_fast, t_slow = times["search"][-1], times["loop"][-1]

    def best(rows, sync):
        ok = [r for r in rows if r.error is None and r.fits and (r.synchronous or not sync)]
        r = max(ok, key=lambda r: r.tokens_per_s)
        return (r.schedule, r.TP, r.S, r.D, r.M, r.v)

    for sync in (True, False):
        assert best(fast, sync) == best(slow, sync), (best(fast, sync), best(slow, sync))
    print(f"175B on {N} GPUs, global batch {B}: {len(slow)} candidates; answer {best(fast, True)}")
    print(f"search {t_fast:.2f} s ({timed} timed) vs straightforward {t_slow:.2f} s: {t_slow / t_fast:.1f}x")


if __name__ == "__main__":
    main()
