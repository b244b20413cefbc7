"""The plan's figure (``python -m experiments.plan figure=...``): step time per microbatch
against the worst rank's peak memory, one point per (schedule, M), the frontier joined (no
other point that fits is both faster and smaller); drawn from the plan's numbers only."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.lines
import matplotlib.ticker
from matplotlib.figure import Figure

from rpd.plotting.style import paper_style, save

MARKERS = ("o", "s", "^", "D", "v", "P")


def frontier_figure(points, path, title: str = "") -> Path:
    """``points``: (peak GiB, ms per microbatch, schedule, M, fits) per row. One colour per
    schedule and one marker per M (legends beside the axes, not on the data); rows that do not
    fit the memory cap are hollow; the frontier of those that fit is the black step."""
    schedules = list(dict.fromkeys(p[2] for p in points))
    Ms = sorted({p[3] for p in points})
    colors = matplotlib.colormaps["tab20"]
    with paper_style():
        fig = Figure(figsize=(10.0, 5.2))
        ax = fig.subplots()
        for x, y, name, M, fits in points:
            c = colors(schedules.index(name) % 20)
            ax.scatter(
                x,
                y,
                s=30,
                marker=MARKERS[Ms.index(M) % len(MARKERS)],
                color=c if fits else "none",
                edgecolors=c,
                zorder=3,
            )
        front, best = [], float("inf")
        for x, y, _, _, fits in sorted(points):
            if fits and y < best:
                front.append((x, y))
                best = y
        handles = [
            matplotlib.lines.Line2D([], [], ls="", marker="o", color=colors(i % 20), label=s)
            for i, s in enumerate(schedules)
        ]
        handles += [
            matplotlib.lines.Line2D([], [], ls="", marker=MARKERS[i % len(MARKERS)], color="0.4", label=f"M = {M}")
            for i, M in enumerate(Ms)
        ]
        if front:
            ax.step(*zip(*front), where="post", color="k", lw=1, zorder=2)
            handles.append(matplotlib.lines.Line2D([], [], color="k", lw=1, label="frontier (fits the cap)"))
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.set_xlabel("peak memory of the worst rank (GiB)")
        ax.set_ylabel("step time per microbatch (ms, log scale)")
        ax.set_title(title)
        fig.tight_layout()
        return save(fig, path)
