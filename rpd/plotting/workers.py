"""E15 (:mod:`rpd.studies.workers`): tokens/s and memory per device against the worker count, per
model, for pure DP, pure PP, the best even S × D split and PipeDream's partitioner; the placement
claim's two placements; the three claims' verdicts in the titles."""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter, ScalarFormatter

from rpd.plotting.style import save

MARK = {True: "holds", False: "fails", None: "depends"}
STYLE = {"pure DP": ("s-", 6), "pure PP": ("^-", 6), "best even S×D": ("o-", 6), "pipedream": ("*-", 8)}


def _series(table: list[dict], model: str, key: str) -> dict[str, tuple[list, list]]:
    rows = [r for r in table if r.get("claim") == "configurations" and r["model"] == model]
    ns = sorted({r["n"] for r in rows})
    out: dict[str, tuple[list, list]] = {}
    for label in STYLE:
        xs, ys = [], []
        for n in ns:
            cell = [r for r in rows if r["n"] == n]
            if label == "best even S×D":
                cell = [r for r in cell if r["name"].startswith("even") and r["fits"]]
                cell = sorted(cell, key=lambda r: -r["tokens_per_s"])[:1]
            else:
                cell = [r for r in cell if r["name"] == label]
            if cell:
                xs.append(n)
                ys.append(cell[0][key])
        if xs:
            out[label] = (xs, ys)
    return out


def _log2(ax) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())


def workers_figure(summary: dict, table: list[dict], path) -> None:
    models = summary["models"]
    fig, axes = plt.subplots(2, len(models) + 1, figsize=(5 * (len(models) + 1), 8.5), constrained_layout=True)
    if axes.ndim == 1:
        axes = axes[:, None]
    for j, model in enumerate(models):
        for i, (key, label) in enumerate((("tokens_per_s", "tokens / s"), ("peak_gib", "peak GiB per device"))):
            ax = axes[i, j]
            for name, (xs, ys) in _series(table, model, key).items():
                fmt, size = STYLE[name]
                ax.plot(xs, ys, fmt, label=name, ms=size)
            _log2(ax)
            ax.set_xlabel("workers")
            ax.set_ylabel(label)
            ax.set_title(model)
            if key == "tokens_per_s":
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    claims = summary["claims"]
    ax = axes[0, -1]
    place = [r for r in table if r.get("claim") == "placement"]
    for k, model in enumerate(models):
        rows = [r for r in place if r["model"] == model]
        if rows:
            ns = [r["n"] for r in rows]
            for prefix, how, mark in (("", "async", "o"), ("sync_", "sync", "s")):
                color = f"C{2 * k + (prefix == 'sync_')}"
                pp, dp = (f"{prefix}{x}_in_node_tokens_per_s" for x in ("pp", "dp"))
                ax.plot(ns, [r[pp] for r in rows], mark + "-", color=color, label=f"{model} {how}: PP in node")
                ax.plot(
                    ns, [r[dp] for r in rows], mark + "--", color=color, mfc="none", label=f"{model} {how}: DP in node"
                )
    _log2(ax)
    ax.set_yscale("log")
    ax.set_xlabel("workers")
    ax.set_ylabel("tokens / s")
    ax.legend(fontsize=6)
    ax.grid(alpha=0.3)
    ax.set_title("\n".join(textwrap.wrap(f"“{claims[0]['claim']}”: {MARK[claims[0]['holds']]}", 44)), fontsize=10)
    ax = axes[1, -1]
    ax.axis("off")
    text = "\n\n".join(
        "\n".join(textwrap.wrap(f"“{c['claim']}”: {MARK[c['holds']]}. {c['verdict']}", 62))[:900] for c in claims[1:]
    )
    ax.text(0, 1, text, va="top", fontsize=7.5, family="monospace")
    save(fig, path)
    plt.close(fig)
