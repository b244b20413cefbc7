"""E3/E4's figure (rpd.studies.pd_vs_localsgd): f − f* against simulated time for PD and every LocalSGD H at the chosen γ; drawn from saved numbers only."""

from __future__ import annotations

import textwrap
from typing import Any

from matplotlib.figure import Figure

from rpd.analysis.tuning import AUTHORS_OVERRIDE, RULE_TEXT
from rpd.plotting.style import paper_style, save
from rpd.results import StudyOutput, gamma_label, pow2_label

X_LABEL = "time step (simulated wall-clock time)"


def figure(out: StudyOutput, path) -> None:
    """f − f* (log) against the time step for every method at its selected γ, from saved arrays
    (PNG and PDF); the noise seeds' min–max band has its legend entry."""
    with paper_style():
        _draw(out.arrays, out.summary, path)


def _draw(a: dict, s: dict, path) -> None:
    t = a["time"]
    fig = Figure(figsize=(7.5, 5.2))
    ax = fig.subplots()
    n_seed = len(s.get("noise_seeds") or [0])
    for i, e in enumerate(s["methods"]):
        j = int(e["gamma_index"])
        if j < 0:
            continue
        g = gamma_label(a[f"{e['key']}_gammas"][j])
        style: dict[str, Any]
        if e["method"] == "PD":
            label, style = f"PipeDream, γ = {g}", dict(color="k", lw=2.0)
        else:
            label, style = f"LocalSGD, H = {e['H']}, γ = {g}", dict(color=f"C{i - 1}", lw=1.4)
        ax.plot(t, a[f"{e['key']}_curves"][j], label=label, **style)
        seeds = a.get(f"{e['key']}_seed_curves")
        if seeds is not None and n_seed > 1:
            ax.fill_between(t, seeds[:, j].min(0), seeds[:, j].max(0), color=style["color"], alpha=0.18, lw=0)
    if n_seed > 1:
        ax.fill_between([], [], [], color="0.5", alpha=0.3, lw=0, label=f"min–max over {n_seed} noise seeds")
    ax.set_yscale("log")
    ax.set_xlabel(X_LABEL)
    ax.set_ylabel("$f(x) - f^*$")
    rule = s.get("selector", "stable")
    band = f"; mean and min–max over {n_seed} noise seeds" if n_seed > 1 else ""
    ax.set_title(
        f"{s['title']}\n" + textwrap.fill(s["setting"], 110) + f"\nγ: {RULE_TEXT.get(rule, rule)}\n"
        f"{s.get('cut_text') or 'curves cut at T = ' + str(s['T_cut'])}{band}",
        fontsize=8,
    )
    ax.legend(fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    notes = []
    if rule != "stable" and all("by_rule" in e for e in s["methods"]):
        picks = ", ".join(
            f"{'PD' if e['H'] is None else 'H=' + str(e['H'])} {pow2_label(e['by_rule']['stable']['gamma_exp'])}"
            for e in s["methods"]
        )
        notes.append(
            f"The strict stable rule (as the spec writes it) would pick: {picks}. Why the reference rule: "
            + s.get("authors_override", AUTHORS_OVERRIDE)
            + "."
        )
    sens = s.get("sensitivity")
    if sens:
        vals = ", ".join(
            f"{'PD' if e['H'] is None else 'H=' + str(e['H'])} {e['f_at_cut']:.3g}"
            for e in sens["methods"]
            if e["f_at_cut"] is not None
        )
        notes.append(f"Sensitivity ({sens['setting']}, not drawn): {vals}.")
    if notes:
        fig.text(
            0.01, -0.01, "\n".join(textwrap.fill(n, 150) for n in notes), fontsize=6, ha="left", va="top", color="0.25"
        )
    save(fig, path)
