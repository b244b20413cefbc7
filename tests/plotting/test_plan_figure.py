"""The plan's figure: the table's units (ms per step, GiB on the worst rank) and the memory cap
drawn (with the margin's line where a row stops fitting)."""

import json

import numpy as np
from hydra_helpers import compose

from rpd.cli import plan as entry
from rpd.plotting import plan as plot_plan


def test_the_figure_plots_the_tables_step_time_and_draws_the_cap(tmp_path, monkeypatch):
    drawn = []
    save = plot_plan.save
    monkeypatch.setattr(plot_plan, "save", lambda fig, path, **kw: (drawn.append(fig), save(fig, path, **kw))[1])
    out = tmp_path / "plan.json"
    cfg = compose(
        [
            "model=gpt2_small",
            "pipeline.S=2",
            "pipeline.M=[4,8]",
            "schedules=[1f1b,gpipe]",
            "memory_cap=6GiB",
            "margin=0.1",
            f"out={out}",
            f"figure={tmp_path / 'plan.png'}",
        ],
        "plan",
    )
    entry.run(cfg)
    rows = [r for r in json.loads(out.read_text())["rows"] if r.get("error") is None]
    (ax,) = drawn[-1].axes
    got = np.concatenate([c.get_offsets() for c in ax.collections])
    want = np.array([(max(r["peak_bytes"]) / 2**30, r["step_time_s"] * 1e3) for r in rows])
    np.testing.assert_allclose(sorted(map(tuple, got)), sorted(map(tuple, want)), rtol=1e-12)  # per step
    assert "per step" in ax.get_ylabel()
    vertical = sorted(ln.get_xdata()[0] for ln in ax.get_lines() if list(ln.get_ydata()) == [0, 1])  # axvline
    assert vertical == [6 * 0.9, 6.0]  # the margin's line, the cap
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "memory cap (6 GiB)" in labels and "fits below (margin 0.1)" in labels
