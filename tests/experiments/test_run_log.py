"""A single run's log line (experiments.train.run): the simulated time its final value is read
at, in the costs' unit, and its level: WARNING only when the selected γ needs a second look."""

from __future__ import annotations

import logging

from hydra_helpers import TINY_LINEAR
from hydra_helpers import compose as _compose

from rpd.cli import train


def test_the_log_line_says_when_in_the_costs_unit(tmp_path, caplog):
    """1F1B, S = 3, N = 12 (flushes of 3) at F = B = 1000 us: 40 unit steps, 40 000 us."""
    cfg = _compose(
        [
            f"results_root={tmp_path}",
            *TINY_LINEAR,
            "method=pipeline",
            "schedule=1f1b",
            "schedule.N=12",
            "costs.unit=us",
            "costs.F=1000",
            "costs.B=1000",
        ]
    )
    with caplog.at_level(logging.INFO, logger="rpd.cli.train"):
        out = train.run(cfg)
    assert out.status == "ok" and out.summary["T"] == 40000 and out.summary["time_unit"] == "us"
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("pipeline: ok")]
    assert len(lines) == 1 and " at T = 40000 us -> " in lines[0], lines


def test_a_tail_that_only_has_not_settled_is_no_warning():
    """The stable test's cv alone fails on a curve still falling (every short run's best γ): no
    flag, INFO. A tail that rises or oscillates, or a γ on the grid's edge: a flag, WARNING; one
    text at one level ("[unstable]" was printed at INFO and at WARNING alike)."""
    grid = [0.25, 0.5, 1.0]
    assert train.gamma_flag(1, grid, ["cv 0.282 > 0.15"]) is None
    assert train.gamma_flag(1, grid, []) is None
    assert train.gamma_flag(1, grid, ["cv 0.3 > 0.15", "up_frac 0.6 > 0.45"]) == "unstable"
    assert train.gamma_flag(1, grid, ["log_slope 0.01 > 0.0001"]) == "unstable"
    assert train.gamma_flag(1, grid, ["tv_ratio 9 > 5"]) == "unstable"
    assert train.gamma_flag(2, grid, []) == "highest on grid"
    assert train.gamma_flag(0, grid, ["cv 0.3 > 0.15", "max_up 2 > 1"]) == "lowest on grid, unstable"
    assert train.gamma_flag(0, [0.5], ["cv 0.3 > 0.15"]) is None  # one γ: no edge
    assert train.gamma_flag(None, grid, []) is None
    for flag in ("unstable", "highest on grid", "lowest on grid, unstable"):
        assert train.flag_level(flag) == logging.WARNING
    assert train.flag_level(None) == logging.INFO
