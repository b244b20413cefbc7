"""E9's figures, drawn from saved numbers: the bubble-memory table and every schedule's op chart.

Op colours: F blue, B green (as the paper's E7), I orange, W purple; an overlapped F&B pair
(DualPipeV) is drawn as one cell split in two; every op is as wide as its ticks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.collections import PatchCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from rpd.plotting import BWD_COLOR, FWD_COLOR, _save, paper_style

KIND_COLOR = {1: FWD_COLOR, 2: BWD_COLOR, 3: "#F58518", 4: "#B279A2"}
KIND_LABEL = {1: "F", 2: "B", 3: "I", 4: "W"}
MARKERS = dict(gpipe="o", **{"1f1b": "s"}, interleaved="D", zb_h1="^", zb_h2="v", zb_v="<",
               dualpipe_v=">", chimera="P", pipedream="X", pipedream_2bw="*", pipemare="h")


def schedule_gantt(panels: list[dict], path) -> Path:
    """One chart per schedule, ranks top to bottom; ``ops`` int [7, n] = kind, stage, mb, rank,
    start, end, fused (ticks; ``scale`` ticks per F)."""
    heights = [int(p["ops"][3].max()) + 2.2 for p in panels]
    T = max(int(p["ops"][5].max()) / p["scale"] for p in panels)
    with paper_style():
        fig = Figure(figsize=(max(10.0, 0.32 * T + 2.5), 0.42 * sum(heights)))
        axes = fig.subplots(len(panels), 1, gridspec_kw={"height_ratios": heights}, squeeze=False)[:, 0]
        for ax, p in zip(axes, panels):
            _gantt(ax, p["ops"], p["scale"], p["title"])
            ax.set_xlim(0, T)
        handles = [Rectangle((0, 0), 1, 1, facecolor=c, edgecolor="black") for c in KIND_COLOR.values()]
        axes[0].legend(handles, ["Forward", "Backward", "Backward (input, I)", "Backward (weights, W)"],
                       loc="lower left", bbox_to_anchor=(0.0, 1.25), ncol=4, frameon=True)
        axes[-1].set_xlabel("Time (units of one stage's forward)")
        fig.tight_layout()
        return _save(fig, path)


def _gantt(ax, ops: np.ndarray, scale: int, title: str) -> None:
    kind, stage, mb, rank, start, end, fused = (np.asarray(r) for r in ops)
    S = int(rank.max()) + 1
    n_stages = int(stage.max()) + 1
    chunked = n_stages > S
    pair_first = np.zeros(len(kind), bool)
    pair_first[:-1] = fused[1:] == 1
    cells, colors = [], []
    for i in range(len(kind)):
        y = S - 1 - rank[i]
        x, w = start[i] / scale, (end[i] - start[i]) / scale
        if fused[i] or pair_first[i]:  # overlapped pair: F in the top half, B in the bottom
            cells.append(Rectangle((x, y + (0.5 if pair_first[i] else 0.0)), w, 0.5))
        else:
            cells.append(Rectangle((x, y), w, 1))
        colors.append(KIND_COLOR[int(kind[i])])
        label = str(mb[i] + 1) + ("'" if chunked and stage[i] >= S else "")
        if w >= 0.45:
            ax.text(x + w / 2, y + (0.75 if pair_first[i] else 0.25 if fused[i] else 0.5), label,
                    ha="center", va="center", fontsize=6.5, color="white", fontweight="bold")
    ax.add_collection(PatchCollection(cells, facecolor=colors, edgecolor="black", linewidth=0.5))
    ax.set_ylim(0, S)
    ax.set_yticks(np.arange(S) + 0.5, [f"rank {S - 1 - i}" for i in range(S)], fontsize=7)
    ax.set_title(title + ("   (' = second chunk)" if chunked else ""), fontsize=9, loc="left")
    ax.grid(False)


def frontier_table_figure(rows: list[dict], path, costs: str = "B=2F") -> Path:
    """Bubble (f_total) against peak activations per rank, one panel per S, one marker per
    schedule; filled at M = 4S without latency, hollow with a p2p latency of one F."""
    ok = [r for r in rows if r["status"] == "ok" and r["costs"] == costs]
    S_values = sorted({r["S"] for r in ok})
    with paper_style():
        fig = Figure(figsize=(4.6 * len(S_values) + 2.2, 4.4))
        axes = fig.subplots(1, len(S_values), squeeze=False)[0]
        palette = [f"C{i}" for i in range(10)] + ["#333333"]
        for ax, S in zip(axes, S_values):
            for (name, marker), color in zip(MARKERS.items(), palette):
                for c, face in ((0, None), (1, "none")):
                    pts = [r for r in ok if r["schedule"] == name and r["S"] == S and r["M"] == 4 * S and r["p2p"] == c]
                    if not pts:
                        continue
                    ax.scatter([pts[0]["act_max"]], [100 * pts[0]["bubble_f_total"]], marker=marker, s=70,
                               facecolors=color if face is None else "none", edgecolors=color,
                               label=name if (c == 0 and S == S_values[0]) else None)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("peak activations on a rank (units of A)")
            ax.set_title(f"S = {S}, M = {4 * S}, {costs}")
            ax.grid(True, alpha=0.3)
        axes[0].set_ylabel("bubble, % of wall time (f_total)")
        fig.legend(loc="center right", frameon=True, title="filled: no latency\nhollow: p2p = 1 F")
        fig.tight_layout(rect=(0, 0, 1 - 2.0 / (4.6 * len(S_values) + 2.2), 1))
        return _save(fig, path)
