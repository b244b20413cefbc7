"""E6's figure (rpd.studies.scaling): the fixed-time loss of PD, RPD and LocalSGD against S; drawn from saved numbers only."""

from __future__ import annotations

import textwrap
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from rpd.analysis.tuning import AUTHORS_OVERRIDE, RULE_TEXT
from rpd.plotting.style import paper_style, save
from rpd.results import StudyOutput, best_final, gamma_label, pow2_label


def figure(out: StudyOutput, path, methods: tuple[str, ...]) -> None:
    """f − f* at the time budget against S (log-log), each method at its selected γ per S
    (solid), and the lowest final value over its γ grid (dotted diagnostic); PNG and PDF."""
    with paper_style():
        _draw(out.arrays, out.summary, path, methods)


def _draw(a: dict, s: dict, path, methods: tuple[str, ...]) -> None:
    S = a["S"]
    H = s["config"]["H"]
    labels = dict(pd="PipeDream", rpd="Randomized PipeDream, δ = ⌊S² − S/2⌋", localsgd=f"LocalSGD, R = S, H = {H}")
    styles: dict[str, dict[str, Any]] = dict(
        pd=dict(color="k", marker="o"), rpd=dict(color="C3", marker="s", ls="--"), localsgd=dict(color="C0", marker="^")
    )
    fig = Figure(figsize=(7.0, 4.6))
    ax = fig.subplots()
    for m in methods:
        y = a[f"{m}_f_at_T"]
        ax.plot(S, y, label=labels[m], **styles[m])
        for x, v, j in zip(S, y, a[f"{m}_gamma_index"]):
            if j >= 0 and np.isfinite(v):
                ax.annotate(
                    gamma_label(a[f"{m}_gammas"][j]),
                    (x, v),
                    textcoords="offset points",
                    xytext=(0, 6),
                    fontsize=6,
                    ha="center",
                    color=styles[m]["color"],
                )
        # Diagnostic, never used to choose: the lowest final value over the whole grid per S.
        best = [np.nan if (b := best_final(a[f"{m}_S{int(v)}_curves"])) is None else b for v in S]
        ax.plot(S, best, color=styles[m]["color"], ls=":", lw=1.0, alpha=0.6)
    ax.plot([], [], color="0.4", ls=":", lw=1.0, label="dotted: best final over the γ grid (diagnostic)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(S, [str(int(v)) for v in S])
    ax.set_xlabel("number of stages S")
    ax.set_ylabel(f"$f(x) - f^*$ at the time budget T = {s['config']['T']}")
    rule = s.get("selector", "stable")
    ax.set_title(
        f"{s['title']}\n{s['setting']}\nγ: {RULE_TEXT.get(rule, rule)} (labels: γ per point)\n"
        + (s.get("cut_text") or ""),
        fontsize=8,
    )
    ax.legend(fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    if rule != "stable" and "by_rule" in s["per_S"][0]["pd"]:
        picks = "; ".join(
            f"{labels[m].split(',')[0]} "
            + ", ".join(pow2_label(e[m]["by_rule"]["stable"]["gamma_exp"]) for e in s["per_S"])
            for m in methods
        )
        note = (
            f"The strict stable rule (as the spec writes it) would pick, per S: {picks}. Why the reference rule: "
            + s.get("authors_override", AUTHORS_OVERRIDE)
            + "."
        )
        fig.text(0.01, -0.01, textwrap.fill(note, 150), fontsize=6, ha="left", va="top", color="0.25")
    save(fig, path)
