"""A sweep's rows at one simulated time (experiments.sweep.EqualTime): for every schedule the run
composes, one added from outside through ``hydra.searchpath`` too, or the sweep refused before
any job runs; a table whose rows end at different T says so (rpd.io.sweep_table.unequal_time)."""

from __future__ import annotations

import json
import textwrap

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from hydra_helpers import CONFIGS, TINY_LINEAR, multirun
from omegaconf import open_dict

from experiments import sweep
from rpd.io import sweeps
from rpd.io.sweep_table import unequal_time

# GPipe with flushes of 2 microbatches, added from outside the repository: T = 48 ticks for
# S = 3, N = 12 at unit costs, against 1F1B's 40 (M = S = 3)
MY_GPIPE = textwrap.dedent(
    """\
    name: gpipe
    S: 3
    N: 12
    M: 2
    T: null
    """
)


def _sweep(tmp_path, *overrides):
    (tmp_path / "cfg" / "schedule").mkdir(parents=True, exist_ok=True)
    (tmp_path / "cfg" / "schedule" / "my_gpipe.yaml").write_text(MY_GPIPE)
    tiny = [o for o in TINY_LINEAR if not o.startswith("schedule.N")]
    return multirun(["method=pipeline", *tiny, *overrides, f"hydra.searchpath=[file://{tmp_path / 'cfg'}]"], tmp_path)


@pytest.mark.slow  # a hydra subprocess per call: several seconds on 2 cores
def test_a_schedule_on_the_search_path_is_compared_at_the_sweeps_one_time(tmp_path):
    """Before: the callback could not compose ``schedule=my_gpipe`` (a warning), and the table
    held GPipe at T = 48 000 us against 1F1B at T = 40 000 us. Now both rows end at the
    shorter, and the start line says so in the costs' unit (it said "ticks" under us)."""
    proc = _sweep(tmp_path, "schedule=my_gpipe,1f1b", "schedule.N=12", "costs.unit=us", "costs.F=1000", "costs.B=1000")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "EqualTime" not in proc.stderr
    assert "at one simulated time T = 40000 us (" in proc.stdout
    df = sweeps.load_sweep(tmp_path / "multirun")
    assert list(df["schedule"]) == ["gpipe", "1f1b"]
    assert list(df["T"]) == [40000, 40000] and list(df["time_unit"]) == ["us", "us"]
    assert "different simulated times" not in proc.stdout


@pytest.mark.slow  # over 4 s on 2 cores (a figure, a subprocess or the study's fits)
def test_a_sweep_whose_row_cannot_be_timed_is_refused_before_any_job(tmp_path):
    """1F1B's flush is M = S = 3 microbatches, and N = 8 is not a whole number of them: no T
    for that row, so no equal-time comparison; one line, exit 2, no job run or stored."""
    proc = _sweep(tmp_path, "schedule=my_gpipe,1f1b", "schedule.N=8")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    error = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(error) == 1, proc.stderr
    assert error[0].startswith("error: compare=equal_time: job 1: schedule.N must be a whole number of flushes")
    assert not (tmp_path / "results").exists() and not list((tmp_path / "multirun").glob("*/.hydra"))


def test_the_callback_times_a_schedule_on_the_search_path_in_process(tmp_path, capsys):
    """Fast, in process, the slow test's case: the EqualTime callback composes every job of
    ``schedule=my_gpipe,1f1b`` with the command line's search path and writes the one T. By hand
    at unit costs: GPipe at S = 3 with flushes of M = 2 takes (M + S - 1)·2 = 8 ticks per flush, 6
    flushes in N = 12: 48; 1F1B's M = S = 3: 10 ticks per flush, 4 flushes: 40. T = the shorter."""
    (tmp_path / "cfg" / "schedule").mkdir(parents=True)
    (tmp_path / "cfg" / "schedule" / "my_gpipe.yaml").write_text(MY_GPIPE)
    search = f"hydra.searchpath=[file://{tmp_path / 'cfg'}]"
    tiny = [o for o in TINY_LINEAR if not o.startswith("schedule.N")]
    task = ["method=pipeline", *tiny, "schedule=my_gpipe,1f1b", "schedule.N=12"]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        config = compose("train", overrides=[search, "method=pipeline"], return_hydra_config=True)
        with open_dict(config):
            config.hydra.overrides.task = task  # the multirun's command line, as hydra records it
            config.hydra.overrides.hydra = [search]
            config.hydra.sweep.dir = str(tmp_path / "multirun")
            config.hydra.job.config_name = "train"
        assert [job[-2:] for job in sweep.job_overrides(config)] == [
            ["schedule=my_gpipe", "schedule.N=12"],
            ["schedule=1f1b", "schedule.N=12"],
        ]
        sweep.EqualTime().on_multirun_start(config)
    assert json.loads((tmp_path / "multirun" / "equal_time.json").read_text())["T"] == 40
    assert "at one simulated time T = 40 ticks (" in capsys.readouterr().out


def test_a_table_at_unequal_time_says_so():
    df = pd.DataFrame(
        {"status": ["ok", "ok", "failed"], "T": [48, 40, None], "time_unit": ["tick", "tick", None]}
    ).astype({"T": "Int64"})
    note = unequal_time(df)
    assert note is not None and note.startswith(
        "note: the rows end at different simulated times T (40 ticks, 48 ticks)"
    )
    assert unequal_time(df.assign(T=[40, 40, None]).astype({"T": "Int64"})) is None
    us = unequal_time(df.assign(time_unit=["us", "us", None]))
    assert us is not None and "(40 us, 48 us)" in us
