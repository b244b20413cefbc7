"""Ctrl-C at random moments: does every interrupted run exit 130 with one line and store
nothing as complete?

    .venv/bin/python benchmarks/stress_interrupt.py                # 60 tries, about 6 minutes
    .venv/bin/python benchmarks/stress_interrupt.py --tries 50 --hog 2  # under a CPU hog

Each try starts ``python -m experiments.train`` (a LocalSGD cell, long enough that it is still
running at the latest moment drawn), sends SIGINT after a delay drawn uniformly from
[0, --latest] seconds (imports, hydra, the objective, the compile and the run all fall in it)
and classifies the outcome:

    clean          exit 130, one line (rpd's message, or the entry point's "while starting"
                   one before rpd is imported), no traceback, no run stored as complete, no
                   temporary file left in the store
    pre-python     the signal came before the interpreter ran any of our code (it dies in its
                   own start-up: "init_import_site", or killed by the signal, -2): outside rpd
    finished       the run ended before the signal (exit 0, stored ok): not an interrupt
    stored-as-ok   exit 130 or 0 after the signal but a complete run in the store: the bug
    crash          any other exit status, a traceback, or a leftover temporary file

The last line is one JSON object with the counts (what BENCHMARKS.md records). ``--hog n``
runs n busy-looping processes beside it, which is when the audit saw the interrupt swallowed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rpd.io import store  # noqa: E402
from rpd.runtime import interrupt  # noqa: E402

COMMAND = ["-m", "experiments.train", "method=localsgd", "schedule.N=20000"]


def _hog() -> None:  # pragma: no cover - a separate process
    while True:
        pass


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RPD_JAX_CACHE": "0"}
    # a background job has SIGINT ignored and its children would inherit that; a handler is
    # reset to the default by exec
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return subprocess.Popen(
        [sys.executable, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def one_try(delay: float, tmp: Path) -> str:
    results = tmp / "results"
    proc = _start([*COMMAND, f"results_root={results}", f"hydra.run.dir={tmp / 'job'}"], tmp)
    time.sleep(delay)
    finished_first = proc.poll() is not None
    if not finished_first:
        proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return "crash"
    complete = list(store.iter_runs(results)) if results.exists() else []
    leftovers = [p for p in results.rglob("*.tmp")] if results.exists() else []
    if finished_first:
        return "finished" if proc.returncode == 0 and complete else "crash"
    if complete:
        return "stored-as-ok"
    if "init_import_site" in err or (proc.returncode == -signal.SIGINT and not err):
        return "pre-python"
    one_line = interrupt.MESSAGE in err or "interrupted (Ctrl-C) while starting" in err
    if proc.returncode != interrupt.EXIT_INTERRUPTED or "Traceback" in err or leftovers or not one_line:
        sys.stderr.write(f"  delay {delay:.2f} s: exit {proc.returncode}\n{err[-1500:]}\n")
        return "crash"
    return "clean"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tries", type=int, default=60)
    ap.add_argument("--latest", type=float, default=6.0, help="latest Ctrl-C, seconds after start")
    ap.add_argument("--hog", type=int, default=0, help="busy-looping processes beside the runs")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    hogs = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(args.hog)]
    for h in hogs:
        h.start()
    counts: Counter[str] = Counter()
    t0 = time.monotonic()
    try:
        for i in range(args.tries):
            delay = rng.uniform(0.0, args.latest)
            with tempfile.TemporaryDirectory(prefix="rpd-stress-") as tmp:
                outcome = one_try(delay, Path(tmp))
            counts[outcome] += 1
            print(f"{i + 1:3d}/{args.tries}  Ctrl-C at {delay:5.2f} s  {outcome}", flush=True)
    finally:
        for h in hogs:
            h.terminate()
    summary = {
        "tries": args.tries,
        "hog": args.hog,
        "latest_s": args.latest,
        "wall_s": round(time.monotonic() - t0, 1),
        **{k: counts.get(k, 0) for k in ("clean", "finished", "pre-python", "stored-as-ok", "crash")},
    }
    print(json.dumps(summary))
    return 0 if summary["stored-as-ok"] == 0 and summary["crash"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
