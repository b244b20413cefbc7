"""The sweep table tells runs apart: every swept override is a column (and the optimizer, its
correction, M, the unit of time); ``--columns`` takes any key of summary.json; ``n_diverged``;
the microbatches run in all against the updates counted to T; and a selected γ on its grid's
edge or marked unstable is flagged in the log line, the summary and the table."""

from __future__ import annotations

import pytest
from hydra_helpers import TINY_LINEAR, multirun_fixture

from rpd.cli import sweep
from rpd.io import store, sweep_table, sweeps

optimizer_sweep = multirun_fixture(
    ["optimizer=sgd,adam", "method.gamma_lo=-5", "method.gamma_hi=-4,-3"]
    + [o for o in TINY_LINEAR if not o.startswith("method.gamma")],
    in_tmp=True,
)


@pytest.mark.slow
def test_every_swept_override_is_a_column(optimizer_sweep):
    tmp, _ = optimizer_sweep
    df = sweeps.load_sweep(tmp / "multirun")
    assert list(df["optimizer"]) == ["sgd", "sgd", "adam", "adam"]
    assert list(df["method.gamma_hi"]) == [-4, -3, -4, -3]  # no column of its own: named by the key
    assert "method.gamma_lo" not in df.columns  # the same in every job
    assert df["correction"].isna().all() and df["M"].isna().all()  # PipeDream has no flushes
    assert set(df["time_unit"]) == {"tick"}
    for row in df.itertuples():
        s = store.load_run(row.result).summary
        assert row.n_diverged == sum(s["diverged"])
        assert row.microbatches_total == 8 and row.updates_by_T == s["updates"] <= 3 * 8
    # filters work on a swept override's column too
    assert list(sweeps.load_sweep(tmp / "multirun", optimizer="adam")["job"]) == [2, 3]


@pytest.mark.slow
def test_columns_take_any_key_of_the_summary(optimizer_sweep, capsys):
    tmp, _ = optimizer_sweep
    assert sweeps.main(["ls", str(tmp / "multirun"), "--columns", "job,optimizer,M,D,noam,n_diverged"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["job", "optimizer", "M", "D", "noam", "n_diverged"]
    assert [line.split()[:2] + line.split()[3:5] for line in lines[1:5]] == [
        ["0", "sgd", "12", "3"],
        ["1", "sgd", "12", "3"],
        ["2", "adam", "12", "3"],
        ["3", "adam", "12", "3"],
    ]
    assert sweeps.main(["ls", str(tmp / "multirun"), "--columns", "job,no_such_key"]) == 2
    assert "no_such_key" in capsys.readouterr().err


@pytest.mark.slow
def test_a_gamma_on_the_edge_is_flagged_in_log_summary_and_table(optimizer_sweep, capsys):
    tmp, proc = optimizer_sweep
    df = sweeps.load_sweep(tmp / "multirun")
    flagged = 0
    for row in df.itertuples():
        s = store.load_run(row.result).summary
        i, grid = s["tuning/index"], s["gammas"]
        expect = [f for f, on in (("lowest on grid", i == 0), ("highest on grid", i == len(grid) - 1)) if on]
        rising = ("up_frac", "max_up", "tv_ratio", "log_slope")  # cv alone: still falling, no flag
        expect += ["unstable"] if any(r.split()[0] in rising for r in s["tuning/reasons"]) else []
        assert (
            s["tuning/flag"]
            == (", ".join(expect) or None)
            == (row.gamma_flag if isinstance(row.gamma_flag, str) else None)
        )
        if expect:
            flagged += 1
            assert f"gamma={s['tuning/gamma']} ({s['tuning/rule']}) [{s['tuning/flag']}]" in proc.stdout + proc.stderr
    assert flagged  # two-γ grids: every choice is on an edge
    assert "gamma_flag" in (proc.stdout + proc.stderr)  # the end-of-sweep table shows the column


@pytest.mark.slow
def test_ls_rows_are_short_with_the_full_text_in_the_metadata(optimizer_sweep, capsys):
    """``ls --target auto``: what every row shares is said once above the table (T_rule's
    sentence too), wide cells are abbreviated, and the full text stays in the table's attrs
    and in --csv."""
    tmp, _ = optimizer_sweep
    assert sweeps.main(["ls", str(tmp / "multirun"), "--target", "auto"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 120
    assert out.count(sweep.T_RULE) == 1 and "every row: method=pd" in out
    df = sweeps.load_sweep(tmp / "multirun")
    table, above = sweep_table.for_terminal(df)
    assert table.attrs["full_text"]["result"] == list(df["result"])  # the metadata keeps the full paths
    assert [r.split("/")[-1] for r in df["result"]] == [r[2:] for r in table["result"]]  # "…/<hash>"
    assert table.attrs["constant"]["T_rule"] == sweep.T_RULE and "T_rule" not in table.columns
    assert f"T_rule: {sweep.T_RULE}" in above
    assert sweeps.main(["ls", str(tmp / "multirun"), "--csv"]) == 0
    csv = capsys.readouterr().out
    assert all(r in csv for r in df["result"]) and sweep.T_RULE in csv


@pytest.mark.slow
def test_a_sweep_stopped_early_lists_every_job(optimizer_sweep, tmp_path, capsys):
    """The sweep wrote its 4 jobs' overrides when it started (jobs.json); with jobs 2 and 3
    never started (no job directory, as after a Ctrl-C), ls still reports 4 jobs, those two not
    finished, with the overrides they would have run."""
    import shutil

    src, _ = optimizer_sweep
    stopped = tmp_path / "multirun"
    shutil.copytree(src / "multirun", stopped, symlinks=True)
    for job in ("2", "3"):
        shutil.rmtree(stopped / job)
    df = sweeps.load_sweep(stopped)
    assert list(df["job"]) == [0, 1, 2, 3]
    assert list(df["status"]) == ["ok", "ok", "not finished", "not finished"]
    assert df["overrides"][2].split()[:2] == ["optimizer=adam", "method.gamma_lo=-5"]
    assert sweeps.sweep_counts(df)["not_finished"] == 2
    assert sweeps.main(["ls", str(stopped)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "4 jobs: 2 done, 0 skipped, 0 failed, 2 not finished"


def test_section_is_a_config_group_or_empty():
    # a stored config's group is a dict; a group stored as a name or missing reads as no fields
    config = {"method": {"name": "pd", "optimizer": {"name": "adam"}}, "schedule": "gpipe"}
    assert sweep_table.section(config, "method") == {"name": "pd", "optimizer": {"name": "adam"}}
    assert sweep_table.section(sweep_table.section(config, "method"), "optimizer") == {"name": "adam"}
    assert sweep_table.section(config, "schedule") == {}
    assert sweep_table.section(config, "objective") == {}


def test_empty_cells_read_as_a_dash_not_nan():
    """A table a person reads has no ``NaN`` or ``None``: a failed row's γ and finals, a
    row without a flag, as the terminal and the sweep summary print them."""
    import math

    import pandas as pd

    from rpd.io.sweep_table import EMPTY, as_text, for_terminal

    df = pd.DataFrame(
        {
            "job": [0, 1],
            "status": ["ok", "failed"],
            "gamma": [0.25, math.nan],
            "final_selected": [0.125, math.nan],
            "gamma_flag": [None, "highest on grid"],
        }
    )
    table, _ = for_terminal(df, collapse=False)
    for text in (as_text(table), as_text(df)):
        assert "NaN" not in text and "None" not in text and "nan" not in text
        failed = text.splitlines()[2].split()
        assert failed[:2] == ["1", "failed"] and failed[2:4] == [EMPTY, EMPTY]
