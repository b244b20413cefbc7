"""E14's figure, drawn from saved numbers (``rpd.studies.search``): the makespan of one flush
against the per-rank activation cap, one panel per pipeline size and cost model. The heuristic
and the exact search are lines over every cap (the exact one filled where proven optimal, open
where the time limit cut it, with the solver's bound as a bar); each hand-written schedule is a
row of markers at its own makespan, drawn only at the caps its peak activations fit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import lines as mpl_lines
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter, NullLocator, ScalarFormatter

from rpd import registry
from rpd.plotting.style import paper_style, save

HAND = ("gpipe", "1f1b", "zb_h1", "zb_h2")  # hand-written schedules drawn beside the searched ones
HAND_STYLE = {n: (registry.style(n).title, registry.style(n).marker, registry.style(n).colour) for n in HAND}
HEURISTIC: dict[str, Any] = dict(color="#222222", linestyle="-", linewidth=1.8)
EXACT: dict[str, Any] = dict(color="#6A3D9A", linestyle="--", linewidth=1.6, marker="o", markersize=4)


def search_figure(panels: list[dict], path) -> Path:
    """``panels``: one dict per (size, cost model) with ``S``, ``M``, ``title``, ``unit``,
    ``unit_per_tick``, per cap ``caps`` / ``heuristic`` / ``exact`` / ``bound`` / ``optimal``
    (ticks), and ``hand``: name -> {T (ticks), peak (A)}. Rows: sizes; columns: cost models."""
    sizes = list(dict.fromkeys((p["S"], p["M"]) for p in panels))
    models = list(dict.fromkeys(p["costs"] for p in panels))
    with paper_style():
        fig = Figure(figsize=(4.3 * len(models), 3.5 * len(sizes) + 0.6))
        axes = fig.subplots(len(sizes), len(models), squeeze=False)
        for ax in axes.flat:
            ax.set_visible(False)
        for p in panels:
            ax = axes[sizes.index((p["S"], p["M"])), models.index(p["costs"])]
            ax.set_visible(True)
            _panel(ax, p)
        handles = [
            mpl_lines.Line2D([], [], **HEURISTIC, label="search: heuristic"),
            mpl_lines.Line2D([], [], **EXACT, label="search: exact (proven optimal)"),
        ]
        if not all(all(p["optimal"]) for p in panels):
            cut: dict[str, Any] = {**EXACT, "markerfacecolor": "white"}
            handles.append(mpl_lines.Line2D([], [], **cut, label="search: exact at the time limit (bar: bound)"))
        handles += [
            mpl_lines.Line2D(
                [], [], linestyle="none", marker=m, color=c, markersize=7, label=f"{label} (where it fits)"
            )
            for label, m, c in HAND_STYLE.values()
        ]
        fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=4, frameon=True)
        fig.tight_layout()
        return save(fig, path)


def _panel(ax, p: dict) -> None:
    scale = float(p["unit_per_tick"])
    caps = np.asarray(p["caps"], np.float64)
    heur = np.asarray(p["heuristic"], np.float64) * scale
    exact = np.asarray(p["exact"], np.float64) * scale
    bound = np.asarray(p["bound"], np.float64) * scale
    proven = np.asarray(p["optimal"], bool)
    ax.plot(caps, heur, **HEURISTIC, zorder=3)
    ax.plot(caps, exact, **{**EXACT, "marker": None}, zorder=4)
    ax.plot(caps[proven], exact[proven], linestyle="none", marker="o", color=EXACT["color"], ms=4, zorder=5)
    cut = ~proven
    if cut.any():
        ax.plot(caps[cut], exact[cut], linestyle="none", marker="o", color=EXACT["color"], ms=4, mfc="white", zorder=5)
        ax.vlines(caps[cut], bound[cut], exact[cut], color=EXACT["color"], linewidth=1.0, zorder=4)
    names = [n for n in HAND_STYLE if n in p["hand"]]
    offsets = np.linspace(-0.18, 0.18, len(names)) if len(names) > 1 else [0.0]
    for dx, name in zip(offsets, names):
        label, marker, colour = HAND_STYLE[name]
        h = p["hand"][name]
        fit = caps[caps >= h["peak"]]
        if fit.size:
            y = np.full(fit.size, h["T"] * scale)
            ax.plot(fit + dx, y, linestyle="none", marker=marker, color=colour, ms=7, mec="white", mew=0.6, zorder=6)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.text(0.97, 0.96, _gain_text(p), transform=ax.transAxes, ha="right", va="top", fontsize=9)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(caps.min() - 0.5, caps.max() + 0.5)
    ax.set_title(f"{p['title']}\nS = {p['S']}, M = {p['M']}", fontsize=10)
    ax.set_xlabel("activation cap per rank (A, held until W)")
    unit = "units of one F" if p["unit"] == "F" else p["unit"]
    ax.set_ylabel(f"makespan of one flush ({unit})")


def _gain_text(p: dict) -> str:
    """The largest gain of the exact search over the best hand-written schedule that fits the
    same cap, read off the panel's numbers."""
    best = None
    for cap, exact in zip(p["caps"], p["exact"]):
        fits = [(h["T"], _label(n)) for n, h in p["hand"].items() if h["peak"] <= cap]
        if fits:
            T, name = min(fits)
            if best is None or T / exact > best[0] + 1e-12:
                best = (T / exact, cap, name)
    if best is None:
        return "no hand-written schedule fits"
    if best[0] <= 1 + 1e-12:
        return "search = best hand-written that fits"
    return f"search beats {best[2]} by {best[0]:.2f}x at cap {best[1]}"


def _label(name: str) -> str:
    return HAND_STYLE[name][0] if name in HAND_STYLE else name
