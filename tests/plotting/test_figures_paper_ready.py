"""Issue 12 item 7, figures ready for a paper: one γ-label helper, a PDF next to every PNG,
legend entries for every line style, no spec section numbers in titles, tables in a reading
order. Cheap figures only: drawn from small arrays or from the committed paper_figures/*.json."""

import json
from pathlib import Path

import matplotlib.text
import numpy as np
import pytest
from matplotlib.figure import Figure

from rpd import results, schedules
from rpd.cli.tables import column_order, format_table
from rpd.io import result_io
from rpd.plotting import style
from rpd.schedules.machinery import delays

PAPER = Path(__file__).resolve().parents[2] / "paper_figures"


def test_gamma_label():
    assert results.gamma_label(2.0**-4) == "2⁻⁴"
    assert results.gamma_label(np.float32(0.0625)) == "2⁻⁴"
    assert results.gamma_label(1.0) == "2⁰"
    assert results.gamma_label(8) == "2³"
    assert results.gamma_label(2.0**-12) == "2⁻¹²"
    assert results.gamma_label(0.3) == "0.3"  # not a power of two: the number itself
    assert results.gamma_label(3e-5) == "3e-05"
    assert results.gamma_label(None) == "none"
    assert results.pow2_label(-10) == "2⁻¹⁰" and results.pow2_label(None) == "none"
    assert results.gamma_grid_label((-8, 0)) == "{2⁻⁸, …, 2⁰}"

    assert result_io.gamma_label is results.gamma_label  # one helper


def test_pdf_written_next_to_png(tmp_path):
    law = delays.delay_law(range(2, 10))
    png = style.delay_law_figure(law.S, law.mean, law.p10, law.max, law.max_fit, law.mean_fit, tmp_path / "e2.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pdf = tmp_path / "e2.pdf"
    assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 5_000
    fig = Figure()
    fig.subplots().plot([0, 1])
    assert style.save(fig, tmp_path / "sub" / "x.png").with_suffix(".pdf").exists()


@pytest.fixture
def drawn(monkeypatch):
    """Every Figure saved while the test runs (to read its texts back)."""
    figs = []
    save = Figure.savefig

    def keep(self, *args, **kwargs):
        figs.append(self)
        return save(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figs


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_text()]


def _legend_labels(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


@pytest.mark.slow
def test_no_section_numbers_in_titles_e11_e9(tmp_path, drawn):
    from rpd.plotting.costs import costs_figure
    from rpd.plotting.schedules import frontier_table_figure

    e11 = json.loads((PAPER / "e11_costs.json").read_text())
    costs_figure(e11["summary"], tmp_path / "e11.png")
    e9 = json.loads((PAPER / "e9_frontier.json").read_text())
    frontier_table_figure(e9["table"], tmp_path / "e9.png", claims=e9["summary"].get("claims"))
    assert (tmp_path / "e11.pdf").exists() and (tmp_path / "e9.pdf").exists()
    assert drawn
    for fig in drawn:
        texts = _texts(fig)
        assert texts and not [t for t in texts if "§" in t]
        assert not [t for t in texts if "2^" in t and "mathdefault" not in t]  # (log-axis ticks aside)
    assert any("beyond the ladder" in t for t in _legend_labels(drawn[0]))  # the dotted line in (c)


def test_averaging_lines_have_a_legend_entry(tmp_path, drawn):
    tl = schedules.local_sgd(2, 8, 2, 2)
    pd = schedules.pipedream(2, 3)
    style.schedule_pictures(
        [
            {"title": "PD", "op": pd.op, "mb": pd.mb},
            {"title": "LS", "op": tl.op, "mb": tl.mb, "sync_time": tl.sync_time},
        ],
        tmp_path / "e7.png",
    )
    assert "LocalSGD averaging" in _legend_labels(drawn[-1])
    style.schedule_chart(pd.op, pd.mb, tmp_path / "pd.png", "PD")
    assert "LocalSGD averaging" not in _legend_labels(drawn[-1])


def test_format_table_column_order():
    # as a stored table comes back: keys sorted
    rows = [
        dict(
            sorted(
                dict(
                    method="PD",
                    H=None,
                    delta=None,
                    gamma="2^-4",
                    final=0.5,
                    status="ok",
                    holds=None,
                    objective="quad",
                    S=8,
                    f_at_stable_gamma=0.4,
                    stable_gamma="2^-8",
                    zeta=1,
                ).items()
            )
        ),
        dict(
            sorted(
                dict(method="RPD", H=None, delta=60, gamma="2^3", final=0.7, status="ok", objective="quad", S=8).items()
            )
        ),
    ]
    assert column_order(rows) == [
        "objective",
        "S",
        "method",
        "H",
        "delta",
        "gamma",
        "stable_gamma",
        "final",
        "f_at_stable_gamma",
        "zeta",
        "status",
        "holds",
    ]
    text = format_table(rows)
    header = text.splitlines()[0].split()
    assert header[:6] == ["objective", "S", "method", "H", "delta", "gamma"] and header[-1] == "holds"
    assert "2⁻⁴" in text and "2³" in text and "2^" not in text
    e11 = json.loads((PAPER / "e11_costs.json").read_text())["table"]
    assert column_order(e11)[:4] == ["panel", "S", "c", "alpha"]
    assert format_table([dict(gamma_stable=0.03125, schedule="GPipe")]).splitlines()[2].split() == ["GPipe", "2⁻⁵"]
