"""python -m experiments.replay: the JSON's keys on ST, and the refusals (missing column,
unknown op type, empty step) in one line with exit 2, nothing written."""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

from rpd.cli import replay
from tests.hydra_helpers import ROOT

ST = ROOT / "tests" / "data" / "trace_st"


def test_st_json_and_figure(tmp_path):
    cfg = types.SimpleNamespace(
        trace=str(ST / "trace-ST.parquet"),
        meta=str(ST / "meta-ST.yaml"),
        out=str(tmp_path / "r.json"),
        figure=str(tmp_path / "r.png"),
        H=8,
        top=3,
    )
    replay.run(cfg)
    r = json.loads((tmp_path / "r.json").read_text())
    for key in ("measured_step_s", "replay_step_s", "ideal_step_s", "slowdown"):
        assert isinstance(r[key], float)
    assert list(r["by_stage"])[0] == "3" and set(r["by_dp_rank"]) == {"0", "1"}
    assert "forward-compute" in r["by_optype"]
    names = [row["schedule"] for row in r["what_if"]]
    assert {"1f1b", "zb_h1", "zb_h2", "interleaved (v=2)", "local_sgd (H=8)"} <= set(names)
    assert all(row["step_s"] > 0 for row in r["what_if"])
    assert (tmp_path / "r.png").stat().st_size > 0
    assert replay.lines(r)[0].startswith("measured step 2.2144 s")


def _run(tmp_path: Path, df: pd.DataFrame) -> subprocess.CompletedProcess:
    df.to_parquet(tmp_path / "t.parquet")
    cmd = [
        sys.executable,
        "-m",
        "experiments.replay",
        f"trace={tmp_path / 't.parquet'}",
        f"meta={ST / 'meta-ST.yaml'}",
        f"out={tmp_path / 'r.json'}",
        f"figure={tmp_path / 'r.png'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    env = {**os.environ, "RPD_DEBUG": ""}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


def _st() -> pd.DataFrame:
    return pd.read_parquet(ST / "trace-ST.parquet")


REFUSALS = {
    "missing column": (lambda df: df.drop(columns=["mb_id"]), "error: trace: missing column 'mb_id'"),
    "unknown op type": (
        lambda df: df.assign(optype=df.optype.astype(str).replace("gc", "gc-pause")),
        "error: trace: unknown op type 'gc-pause'",
    ),
    "empty step": (
        lambda df: df[~((df.step == 25) & (df.stage == 2) & (df.dp_rank == 1))],
        "error: trace: step 25 is empty on dp_rank 1, stage 2 (no ops)",
    ),
}


@pytest.mark.slow  # a python process each (~15 s on 2 shared cores); the messages: tests/io/test_trace.py
@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusal_is_one_line_exit_2(tmp_path, case):
    edit, message = REFUSALS[case]
    proc = _run(tmp_path, edit(_st()))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1 and proc.stdout == ""
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "r.png").exists()
