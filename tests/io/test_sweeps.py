"""Sweeps into tables: rpd.io.sweeps.load_sweep on a real multirun, the job
directories' links to their runs, the end-of-sweep summary, ``python -m rpd.io.sweeps ls``, the
example sweep written as hydra.sweeper.params, and main's return value for optimising sweepers."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hydra_helpers import ROOT, TINY_LINEAR, multirun_fixture
from hydra_helpers import compose as _compose

from experiments import train
from rpd.cli import sweep
from rpd.io import store, sweep_results, sweeps

TINY_E3 = [o for o in TINY_LINEAR if not o.startswith("method.")] + [
    "schedule.R=3",
    "method.gamma_lo=-5",
    "method.gamma_hi=-3",
]


# The example sweep (configs/sweep/e3_methods.yaml: method=pd,localsgd x schedule.H), shrunk, with
# H=2,5 from the command line (it wins over the file's 2,5,30): 4 jobs, PD's second is the same
# stored run (PD does not read H).
e3_sweep = multirun_fixture(
    ["experiment=e3_nesterov", "sweep=e3_methods", "schedule.H=2,5", *TINY_E3], HYDRA_FULL_ERROR="1"
)


@pytest.mark.slow
def test_load_sweep_is_the_sweeps_table(e3_sweep):
    tmp, proc = e3_sweep
    df = sweeps.load_sweep(tmp / "multirun")
    assert list(df["job"]) == [0, 1, 2, 3]
    assert list(df["method"]) == ["pd", "pd", "localsgd", "localsgd"]
    assert list(df["skipped"]) == [False, True, False, False]
    assert df["H"].isna().tolist() == [True, True, False, False]  # PD's key has no H
    assert list(df["H"][2:]) == [2, 5] and set(df["S"]) == {3}
    # one simulated time for every row: the shortest row's time for N = 8 microbatches, PD's
    # 2N + 2S - 2 = 20 ticks (LocalSGD H = 2: 2N + ceil(N / (R H)) (2S - 2) = 24, H = 5: 20)
    assert "comparing the 4 rows at one simulated time T = 20 ticks" in proc.stdout
    assert set(df["T"]) == {20} and set(df["T_rule"]) == {sweep.T_RULE}
    # each row runs its N = 8 microbatches and is read at T = 20 (protocol (i))
    assert list(df["N"]) == [8, 8, 8, 8]
    assert df["result"][0] == df["result"][1] != df["result"][2]
    assert ["method=pd", "schedule.H=2"] == df["overrides"][0].split()[:2]
    assert list(df["status"]) == ["ok"] * 4 and df["wandb_id"].isna().all()
    for row in df.itertuples():  # every number is the stored run's, recomputed from its curves
        run = store.load_run(row.result)
        s = run.summary
        assert row.gamma == s["tuning/gamma"] and row.final_selected == s["final/selected"]
        assert (
            row.rule == s["tuning/rule"] == "reference" and run.curves["axis/sim_time"][-1] <= 20
        )  # e3_nesterov's rule
        final = run.curves[s["metric"]].mean(axis=0)[:, -1]
        ok = ~np.asarray(s["diverged"], bool)
        assert row.final_best == pytest.approx(final[ok].min(), rel=1e-12)
        assert row.final_best <= row.final_selected
    # the end-of-sweep summary and the links in each job directory
    assert "4 jobs, 3 done, 1 skipped (already stored), 0 failed" in proc.stdout
    for job in range(4):
        link = tmp / "multirun" / str(job)
        assert (link / "result").resolve() == (
            tmp / "results" / "train" / os.path.basename(df["result"][job])
        ).resolve()


@pytest.mark.slow
def test_load_sweep_filters_and_store_listing(e3_sweep):
    tmp, _ = e3_sweep
    local = sweeps.load_sweep(tmp / "multirun", method="localsgd", H=[5, 30])
    assert list(local["job"]) == [3]
    assert list(sweeps.load_sweep(tmp / "multirun", H=None)["job"]) == [0, 1]
    with pytest.raises(ValueError, match="unknown filter 'gama'.*gamma"):
        sweeps.load_sweep(tmp / "multirun", gama=1)
    runs = sweeps.load_sweep(tmp / "results" / "train")  # a results store: one row per run
    assert len(runs) == 3 and runs["overrides"].eq("").all() and set(runs["method"]) == {"pd", "localsgd"}
    with pytest.raises(FileNotFoundError):
        sweeps.load_sweep(tmp / "nothing")


@pytest.mark.slow
def test_store_ls_cli(e3_sweep, capsys):
    tmp, _ = e3_sweep
    assert sweeps.main(["ls", str(tmp / "multirun"), "method=localsgd", "--columns", "job,H,status"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["job", "H", "status"]
    assert [line.split() for line in out[1:3]] == [["2", "2", "ok"], ["3", "5", "ok"]]
    assert out[3] == "2 jobs: 2 done, 0 skipped, 0 failed"
    assert sweeps.main(["ls", str(tmp / "multirun"), "H=30"]) == 0
    assert "no rows match the filters" in capsys.readouterr().out
    assert sweeps.main(["ls", str(tmp / "multirun"), "nope=1"]) == 2
    proc = subprocess.run(
        [sys.executable, "-m", "rpd.io.sweeps", "ls", str(tmp / "multirun"), "--csv"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.splitlines()[0].startswith("job,overrides,method")
    assert len(proc.stdout.splitlines()) == 5


def test_main_returns_the_selected_metric(tmp_path):
    """What an optimising sweeper (Optuna, Ax) minimises: the final value at the selected γ."""
    cfg = _compose([f"results_root={tmp_path}", *TINY_LINEAR])
    value = train.main.__wrapped__(cfg)
    out = train.run(cfg)
    assert out.skipped and value == out.summary["final/selected"] and math.isfinite(value)


def test_sweep_counts_and_swept():
    import pandas as pd

    df = pd.DataFrame(
        {
            "status": ["ok", "diverged", "failed", "no result", "ok", "not finished"],
            "skipped": [False, False, False, False, True, False],
        }
    )
    assert sweeps.sweep_counts(df) == {"total": 6, "done": 2, "skipped": 1, "failed": 2, "not_finished": 1}
    assert sweeps.swept(["a=1 b=2 c=3", "a=2 b=2 c=3"]) == ["a=1", "a=2"]


@pytest.mark.slow
def test_a_row_reopens_as_its_result(e3_sweep):
    """Issue 26, item 7: any row of a sweep table is its Result again."""
    tmp, _ = e3_sweep
    df = sweeps.load_sweep(tmp / "multirun")
    for row in df.itertuples():
        res = sweep_results.load_result(row)
        run = store.load_run(row.result)
        assert res.axis_name == "sim_time" and res.axis[-1] <= row.T
        assert res.curve.shape == (len(res.gammas), len(res.axis))
        assert res.curve[run.summary["tuning/index"], -1] == pytest.approx(row.final_selected, rel=1e-12)
        assert res.method == row.method and res.meta["status"] == row.status
    with pytest.raises(ValueError, match="no stored run"):
        sweep_results.load_result({"result": None})


@pytest.mark.slow
def test_time_to_target_reads_each_rows_selected_curve(e3_sweep):
    """Issue 26's missing column: the first simulated time each row's selected curve reaches the
    target (E10's rule by default: the lowest value any row has at half the common T)."""
    tmp, _ = e3_sweep
    df = sweep_results.time_to_target(sweeps.load_sweep(tmp / "multirun"))
    picked = {}
    for row in df.itertuples():
        res = sweep_results.load_result(row)
        picked[row.job] = (res.axis, res.curve[res.meta["summary"]["tuning/index"]], row.T)
    half = min(T for *_, T in picked.values()) / 2
    target = min(c[np.searchsorted(a, half, side="right") - 1] for a, c, _ in picked.values())
    assert (df["target"] == target).all()
    for row in df.itertuples():
        a, c, T = picked[row.job]
        hit = [t for t, v in zip(a, c) if v <= target and t <= T]
        assert (math.isnan(row.time_to_target) and not hit) or row.time_to_target == hit[0]
    assert df["time_to_target"].notna().any()  # the row that sets the target reaches it by T/2
    easy = sweep_results.time_to_target(sweeps.load_sweep(tmp / "multirun"), target=1e30)
    assert (easy["time_to_target"] == [picked[j][0][0] for j in easy["job"]]).all()  # at once
    assert sweeps.main(["ls", str(tmp / "multirun"), "--target", "auto", "--columns", "job,time_to_target"]) == 0


def test_time_to_target_takes_auto_as_documented():
    """docs/running.md writes ``time_to_target(df, "auto")`` (it raised); any other word is
    refused naming ``target``. A table with no stored curve gets no target and no times."""
    import pandas as pd

    df = pd.DataFrame({"status": ["diverged"], "result": [None], "T": [1.0]})
    for target in ("auto", None):
        out = sweep_results.time_to_target(df, target)
        assert math.isnan(out["target"][0]) and math.isnan(out["time_to_target"][0])
    with pytest.raises(ValueError, match="^target: 'fastest'"):
        sweep_results.time_to_target(df, "fastest")
