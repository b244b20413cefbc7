"""The plan's figure (``python -m experiments.plan figure=...``): step time (per step, as the
plan's table prints it) against the worst rank's peak memory, one point per (schedule, M), the
memory cap drawn, the frontier joined (no other point that fits is both faster and smaller);
drawn from the plan's numbers only."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.lines
import matplotlib.ticker
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

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


def _label_points(ax, points, renderer) -> None:
    """Name each (name, x, y) point at 7 pt where the label overlaps no marker and no label already
    placed."""
    r = 3.0 * renderer.points_to_pixels(1.0)  # a marker's half width in pixels
    placed: list = [
        Bbox.from_extents(u - r, v - r, u + r, v + r) for u, v in ax.transData.transform([p[1:] for p in points])
    ]
    # beside the point, else in a column in the panel's empty lower right with a leader line (the
    # highest points take the highest slots, so no lines cross)
    near = [((4, 2), "offset points", "left"), ((-4, 2), "offset points", "right")]
    column = [((0.62, 0.40 - 0.055 * k), "axes fraction", "left") for k in range(8)]
    for name, x, y in sorted(points, key=lambda p: (-p[2], p[1])):
        for k, (where, coords, ha) in enumerate(near + column):
            lead = dict(arrowprops=dict(arrowstyle="-", lw=0.5, color="0.4", shrinkA=2, shrinkB=3)) if k >= 2 else {}
            t = ax.annotate(name, (x, y), fontsize=7, xytext=where, textcoords=coords, ha=ha, va="bottom", **lead)
            t.update_positions(renderer)
            box = Text.get_window_extent(t, renderer)  # the words, not the leader line
            if not any(box.overlaps(b) for b in placed) or k == len(near) + len(column) - 1:
                placed.append(box)
                break
            t.remove()


def accuracy_figure(table, summary, path) -> Path:
    """Predicted against published, one panel per development set (rows of
    :func:`rpd.studies.plan_accuracy.run`), the ±10 % band shaded; from the saved numbers only."""
    presets = list(dict.fromkeys(r["preset"] for r in table))
    units = {"sc21": "TFLOP/s per GPU", "h100": "MFU (%)"}
    with paper_style():
        fig = Figure(figsize=(5.0 * len(presets), 4.6))
        axes = fig.subplots(1, len(presets), squeeze=False)[0]
        named = []
        for ax, preset in zip(axes, presets):
            rows = [r for r in table if r["preset"] == preset]
            pub = [r["published"] for r in rows]
            lo, hi = 0.85 * min(pub), 1.15 * max(pub)
            xs = [lo, hi]
            ax.fill_between(xs, [0.9 * x for x in xs], [1.1 * x for x in xs], color="0.9", zorder=1, label="±10 %")
            ax.plot(xs, xs, color="k", lw=0.8, zorder=2)
            ax.scatter(pub, [r["predicted"] for r in rows], s=24, color="C0", zorder=3)
            # rows whose published figure needs more compute than the plan's, DP free (a bound)
            beyond = [r for r in rows if r.get("least_compute_mfu", 0.0) > r.get("plan_compute_mfu", np.inf)]
            if beyond:
                ax.scatter(
                    [r["published"] for r in beyond],
                    [r["predicted"] for r in beyond],
                    s=90,
                    facecolors="none",
                    edgecolors="C3",
                    zorder=4,
                    label="published needs faster\ncompute than the plan's",
                )
                note = "\n".join(
                    f"{r['name']} at micro-batch {r.get('micro_batch', 1)}: the published figure\n"
                    f"needs >= {r['least_compute_mfu']:.0%} compute MFU (the plan's: {r['plan_compute_mfu']:.0%})"
                    for r in beyond
                )
                ax.text(0.97, 0.03, note, transform=ax.transAxes, ha="right", va="bottom", fontsize=7, color="C3")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            named.append((ax, [(r["name"], r["published"], r["predicted"]) for r in rows]))
            s = summary[preset]
            ax.set_title(
                f"{s['source']}\nmean |error| {s['mean_abs_error']:.1%}, max {s['max_abs_error']:.1%}", fontsize=9
            )
            unit = units[rows[0]["set"]]
            ax.set_xlabel(f"published {unit}")
            ax.set_ylabel(f"predicted {unit}")
            ax.legend(loc="upper left", fontsize=8, frameon=False)
        fig.tight_layout()
        renderer = FigureCanvasAgg(fig).get_renderer()  # labels placed where the layout put the axes
        for ax, points in named:
            _label_points(ax, points, renderer)
        return save(fig, path)
