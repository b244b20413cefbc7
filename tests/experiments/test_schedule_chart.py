"""``python -m experiments.schedule``: a chunk costs F/v as in docs/schedules.md and E9, so the
chart's numbers are E9's; N defaults to two flushes; a wrapped row draws only the ops it shows."""

import numpy as np
import pytest
from hydra_helpers import CONFIGS, compose
from omegaconf import OmegaConf

from rpd.cli import chart as schedule
from rpd.cli import checks
from rpd.cli import config as C
from rpd.plotting import schedules as plot_schedules
from rpd.schedules.machinery.costs import CostModel, HostLink
from rpd.studies import schedule_table

SIZE = ["schedule.S=4", "schedule.M=8"]


def _drawn(monkeypatch) -> list:
    figures: list = []
    save = plot_schedules.save
    monkeypatch.setattr(plot_schedules, "save", lambda fig, path, **kw: (figures.append(fig), save(fig, path, **kw))[1])
    return figures


def _typed(overrides):
    return schedule._with_n(checks.typed(compose(overrides, "chart"), C.ChartConfig))


def test_interleaved_chart_is_e9s_number_and_its_axis_names_the_unit(tmp_path, monkeypatch):
    figures = _drawn(monkeypatch)
    cfg = compose(["schedule=interleaved", *SIZE, "schedule.N=8", "costs=b2f", f"out={tmp_path / 'il.png'}"], "chart")
    numbers = schedule.chart(cfg)
    e9 = schedule_table._cell("interleaved", 4, 8, 8, "B=2F", 1, 2, 0)
    assert numbers["makespan"] == e9["T"] == 28.5  # (vM + S - 1)(F + B) / v; it printed 57 (chunks at F)
    assert numbers["period"] == e9["period"] and numbers["bubble_total"] == e9["bubble_f_total"]
    one_f_one_b = schedule.chart(
        compose(["schedule=1f1b", *SIZE, "schedule.N=8", "costs=b2f", "out=" + str(tmp_path / "o.png")], "chart")
    )
    assert one_f_one_b["makespan"] == 33 > numbers["makespan"]  # interleaving shortens the flush
    label = figures[0].axes[-1].get_xlabel()
    assert label == "Time (units of one stage's F = 1 tick; a chunk's op costs 1/2 of its stage's)"


def test_every_schedule_charts_e9s_makespan():
    """Each schedule's file composed once, with costs=b2f (p2p 0) and then with the costs group of
    a composed costs=b2f_latency (p2p 1) in its place: no schedule file sets a cost, so this is the
    config ``costs=b2f_latency`` composes, for half the compositions (a quarter of a second each)."""
    names = [n for n in schedule_table.ORDER if (CONFIGS / "schedule" / f"{n}.yaml").exists()]
    assert {"interleaved", "zb_v", "dualpipe_v", "wpipe", "bitpipe", "v_half", "looped_bfs"} <= set(names)
    latency = _typed(["costs=b2f_latency"]).costs
    assert (latency.F, latency.B, latency.p2p) == (1, 2, 1)
    for name in names:
        b2f = _typed([f"schedule={name}", *SIZE, "schedule.N=16", "costs=b2f"])
        assert b2f.costs.p2p == 0
        for cfg, p2p in ((b2f, 0), (OmegaConf.merge(b2f, {"costs": latency}), 1)):
            pipeline, tl, scale = schedule.build(cfg)
            e9 = schedule_table._cell(name, 4, 8, 16, "B=2F", 1, 2, p2p)
            assert (name, p2p, tl.T / scale, tl.period() / scale) == (name, p2p, e9["T"], e9["period"])


def test_a_chunk_keeps_its_ticks_and_every_other_time_is_v_times():
    costs = CostModel(F=2, B=4, p2p=3, allreduce=(1.5, 0.25), straggler=(0.5, 2), host=HostLink(1, 2, 3, 2))
    per = schedule.chunk_costs(costs, 2)
    assert (per.F, per.B, per.p2p, per.allreduce) == (2, 4, 6, (3.0, 0.5))
    assert (per.straggler.p, per.straggler.ticks) == (0.5, 4) and per.host == HostLink(1, 2, 6, 2)
    assert schedule.chunk_costs(costs, 1) is costs


def test_chart_n_defaults_to_two_flushes():
    assert _typed(["schedule=zb_h2", *SIZE]).schedule.N == 16
    assert _typed(["schedule=dualpipe_v", "schedule.S=4"]).schedule.N == 16  # its M defaults to 2S
    assert _typed(["schedule=gpipe", "schedule.S=4"]).schedule.N == 8  # M defaults to S
    assert _typed(["schedule=pipedream", "schedule.S=4"]).schedule.N == 8  # no flush: 2S
    assert _typed(["schedule=zb_h2", *SIZE, "schedule.N=24"]).schedule.N == 24
    assert _typed(["schedule=zb_h2", *SIZE, "schedule.T=30"]).schedule.N is None  # T chooses N


@pytest.mark.slow  # over 4 s on 2 cores (a figure, a subprocess or the study's fits)
def test_a_long_chart_draws_in_each_row_only_the_ops_it_shows(tmp_path, monkeypatch):
    figures = _drawn(monkeypatch)
    overrides = ["schedule=zb_h2", *SIZE, "schedule.N=160", "costs=b2f_latency"]
    numbers = schedule.chart(compose([*overrides, f"out={tmp_path / 'zb.png'}"], "chart"))
    _, tl, scale = schedule.build(_typed(overrides))
    start, end = np.asarray(tl.table.start) / scale, np.asarray(tl.table.end) / scale
    axes = figures[-1].axes
    assert len(axes) == int(np.ceil(numbers["makespan"] / schedule.WRAP)) == 13
    cells, labels, expected = 0, 0, 0
    for ax in axes:
        lo, hi = ax.get_xlim()
        shown = int(((end > lo) & (start < hi)).sum())
        drawn, glyphs = (len(c.get_paths()) for c in ax.collections[:2])
        assert drawn == glyphs == shown  # was every one of the 1920 ops in every row
        assert not ax.texts  # one glyph collection, not a Text per op
        cells, labels, expected = cells + drawn, labels + glyphs, expected + shown
    assert len(tl.table.kind) == 1920 <= cells == expected < 1920 + 4 * len(axes)


def test_a_post_validated_chart_carries_its_steps_and_a_plain_one_does_not(tmp_path, monkeypatch):
    panels: list = []
    gantt = schedule.schedule_gantt
    monkeypatch.setattr(schedule, "schedule_gantt", lambda p, *a, **k: (panels.extend(p), gantt(p, *a, **k))[1])
    zb = ["schedule=zb_h2", *SIZE, "schedule.N=16"]
    schedule.chart(compose([*zb, "schedule.post_validation=true", f"out={tmp_path / 'pv.png'}"], "chart"))
    schedule.chart(compose([*zb, f"out={tmp_path / 'plain.png'}"], "chart"))
    pv, plain = panels
    _, tl, _ = schedule.build(_typed([*zb, "schedule.post_validation=true"]))
    assert np.array_equal(pv["steps"], tl.step_end) and pv["steps"].shape == (2, 4)  # two flushes, S = 4
    assert pv["wasted"].shape == (pv["ops"].shape[1],) and not pv["wasted"].any()  # no rollback: nothing thrown away
    assert "steps" not in plain and "wasted" not in plain
