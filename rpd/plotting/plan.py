"""The plan's figure (``python -m experiments.plan figure=...``): step time (per step, as the
plan's table prints it) against the worst rank's peak memory, one point per (schedule, M), the
memory cap drawn, the frontier joined (no other point that fits is both faster and smaller);
drawn from the plan's numbers only."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.lines
import matplotlib.ticker
from matplotlib.figure import Figure

from rpd import registry
from rpd.plotting.style import paper_style, save

MARKERS = ("o", "s", "^", "D", "v", "P")


def frontier_figure(points, path, title: str = "", cap_gib: float | None = None, margin: float = 0.0) -> Path:
    """``points``: (peak GiB, ms per step, schedule, M, fits) per row. One colour per
    schedule and one marker per M (legends beside the axes, not on the data); rows that do not
    fit the memory cap are hollow; the frontier of those that fit is the black step. ``cap_gib``:
    the memory cap, a red vertical line (and with ``margin`` > 0 a dotted one where a row stops
    fitting, (1 − margin) × the cap)."""
    schedules = list(dict.fromkeys(p[2] for p in points))
    Ms = sorted({p[3] for p in points})
    colour = {n: registry.style(n).colour for n in schedules}  # fixed per schedule by its registry entry
    with paper_style():
        fig = Figure(figsize=(10.0, 5.2))
        ax = fig.subplots()
        for x, y, name, M, fits in points:
            c = colour[name]
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
            matplotlib.lines.Line2D([], [], ls="", marker="o", color=colour[s], label=registry.style(s).title)
            for s in schedules
        ]
        handles += [
            matplotlib.lines.Line2D([], [], ls="", marker=MARKERS[i % len(MARKERS)], color="0.4", label=f"M = {M}")
            for i, M in enumerate(Ms)
        ]
        if front:
            ax.step(*zip(*front), where="post", color="k", lw=1, zorder=2)
            handles.append(matplotlib.lines.Line2D([], [], color="k", lw=1, label="frontier (fits the cap)"))
        if cap_gib is not None:
            cap_style = dict(color="tab:red", lw=1.2)
            ax.axvline(cap_gib, zorder=1, **cap_style)
            handles.append(matplotlib.lines.Line2D([], [], label=f"memory cap ({cap_gib:g} GiB)", **cap_style))
            if margin > 0:
                fit_style = dict(color="tab:red", lw=1.0, ls=":")
                ax.axvline(cap_gib * (1 - margin), zorder=1, **fit_style)
                handles.append(matplotlib.lines.Line2D([], [], label=f"fits below (margin {margin:g})", **fit_style))
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.set_xlabel("peak memory of the worst rank (GiB)")
        ax.set_ylabel("step time (ms per step, log scale)")
        ax.set_title(title)
        fig.tight_layout()
        return save(fig, path)


def accuracy_figure(table, summary, path) -> Path:
    """Predicted against published, one panel per development set (rows of
    :func:`rpd.studies.plan_accuracy.run`), the ±10 % band shaded; from the saved numbers only."""
    presets = list(dict.fromkeys(r["preset"] for r in table))
    units = {"sc21": "TFLOP/s per GPU", "h100": "MFU (%)"}
    with paper_style():
        fig = Figure(figsize=(5.0 * len(presets), 4.6))
        axes = fig.subplots(1, len(presets), squeeze=False)[0]
        for ax, preset in zip(axes, presets):
            rows = [r for r in table if r["preset"] == preset]
            pub = [r["published"] for r in rows]
            lo, hi = 0.85 * min(pub), 1.15 * max(pub)
            xs = [lo, hi]
            ax.fill_between(xs, [0.9 * x for x in xs], [1.1 * x for x in xs], color="0.9", zorder=1, label="±10 %")
            ax.plot(xs, xs, color="k", lw=0.8, zorder=2)
            ax.scatter(pub, [r["predicted"] for r in rows], s=24, color="C0", zorder=3)
            for r in rows:
                ax.annotate(
                    r["name"], (r["published"], r["predicted"]), fontsize=7, xytext=(3, 3), textcoords="offset points"
                )
            s = summary[preset]
            ax.set_title(
                f"{s['source']}\nmean |error| {s['mean_abs_error']:.1%}, max {s['max_abs_error']:.1%}", fontsize=9
            )
            unit = units[rows[0]["set"]]
            ax.set_xlabel(f"published {unit}")
            ax.set_ylabel(f"predicted {unit}")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            ax.legend(loc="upper left", fontsize=8, frameon=False)
        fig.tight_layout()
        return save(fig, path)
