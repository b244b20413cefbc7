"""E9's figures, drawn from saved numbers: the bubble-memory table and every schedule's op chart.

Op colours: F blue, B green (as the paper's E7), I orange, W purple; an overlapped F&B pair
(DualPipeV) is drawn as one cell split in two; every op is as wide as its ticks.
"""

from __future__ import annotations

import functools
import textwrap
from pathlib import Path

import numpy as np
from matplotlib import lines as mpl_lines
from matplotlib.artist import Artist
from matplotlib.collections import PatchCollection, PathCollection
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import Rectangle
from matplotlib.path import Path as MplPath
from matplotlib.textpath import TextPath
from matplotlib.transforms import Affine2D

from rpd import registry
from rpd.plotting.style import BWD_COLOR, FWD_COLOR, paper_style, save

KIND_COLOR = {1: FWD_COLOR, 2: BWD_COLOR, 3: "#F58518", 4: "#B279A2", 5: "#D62728", 6: "#FFD700"}
KIND_LABEL = {1: "F", 2: "B", 3: "I", 4: "W"}
R_TICKS = (0, 10, 25, 50, 100, 200, 500, 1000, 2000)  # E9's r_ideal axis, %


KIND_NAME = {
    1: "Forward",
    2: "Backward",
    3: "Backward (input, I)",
    4: "Backward (weights, W)",
    5: "activation to host (D2H)",
    6: "activation back (H2D)",
}


def schedule_gantt(
    panels: list[dict], path, wrap: float | None = None, xlabel: str = "Time (units of one stage's forward)"
) -> Path:
    """One chart per schedule, ranks top to bottom; ``ops`` int [7, n] = kind, stage, mb, rank,
    start, end, fused (ticks; ``scale`` ticks per F). ``wrap``: at most this many time units per
    row; a longer chart goes on in further rows of equal span below (a long schedule keeps a
    readable aspect instead of a strip), each row drawing only the ops it shows, so any N draws
    in seconds. The legend names the op kinds drawn, no others; ``xlabel`` says what a unit is."""
    T = max(int(p["ops"][5].max()) / p["scale"] for p in panels)
    n_rows = 1 if wrap is None or T <= wrap else int(np.ceil(T / wrap))
    span = float(np.ceil(T / n_rows))  # whole ticks per row
    rows = [(p, k) for p in panels for k in range(n_rows)]
    heights = [int(p["ops"][3].max()) + 2.2 for p, _ in rows]
    with paper_style():
        fig = Figure(figsize=(max(10.0, 0.32 * span + 2.5), 0.42 * sum(heights)))
        axes = fig.subplots(len(rows), 1, gridspec_kw={"height_ratios": heights}, squeeze=False)[:, 0]
        for ax, (p, k) in zip(axes, rows):
            window = (k * span * p["scale"], (k + 1) * span * p["scale"])  # in ticks
            _gantt(ax, p["ops"], p["scale"], p["title"] if k == 0 else f"{p['title']} (continued)", window)
            if "wasted" in p:
                _post_validation(ax, p["ops"], p["wasted"], p["steps"], p["scale"], window)
            if "transfers" in p:
                _transfers(ax, p["transfers"], p["scale"], int(p["ops"][3].max()) + 1, window)
            ax.set_xlim(k * span, (k + 1) * span)
        drawn = [p["ops"][0] for p in panels] + [p["transfers"][0] for p in panels if "transfers" in p]
        kinds = sorted({int(x) for k in drawn for x in np.unique(k)} & set(KIND_NAME))
        handles = [Rectangle((0, 0), 1, 1, facecolor=KIND_COLOR[k], edgecolor="black") for k in kinds]
        axes[0].legend(
            handles,
            [KIND_NAME[k] for k in kinds],
            loc="lower left",
            bbox_to_anchor=(0.0, 1.25),
            ncol=len(kinds),
            frameon=True,
        )
        axes[-1].set_xlabel(xlabel)
        fig.tight_layout()
        return save(fig, path)


