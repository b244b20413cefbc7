"""The figure script spreads a splitting study's units over its worker processes
(``rpd.cli.spread``): the plan lists exactly the units the store lacks, the units run as pool
tasks, and the figure made so equals the figure made in one process."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from experiments import reproduce_paper_figures as R
from rpd.cli import checks, spread
from rpd.cli import config as C
from rpd.cli import figure as F
from rpd.cli.figure_list import COLD_CPU_S, FIGURES
from rpd.studies import fanout, frontier
from rpd.studies import units as U

NUMBERS = ("figure", "size", "config", "summary", "table")  # a figure JSON's numbers (not its timings)


def _cfg(name, tmp_path, force=False):
    return R.figure_config(name, "quick", force=force, results_root=str(tmp_path / "r"), out_dir=str(tmp_path / "pf"))


def test_a_splitting_figure_is_planned_unit_by_unit_the_others_whole(tmp_path):
    """E3's plan lists each of its units (counted by its own ``units``), none computed; E1
    (one unit) and a name that is no study are made whole (None)."""
    cfg = _cfg("e3_nesterov", tmp_path)
    sp = spread.plan(cfg)
    typed = checks.typed(cfg, C.FigureConfig)
    study, scfg, key, _ = F.target("e3_nesterov", "quick", C.study_fields(typed.study), typed.results_root)
    specs = U.of(study.module, study.run).units(scfg)
    assert len(specs) > 1 and sp is not None and sp.todo == tuple(range(len(specs)))
    assert json.loads(sp.plan.read_text())["units"] == specs
    assert all(s.status == "missing" for s in fanout.states(sp.plan.parent, key, specs))
    assert spread.plan(_cfg("e1_pd_vs_rpd", tmp_path)) is None
    assert spread.plans(["e1_pd_vs_rpd", "no_such_figure"], lambda n: _cfg(n, tmp_path)) == {}


@pytest.mark.slow  # two spawned workers and E3, E4 at the quick size twice (~1 min on 2 cores)
def test_a_figure_spread_over_the_workers_equals_the_figure_made_in_one_process(tmp_path):
    """``jobs=2``: E3's and E4's units run as tasks of the pool beside E1, each stored as a
    fan-out job; the figures' numbers equal those made one after another in this process."""
    names = ["e3_nesterov", "e4_logistic", "e1_pd_vs_rpd"]
    runs = {}
    for jobs in (1, 2):
        out = tmp_path / f"pf{jobs}"
        root = tmp_path / f"r{jobs}"
        reports = R.reproduce(names, results_root=str(root), out_dir=str(out), file=io.StringIO(), jobs=jobs)
        assert [r.status for r in reports] == ["ok"] * 3, [(r.name, r.error) for r in reports]
        runs[jobs] = {n: json.loads((out / f"{n}.json").read_text()) for n in names}
        plans = sorted((root / fanout.JOBS).glob("*/*/plan.json"))
        assert [p.parent.parent.name for p in plans] == (["e3_nesterov", "e4_logistic"] if jobs == 2 else [])
    for n in names:
        assert {k: runs[2][n][k] for k in NUMBERS} == {k: runs[1][n][k] for k in NUMBERS}, n


def test_the_pool_takes_the_longest_task_first_a_spread_figure_by_its_units():
    """Longest processing time first, by hand: a figure of unknown cost first (it may be the
    longest), then 30 s; the spread figure's 100 s over its 4 units is 25 s a unit, and only its
    units not stored are tasks; 10 s last. Ties keep the order of the names. A unit's own
    recorded cost (40 s) places it before the 30 s figures."""
    sp = spread.Spread("b", Path("plan.json"), (0, 1, 3), 4, ("u0", "u1", "u2", "u3"))
    cost = {"a": 10.0, "b": 100.0, "c": 30.0, "e": 30.0}
    order = spread.longest_first(["a", "b", "c", "d", "e"], {"b": sp}, cost)
    assert order == [("d", None), ("c", None), ("e", None), ("b", 0), ("b", 1), ("b", 3), ("a", None)]
    order = spread.longest_first(["a", "b", "c", "d", "e"], {"b": sp}, {**cost, "b/u3": 40.0})
    assert order == [("d", None), ("b", 3), ("c", None), ("e", None), ("b", 0), ("b", 1), ("a", None)]


def test_every_figure_has_a_measured_cold_cost():
    """The queue's costs cover the figure list, so no figure is queued first for lack of one;
    a unit's entry names a figure and one of its units (E10's: its units' keys)."""
    figures = {k for k in COLD_CPU_S if "/" not in k}
    assert figures == set(FIGURES) and all(v > 0 for v in COLD_CPU_S.values())
    e10 = frontier.units(F.study_config(F.resolve("e10_frontier"), "quick"))
    assert {k for k in COLD_CPU_S if "/" in k} == {f"e10_frontier/{u['key']}" for u in e10}
