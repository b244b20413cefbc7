"""E5's figure (rpd.studies.nanochat): the LM's training and held-out loss for PD and LocalSGD against simulated time; drawn from saved numbers only."""

from __future__ import annotations

import textwrap

from rpd.analysis.tuning import AUTHORS_OVERRIDE, RULE_TEXT
from rpd.plotting import style
from rpd.results import StudyOutput, gamma_label, pow2_label

X_LABEL = "time step (simulated wall-clock time)"


def figure(out: StudyOutput, path) -> None:
    """Left: smoothed last-stage forward loss (raw faint) against the time step for PD and the
    shown LocalSGD H at their selected γ; right: held-out loss. From saved arrays only; PNG and
    PDF (:func:`rpd.plotting.style.save`)."""
    from matplotlib.figure import Figure

    a, s = out.arrays, out.summary
    t = a["time"]
    with style.paper_style():
        fig = Figure(figsize=(12.5, 4.8))
        ax, ax_h = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.7, 1.0]})
        for i, e in enumerate(m for m in s["methods"] if m["shown"]):
            j = int(e["gamma_index"])
            if j < 0:
                continue
            g = gamma_label(a[f"{e['key']}_gammas"][j])
            color = "k" if e["method"] == "PD" else f"C{i - 1}"
            label = f"PipeDream, γ = {g}" if e["method"] == "PD" else f"LocalSGD, H = {e['H']}, γ = {g}"
            ax.plot(t, a[f"{e['key']}_train"][j], color=color, lw=0.6, alpha=0.18)
            ax.plot(t, a[f"{e['key']}_train_smooth"][j], color=color, lw=2.0, label=label)
            ax_h.plot(
                a[f"{e['key']}_heldout_time"],
                a[f"{e['key']}_heldout"][j],
                color=color,
                lw=1.6,
                marker="o",
                ms=2.5,
                label=label,
            )
        rules = sorted({e["rule"] for e in s["methods"] if e["shown"]})
        ax.set_xlabel(X_LABEL)
        ax.set_ylabel("last-stage forward loss (training)")
        rule = s.get("selector", "stable")
        ax.set_title(
            f"{s['title']}\n{s['setting']}\nγ: {RULE_TEXT.get(rule, rule)}, LM thresholds "
            f"(picked as: {', '.join(rules)});\ntrailing mean over {s['smooth_window']} steps, raw faint",
            fontsize=8,
        )
        ax.plot([], [], color="0.3", lw=0.6, alpha=0.35, label="raw minibatch loss (faint)")
        ax.legend(fontsize=8)
        ax_h.set_xlabel(X_LABEL)
        ax_h.set_ylabel("held-out loss")
        ax_h.set_title(f"held-out loss (PD every {s['heldout_stride']} steps, LocalSGD at round ends)", fontsize=9)
        fig.tight_layout()
        if rule != "stable" and all("by_rule" in e for e in s["methods"]):
            picks = ", ".join(
                f"{'PD' if e['H'] is None else 'H=' + str(e['H'])} {pow2_label(e['by_rule']['stable']['gamma_exp'])}"
                for e in s["methods"]
                if e["shown"]
            )
            note = (
                f"The strict stable rule (as the spec writes it, LM thresholds) would pick: {picks}. Why the reference "
                "rule: " + s.get("authors_override", AUTHORS_OVERRIDE) + "."
            )
            fig.text(0.01, -0.01, textwrap.fill(note, 190), fontsize=6, ha="left", va="top", color="0.25")
        style.save(fig, path)
