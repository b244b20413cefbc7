"""E17's figure (rpd.studies.staleness_2026), drawn from saved numbers only: (a) the gap of 2BW to
synchronous training per optimizer, with and without error feedback; (b) the loss at equal
simulated time of Nesterov's look-ahead against its rivals; (c) Adam's slowdown against S, plain
and rotated. Every mean carries its seeds as dots (the spread); every delay is given in both units
(rpd's block updates and the stages' own optimizer steps). Below the panels: each claim's
verdict with its numbers, and for a run smaller than the paper's what it leaves out
(:mod:`rpd.plotting.staleness_2026_text`)."""

from __future__ import annotations

import textwrap

import numpy as np
from matplotlib.figure import Figure

from rpd.plotting.staleness_2026_text import caveat, plural, verdicts
from rpd.plotting.style import paper_style, save

VERDICT_COLOR = {"holds": "#2E7D32", "fails": "#C62828", "depends": "#EF6C00"}


def _bar_panel(ax, labels, rows, key, colors, *, ref: float, title: str, ylabel: str):
    """One bar per row (its mean, its seeds as dots) against a line at ``ref``."""
    for i, (r, c) in enumerate(zip(rows, colors)):
        ax.bar(i, r[key + "_mean"], color=c, alpha=0.6)
        ax.plot(np.full(len(r[key]), i), r[key], "k.", ms=5)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
    ax.axhline(ref, color="0.4", lw=0.8)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel)


def _units(delays: dict, key: str) -> str:
    d = delays.get(key)
    if d is None:
        return ""
    steps = d["optimizer_steps_per_stage"]
    span = f"{steps[0]}" if len(set(steps)) == 1 else f"{steps[0]}..{steps[-1]}"
    steps_word = "optimizer step" if len(set(steps)) == 1 and steps[0] == 1 else "optimizer steps"
    return f"delay: {span} {steps_word} per stage = {plural(d['block_updates_max'], 'block update')} (max)"


