"""E1's and E8's figures (``rpd.studies.pd_vs_rpd``), drawn from the saved arrays and summary:
f − f* against K for PD and RPD per δ (E1), and RPD's best objective against δ with PD's level
(E8)."""

from __future__ import annotations

import textwrap

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from rpd.analysis.tuning import AUTHORS_OVERRIDE, RULE_TEXT
from rpd.plotting.style import paper_style, save
from rpd.results import StudyOutput, gamma_grid_label, gamma_label

TITLE = "PipeDream vs Randomized PipeDream for different δ"
E8_TITLE = "Best Randomized PipeDream objective against δ"


def _problem(cfg: dict) -> str:
    """The random quadratic and the γ grid of an E1 / E8 config, for a title."""
    return (
        f"random quadratic, S = {cfg['S']}, n = {cfg['n']}, d = {cfg['d']}, B = {cfg['batch_size']}, "
        f"γ ∈ {gamma_grid_label(cfg['gamma_exps'])}"
    )


def _footer(fig, summary) -> None:
    setting = summary.get("setting") or ""
    if setting:
        fig.text(
            0.01,
            0.005,
            f"quick setting (paper size: see the README): {setting}",
            fontsize=7,
            ha="left",
            va="bottom",
            color="0.3",
            wrap=True,
        )


def e1_figure(out: StudyOutput, path) -> None:
    """E1 from the saved arrays (PNG and PDF): f − f* (log) against K, PD and RPD per δ at their
    selected γ, RPD as the seed mean with a min–max band over seeds. One panel per selector rule;
    the second rule's panel only when it picks differently. Each δ has its colour and its
    marker (curves that coincide stay apart), the band has a legend entry."""
    a, s = out.arrays, out.summary
    with paper_style():
        _draw_e1(a, s, path)


