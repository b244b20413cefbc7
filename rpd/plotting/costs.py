"""E11's figure (``rpd.studies.costs_crossover``) from its saved summary: the quadratic's f − f*
at the budget per rung, the logistic panel's f_LocalSGD / f_PD per rung for every S, and the
crossover α against S."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.figure import Figure

from rpd.analysis.crossover import crossover_point, crossover_point_any, fmt
from rpd.plotting.style import paper_style, save


def costs_figure(summary: dict, path) -> None:
    """``path`` (PNG) and ``<stem>.pdf``: three panels from the saved summary: the quadratic's f − f* at the budget per rung (PD and
    every LocalSGD H, the crossover marked), the logistic panel's f_LocalSGD / f_PD per rung for
    every S (crossings of 1 marked), and the crossover α against S."""
    with paper_style():
        _draw(summary, path)


def _position(series: dict, x: dict) -> float | None:
    """Where a crossover sits on the rung axis (0 = unit, 1 = the first α rung, ...)."""
    if x["to"] is None:
        return None
    alphas = [r["alpha"] for r in series["rungs"][1:]]
    i = alphas.index(x["alpha_lo"]) + 1
    return i + (0.5 if x["frac"] is None else x["frac"])


_UNDER = dict(loc="upper center", bbox_to_anchor=(0.5, -0.11), frameon=True)  # below the x label


def _draw(s: dict, path) -> None:
    cfg = s["config"]
    alphas = list(cfg["alphas"])
    ticks = list(range(len(alphas) + 1))
    labels = ["unit\n(paper)"] + [f"{a:g}" for a in alphas]
    styles = {c: ls for c, ls in zip(cfg["p2p"], ("-", "--", ":", "-."))}
    fig = Figure(figsize=(18.0, 7.6), layout="constrained")
    ax_q, ax_l, ax_x = fig.subplots(1, 3, gridspec_kw=dict(width_ratios=[1.15, 1.15, 0.9]))
    series = s["series"]
    for ax in (ax_q, ax_l):
        ax.set_xticks(ticks, labels, fontsize=7)
        ax.axvspan(-0.5, 0.5, color="0.92", zorder=0)
        ax.set_xlabel(f"averaging latency α (ticks = F units); α rungs: tB = {cfg['tB']}·tF, p2p c, ⌈α + β·D⌉")
        ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.3)

    def val(v):
        return np.nan if v is None else v

    # (a) the quadratic: f − f* at the budget for PD and every H, both c.
    quad = [x for x in series if x["panel"] == "quadratic"]
    for sr in quad:
        ls_ = styles[sr["c"]]
        ax_q.plot(
            ticks,
            [val(r["stable"]["f_pd"]) for r in sr["rungs"]],
            color="k",
            lw=2.0,
            ls=ls_,
            marker="o",
            ms=3,
            label=f"PipeDream, c = {sr['c']}",
        )
        for j, H in enumerate(cfg["quad_H"]):
            ax_q.plot(
                ticks,
                [val(r["stable"]["f_ls"][str(H)]) for r in sr["rungs"]],
                color=f"C{j}",
                lw=1.3,
                ls=ls_,
                marker="^",
                ms=3,
                label=f"LocalSGD H = {H}, c = {sr['c']}",
            )
        pos = _position(sr, sr["crossover"])
        if pos is not None:
            ax_q.axvline(pos, color="C3", ls=ls_, lw=1.2, label=f"winner changes, c = {sr['c']}")
            ax_q.annotate(
                f"winner changes (c = {sr['c']})\nα ≈ {crossover_point_any(sr['crossover']):.3g}",
                (pos, 0.97),
                xycoords=("data", "axes fraction"),
                fontsize=7,
                color="C3",
                va="top",
            )
    note = None
    if all(x["crossover"]["to"] is None for x in quad):  # said under the panel, in its legend's title
        ratios = "\n".join(
            f"c = {x['c']}: best LocalSGD / PD {fmt(x['rungs'][1]['stable']['ratio'])} at α = "
            f"{alphas[0]:g} → {fmt(x['rungs'][-1]['stable']['ratio'])} at α = {alphas[-1]:g}"
            for x in quad
        )
        note = f"no crossover: {quad[0]['crossover']['from']} wins on every rung\n{ratios}"
    ax_q.set_ylabel("f(x) − f* at the budget (stable γ)")
    ax_q.set_title(
        f"E3 under costs: {s['setting']['quadratic']}\nprotocol (i): every method N microbatches, "
        f"curves cut to PD's makespan",
        fontsize=8,
    )
    ax_q.legend(fontsize=6, ncol=2, title=note, title_fontsize=7, **_UNDER)  # off the curves

    # (b) logistic regression: f_LocalSGD / f_PD per rung, every S and c.
    log = [x for x in series if x["panel"] == "logistic"]
    S_vals = sorted({x["S"] for x in log})
    cmap = _cmap(len(S_vals))
    for sr in log:
        col = cmap[S_vals.index(sr["S"])]
        ax_l.plot(
            ticks,
            [val(r["stable"]["ratio"]) for r in sr["rungs"]],
            color=col,
            ls=styles[sr["c"]],
            marker="o",
            ms=3,
            label=f"S = {sr['S']}" if sr["c"] == cfg["p2p"][0] else None,
        )
        pos = _position(sr, sr["crossover"])
        if pos is not None:
            ax_l.plot([pos], [1.0], marker="X", ms=8, color=col, mec="k", mew=0.6, zorder=5)
    ax_l.axhline(1.0, color="k", lw=1.0)
    ax_l.text(0.99, 0.98, "above 1: PD lower (PD wins)", transform=ax_l.transAxes, ha="right", va="top", fontsize=7)
    ax_l.text(0.99, 0.02, "below 1: LocalSGD wins", transform=ax_l.transAxes, ha="right", va="bottom", fontsize=7)
    for c, st in styles.items():
        ax_l.plot([], [], color="0.3", ls=st, label=f"c = {c}")
    ax_l.plot([], [], ls="", marker="X", color="0.5", mec="k", label="winner changes")
    ax_l.set_ylabel("f_LocalSGD / f_PD at the budget (stable γ)")
    seeds = cfg.get("log_seeds", [cfg["seed"]])
    ax_l.set_title(
        f"E6 under costs: {s['setting']['logistic']}\nprotocol (ii): each method the smallest N "
        f"reaching the budget; f averaged over {len(seeds)} noise seed(s)",
        fontsize=8,
    )
    ax_l.legend(fontsize=6, ncol=2, **_UNDER)

    # (c) the crossover α against S, both selectors.
    top = max(alphas) * 4
    for rule, key, fill in (("stable γ", "crossover", True), ("best final over γ", "crossover_best_final", False)):
        for c, st in styles.items():
            ss = sorted((x for x in log if x["c"] == c), key=lambda x: x["S"])
            pts = [(sr["S"], crossover_point(sr[key], alphas)) for sr in ss]
            xs = [S for S, p in pts if p is not None and math.isfinite(p)]
            ys = [p for S, p in pts if p is not None and math.isfinite(p)]
            color = "k" if fill else "C7"
            ax_x.plot(
                xs,
                ys,
                color=color,
                ls=st,
                lw=1.0 if fill else 0.8,
                marker="o",
                ms=6,
                mfc=color if fill else "none",
                label=f"{rule}, c = {c}",
            )
            for S, p in pts:
                if p is None or math.isinf(p):
                    ax_x.plot(
                        [S],
                        [0.0 if p is None else top],
                        marker="v" if p is None else "^",
                        ms=7,
                        ls="",
                        color="C3",
                        mfc="C3" if fill else "none",
                    )
    ax_x.axhline(top, color="0.6", lw=0.6, ls=":", label="beyond the ladder (▲ drawn on this line)")
    ax_x.set_xscale("log", base=2)
    ax_x.set_yscale("symlog", linthresh=1.0)
    ax_x.set_xticks(S_vals, [str(v) for v in S_vals])
    ax_x.set_xlabel("number of stages S (R = S)")
    ax_x.set_ylabel("α where PD overtakes LocalSGD (ticks, interpolated)")
    ax_x.plot([], [], ls="", marker="^", color="C3", label=f"LocalSGD still wins at α = {max(alphas):g}")
    ax_x.plot([], [], ls="", marker="v", color="C3", label=f"PD already wins at α = {alphas[0]:g}")
    ax_x.set_title(
        "E6's crossover: the averaging latency at which PD\novertakes LocalSGD (filled: stable γ; hollow: best final)",
        fontsize=8,
    )
    ax_x.legend(fontsize=6, **_UNDER)
    ax_x.grid(True, which="major", alpha=0.3)

    fig.suptitle(
        f"{s['title']}. {s['setting']['ladder']}.\nMeasured: f − f* at a fixed budget = the paper's "
        f"budget × PD's makespan under the rung's costs / at unit cost (PD does the paper's work on every "
        f"rung and never averages: it is flat in α)",
        fontsize=9,
    )
    save(fig, path)


def _cmap(n: int) -> list:
    import matplotlib

    cm = matplotlib.colormaps["viridis"]
    return [cm(x) for x in np.linspace(0.0, 0.85, max(n, 1))]
