"""The figure script's printed tables: a paper-claim row is a line under the table (not three
columns empty but for one row), and a cell wider than MAX_CELL is abbreviated."""

import json

from hydra_helpers import ROOT

from rpd.cli import tables


def test_e3_claim_row_is_a_line_under_the_table():
    rows = json.loads((ROOT / "paper_figures" / "e3_nesterov.json").read_text())["table"]
    claim = next(r for r in rows if r.get("method") == "paper claim")
    lines = tables.format_table(rows).splitlines()
    header = lines[0].split()
    assert not {"holds", "measured", "paper"} & set(header)
    assert len(lines) == 2 + len(rows) - 1 + 1  # header, rule, the data rows, the claim's line
    assert lines[-1] == f"  paper claim: holds True; measured {claim['measured']}; paper {claim['paper']}"
    assert max(len(line) for line in lines[:-1]) < 160  # was 258 with the three claim columns


def test_wide_cells_are_abbreviated_and_said_so():
    rows = [dict(method="PD", notes="x" * 100), dict(method="RPD", notes="short")]
    lines = tables.format_table(rows).splitlines()
    assert lines[2].split()[1] == "x" * (tables.MAX_CELL - 1) + "…"
    assert lines[3].split()[1] == "short" and "full table is in the figure's JSON" in lines[-1]


def test_rows_that_share_no_column_stay_a_table():
    lines = tables.format_table([dict(a=1), dict(b=2)]).splitlines()
    assert lines[0].split() == ["a", "b"] and len(lines) == 4
