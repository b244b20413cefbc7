"""Paper figures, drawn from saved numbers (never recomputed here, never read from wandb).

Every figure is a small function ``name(<arrays>, path) -> path`` that writes one PNG in the
paper's style (:func:`paper_style`) and, next to it, the same figure as a vector PDF
(:func:`save`). Step sizes are labelled by one helper, :func:`rpd.results.gamma_label` ("2⁻⁴"). Colours of
the schedule charts follow the paper: blue forward, green backward, white hatched idle.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import matplotlib as mpl
import matplotlib.style
import numpy as np
from matplotlib.artist import Artist
from matplotlib.collections import PatchCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

FWD_COLOR, BWD_COLOR = "#4C78A8", "#8BC17C"
_IDLE, _FWD, _BWD = 0, 1, 2  # the op codes of rpd.schedules
SYNC_STYLE: dict[str, Any] = dict(color="#D62728", linestyle="--", linewidth=2.2)  # LocalSGD's averaging


@contextlib.contextmanager
def paper_style():
    """Whitegrid look of the paper's figures, scoped to the figure being drawn. PDFs embed
    TrueType (type 42) fonts, as journals ask."""
    with mpl.style.context("seaborn-v0_8-whitegrid"), mpl.rc_context({"savefig.dpi": 200, "pdf.fonttype": 42}):
        yield


def _axes(figsize):
    # A bare Figure (no pyplot): no GUI backend, no global figure registry to leak into.
    fig = Figure(figsize=figsize)
    return fig, fig.subplots()


def save(fig, path, **kwargs) -> Path:
    """Write ``fig`` to ``path`` (PNG at the style's or the given dpi, ``bbox_inches="tight"``
    unless given) and the same figure as a vector PDF next to it (``<stem>.pdf``). Returns the
    PNG's path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    kwargs.setdefault("bbox_inches", "tight")
    fig.savefig(path, **kwargs)
    if path.suffix.lower() != ".pdf":
        fig.savefig(path.with_suffix(".pdf"), **{k: v for k, v in kwargs.items() if k != "dpi"})
    return path