def shown(start, end, window: tuple[float, float] | None) -> np.ndarray:
    """Indices of the intervals [start, end) that overlap ``window`` (ticks; None: all)."""
    start, end = np.asarray(start), np.asarray(end)
    if window is None:
        return np.arange(len(start))
    return np.flatnonzero((end > window[0]) & (start < window[1]))


def _gantt(ax, ops: np.ndarray, scale: int, title: str, window: tuple[float, float] | None = None) -> None:
    kind, stage, mb, rank, start, end, fused = (np.asarray(r) for r in ops)
    S = int(rank.max()) + 1
    n_stages = int(stage.max()) + 1
    chunked = n_stages > S
    pair_first = np.zeros(len(kind), bool)
    pair_first[:-1] = fused[1:] == 1
    up = (stage != rank) if not chunked else np.zeros(len(kind), bool)  # Chimera's second pipeline
    cells, colors, hatched, labels, at = [], [], [], [], []
    for i in shown(start, end, window):
        y = S - 1 - rank[i]
        x, w = start[i] / scale, (end[i] - start[i]) / scale
        if fused[i] or pair_first[i]:  # overlapped pair: F in the top half, B in the bottom
            cells.append(Rectangle((x, y + (0.5 if pair_first[i] else 0.0)), w, 0.5))
        else:
            cells.append(Rectangle((x, y), w, 1))
        colors.append(KIND_COLOR[int(kind[i])])
        hatched.append(bool(up[i]))
        if w >= 0.45:
            labels.append(str(mb[i] + 1) + ("'" if chunked and stage[i] >= S else ""))
            at.append((x + w / 2, y + (0.75 if pair_first[i] else 0.25 if fused[i] else 0.5)))
    ax.add_collection(PatchCollection(cells, facecolor=colors, edgecolor="black", linewidth=0.5))
    if any(hatched):  # hatched on top, in a light colour so the labels stay readable
        ax.add_collection(
            PatchCollection(
                [c for c, u in zip(cells, hatched) if u],
                facecolor="none",
                edgecolor="#FFFFFF99",
                linewidth=0,
                hatch="///",
            )
        )
    _labels(ax, labels, at)
    ax.set_ylim(0, S)
    ax.set_yticks(np.arange(S) + 0.5, [f"rank {S - 1 - i}" for i in range(S)], fontsize=7)
    note = (
        "   (' = second chunk)"
        if chunked
        else "   (hatched: the up pipeline, stage s on rank S-1-s)"
        if up.any()
        else ""
    )
    ax.set_title(title + note, fontsize=9, loc="left")
    ax.grid(False)


@functools.lru_cache(maxsize=4096)  # a label's glyphs are the same in every row and chart
def _glyphs(label: str, size: float) -> MplPath:
    """``label`` in white bold at ``size`` points, as one path centred on (0, 0)."""
    path = TextPath((0, 0), label, size=size, prop=FontProperties(weight="bold"))
    drawn = path.vertices[path.codes != MplPath.CLOSEPOLY]  # control points: close to the glyphs' box
    x, y = (drawn.min(axis=0) + drawn.max(axis=0)) / 2
    return path.transformed(Affine2D().translate(-x, -y))


def _labels(ax, labels: list[str], at: list[tuple[float, float]], size: float = 6.5) -> None:
    """The ops' microbatch numbers as one collection of glyph paths (one artist, not one Text
    per op: thousands of ops draw in seconds), centred on ``at`` (data), ``size`` points tall."""
    if not labels:
        return
    paths = [_glyphs(t, size) for t in labels]
    points = Affine2D().scale(1 / 72) + ax.get_figure().dpi_scale_trans  # points -> pixels
    glyph = PathCollection(
        paths, offsets=at, offset_transform=ax.transData, transform=points, facecolor="white", edgecolor="none"
    )
    glyph.set_in_layout(False)  # inside their cells: the tight box need not measure every curve
    ax.add_collection(glyph, autolim=False)


