"""The plan's figure (``python -m experiments.plan figure=...``): step time (per step, as the
plan's table prints it) against the worst rank's peak memory, one point per (schedule, M), the
memory cap drawn, the frontier joined (no other point that fits is both faster and smaller);
drawn from the plan's numbers only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.lines
import matplotlib.ticker
import numpy as np
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
            cap_style: dict[str, Any] = dict(color="tab:red", lw=1.2)
            ax.axvline(cap_gib, zorder=1, **cap_style)
            handles.append(matplotlib.lines.Line2D([], [], label=f"memory cap ({cap_gib:g} GiB)", **cap_style))
            if margin > 0:
                fit_style: dict[str, Any] = dict(color="tab:red", lw=1.0, ls=":")
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
    """Predicted against published step time, every run of the development set as its
    left-out fold predicts it (rows of :func:`rpd.studies.plan_accuracy.run`), one colour per
    source, the ±5 % and ±10 % bands shaded; beside it each source's error per run. Runs whose
    published figure needs faster compute than the plan's (a bound from bytes and link rates)
    are ringed. From the saved numbers only."""
    sources = list(dict.fromkeys(r["source"] for r in table))
    with paper_style():
        fig = Figure(figsize=(11.0, 5.8))
        ax, bx = fig.subplots(1, 2, gridspec_kw=dict(width_ratios=(1, 1.2)))
        pub = [r["published_step_s"] for r in table]
        lo, hi = 0.7 * min(pub), 1.4 * max(pub)
        xs = np.geomspace(lo, hi, 50)
        ax.fill_between(xs, 0.9 * xs, 1.1 * xs, color="0.93", zorder=1, label="±10 %")
        ax.fill_between(xs, 0.95 * xs, 1.05 * xs, color="0.82", zorder=1, label="±5 %")
        ax.plot(xs, xs, color="k", lw=0.8, zorder=2)
        for i, source in enumerate(sources):
            rows = [r for r in table if r["source"] == source]
            s = summary[source]
            label = f"{s['title']}: {s['mean_abs_error']:.1%} mean, {s['max_abs_error']:.1%} max"
            ax.scatter(
                [r["published_step_s"] for r in rows],
                [r["predicted_step_s"] for r in rows],
                s=22,
                color=f"C{i}",
                marker=MARKERS[i % len(MARKERS)],
                zorder=3,
                label=label,
            )
            bx.plot(
                range(len(rows)),
                [100 * r["error"] for r in rows],
                marker=MARKERS[i % len(MARKERS)],
                color=f"C{i}",
                lw=0.8,
                ms=4,
            )
            for j, r in enumerate(rows):
                if r.get("out_of_reach", False):
                    ax.scatter(r["published_step_s"], r["predicted_step_s"], s=90, facecolors="none", edgecolors="C3")
                    bx.scatter(j, 100 * r["error"], s=90, facecolors="none", edgecolors="C3", zorder=4)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("published step time (s)")
        ax.set_ylabel("predicted step time (s), source left out of the fit")
        cv = summary["cross_validated"]
        ax.set_title(
            f"leave-one-source-out: mean |error| {cv['mean_abs_error']:.1%}, max {cv['max_abs_error']:.1%}"
            f" ({cv['rows']} runs)",
            fontsize=9,
        )
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=6.5, frameon=False)  # off the points
        bx.axhspan(-5, 5, color="0.82", zorder=0)
        bx.axhspan(-10, 10, color="0.93", zorder=-1)
        bx.axhline(0, color="k", lw=0.8)
        bx.set_xlabel("run of its source, in the source's order (model size or GPUs)")
        bx.set_ylabel("step-time error (%), ringed: published needs faster compute")
        bx.set_title("error of each run when its source is left out", fontsize=9)
        fig.tight_layout()
        return save(fig, path)
