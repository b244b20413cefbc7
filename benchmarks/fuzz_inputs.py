"""Bad input at every entry point: is each refused before any work, in one line?

    .venv/bin/python benchmarks/fuzz_inputs.py              # about 130 cases, ~5 minutes on 2 cores
    .venv/bin/python benchmarks/fuzz_inputs.py --limit 20   # a sample

Each case runs one command (``experiments.train``, ``experiments.schedule``, ``experiments.plan``,
``experiments.figure``) with one generated bad override in a fresh temporary directory and
classifies what came back:

    one-line       exit 2, stderr is one line naming the field (or path), no traceback, and
                   nothing was stored (no run directory, no JAX compile)
    hydra          refused by hydra's own config checks before the program starts (an unknown key
                   or a value of the wrong type): exit 1 and hydra's message, no traceback
    traceback      a Python traceback reached the user
    accepted       the command ran (a value that should have been refused was not)
    other          any other exit

The last line is one JSON object with the counts (what BENCHMARKS.md records).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL = [
    "objective.n=32",
    "objective.d=12",
    "objective.batch_size=4",
    "schedule.S=3",
    "schedule.N=8",
    "method.gammas=[0.0625]",
]

BAD_INT = ["0", "-3"]
BAD_NUM = ["-1.5", "nan"]
BAD_TYPE = ["abc", "[1,2]"]


def cases() -> list[tuple[str, list[str], str]]:
    """(entry point, overrides, the field the error must name)."""
    out = []
    train_ints = [
        "schedule.S",
        "schedule.N",
        "schedule.M",
        "schedule.T",
        "schedule.R",
        "schedule.H",
        "schedule.noam",
        "objective.n",
        "objective.d",
        "objective.batch_size",
        "method.stride",
        "costs.F",
        "costs.B",
        "costs.I",
        "costs.W",
    ]
    for field in train_ints:
        for v in BAD_INT + BAD_TYPE[:1]:
            out.append(("experiments.train", SMALL + [f"{field}={v}"], field))
    for field in ["costs.allreduce_alpha", "costs.straggler_p", "objective.grad_noise", "method.tail_frac"]:
        for v in BAD_NUM:
            out.append(("experiments.train", SMALL + [f"{field}={v}"], field))
    for field, v in [
        ("method.gammas", "[]"),
        ("method.gammas", "[-1.0]"),
        ("method.gammas", "[0.0]"),
        ("method.seeds", "[-1]"),
        ("schedule.cut", "middle"),
        ("objective._target_", "no.such.fn"),
        ("results_root", "/etc/hostname/sub"),
        ("results_root", "/proc/rpd_x"),
        ("costs.p2p", "-1"),
        ("method.delta", "-2"),
        ("objective.mu", "-1.0 objective=nesterov_quadratic"),
        ("objective.condition_number", "0.5 objective=nesterov_quadratic"),
        ("schedule.S", "100000"),
        ("costs.F", "1000000000"),
        ("objective.d", "10000000"),
        ("method.gamma_lo", "5 method.gammas=null"),
        ("schedule.M", "0 schedule=gpipe"),
        ("schedule.S", "3 schedule=chimera method=pipeline schedule.N=6"),
        ("schedule.concat", "halving schedule=chimera method=pipeline schedule.S=4"),
        ("schedule.concat", "backward_halving schedule=chimera method=pipeline schedule.S=4"),
        ("schedule.local_steps", "0 schedule=1f1b method=pipeline schedule.S=4 schedule.D=2"),
        ("schedule.local_steps", "2 schedule=1f1b method=pipeline schedule.S=4"),
        ("schedule.D", "2 schedule=pipedream method=pipeline schedule.local_steps=2"),
        ("schedule.v", "0 schedule=interleaved"),
        ("method.delta", "-1 method=rpd"),
        ("schedule.H", "0 method=localsgd"),
        ("schedule.R", "0 method=localsgd"),
        ("schedule.S", "2 objective=nanochat"),
        ("objective.heads", "3 objective=nanochat"),
        ("objective.width", "0 objective=mlp_chain"),
        ("optimizer", "muon"),
        ("optimizer.b1", "1.5 optimizer=adam"),
        ("logger.mode", "sometimes logger=wandb"),
        ("compare_T", "0"),
        ("costs.FB", "0"),
        ("costs.straggler_ticks", "-1"),
        ("method.stride", "0 method=pipeline"),
        ("schedule", "no_such_schedule"),
        ("method", "no_such_method"),
        ("objective", "no_such_objective"),
        ("nonsense", "1"),
    ]:
        value, *more = v.split(" ")
        out.append(("experiments.train", SMALL + [f"{field}={value}", *more], field))
    for field, v in [
        ("schedule.S", "0"),
        ("schedule.M", "-1"),
        ("costs.F", "0"),
        ("out", "/etc/hostname/x.png"),
        ("schedule", "nope"),
    ]:
        out.append(("experiments.schedule", [f"{field}={v}"], field))
    for field, v in [
        ("pipeline.S", "0"),
        ("pipeline.D", "0"),
        ("pipeline.M", "-4"),
        ("memory_cap", "-1"),
        ("model", "nope"),
        ("hardware", "nope"),
        ("optimizer", "nope"),
    ]:
        out.append(("experiments.plan", [f"{field}={v}", "out=null"], field))
    for field, v in [("experiment", "nope"), ("size", "huge")]:
        out.append(("experiments.figure", [f"{field}={v}"], field))
    return out


def run_case(entry: str, overrides: list[str], field: str) -> tuple[str, str]:
    with tempfile.TemporaryDirectory(prefix="rpd-fuzz-") as tmp:
        own_root = any(o.startswith("results_root=") for o in overrides)
        extra = (
            [f"results_root={tmp}/results"]
            if entry in ("experiments.train", "experiments.figure") and not own_root
            else []
        )
        extra += [f"hydra.run.dir={tmp}/job"]
        if entry == "experiments.schedule" and not any(o.startswith("out=") for o in overrides):
            extra.append(f"out={tmp}/chart.png")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "RPD_JAX_CACHE": "0", "RPD_DEBUG": ""}
        proc = subprocess.run(
            [sys.executable, "-m", entry, *overrides, *extra],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        stored = list(Path(tmp, "results").rglob("status.json")) if Path(tmp, "results").exists() else []
    err = proc.stderr.strip()
    if "Traceback" in err:
        return "traceback", err[-400:]
    if proc.returncode == 0 or stored:
        return "accepted", err[-200:]
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("[")]
    if proc.returncode == 2 and len(lines) == 1 and field.split(".")[-1] in lines[0]:
        return "one-line", lines[0]
    if proc.returncode == 1 and (
        "Could not override" in err
        or "Error merging" in err
        or "Key '" in err
        or "Could not find" in err
        or "Error parsing" in err
        or "Validation" in err
    ):
        return "hydra", lines[0] if lines else ""
    return "other", f"rc {proc.returncode}: {err[-300:]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    todo = cases()[: args.limit]
    counts: Counter[str] = Counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        for (entry, overrides, field), (outcome, text) in zip(todo, pool.map(lambda c: run_case(*c), todo)):
            counts[outcome] += 1
            if outcome not in ("one-line",):
                print(f"{outcome:10s} {entry} {overrides[-1]}: {text.splitlines()[0] if text else ''}", flush=True)
    print(
        json.dumps(
            {
                "cases": len(todo),
                **{k: counts.get(k, 0) for k in ("one-line", "hydra", "traceback", "accepted", "other")},
            }
        )
    )
    return 0 if counts["traceback"] == counts["accepted"] == counts["other"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