def _transfers(ax, x: np.ndarray, scale: int, S: int, window: tuple[float, float] | None = None) -> None:
    """Activation offload's transfers (kind 5 D2H, 6 H2D; ``x`` int [6, n] = kind, stage, mb,
    rank, start, end) as thin bars on their rank's row: D2H along its top edge, H2D along its
    bottom, over the compute they overlap."""
    kind, _, _, rank, start, end = (np.asarray(r) for r in x[:6])
    i = shown(start, end, window)
    bars = [
        Rectangle(
            (start[j] / scale, S - 1 - rank[j] + (0.8 if kind[j] == 5 else 0.0)), (end[j] - start[j]) / scale, 0.2
        )
        for j in i
    ]
    colours = [KIND_COLOR[int(kind[j])] for j in i]
    ax.add_collection(PatchCollection(bars, facecolor=colours, edgecolor="black", linewidth=0.3))


def _post_validation(
    ax, ops: np.ndarray, wasted: np.ndarray, steps: np.ndarray, scale: int, window: tuple[float, float] | None = None
) -> None:
    """ZB-H2's post-validation: wasted speculative forwards cross-hatched, and a black bar where
    each rank's optimizer step of a flush is final (``steps`` int [n_flush, S], last ticks)."""
    S = int(np.asarray(ops[3]).max()) + 1
    start, end, rank = (np.asarray(ops[i])[wasted] for i in (4, 5, 3))
    i = shown(start, end, window)
    cells = [Rectangle((start[j] / scale, S - 1 - rank[j]), (end[j] - start[j]) / scale, 1) for j in i]
    ax.add_collection(PatchCollection(cells, facecolor="#80808099", edgecolor="black", linewidth=0.5, hatch="xx"))
    for r in range(S):
        for t in steps[shown(steps[:, r], steps[:, r] + 1, window), r]:
            ax.plot([(t + 1) / scale] * 2, [S - 1 - r, S - r], color="black", linewidth=2.0)
    ax.set_title(
        ax.get_title(loc="left") + "   (bars: each rank's step final; crossed: forwards rerun after a rollback)",
        fontsize=9,
        loc="left",
    )


def _weights_label(rows: list[dict], name: str) -> str:
    """Weights held on the busiest rank, in stages: "S" when it equals S at every S."""
    held = [(r["S"], r["weight_memory"]) for r in rows if r["schedule"] == name and r["status"] == "ok"]
    if len({S for S, _ in held}) > 1 and all(w == S for S, w in held):
        return "S"
    return "/".join(f"{w:g}" for w in sorted({w for _, w in held}))  # every M (WPipe's depends on it)


def _pct(x) -> str:
    return f"{100 * x:.1f}"


