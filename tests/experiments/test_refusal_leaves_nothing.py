"""A refused value leaves nothing behind: each hydra entry point, given a bad
value that only its job can refuse (hydra composes it), answers one line and exit status 2 and
leaves its working directory as it found it: no ``outputs/`` run folder, no results, no cache
entry. Before, hydra's ``outputs/<command>/<date>/<time>/`` (its saved config and log, and for
``experiments.train`` a ``result.json`` saying "failed") stayed behind.

The commands run as ``python -m`` runs them, all in one Python process to share its imports
(tests/experiments/refusing_commands.py), each in an empty directory of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra_helpers import ROOT

# Slow: the six entry points run as `python -m` runs them, in a subprocess (12 s of one worker's
# time, its JAX and hydra imports), like the suite's other entry points run whole (docs/running.md).
pytestmark = pytest.mark.slow

REFUSED = {  # entry point: (a value its job refuses, the line it prints)
    "train": (["schedule.S=0"], "error: schedule.S must be >= 1, got 0"),
    "figure": (["experiment=e3_nesterov", "study.S=0"], "error: study.S must be >= 1, got 0"),
    "plan": (["memory_cap=1"], "error: memory_cap=1 without a unit is 1 bytes, below 1 MiB"),
    "schedule": (["schedule.S=0"], "error: schedule.S must be >= 1, got 0"),
    "replay": (["trace=missing.parquet", "meta=missing.yaml"], "error: trace: no such file missing.parquet"),
    "time_to_loss": (["n_workers=0"], "error: n_workers must be >= 1, got 0"),
}
EARLIER = ["schedule/2000-01-01/00-00-00/.hydra/config.yaml", "schedule/2000-01-01/00-00-00/zb_h2.png"]


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    """Each command of REFUSED run once in an empty directory, and ``experiments.schedule`` once
    more beside another run's folder (``outputs/schedule/...``, EARLIER): (exit status, stderr,
    the files and folders each directory holds after it)."""
    base = tmp_path_factory.mktemp("refused")
    runs = {name: base / name for name in REFUSED}
    runs["beside"] = base / "beside"
    for path in runs.values():
        path.mkdir()
    for name in EARLIER:
        (runs["beside"] / "outputs" / name).parent.mkdir(parents=True, exist_ok=True)
        (runs["beside"] / "outputs" / name).write_text("an earlier run's\n")
    lines = [[str(path), f"experiments.{name}", REFUSED[name][0]] for name, path in runs.items() if name in REFUSED]
    lines.append([str(runs["beside"]), "experiments.schedule", REFUSED["schedule"][0]])
    (base / "runs.json").write_text(json.dumps(lines))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RPD_CACHE": str(base / "cache"), "WANDB_MODE": "disabled"}
    env.pop("RPD_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("refusing_commands.py")), base / "runs.json", base / "out.json"],
        cwd=base,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((base / "out.json").read_text())
    names = [*REFUSED, "beside"]
    assert not [p for p in (base / "cache").rglob("*") if p.is_file()]  # no cache entry either
    return {
        name: (r["code"], r["stderr"], sorted(p.relative_to(runs[name]).as_posix() for p in runs[name].rglob("*")))
        for name, r in zip(names, results)
    }


@pytest.mark.parametrize("command", list(REFUSED))
def test_a_refused_value_leaves_the_working_directory_empty(command, refused):
    code, err, left = refused[command]
    assert code == 2 and err.startswith(REFUSED[command][1]) and err.count("\n") == 1, err
    assert left == []


def test_a_refusal_takes_back_only_its_own_run_folder(refused):
    """Another run's folder under ``outputs/`` stays whole: only what this run wrote is removed,
    and a folder only once it is empty."""
    code, err, left = refused["beside"]
    assert code == 2 and err.startswith(REFUSED["schedule"][1])
    assert left == [
        "outputs",
        "outputs/schedule",
        "outputs/schedule/2000-01-01",
        "outputs/schedule/2000-01-01/00-00-00",
        "outputs/schedule/2000-01-01/00-00-00/.hydra",
        *(f"outputs/{name}" for name in EARLIER),
    ]
