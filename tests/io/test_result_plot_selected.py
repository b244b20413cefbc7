"""``rpd.io.result_io.plot`` marks the selected γ: given, or a stored run's own choice."""

import numpy as np
import pytest
from matplotlib.figure import Figure

from rpd.analysis import tuning
from rpd.io import result_io
from rpd.results import Result


def _result(meta=None) -> Result:
    curve = np.array([[8.0, 4.0, 2.0, 1.0], [8.0, 2.0, 0.5, 0.25], [8.0, 3.0, 1.0, 0.5]])
    return Result(
        method="pd",
        gammas=np.array([0.25, 0.5, 1.0]),
        axis=np.arange(4),
        axis_name="sim_time",
        curve=curve,
        traces={},
        x_final=np.zeros((3, 2)),
        meta=meta or {},
    )


def _lines(ax):
    return [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]


@pytest.mark.parametrize("selected", [1, 0.5, "select_gamma"])
def test_the_selected_gamma_is_thick_black_and_labelled(selected):
    r = _result()
    if selected == "select_gamma":  # the selector's choice: the best final value, γ = 2⁻¹
        selected = tuning.select_gamma(r.curve, r.gammas, rule="best_final")
    ax = result_io.plot(r, Figure().subplots(), selected=selected)
    lines = _lines(ax)
    assert [ln.get_label() for ln in lines] == ["γ = 2⁻²", "γ = 2⁻¹ (selected)", "γ = 2⁰"]
    assert lines[1].get_color() == "black" and lines[1].get_linewidth() > lines[0].get_linewidth()
    assert lines[0].get_alpha() < 1 and lines[2].get_alpha() < 1


def test_a_stored_runs_choice_is_marked_by_default_and_a_bare_result_is_not():
    ax = result_io.plot(_result({"summary": {"tuning/index": 2}}), Figure().subplots())
    assert [ln.get_label() for ln in _lines(ax)][2] == "γ = 2⁰ (selected)"
    ax = result_io.plot(_result(), Figure().subplots())
    assert not any("selected" in ln.get_label() for ln in _lines(ax))
    with pytest.raises(ValueError, match=r"^selected: γ = 0.3 is not on the grid"):
        result_io.plot(_result(), Figure().subplots(), selected=0.3)