def frontier_table_figure(
    rows: list[dict], path, costs: str = "B=2F", claims: list[dict] | None = None, table_S: int = 8
) -> Path:
    """E9 on one page. Top: bubble (f_total, left axis; r_ideal = f/(1-f), right axis) against
    peak activations per rank at M = 4S, one panel per S, one marker per schedule, filled
    without latency, hollow with a p2p latency of one F (coincident schedules drawn as nested
    markers). Middle: f_total against M without latency, with the seeds' interleaved 5-10 %
    band; under each panel, the schedules whose curves coincide. One legend, in a strip of its own
    between the two rows, on no panel. Bottom: the table at S = ``table_S`` and the seeds' claims
    with their verdicts."""
    ok = [r for r in rows if r["status"] == "ok" and r["costs"] == costs]
    S_values = sorted({r["S"] for r in ok})
    table_S = table_S if table_S in S_values else max(S_values)  # a table of what was computed
    names = list(dict.fromkeys(r["schedule"] for r in ok))  # the study's row order
    style = {n: registry.style(n) for n in names}  # label, colour and marker from the registry
    width = max(4.8 * len(S_values) + 1.2, 15.6)  # the table and the legend need the width of three panels
    with paper_style():
        fig = Figure(figsize=(width, 19.4))
        top, key, mid, bottom = fig.subfigures(4, 1, squeeze=False, height_ratios=[4.4, 1.7, 5.0, 8.3])[:, 0]
        axes = top.subplots(1, len(S_values), squeeze=False)[0]
        for ax, S in zip(axes, S_values):
            seen: dict = {}
            for name in names:
                for c, face in ((0, None), (1, "none")):
                    pts = [r for r in ok if r["schedule"] == name and r["S"] == S and r["M"] == 4 * S and r["p2p"] == c]
                    if not pts:
                        continue
                    xy = (pts[0]["act_max"], round(100 * pts[0]["bubble_f_total"], 6))
                    k = seen[xy] = seen.get(xy, -1) + 1  # nested: later ones smaller
                    ax.scatter(
                        [xy[0]],
                        [xy[1]],
                        marker=style[name].marker,
                        s=110 * 0.5**k,
                        zorder=3 + k,
                        facecolors=style[name].colour if face is None else "none",
                        edgecolors=style[name].colour,
                        linewidths=1.3,
                    )
            ax.set_xscale("log", base=2)
            ax.set_xlabel("peak activations on a rank (units of A)")
            ax.set_title(f"S = {S}, M = {4 * S}, {costs}")
            ax.grid(True, alpha=0.3)
            sec = ax.secondary_yaxis(
                "right",
                functions=(
                    lambda f: 100 * (f / 100) / (1 - f / 100 + 1e-12),
                    lambda r: 100 * (r / 100) / (1 + r / 100),
                ),
            )
            sec.set_yticks(R_TICKS)  # fixed: r_ideal grows without bound as f_total nears 100 % (GEMS)
            sec.set_ylabel("r_ideal, % of compute", fontsize=8)
            sec.tick_params(labelsize=7)
        axes[0].set_ylabel("bubble f_total, % of wall time")
        top.subplots_adjust(left=0.06, right=0.95, wspace=0.36)
        _key(key, rows, names, style)

        axes = mid.subplots(1, len(S_values), squeeze=False)[0]
        for ax, S in zip(axes, S_values):
            ax.axhspan(5, 10, color=_BAND, zorder=0)
            seen = {}
            curves: dict = {}
            for name in names:
                pts = sorted(
                    (r for r in ok if r["schedule"] == name and r["S"] == S and r["p2p"] == 0), key=lambda r: r["M"]
                )
                if not pts:
                    continue
                x = [r["M"] / S for r in pts]
                y = [100 * r["bubble_f_total"] for r in pts]
                key_xy = (tuple(x), tuple(np.round(y, 6)))
                k = seen[key_xy] = seen.get(key_xy, -1) + 1
                curves.setdefault(key_xy, []).append(style[name].compact)
                ax.plot(
                    x,
                    y,
                    color=style[name].colour,
                    linewidth=1.2,
                    marker=style[name].marker,
                    markersize=9 * 0.7**k,
                    zorder=3 + k,
                )
            same = [" = ".join(n.replace(" ", "\u00a0") for n in v) for v in curves.values() if len(v) > 1]
            if same:  # under the panel, off the data: each group's names kept on one line where they fit
                ax.text(
                    0.0,
                    -0.13,
                    textwrap.fill("equal curves: " + ";  ".join(same), 66).replace("\u00a0", " "),
                    transform=ax.transAxes,
                    ha="left",
                    va="top",
                    fontsize=7.5,
                )
            ax.set_xscale("log", base=2)
            ax.set_xticks([1, 4, 16], ["M = S", "4S", "16S"])
            ax.set_title(f"S = {S}: bubble against M ({costs}, no latency)", fontsize=10)
            ax.grid(True, alpha=0.3)
        axes[0].set_ylabel("bubble f_total, %")
        mid.subplots_adjust(left=0.06, right=0.95, wspace=0.36, top=0.93, bottom=0.3)

        ax = bottom.subplots()
        ax.axis("off")
        _table(ax, ok, table_S, costs)
        if claims:
            lines = [f'{"HOLDS" if c["holds"] else "FAILS"}  "{c["claim"]}"  measured: {c["measured"]}' for c in claims]
            ax.text(
                0.0,
                0.2,
                "The seeds' claims (docs/schedules.md#the-seeds-claims), verdicts computed from these timelines:\n"
                + "\n".join(lines),
                transform=ax.transAxes,
                fontsize=9,
                va="top",
                ha="left",
                family="monospace",
            )
        return save(fig, path)