def _draw_schedule(ax, op, mb, title: str, sync_time=(), numbers: bool = True) -> None:
    op, mb = np.asarray(op), np.asarray(mb)
    T, S = op.shape
    for kind, color, hatch in ((_FWD, FWD_COLOR, None), (_BWD, BWD_COLOR, None), (_IDLE, "white", "////")):
        t, s = np.nonzero(op == kind)
        cells = [Rectangle((float(ti), float(S - 1 - si)), 1, 1) for ti, si in zip(t, s)]
        ax.add_collection(PatchCollection(cells, facecolor=color, edgecolor="black", linewidth=0.8, hatch=hatch))
    if numbers:
        for t, s in zip(*np.nonzero(op != _IDLE)):
            ax.text(
                t + 0.5,
                S - 0.5 - s,
                str(mb[t, s] + 1),
                ha="center",
                va="center",
                fontsize=10 if T <= 40 else 7,
                color="white",
                fontweight="bold",
            )
    for t in np.asarray(sync_time)[:-1]:  # the last averaging ends the run
        ax.axvline(t + 1, **SYNC_STYLE)
    ax.set_xlim(0, T)
    ax.set_ylim(0, S)
    ticks = np.arange(0, T, 1 if T <= 30 else 2 if T <= 80 else max(1, T // 40))
    ax.set_xticks(ticks + 0.5, [str(t) for t in ticks])
    ax.set_yticks(np.arange(S) + 0.5, [f"Machine {S - i}" for i in range(S)])
    ax.set_xlabel("Time step")
    ax.set_title(title)
    ax.grid(False)


def _schedule_legend(ax, averaging: bool = False) -> None:
    """Forward / Backward / Idle cells, and the dashed averaging line when one is drawn."""
    from matplotlib.lines import Line2D

    handles: list[Artist] = [
        Rectangle((0, 0), 1, 1, facecolor=c, edgecolor="black", hatch=h)
        for c, h in ((FWD_COLOR, None), (BWD_COLOR, None), ("white", "////"))
    ]
    labels = ["Forward", "Backward", "Idle"]
    if averaging:
        handles.append(Line2D([], [], **SYNC_STYLE))
        labels.append("LocalSGD averaging")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=True, edgecolor="black")


def schedule_chart(op, mb, path, title: str, sync_time=(), numbers: bool = True) -> Path:
    """Pipeline schedule: one row per machine (machine 1 on top), one cell per time step;
    blue F, green B, hatched idle, the (1-based) microbatch in each busy cell. ``sync_time``:
    steps at whose end LocalSGD averages the replicas (dashed lines)."""
    T, S = np.shape(op)
    with paper_style():
        fig, ax = _axes((max(6.0, 0.42 * T + 2.0), 0.62 * S + 1.3))
        _draw_schedule(ax, op, mb, title, sync_time, numbers)
        _schedule_legend(ax, averaging=len(np.asarray(sync_time)) > 1)
        return save(fig, path)


def schedule_pictures(panels: list[dict], path) -> Path:
    """E7: several schedules stacked on a shared time axis; each panel is a dict with
    ``title``, ``op`` and ``mb`` [T, S] and optionally ``sync_time``."""
    T = max(np.shape(p["op"])[0] for p in panels)
    heights = [np.shape(p["op"])[1] + 1.6 for p in panels]
    with paper_style():
        fig = Figure(figsize=(max(8.0, 0.3 * T + 2.5), 0.5 * sum(heights)))
        axes = fig.subplots(len(panels), 1, gridspec_kw={"height_ratios": heights}, squeeze=False)[:, 0]
        for ax, p in zip(axes, panels):
            _draw_schedule(ax, p["op"], p["mb"], p["title"], p.get("sync_time", ()))
            ax.set_xlim(0, T)
        _schedule_legend(axes[0], averaging=any(len(np.asarray(p.get("sync_time", ()))) > 1 for p in panels))
        fig.tight_layout()
        return save(fig, path)


def delay_law_figure(S, mean, p10, max_, max_fit, mean_fit, path) -> Path:
    """E2: PD exact delay statistics against S on log-log axes -- the p10..max band, the mean,
    and the degree-2 fits of max and mean (coefficients of S², S, 1). A p10 of 0 (S = 2) is
    drawn at the bottom of the axis, since log axes have no 0."""
    S = np.asarray(S, np.float64)
    max_fit, mean_fit = np.asarray(max_fit), np.asarray(mean_fit)
    with paper_style():
        fig, ax = _axes((8.5, 5.2))
        ax.fill_between(S, np.maximum(p10, 0.5), max_, alpha=0.18, label="10th percentile – max range")
        ax.plot(S, mean, linewidth=2.2, label="Mean staleness")
        ax.plot(
            S,
            np.polyval(mean_fit, S),
            linestyle="--",
            linewidth=2.2,
            label=rf"Quadratic fit (${mean_fit[0]:.1f} \cdot S^2$)",
        )
        ax.plot(
            S,
            np.polyval(max_fit, S),
            linestyle="--",
            linewidth=2.2,
            label=rf"Quadratic fit (${max_fit[0]:.1f} \cdot S^2 {max_fit[1]:+.1f} \cdot S$)",
        )
        ax.plot(  # the same pipeline's delay counted in a stage's own optimizer steps (docs/optimizers.md)
            S,
            S - 1,
            color="0.35",
            linestyle=":",
            linewidth=1.8,
            label=r"Stage 0's delay in its own optimizer steps ($S - 1$)",
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(bottom=0.5)
        ax.set_xlabel(r"Number of stages $S$")
        ax.set_ylabel(r"Staleness $(k-j_k^{(s)})$ in block updates; optimizer steps dotted")
        ax.set_title("PipeDream exact delay statistics vs number of stages")
        ax.grid(True, alpha=0.28)
        ax.legend(frameon=True)
        return save(fig, path)
