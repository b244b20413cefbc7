"""E12's figure: per objective a heat-table of log10 loss at T, method × optimizer, each cell
with its loss and chosen γ, and the paper's claim's verdict per optimizer under the panel
(``rpd.studies.optimizers``; drawn from the saved table and summary only)."""

from __future__ import annotations

import math
import textwrap

import numpy as np
from matplotlib.figure import Figure

from rpd.plotting.style import paper_style, save
from rpd.results import pow2_label

NAMES = {
    "nesterov_quadratic": "Nesterov quadratic (E3)",
    "aligned_quadratic": "its spectrum on the axes",
    "rotated_quadratic": "its spectrum rotated",
    "logistic_regression": "logistic regression (E4)",
    "mlp_chain": "MLP chain",
    "nanochat": "char LM (E5; held-out loss)",
}


def _panel(ax, rows: list[dict], cells: list[dict], objective: str, meta: dict) -> None:
    methods = list(dict.fromkeys(r["method"] for r in rows))
    opts = list(dict.fromkeys(r["optimizer"] for r in rows if r["status"] != "n/a"))  # Muon: matrices only
    rows = [r for r in rows if r["optimizer"] in opts]
    Z = np.full((len(methods), len(opts)), np.nan)
    for r in rows:
        if r["status"] == "ok":
            Z[methods.index(r["method"]), opts.index(r["optimizer"])] = math.log10(max(r["loss"], 1e-300))
    finite = Z[np.isfinite(Z)]
    vmin, vmax = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
    ax.imshow(np.ma.masked_invalid(Z), cmap="viridis_r", vmin=vmin, vmax=max(vmax, vmin + 1e-9), aspect="auto")
    ax.grid(False)
    ax.set_facecolor("#dddddd")
    for r in rows:
        i, j = methods.index(r["method"]), opts.index(r["optimizer"])
        if r["status"] == "ok":
            edge = "*" if r.get("gamma_edge") else ""
            text = f"{r['loss']:.3g}\n{pow2_label(r['gamma_exp'])}{edge}"
        else:
            text = "diverged" if r["status"] == "all_diverged" else "n/a"
        dark = r["status"] == "ok" and (Z[i, j] - vmin) > 0.5 * (vmax - vmin)  # viridis_r: high is dark
        ax.text(j, i, text, ha="center", va="center", fontsize=6.5, color="white" if dark else "black")
    for j, o in enumerate(opts):  # the best method per optimizer: a frame
        col = [(Z[i, j], i) for i in range(len(methods)) if np.isfinite(Z[i, j])]
        if col:
            i = min(col)[1]
            ax.add_patch(_frame(j, i))
    ax.set_xticks(range(len(opts)), opts)
    ax.set_yticks(range(len(methods)), methods)
    ax.tick_params(labelsize=8)
    m = meta.get(objective, {})
    ax.set_title(f"{NAMES.get(objective, objective)}\nS = {m.get('S')}, N = {m.get('N')}, T = {m.get('T')}", fontsize=9)
    lines = []
    for c in cells:
        if c["objective"] != objective or c["optimizer"] not in opts:
            continue
        v = c.get("verdict", "n/a")
        short = v.split(":")[0] if v != "n/a" else "n/a"
        lines.append(f"{c['optimizer']}: {short}")
    claim = next((c["claim"] for c in cells if c["objective"] == objective and c.get("claim")), "")
    ax.set_xlabel("\n".join(textwrap.wrap(claim, 48) + textwrap.wrap("; ".join(lines), 48)), fontsize=7.5)


def _frame(j: int, i: int):
    from matplotlib.patches import Rectangle

    return Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.6)


def optimizers_figure(out, path):
    table, summary = out.table, out.summary
    objectives = list(dict.fromkeys(r["objective"] for r in table))
    shown = [o for o in objectives if any(r["status"] != "n/a" for r in table if r["objective"] == o)]
    with paper_style():
        n = max(len(shown), 1)
        fig = Figure(figsize=(3.3 * n + 0.6, 6.2), layout="constrained")
        axes = fig.subplots(1, n, squeeze=False)[0]
        for ax, objective in zip(axes, shown):
            _panel(
                ax,
                [r for r in table if r["objective"] == objective],
                summary["cells"],
                objective,
                summary["objectives"],
            )
        fig.suptitle(
            "E12: loss at equal simulated time T, method × optimizer. T = the shortest timeline of the "
            "rows (protocol (i), every row runs the same N)\n"
            f"γ per cell: {summary['rule_text']}, power-of-two grid per optimizer. Cell: loss at T "
            "(f − f*; LM: held-out loss) and γ; * = γ on its grid's edge; red frame = best per optimizer",
            fontsize=9,
        )
        return save(fig, path)
