"""E16's figure: the survey's table measured (left) and every system's loss against simulated time
at the tuned step size (right), drawn from saved numbers only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from rpd.plotting.style import paper_style, save
from rpd.registry import style


def _pct(x) -> str:
    return f"{100 * x:.1f}"


def survey_figure(out, path) -> Path:
    rows = out.table
    S0 = min(r["S"] for r in rows)
    mine = [r for r in rows if r["S"] == S0]
    cols = ["system", "bubble % F=B", "bubble % B=2F", "act. A", "weights", "loss at T", "γ"]
    cells = [
        [
            r["system"],
            _pct(r["bubble_F=B"]),
            _pct(r["bubble_B=2F"]),
            f"{r['activations']:g}",
            f"{r['weights']:g}",
            f"{r['loss']:.3g}",
            "-" if r["gamma"] is None else f"2^{int(np.log2(r['gamma']))}",
        ]
        for r in mine
    ]
    with paper_style():
        fig = Figure(figsize=(15, 0.36 * len(cells) + 4.0))
        ax_t, ax_c = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.5, 1.0]})
        ax_t.axis("off")
        tab = ax_t.table(cellText=cells, colLabels=cols, loc="center", cellLoc="center")
        tab.auto_set_font_size(False)
        tab.set_fontsize(8)
        tab.scale(1.0, 1.25)
        tab.auto_set_column_width([0])  # the longest system names (Chimera's variants) in full
        ax_t.set_title(f"E16: the survey's table measured (S = {S0}, M = {mine[0]['M']})", fontsize=10, loc="left")
        lines = [f"{c['verdict']}: {c['claim']}" for c in out.summary.get("claims", [])]
        ax_t.text(0.0, -0.02, "\n".join(lines), transform=ax_t.transAxes, fontsize=7, va="top", ha="left")
        axis = out.arrays[f"S{S0}/axis"]
        seen: set[str] = set()  # the registry's colour per schedule; a schedule's second row dashed
        for r in mine:
            y = out.arrays[f"S{S0}/{r['system']}"]
            colour = style(r["schedule"]).colour
            ax_c.plot(
                axis[: len(y)],
                y,
                label=r["system"] + ("" if r.get("in_survey", True) else " (2024+)"),
                color=colour,
                linewidth=1.2,
                linestyle="--" if colour in seen else "-",
            )
            seen.add(colour)
        ax_c.set_yscale("log")
        ax_c.set_xlabel("simulated time (units of one stage's F), B = 2F")
        ax_c.set_ylabel("f - f* at the tuned γ (Nesterov's quadratic)")
        ax_c.legend(fontsize=6.5, ncol=2)
        fig.tight_layout()
        return save(fig, path)
