"""E17 in words (rpd.plotting.staleness_2026_text) and on its figure, from the committed paper-size
numbers: every verdict printed and drawn with its numbers, a console table of at most 160 columns,
the caveat of a run smaller than the paper's, titles in the run's own sizes."""

import dataclasses
import json
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from rpd.plotting import staleness_2026_text as text
from rpd.plotting.staleness_2026 import figure as draw
from rpd.results import StudyOutput
from rpd.studies import staleness_2026

E17 = json.loads((Path(__file__).resolve().parents[2] / "paper_figures" / "e17_staleness_2026.json").read_text())
PAPER = dataclasses.asdict(staleness_2026.Config())
QUICK = dataclasses.asdict(staleness_2026.Config(**staleness_2026.QUICK))


def test_console_prints_every_verdict_with_its_numbers_in_160_columns():
    out = staleness_2026.console(E17["table"], E17["summary"])
    lines = out.splitlines()
    assert max(map(len, lines)) <= 160  # the generic table was 590 characters wide
    assert "  DEPENDS (a) under 2BW AdamW's gap to synchronous is larger than Muon's, S = 4: " in out
    assert "mlp_chain holds (0.542 vs 0.389); nanochat depends (0.0626 vs 0.0831)" in out
    assert "  HOLDS   (a) error feedback shrinks AdamW's gap: mlp_chain holds (0.542 -> 0.135)" in out
    assert "  FAILS   (c) adam_rotated removes most of it (>= 1/2), rotated quadratic: " in out
    verdicts = E17["summary"]["verdicts"]
    n_claims = sum(2 if k.startswith("c_") else 1 for k in verdicts)
    assert len([x for x in lines if x[2:9].strip() in ("HOLDS", "FAILS", "DEPENDS")]) == n_claims == 10
    assert "note:" not in out  # the paper's size: nothing left out
    # the table: one row per arm, means ± sd (every seed stays in the JSON)
    assert "  mlp_chain  adamw      2bw     0.1047 ± 0.0081   0.5419 ± 0.19       -0.05058 ± 0.094   2⁻⁵" in lines


def test_quick_size_caveat_names_what_it_leaves_out():
    note = text.caveat(QUICK, PAPER)
    for part in ("2 seeds (paper 3)", "no char LM", "S = 3 in (a) (paper 4)", "S = 4 in (b) (paper 8)"):
        assert part in note
    assert "verdicts may differ from the README's" in note
    assert text.caveat(PAPER, PAPER) is None
    summary = dict(E17["summary"], config=QUICK)
    out = text.console([r for r in E17["table"] if r["objective"] != "nanochat"], summary, PAPER)
    assert "note: Smaller than the paper's run: 2 seeds (paper 3)" in out and max(map(len, out.splitlines())) <= 160


def test_plural():
    assert [text.plural(n, "optimizer step") for n in (0, 1, 2)] == [
        "0 optimizer steps",
        "1 optimizer step",
        "2 optimizer steps",
    ]


@pytest.fixture
def drawn(monkeypatch):
    figs = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (figs.append(self), save(self, *a, **k))[1])
    return figs


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in [*ax.texts, ax.title]]


@pytest.mark.slow  # over 4 s on 2 cores (a figure, a subprocess or the study's fits)
def test_figure_shows_the_verdicts_and_the_caveat(tmp_path, drawn):
    out = StudyOutput(arrays={}, summary=E17["summary"], table=E17["table"])
    staleness_2026.figure(out, tmp_path / "e17.png")
    texts = _texts(drawn[0])
    assert [t for t in texts if t in ("HOLDS", "FAILS", "DEPENDS")] == [
        v.upper() for v, _, _ in text.verdicts(E17["summary"])
    ]
    assert sorted(set(t for t in texts if t in ("HOLDS", "FAILS", "DEPENDS"))) == ["DEPENDS", "FAILS", "HOLDS"]
    assert any(t.startswith("(a) error feedback shrinks Muon's gap: mlp_chain holds (0.389 -> 0.162)") for t in texts)
    title = drawn[0].axes[0].get_title()
    assert title.startswith(
        "(a) 2BW vs synchronous 1F1B, S = 4, M = 4\ndelay: 1 optimizer step per stage = 10 block updates"
    )
    assert not any("Note:" in t for t in texts)  # the paper's size
    smaller = dict(PAPER, seeds=(0, 1, 2, 3))  # against a larger reference the same run is the smaller one
    drawn.clear()
    draw(out, tmp_path / "e17_small.png", paper=smaller)
    assert any(t.startswith("Note: Smaller than the paper's run: 3 seeds (paper 4)") for t in _texts(drawn[0]))