_BAND = "#DDDDDD"  # the seeds' interleaved 5-10 % claim, behind E9's middle row


def _key(sub, rows: list[dict], names: list[str], style: dict) -> None:
    """E9's one legend, in a strip of its own between the top and middle rows (on no panel): every
    schedule's marker and colour (the registry's), the weights it holds, and the middle row's band."""
    handles: list[Artist] = [
        mpl_lines.Line2D([], [], marker=style[n].marker, ls="none", ms=8, color=style[n].colour, label=f"{t}  [w {w}]")
        for n in names
        for t, w in [(style[n].title, _weights_label(rows, n))]
    ]
    handles.append(Rectangle((0, 0), 1, 1, facecolor=_BAND, label="middle row: the seeds' interleaved claim, 5-10 %"))
    sub.legend(
        handles=handles,
        loc="center",
        ncol=max(1, int(sub.get_figure(root=True).get_figwidth() / 2.8)),  # columns of ~2.6 in: as many as fit
        frameon=True,
        fontsize=8,
        title="top row: filled = no latency, hollow = p2p latency of one F;  [w: weights held on a rank, in stages]",
        title_fontsize=8,
    )


def _table(ax, ok: list[dict], S: int, costs: str) -> None:
    cols = [
        "schedule",
        "f_total % (M = S / 4S / 16S)",
        "r_ideal % (4S)",
        "T (4S)",
        "peak act. A (4S)",
        "F-not-W A (4S)",
        "weights held",
        "f_total %, p2p = 1 F (4S)",
    ]
    cells = []
    for name in dict.fromkeys(r["schedule"] for r in ok):
        by_M = {r["M"]: r for r in ok if r["schedule"] == name and r["S"] == S and r["p2p"] == 0}
        lat = [r for r in ok if r["schedule"] == name and r["S"] == S and r["M"] == 4 * S and r["p2p"] == 1]
        if not by_M:
            continue
        q = by_M.get(4 * S)
        row = [
            registry.style(name).title,
            " / ".join(_pct(by_M[m]["bubble_f_total"]) if m in by_M else "n/a" for m in (S, 4 * S, 16 * S)),
        ]
        if q is None:
            row += ["n/a"] * 5
        else:
            t = f"{q['T']:g}" + (f" ({q['T_overlapped']:g} overl.)" if "T_overlapped" in q else "")
            row += [_pct(q["bubble_r_ideal"]), t, f"{q['act_max']:g}", f"{q['act_W_max']:g}", f"{q['weight_memory']:g}"]
        row.append(_pct(lat[0]["bubble_f_total"]) if lat else "n/a")
        cells.append(row)
    tab = ax.table(
        cellText=cells,
        colLabels=cols,
        loc="upper center",
        cellLoc="center",
        bbox=(0.0, 0.25, 1.0, 0.72),
        colWidths=[2.7, 2.0, 0.9, 1.6, 1.1, 1.1, 0.9, 1.6],
    )
    tab.auto_set_font_size(False)
    tab.set_fontsize(9)
    for (i, j), cell in tab.get_celld().items():
        if i == 0:
            cell.set_text_props(fontweight="bold")
            cell.set_facecolor("#EEEEEE")
    g = [r for r in ok if r["schedule"] == "gpipe" and r["S"] == S and r["M"] == 4 * S and r["p2p"] == 0]
    ideal = f" (busy time per rank, the ideal T: {g[0]['T'] * (1 - g[0]['bubble_f_total']):g} at M = 4S)" if g else ""
    ax.set_title(f"S = {S}, {costs}, two flushes (N = 2M); T in units of one stage's F{ideal}", fontsize=10, loc="left")
