"""The n_workers search's cost, and its answers against the published recipes.

1. The command as a user runs it, timed whole (a fresh process: imports, hydra, the search, the
   partitioner's rows, the JSON): ``python -m experiments.plan model=gpt3_175b hardware=h100_80g
   n_workers=1024 pipeline.global_batch=2048`` and ``model=llama3_405b n_workers=16384
   pipeline.global_batch=2048`` (Llama 3's 16M tokens of 8192), then 405B at the default batch.
2. :func:`rpd.model.search3d.search` against the straightforward loop over the same space
   (:func:`rpd.model.search3d.brute_force`: every candidate timed by
   :func:`rpd.model.plan.plan_one`), both in this process, answers checked equal before any time
   is printed: GPT-3 175B on ``--gpus`` H100s (default 128, global batch 2 per GPU; the loop
   over 1024 GPUs' 7,668 candidates takes most of an hour).
3. ``--devset``: for every run of the plan's development set (rpd.studies.plan_devset) at its
   GPU count, global batch and settings, the search's answer is predicted at least as fast as
   the published recipe's layout (which is in its space).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_plan_search.py [--gpus 128] [--devset]
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time
from pathlib import Path

from rpd import registry
from rpd.model import hardware, search3d
from rpd.model.answer import choose
from rpd.model.layers import Parallel, gpt_model
from rpd.model.shapes import PRESETS
from rpd.studies import plan_accuracy
from rpd.studies.plan_devset import runs

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("1f1b", "interleaved", "zb_h1", "pipedream")
COMMANDS = (
    ["model=gpt3_175b", "hardware=h100_80g", "n_workers=1024", "pipeline.global_batch=2048"],
    ["model=llama3_405b", "hardware=h100_80g", "n_workers=16384", "pipeline.global_batch=2048"],
    ["model=llama3_405b", "hardware=h100_80g", "n_workers=16384"],
)


def command(args: list[str], out: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.plan", *args, f"out={out}"], cwd=ROOT, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    return wall, proc.stdout.splitlines()[0]


def setting(cfg, attention="standard", overlap=None):
    cache = {}

    def models(x: search3d.Variant):
        if x in cache:
            return cache[x]
        par = Parallel(
            TP=x.TP, SP=x.SP, CP=x.CP, attention=attention, tp_overlap=overlap is not None and overlap.tp_comm
        )
        cache[x] = gpt_model(cfg, x.recompute, par=par)
        return cache[x]

    shape = search3d.Shape(cfg.n_layer, cfg.n_head, cfg.kv_heads, cfg.d_model, cfg.seq)
    return models, shape


def loop_against_search(gpus: int) -> None:
    hw = hardware.preset("h100_80g")
    models, shape = setting(PRESETS["gpt3_175b"])
    names = registry.searched(NAMES)
    kw = dict(margin=0.05)
    cap = float(hw.memory_bytes)
    times = []
    for _ in range(2):  # the second reported: the first also compiles the timer and builds the models
        t0 = time.perf_counter()
        found = search3d.search(models, hw, registry.timeline, gpus, 2 * gpus, cap, names, shape, **kw)
        times.append(time.perf_counter() - t0)
    t_search = times[-1]
    t0 = time.perf_counter()
    cands = search3d.candidates(gpus, 2 * gpus, hw, shape, names)
    slow = search3d.brute_force(models, hw, registry.timeline, cands, cap, **kw)
    t_loop = time.perf_counter() - t0
    for a, b in zip(choose(found.rows), choose(slow)):
        assert a == b, (a, b)
    best = choose(found.rows)[0]
    print(
        f"175B on {gpus} H100s, global batch {2 * gpus}: {found.candidates} candidates; answer {best.schedule} v={best.v} "
        f"TP {best.TP} CP {best.CP} PP {best.S} DP {best.D}, {best.recompute}, SP {best.SP}, zero {best.zero}: "
        f"{best.tokens_per_s:,.0f} tokens/s"
    )
    print(
        f"search {t_search:.2f} s warm, {times[0]:.2f} s cold ({found.timed} timed) vs straightforward {t_loop:.1f} s: "
        f"{t_loop / t_search:.0f}x"
    )


def devset() -> None:
    worst = None
    for run in runs():
        hw = hardware.preset(run.preset)
        models, shape = setting(run.model, run.attention, run.overlap)
        kw = dict(margin=0.0, grad_bytes=run.grad_bytes, overlap=run.overlap, precision=run.precision)
        # the recipe's row as the accuracy study plans it, at the preset's attention rate (the search's)
        recipe = plan_accuracy.plan_run(dataclasses.replace(run, attention_efficiency=None), hw)
        t0 = time.perf_counter()
        cap = float(hw.memory_bytes)
        found = search3d.search(
            models, hw, registry.timeline, run.gpus, run.DP * run.M, cap, registry.searched(NAMES), shape, **kw
        )
        best = choose(found.rows)[0]
        ratio = best.tokens_per_s / recipe.tokens_per_s
        print(
            f"{run.source} {run.name}: search {best.tokens_per_s:,.0f} tokens/s ({best.schedule} TP {best.TP} CP "
            f"{best.CP} PP {best.S} v {best.v} {best.recompute}) vs recipe {recipe.tokens_per_s:,.0f}"
            f"{'' if recipe.fits else ' (over the cap in the plan)'}: {ratio:.3f}x ({time.perf_counter() - t0:.1f} s)"
        )
        if recipe.fits:
            worst = ratio if worst is None else min(worst, ratio)
            assert ratio >= 1.0, run
    print(f"every run whose recipe fits: the search's answer at least the recipe's ({worst:.3f}x at worst)")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--gpus", type=int, default=128)
    p.add_argument("--devset", action="store_true")
    args = p.parse_args()
    out = "/tmp/bench_plan_search.json"
    for cmd in COMMANDS:
        wall, first = command(cmd, out)
        print(f"{' '.join(cmd)}: {wall:.1f} s; {first}")
    loop_against_search(args.gpus)
    if args.devset:
        devset()


if __name__ == "__main__":
    main()
