"""``python -m experiments.schedule``'s picture: a long schedule wraps into rows of a readable
aspect, and the legend names only the op kinds drawn."""

import matplotlib.image
import numpy as np
import pytest
from hydra_helpers import compose

from rpd.cli import chart as schedule
from rpd.cli import specs
from rpd.plotting import schedules as plot_schedules


@pytest.mark.slow
def test_a_long_schedule_wraps_and_its_legend_is_what_is_drawn(tmp_path, monkeypatch):
    drawn = []
    save = plot_schedules.save
    monkeypatch.setattr(plot_schedules, "save", lambda fig, path, **kw: (drawn.append(fig), save(fig, path, **kw))[1])
    overrides = ["schedule=zb_v", "schedule.S=4", "schedule.M=8", "schedule.N=16"]  # chunks at F/2: 51 F
    numbers = schedule.chart(compose([*overrides, f"out={tmp_path / 'zb_v.png'}"], "chart"))
    height, width = matplotlib.image.imread(tmp_path / "zb_v.png").shape[:2]
    assert width / height <= 4  # was 3743 x 368 (10 : 1) on one row
    rows = int(np.ceil(numbers["makespan"] / schedule.WRAP))
    axes = drawn[-1].axes
    assert len(axes) == rows == 2
    assert [ax.get_xlim() for ax in axes] == [(0.0, 26.0), (26.0, 52.0)]  # whole units per row, 51 in all
    tl = specs.run_spec(compose(overrides, "chart")).pipeline.timeline()
    kinds = sorted(set(np.asarray(tl.table.kind).tolist()))
    labels = [t.get_text() for t in axes[0].get_legend().get_texts()]
    assert labels == [plot_schedules.KIND_NAME[k] for k in kinds] and "Backward" not in labels


@pytest.mark.slow
def test_offload_draws_each_transfer_on_its_rank_and_names_both_in_the_legend(tmp_path, monkeypatch):
    drawn = []
    save = plot_schedules.save
    monkeypatch.setattr(plot_schedules, "save", lambda fig, path, **kw: (drawn.append(fig), save(fig, path, **kw))[1])
    overrides = ["schedule=interleaved", "schedule.S=4", "schedule.M=8", "schedule.N=8", "costs.host_d2h=1"]
    numbers = schedule.chart(compose([*overrides, f"out={tmp_path / 'off.png'}"], "chart"))
    tl = specs.run_spec(compose(overrides, "chart")).pipeline.timeline()
    x = tl.transfers
    (ax,) = drawn[-1].axes
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[-2:] == [plot_schedules.KIND_NAME[5], plot_schedules.KIND_NAME[6]]
    bars = ax.collections[-1].get_paths()  # the transfers' collection, drawn last
    assert len(bars) == len(x.kind) > 0 and "offload (56 activations)" in ax.get_title(loc="left")
    assert max(numbers["peak_activations"]) < 5.5  # interleaved's busiest rank holds 5.5 A without