def _draw_e1(a, s, path) -> None:
    K, gammas, rules = a["K"], a["gammas"], list(s["selectors"])
    panels = (
        [0] + [1]
        if not (
            np.array_equal(a["pd_gamma_index"][0], a["pd_gamma_index"][1])
            and np.array_equal(a["rpd_gamma_index"][0], a["rpd_gamma_index"][1])
        )
        else [0]
    )
    fig = Figure(figsize=(7.0 * len(panels), 5.0))
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)
    colors = matplotlib.colormaps["viridis"](np.linspace(0.0, 0.9, len(a["deltas"])))
    markers = "osD^vP*X"
    n_seed = len(a["seeds"])
    every = max(1, len(K) // 8)
    for p, (ax, u) in enumerate(zip(axes[0], panels)):
        for i, dl in enumerate(a["deltas"]):
            j = int(a["rpd_gamma_index"][u, i])
            if j < 0:
                continue
            runs = a["rpd_curves"][i, :, j]
            mark = " = S² − S/2" if int(dl) == int(s["delta_pd"]) else ""
            # staggered markers: δ whose curves coincide (small δ, same γ) stay distinguishable
            ax.plot(
                K,
                runs.mean(0),
                color=colors[i],
                lw=1.4,
                marker=markers[i % len(markers)],
                ms=4.5,
                markevery=(int(i * every / max(len(a["deltas"]), 1)), every),
                mec="white",
                mew=0.5,
                label=f"RPD, δ = {int(dl)}{mark}, γ = {gamma_label(gammas[j])}",
            )
            if n_seed > 1:
                ax.fill_between(K, runs.min(0), runs.max(0), color=colors[i], alpha=0.2, lw=0)
        j = int(a["pd_gamma_index"][u])
        if j >= 0:
            ax.plot(K, a["pd_curves"][j], color="k", lw=2.0, ls="--", label=f"PipeDream, γ = {gamma_label(gammas[j])}")
        if n_seed > 1:
            ax.fill_between([], [], [], color="0.5", alpha=0.3, lw=0, label=f"RPD: min–max over {n_seed} seeds")
        ax.set_yscale("log")
        ax.set_xlabel("block update K")
        ax.set_title(f"({'ab'[p]}) γ by the " + RULE_TEXT.get(rules[u], rules[u]).removeprefix("the "), fontsize=9)
        ax.legend(fontsize=7, loc="lower left", frameon=True, framealpha=0.9)
        ax.grid(True, which="major", alpha=0.3)
        ax.tick_params(labelleft=True)
    axes[0, 0].set_ylabel("$f(x^K) - f^*$")
    fig.suptitle(
        f"{TITLE}\n{_problem(s['config'])}" + (f"; RPD: mean and range over {n_seed} seeds" if n_seed > 1 else ""),
        fontsize=10,
    )
    _footer(fig, s)
    _rule_note(fig, s)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    save(fig, path, dpi=150)


def _rule_note(fig, s) -> None:
    """Which rule chose the drawn γ and why (one sentence on the authors' override)."""
    if s["selectors"][0] == "reference":
        cfg = s.get("config", {})
        tails = (
            (
                f" PD's tail {cfg.get('tail_frac')}, RPD's {cfg.get('rpd_tail_frac')} on its curve"
                + (" without x⁰" if cfg.get("rpd_skip_x0") else "")
                + "."
            )
            if cfg
            else ""
        )
        fig.text(
            0.01,
            -0.01,
            textwrap.fill(
                "γ by the reference rule; the strict stable and best-final picks are in "
                "the JSON." + tails + " Why: " + s.get("authors_override", AUTHORS_OVERRIDE) + ".",
                160,
            ),
            fontsize=6,
            ha="left",
            va="top",
            color="0.25",
        )


def e8_figure(out: StudyOutput, path) -> None:
    """E8 from the saved arrays (PNG and PDF): RPD's final f − f* at each δ's selected γ against δ (seed mean,
    min–max band), one line per selector rule, PD's level per rule as a horizontal line, and
    δ = S² − S/2 marked."""
    a, s = out.arrays, out.summary
    with paper_style():
        _draw_e8(a, s, path)


def _draw_e8(a, s, path) -> None:
    deltas = a["deltas"].astype(float)
    x = np.maximum(deltas, 0.5)  # δ = 0 drawn at 0.5 on the log axis (tick relabelled)
    fig = Figure(figsize=(10.0, 4.6))
    ax = fig.subplots()
    n_seed = a["best_final_per_seed"].shape[-1]
    for u, rule in enumerate(s["selectors"]):
        # rules that pick alike draw on top of each other: each its own line style and marker size
        c, ls, mk, ms = f"C{u}", ("-", ":", "-.")[u % 3], "osD"[u % 3], (7, 5, 3.5)[u % 3]
        ax.plot(
            x,
            a["best_final"][u],
            mk + ls,
            color=c,
            ms=ms,
            lw=1.6,
            zorder=3 + u,
            label=f"RPD, γ per δ: {rule.replace('_', ' ')} rule" + (" (seed mean)" if n_seed > 1 else ""),
        )
        if n_seed > 1:
            per_seed = a["best_final_per_seed"][u]
            ax.fill_between(
                x,
                np.nanmin(per_seed, 1),
                np.nanmax(per_seed, 1),
                color=c,
                alpha=0.15,
                lw=0,
                label=f"RPD ({rule.replace('_', ' ')}): min–max over {n_seed} seeds",
            )
        for xi, yi, j in zip(x, a["best_final"][u], a["best_gamma_index"][u]):
            if j >= 0 and np.isfinite(yi):
                ax.annotate(
                    gamma_label(a["gammas"][j]),
                    (xi, yi),
                    textcoords="offset points",
                    xytext=(0, 5),
                    fontsize=6,
                    ha="center",
                    color=c,
                )
        j = int(a["pd_gamma_index"][u])
        if j >= 0:
            ax.axhline(
                a["pd_level"][u],
                color=c,
                ls="--",
                lw=1.2,
                label=f"PipeDream ({rule.replace('_', ' ')}), γ = {gamma_label(a['gammas'][j])}",
            )
    ax.axvline(s["delta_pd"], color="C3", ls=":", label=f"δ = S² − S/2 = {s['delta_pd']}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    if np.any(deltas == 0):
        ticks = [t for t in (1, 10, 100, 1000, 10000) if t <= x.max() * 1.01]
        ax.set_xticks([0.5] + ticks, ["0"] + [f"{t:g}" for t in ticks])
    ax.set_xlabel("δ (delay bound)")
    ax.set_ylabel(f"best final $f(x^K) - f^*$, K = {s['K']}")
    ax.set_title(
        f"{E8_TITLE}\n{_problem(s['config'])}" + (f", band: range over {n_seed} seeds" if n_seed > 1 else ""),
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=True)
    ax.grid(True, which="major", alpha=0.3)
    _footer(fig, s)
    _rule_note(fig, s)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    save(fig, path, dpi=150)
