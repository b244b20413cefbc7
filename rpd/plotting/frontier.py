"""E10's figures: loss at a simulated-time budget, and time to a target loss, against peak
memory per rank, one marker per schedule, the Pareto front drawn (``rpd.studies.frontier``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from matplotlib import lines as mpl_lines
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

from rpd import registry
from rpd.plotting.style import paper_style, save

OPTION_ARMS = {  # a row that is a schedule with options of its semantics: (schedule, marker, colour or None)
    "PipeDream+pred": ("pipedream", "x", None),
    "PipeMare T1+T2": ("pipemare", "h", "#999999"),
}


def style(label: str) -> tuple[str, str]:
    """(marker, colour) of an E10 row, by its label: the registry entry whose compact label it
    is, or an option arm drawn in its schedule's colour."""
    if label in OPTION_ARMS:
        base, marker, colour = OPTION_ARMS[label]
        return marker, colour or registry.style(base).colour
    entries: list[registry.ScheduleEntry | registry.Variant] = [
        *registry.SCHEDULES.values(),
        *registry.VARIANTS.values(),
    ]
    for e in entries:
        if e.compact == label:
            return e.marker, e.colour
    raise KeyError(f"no registered schedule or variant is labelled {label!r}")


NAMES = {
    "nesterov_quadratic": "Nesterov quadratic",
    "logistic_regression": "logistic regression",
    "mlp_chain": "MLP chain",
    "nanochat": "NanoChat LM",
}


def _compact(v: float) -> str:
    """Tick text: 40k, 1.2M, 0.05, 3.1 (no 4e+04)."""
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    return f"{v:.4g}"


_PLAIN = FuncFormatter(lambda v, _: _compact(v))
_TWO_FIVE = FuncFormatter(lambda v, _: _compact(v) if round(v / 10 ** np.floor(np.log10(v)), 6) in (2.0, 5.0) else "")


def _panel(ax, rows: list[dict], y: str, title: str) -> None:
    ok = [r for r in rows if r["status"] == "ok" and r.get(y) is not None and np.isfinite(r[y])]
    for r in ok:
        marker, color = style(r["schedule"])
        on_front = r.get("pareto") and y == "loss_stable"
        ax.scatter(
            r["memory"],
            r[y],
            marker=marker,
            color=color,
            s=80 if on_front else 45,
            zorder=3,
            edgecolors="black" if on_front and marker not in "x+" else None,
            linewidths=1.2,
        )
    pts = sorted((r["memory"], r[y]) for r in ok)
    front, best = [], np.inf
    for m, v in pts:
        if v < best:
            front.append((m, v))
            best = v
    if front:
        xs, ys = zip(*front)
        ax.step(xs, ys, where="post", color="black", linewidth=1.0, alpha=0.6, zorder=2)
    missing = [r["schedule"] for r in rows if r["status"] == "ok" and (r.get(y) is None or not np.isfinite(r[y]))]
    if missing:  # under the title, wrapped
        words = ("never: " if y == "time_to_target" else "diverged: ") + ", ".join(missing)
        title += "\n" + textwrap.fill(words, 48)
    # log axes where the values span a decade or more; narrower ranges read better on linear ones
    for values, set_scale in (([r["memory"] for r in ok], ax.set_xscale), ([r[y] for r in ok], ax.set_yscale)):
        if values and min(values) > 0 and max(values) / min(values) >= 10:
            set_scale("log")
    for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
        if scale == "linear":
            axis.set_major_locator(MaxNLocator(nbins=4))
    for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
        axis.set_major_formatter(_PLAIN)
        lo, hi = axis.get_view_interval()
        narrow = scale == "log" and lo > 0 and np.log10(hi / lo) < 1.5  # few or no decades: label 2 and 5
        axis.set_minor_formatter(_TWO_FIVE if narrow else NullFormatter())
    ax.set_title(title, fontsize=7)
    ax.tick_params(labelsize=7)


def _grid(rows: list[dict], y: str, ylabel: str, suptitle: str, path) -> Path:
    objectives = [o for o in NAMES if any(r["objective"] == o for r in rows)]
    cols = sorted({(r["S"], r["costs"]) for r in rows}, key=lambda c: (c[1] != "F=B", c[0]))
    with paper_style():
        fig = Figure(figsize=(2.9 * len(cols) + 2.6, 2.5 * len(objectives) + 0.8))
        axes = fig.subplots(len(objectives), len(cols), squeeze=False)
        for i, o in enumerate(objectives):
            for j, (S, costs) in enumerate(cols):
                sub = [r for r in rows if (r["objective"], r["S"], r["costs"]) == (o, S, costs)]
                ax = axes[i, j]
                if not sub:
                    ax.axis("off")
                    continue
                _panel(ax, sub, y, f"{NAMES[o]}, S = {S}, {costs}")
                if j == 0:
                    ax.set_ylabel(ylabel, fontsize=8)
                if i == len(objectives) - 1:
                    ax.set_xlabel("peak memory per rank (values)", fontsize=8)
        handles = [
            mpl_lines.Line2D([], [], marker=style(k)[0], color=style(k)[1], linestyle="none", markersize=7, label=k)
            for k in dict.fromkeys(r["schedule"] for r in rows)
        ]
        handles.append(mpl_lines.Line2D([], [], color="black", alpha=0.6, label="Pareto front"))
        if y == "loss_stable" and any(r.get("pareto") for r in rows):
            handles.append(
                mpl_lines.Line2D(
                    [],
                    [],
                    marker="o",
                    color="0.6",
                    markeredgecolor="black",
                    markeredgewidth=1.2,
                    markersize=8.5,
                    linestyle="none",
                    label="on the Pareto front (outlined)",
                )
            )
        fig.legend(handles=handles, loc="center right", fontsize=8, frameon=True)
        fig.suptitle(suptitle, fontsize=10)
        fig.tight_layout(rect=(0, 0, 1 - 2.6 / (2.9 * len(cols) + 2.6), 0.97))  # the legend's column
        return save(fig, path)


def frontier_figure(out, path) -> Path:
    """``path``: loss at the budget vs memory; ``<stem>_time.png``: time to the target vs memory
    (each with its PDF next to it, :func:`rpd.plotting.style.save`)."""
    rows = out.table
    p = Path(path)
    _grid(
        rows,
        "loss_stable",
        "loss at the budget (stable γ)",
        "E10: loss at a fixed simulated-time budget against peak memory (outlined: on the Pareto front)",
        p,
    )
    return _grid(
        rows,
        "time_to_target",
        "time to target (units of F)",
        "E10: simulated time to the target loss (the best loss at half the budget) against memory",
        p.with_name(p.stem + "_time.png"),
    )
