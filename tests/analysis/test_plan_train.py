"""rpd.analysis.plan_train: time to a target loss for the plan's rows, against a direct replay."""

from __future__ import annotations

import numpy as np
import pytest

from rpd import objectives, registry
from rpd.analysis import tuning
from rpd.analysis.plan_train import format_times, time_to_target
from rpd.model import hardware, layers
from rpd.model.plan import plan, staged
from rpd.train import methods

HW = hardware.preset("a100_80g_flat")
MODEL = layers.preset("gpt2_small")
GRID = 2.0 ** np.arange(-4, 1)


make = registry.timeline


def chain(n_blocks):
    return objectives.mlp_chain(32, 4, n_blocks, 4, seed=1)


@pytest.fixture(scope="module")
def result():
    rows = plan(MODEL, HW, ["gpipe", "pipedream", "dualpipe_v", "interleaved"], make, 2, [2])
    return rows, time_to_target(rows, MODEL, HW, make, chain, 16, GRID, points=8)


@pytest.mark.slow
def test_every_row_is_read_at_one_time_and_replays_exactly(result):
    rows, out = result
    # interleaved's two chunks per rank train a 4-block model: its own group, its own T and target
    assert [g["blocks"] for g in out["groups"]] == [2, 4]
    assert [e["schedule"] for e in out["groups"][1]["rows"]] == ["interleaved"]
    grp = out["groups"][0]
    by = {e["schedule"]: e for e in grp["rows"]}
    assert set(by) == {"gpipe", "pipedream"}  # a row the plan refused (DualPipeV needs M >= 2S) is not trained
    assert next(r for r in rows if r.schedule == "dualpipe_v").error
    ends = {}
    for r in rows:
        if r.schedule not in by:
            continue
        unit = make(r.schedule, r.S, r.M, r.M, None, 0)
        _, costs, tick, values = staged(MODEL, HW, unit)
        tl = make(r.schedule, r.S, 16, r.M, costs, values)
        ends[r.schedule] = (tl, tick)
    T = min(tl.T * tick for tl, tick in ends.values())
    assert grp["T_s"] == pytest.approx(T, rel=1e-12)  # protocol (i): the shortest run's seconds
    instants = np.linspace(T / 8, T, 8)
    curves = {}
    for name, (tl, tick) in ends.items():
        # the replay: every tick of the run, then read at the last tick at or before each instant
        res = methods.train(chain(tl.n_stages), tl, GRID, seed=0)
        ticks = np.asarray(res.axis)
        idx = np.searchsorted(ticks, np.floor(instants / tick + 1e-9), side="right") - 1
        c = np.asarray(res.curve)[:, idx]
        i = tuning.select_gamma(c, GRID, rule="best_final", start=np.asarray(res.curve)[:, 0]).index
        assert by[name]["gamma"] == GRID[i]
        assert by[name]["loss_at_T"] == pytest.approx(c[i, -1], rel=1e-9)
        curves[name] = c[i]
    target = min(c[3] for c in curves.values())  # the lowest loss at T/2 (instant 4 of 8)
    assert grp["target"] == pytest.approx(target, rel=1e-12)
    for name, c in curves.items():
        hit = np.nonzero(c <= target)[0]
        want = None if not hit.size else instants[hit[0]]
        got = by[name]["time_to_target_s"]
        assert (got is None) == (want is None) and (want is None or got == pytest.approx(want, rel=1e-12))
    assert "time to loss" in format_times(out)


def test_a_given_target_and_bad_input():
    rows = plan(MODEL, HW, ["gpipe"], make, 2, [2])
    grp = time_to_target(rows, MODEL, HW, make, chain, 8, GRID, points=4, target=1e9)["groups"][0]
    assert grp["rows"][0]["time_to_target_s"] == pytest.approx(grp["T_s"] / 4)  # reached at the first instant
    with pytest.raises(ValueError, match="train.rule"):
        time_to_target(rows, MODEL, HW, make, chain, 8, GRID, rule="fastest")
    with pytest.raises(ValueError, match="train.N"):
        time_to_target(rows, MODEL, HW, make, chain, 0, GRID)