def figure(out, path, paper: dict | None = None) -> None:
    """The three panels and the verdicts; ``paper``: the paper-size config, whose differences from
    this run's are stated on the figure (None: nothing stated)."""
    rows, s = out.table, out.summary
    cfg, delays = s["config"], s["delays"]
    claims = verdicts(s)
    note = caveat(cfg, paper)
    with paper_style():
        fig = Figure(figsize=(16, 5.5 + 0.22 * (len(claims) + 3)))
        axes = fig.subplot_mosaic([["a", "b", "c"], ["v", "v", "v"]], height_ratios=[5.5, 0.22 * (len(claims) + 3)])
        ax_a, ax_b, ax_c = axes["a"], axes["b"], axes["c"]
        # (a) gaps at equal updates
        labels, sel = [], []
        for name in cfg["a_objectives"]:
            for opt in ("adamw", "muon"):
                for arm in ("2bw", "2bw_ef"):
                    sel.append(
                        next(
                            r
                            for r in rows
                            if r["part"] == "a" and r["objective"] == name and r["optimizer"] == opt and r["arm"] == arm
                        )
                    )
                    labels.append(f"{name}\n{opt}{' + EF' if arm == '2bw_ef' else ''}")
        first = cfg["a_objectives"][0]
        _bar_panel(
            ax_a,
            labels,
            sel,
            "gap_updates",
            [("C0" if r["optimizer"] == "adamw" else "C1") for r in sel],
            ref=0,
            title=f"(a) 2BW vs synchronous 1F1B, S = {cfg['a_S']}, M = {cfg['a_M']}\n"
            + _units(delays["a (2BW vs 1F1B)"][first], "2bw"),
            ylabel="(loss 2BW − loss sync) / loss sync, equal updates",
        )
        # (b) loss at equal time, relative to synchronous 1F1B
        labels, sel, colors = [], [], []
        for name in cfg["b_objectives"]:
            ref = next(r for r in rows if r["part"] == "b" and r["objective"] == name and r["schedule"] == "1F1B")
            for r in (r for r in rows if r["part"] == "b" and r["objective"] == name):
                rel = np.asarray(r["loss_time"]) / np.asarray(ref["loss_time"])
                sel.append({"rel": list(rel), "rel_mean": float(rel.mean())})
                labels.append(f"{name}\n{r['schedule']} {r['optimizer']}")
                colors.append("C2" if r["optimizer"] == "nesterov_async" else "C7")
        first = cfg["b_objectives"][0]
        _bar_panel(
            ax_b,
            labels,
            sel,
            "rel",
            colors,
            ref=1,
            title=f"(b) equal simulated time, S = {cfg['b_S']}\nPipeDream "
            + _units(delays["b (PipeDream vs 1F1B)"][first], "PD"),
            ylabel="loss at PipeDream's T / synchronous 1F1B's",
        )
        # (c) slowdown against S
        ticks = {}
        for j, label in enumerate(["rotated_quadratic", "aligned_quadratic", "nanochat"]):
            for arm, ls in (("adam", "-"), ("adam_rotated", "--")):
                rs = [
                    r
                    for r in rows
                    if r["part"] == "c"
                    and r["objective"] == label
                    and r["optimizer"] == arm
                    and r["schedule"] == "PD/sync"
                ]
                if not rs:
                    continue
                S = np.array([r["S"] for r in rs], np.float64)
                ax_c.plot(S, [r["slowdown_mean"] for r in rs], "o" + ls, color=f"C{j}", ms=4, label=f"{label}, {arm}")
                for x, r in zip(S, rs):
                    ax_c.plot(np.full(len(r["slowdown"]), x), r["slowdown"], ".", color=f"C{j}", ms=3)
                for r in rs:
                    d = delays["c (PipeDream)"].get(f"{label} S={r['S']}")
                    if d is not None:
                        ticks[r["S"]] = (
                            f"S={r['S']}\n{plural(d['optimizer_steps_per_stage'][0], 'step')}\n{d['block_updates_max']} b.u."
                        )
        ax_c.set_xscale("log", base=2)
        ax_c.set_xticks(sorted(ticks), [ticks[k] for k in sorted(ticks)], fontsize=7)
        ax_c.set_xlabel("stages S (stage 0's delay: own optimizer steps; rpd's max delay: block updates)")
        ax_c.set_ylabel("updates to target, PipeDream / no staleness")
        ax_c.set_title("(c) Adam's slowdown with depth, plain vs rotated basis", fontsize=9)
        ax_c.legend(fontsize=7)
        _verdicts(axes["v"], claims, note)
        fig.tight_layout()
        save(fig, path)


def _verdicts(ax, claims: list[tuple[str, str, str]], note: str | None) -> None:
    """Each claim's verdict (coloured) and its numbers, one line each; the caveat below."""
    ax.axis("off")
    n = len(claims) + 2
    ax.text(
        0.0,
        1.0,
        "Verdicts (holds: in every seed on every objective; fails: in none; depends otherwise)",
        fontsize=8.5,
        fontweight="bold",
        va="top",
        transform=ax.transAxes,
    )
    for i, (v, claim, detail) in enumerate(claims, start=1):
        y = 1.0 - i / n
        ax.text(
            0.0,
            y,
            v.upper(),
            fontsize=8,
            fontweight="bold",
            color=VERDICT_COLOR.get(v, "black"),
            va="top",
            transform=ax.transAxes,
        )
        ax.text(0.06, y, f"{claim}: {detail}" if detail else claim, fontsize=8, va="top", transform=ax.transAxes)
    if note:
        ax.text(
            0.0,
            1.0 - (n - 0.8) / n,
            textwrap.fill("Note: " + note, 190),
            fontsize=8,
            style="italic",
            color="#B71C1C",
            va="top",
            transform=ax.transAxes,
        )
