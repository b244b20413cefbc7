"""The seeds' memory / communication / efficiency claims measured on a real model
(:mod:`rpd.studies.plan_claims`): four panels, one per claim, each titled with its verdict."""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import NullFormatter, ScalarFormatter

from rpd.plotting.style import save

MARK = {True: "holds", False: "fails", None: "depends"}


def _log2(ax) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _title(ax, c: dict) -> None:
    ax.set_title("\n".join(textwrap.wrap(f"“{c['claim']}”: {MARK[c['holds']]}", 46)), fontsize=10)


def claims_figure(summary: dict, table: list[dict], path) -> None:
    c = {x["claim"]: x for x in summary["claims"]}
    names = [x["claim"] for x in summary["claims"]]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5), constrained_layout=True)
    # 1. activations held per rank, the largest (S, M)
    ax = axes[0, 0]
    rows = [r for r in table if r["claim"] == "activations"]
    S, M = max((r["S"], r["M"]) for r in rows)
    for r in rows:
        if (r["S"], r["M"]) != (S, M):
            continue
        ranks = np.arange(S)
        ax.plot(ranks, r["held"], "o", ms=8, label=f"{r['schedule']} measured")
        ax.plot(ranks, r["claimed"], "k--", lw=1)
    ax.plot([], [], "k--", lw=1, label="claimed")
    ax.set(xlabel="rank s", ylabel="peak activations / one microbatch of the stage", yscale="log")
    ax.text(0.02, 0.02, f"S = {S}, M = {M}", transform=ax.transAxes)
    ax.legend(fontsize=8)
    _title(ax, c[names[0]])
    # 2. p2p elements per interior rank per step against 2·h·s·M
    ax = axes[0, 1]
    rows = [r for r in table if r["claim"] == "p2p"]
    for name in ("1f1b", "interleaved"):
        pts = [(r["M"], max(r["elements"]) / r["claimed"]) for r in rows if r["schedule"] == name]
        ax.plot(*zip(*sorted(set(pts))), "o-", label=name)
    ax.axhline(1.0, color="k", ls="--", lw=1, label="claimed 2·h·s·M")
    ax.set(xlabel="M (microbatches per step)", ylabel="interior rank's values sent / (2·h·s·M)", ylim=(0, 2.5))
    _log2(ax)
    ax.legend(fontsize=8)
    _title(ax, c[names[1]])
    # 3. efficiency and MFU against M
    ax = axes[1, 0]
    rows = [r for r in table if r["claim"] == "efficiency"]
    for i, how in enumerate(dict.fromkeys(r["partition"] for r in rows)):
        part = [r for r in rows if r["partition"] == how]
        Ms = [r["M"] for r in part]
        ax.plot(Ms, [r["efficiency"] for r in part], "o-", color=f"C{i}", label=f"1 − bubble, {how} stages")
        ax.plot(Ms, [r["mfu"] for r in part], "s:", color=f"C{i}", label=f"MFU, {how} stages")
    ax.plot(Ms, [r["ideal"] for r in part], "k-", lw=0.8, label="M/(M + S − 1): balanced, no p2p")
    ax.axhspan(0.6, 0.8, color="0.85", label="claimed 60–80 %")
    ax.set(xlabel=f"M at S = {rows[0]['S']}", ylabel="share", ylim=(0, 1.3), yticks=np.arange(0, 1.01, 0.2))
    _log2(ax)
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    _title(ax, c[names[2]])
    # 4. bubble against S
    ax = axes[1, 1]
    rows = [r for r in table if r["claim"] == "stages"]
    for i, rule in enumerate(("fixed", "4S")):
        by_S = [(r["S"], r["bubble"], r["ideal"]) for r in rows if r["rule"] == rule]
        label = f"M = {rows[0]['M']} (fixed)" if rule == "fixed" else "M = 4S"
        S, bub, ideal = zip(*by_S)
        ax.plot(S, bub, "o-", color=f"C{i}", label=f"{label}, measured ({rows[0]['partition']} stages)")
        ax.plot(S, ideal, ":", color=f"C{i}", label=f"{label}, (S − 1)/(M + S − 1)")
    ax.axhline(0.5, color="k", ls="--", lw=1, label="bubble = 50 %")
    ax.axvline(16, color="0.6", ls=":", lw=1, label="16 stages")
    ax.set(xlabel="stages S", ylabel="bubble f_total (1F1B)", ylim=(0, 1))
    _log2(ax)
    ax.legend(fontsize=8)
    _title(ax, c[names[3]])
    fig.suptitle(f"The seeds' memory and communication claims, measured: {summary['model']} on {summary['hardware']}")
    save(fig, path)
    plt.close(fig)
