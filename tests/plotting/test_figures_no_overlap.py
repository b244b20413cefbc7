"""Pictures read at a glance: in every committed figure that draws from its JSON alone, no legend and no free text
(an annotation, a note, a boxed label) covers another panel or the data points of its own, and a
table's text stays inside its cells. Measured with matplotlib's own boxes (``get_window_extent``
after a draw), on figures drawn from the committed paper_figures/*.json: the stored numbers."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.table import Table
from matplotlib.transforms import Bbox

PAPER = Path(__file__).resolve().parents[2] / "paper_figures"


@pytest.fixture
def drawn(monkeypatch):
    """Every Figure the drawing functions save, kept instead of written (the test measures them)."""
    figs: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: figs.append(self) if self not in figs else None)
    return figs


def _panels(fig: Figure) -> list[Axes]:
    """The axes that show data (a secondary axis is part of its parent's panel; an axis turned off,
    such as a table's holder or an empty grid cell, shows none)."""
    return [ax for ax in fig.get_axes() if ax.axison and not hasattr(ax, "_parent")]


def _points(ax: Axes) -> np.ndarray:
    """The display coordinates of ``ax``'s data points: line vertices and scatter offsets."""
    xy = [line.get_transform().transform(line.get_xydata()) for line in ax.get_lines()]
    for c in ax.collections:
        offsets = np.asarray(c.get_offsets(), float).reshape(-1, 2)
        if isinstance(c, PathCollection) and len(offsets):
            xy.append(c.get_offset_transform().transform(offsets))
    return np.concatenate(xy) if xy else np.zeros((0, 2))


def _boxes(fig: Figure) -> list[tuple[str, Bbox, Axes | None]]:
    """(what, its box on the canvas, the axes it sits in or None) of every legend and free text."""
    out: list[tuple[str, Bbox, Axes | None]] = []
    for legend in fig.findobj(Legend):
        ax = legend.axes if isinstance(legend.parent, Axes) else None
        out.append((f"legend {[t.get_text() for t in legend.get_texts()][:3]}", legend.get_window_extent(), ax))
    for ax in fig.get_axes():
        for t in ax.texts:
            if t.get_visible() and t.get_text():
                out.append((f"text {t.get_text()[:40]!r}", t.get_window_extent(), ax))
    for sub in [fig, *fig.subfigs]:
        for t in sub.texts:
            if t.get_visible() and t.get_text():
                out.append((f"text {t.get_text()[:40]!r}", t.get_window_extent(), None))
    return out


def overlaps(fig: Figure) -> list[str]:
    """What covers what: a legend or free text over another panel (its frame, ticks, labels and
    title: ``get_tightbbox``) or over a data point of its own axes; a table cell's text wider or
    taller than the cell. Empty when the figure reads at a glance."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw_without_rendering()  # the layout and every artist's place, no pixels
    found = []
    panels = {ax: tight for ax in _panels(fig) if (tight := ax.get_tightbbox(renderer)) is not None}
    for what, box, own in _boxes(fig):
        for ax, tight in panels.items():
            if ax is own:
                x, y = _points(ax).T
                covered = int(np.sum((box.x0 < x) & (x < box.x1) & (box.y0 < y) & (y < box.y1)))
                if covered:
                    found.append(f"{what} covers {covered} data points of {ax.get_title()!r}")
            elif box.overlaps(tight):
                found.append(f"{what} overlaps the panel {ax.get_title()!r}")
    for table in fig.findobj(Table):
        for (i, j), cell in table.get_celld().items():
            text, frame = cell.get_text().get_window_extent(renderer), cell.get_window_extent(renderer)
            if text.width > frame.width or text.height > frame.height:
                found.append(f"table cell ({i}, {j}) {cell.get_text().get_text()!r} overflows its column")
    return found


def test_the_check_sees_a_legend_over_a_neighbour_and_over_points(drawn):
    fig = Figure(figsize=(6, 3))
    left, right = fig.subplots(1, 2)
    left.plot([0, 1], [0, 1], label="a line")
    right.scatter([0.5], [0.5])
    left.legend(loc="center left", bbox_to_anchor=(0.9, 0.5))  # reaches into the right panel
    right.text(0.5, 0.5, "a note", transform=right.transAxes, ha="center", va="center")  # on the point
    found = overlaps(fig)
    assert any("legend" in f and "overlaps the panel" in f for f in found)
    assert any("a note" in f and "covers 1 data points" in f for f in found)

    fig = Figure(figsize=(6, 3))
    left, right = fig.subplots(1, 2)
    left.plot([0, 1], [0, 1], label="a line")
    left.legend(loc="upper left")  # its own empty corner
    assert overlaps(fig) == []


def _json(name: str) -> dict:
    return json.loads((PAPER / f"{name}.json").read_text())


def test_e9_reads_at_a_glance(drawn):
    from rpd.plotting.schedules import frontier_table_figure

    e9 = _json("e9_frontier")
    frontier_table_figure(e9["table"], "e9.png", claims=e9["summary"].get("claims"))
    assert len(drawn) == 1
    assert overlaps(drawn[0]) == []


@pytest.mark.slow
@pytest.mark.parametrize("S_values", [(4,), (4, 8)])
def test_e9_at_fewer_S_reads_at_a_glance(drawn, S_values):
    """A study run with fewer stage counts (``S_values=``) still has room for its table and legend."""
    from rpd.plotting.schedules import frontier_table_figure

    e9 = _json("e9_frontier")
    frontier_table_figure([r for r in e9["table"] if r["S"] in S_values], "e9.png", claims=e9["summary"]["claims"])
    assert overlaps(drawn[0]) == []


def _e10(rows: list[dict], drawn: list[Figure]) -> None:
    from rpd.plotting.frontier import frontier_figure

    frontier_figure(SimpleNamespace(table=rows), "e10.png")
    assert len(drawn) == 2  # loss at the budget, time to the target
    for fig in drawn:
        assert overlaps(fig) == []


def test_e10_reads_at_a_glance(drawn):
    """The committed E10's S = 4 panels of one objective (both cost models, the whole legend): the
    default suite's share (the whole grid takes ~15 s; it is checked in the slow suite)."""
    rows = [r for r in _json("e10_frontier")["table"] if r["objective"] == "nesterov_quadratic" and r["S"] == 4]
    assert len({r["schedule"] for r in rows}) >= 20
    _e10(rows, drawn)


@pytest.mark.slow
def test_e10_whole_reads_at_a_glance(drawn):
    _e10(_json("e10_frontier")["table"], drawn)


def _e11(drawn: list[Figure]) -> None:
    from rpd.plotting.costs import costs_figure

    costs_figure(_json("e11_costs")["summary"], "e11.png")


def _e15(drawn: list[Figure]) -> None:
    from rpd.plotting.workers import workers_figure

    e15 = _json("e15_workers")
    workers_figure(e15["summary"], e15["table"], "e15.png")


def _claims(drawn: list[Figure]) -> None:
    from rpd.plotting.claims import claims_figure

    claims = _json("plan_claims")
    claims_figure(claims["summary"], claims["table"], "claims.png")


def _e12(drawn: list[Figure]) -> None:
    from rpd.plotting.optimizers import optimizers_figure

    e12 = _json("e12_optimizers")
    optimizers_figure(SimpleNamespace(table=e12["table"], summary=e12["summary"]), "e12.png")


def _e14(drawn: list[Figure]) -> None:
    from rpd.plotting.search import search_figure

    search_figure(_json("e14_search")["summary"]["panels"], "e14.png")


def _accuracy(drawn: list[Figure]) -> None:
    from rpd.plotting.plan import accuracy_figure

    accuracy = _json("plan_accuracy")
    accuracy_figure(accuracy["table"], accuracy["summary"], "accuracy.png")


@pytest.mark.slow
@pytest.mark.parametrize("draw", [_e11, _e12, _e14, _e15, _claims, _accuracy])
def test_figures_drawn_from_their_json_read_at_a_glance(drawn, draw):
    draw(drawn)
    assert len(drawn) == 1
    assert overlaps(drawn[0]) == []


def _lab(colour: str) -> np.ndarray:
    """CIE L*a*b* (D65) of a matplotlib colour: sRGB linearised, to XYZ, to Lab (CIE 15:2004)."""
    rgb = np.asarray(to_rgb(colour))
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    to_xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    t = (to_xyz @ lin) / to_xyz.sum(axis=1)  # relative to the white point: sRGB white's XYZ, D65
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_lab_by_hand():
    np.testing.assert_allclose(_lab("white"), [100, 0, 0], atol=0.01)
    np.testing.assert_allclose(_lab("black"), [0, 0, 0], atol=1e-9)
    np.testing.assert_allclose(_lab("#FF0000"), [53.24, 80.09, 67.20], atol=0.05)  # sRGB red's published Lab


def test_every_schedule_has_a_colour_of_its_own():
    """No two registered schedules or variants share a colour to the eye (CIE76 ΔE ≥ 10; 2.3 is
    the just-noticeable difference): a figure that draws many tells them apart by colour, not only
    by marker (E9, E10, the plan's frontier, which draws every schedule as a circle)."""
    from rpd import registry

    looks = {n: e.colour for n, e in {**registry.SCHEDULES, **registry.VARIANTS}.items()}
    close = [
        (a, b, round(float(np.linalg.norm(_lab(looks[a]) - _lab(looks[b]))), 1))
        for i, a in enumerate(looks)
        for b in list(looks)[i + 1 :]
        if np.linalg.norm(_lab(looks[a]) - _lab(looks[b])) < 10
    ]
    assert close == []
