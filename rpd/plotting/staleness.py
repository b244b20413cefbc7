"""The S⁴ staleness figure (rpd.studies.staleness): measured stale-read errors and their bound against S, and the local exponents; drawn from saved numbers only."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from rpd.plotting.style import paper_style, save
from rpd.results import StudyOutput, pow2_label

TITLE = "Stale-read error against the number of stages S"


def _fit_label(s, key) -> str:
    """', global k [lo, hi]; S >= a: k [lo, hi]' from the seed exponents (older outputs: the
    pooled fit)."""
    e = s.get("exponents", {}).get(key)
    if e is not None:
        g, lg = e["global_ci"], e["large_S_ci"]
        return (
            f", global {e['global_slope']:.2f} [{g[0]:.2f}, {g[1]:.2f}]; "
            f"S {e['large_S_range']}: {e['large_S_slope']:.2f} [{lg[0]:.2f}, {lg[1]:.2f}]"
        )
    f = s["fits"].get(key + "/all")
    return "" if f is None else f", slope {f['slope']:.2f} [{f['ci'][0]:.2f}, {f['ci'][1]:.2f}]"


def figure(out: StudyOutput, path, methods: tuple[str, ...]) -> None:
    """Three log-x panels against S: ‖x − z‖² with its bound γ²δ²G², ‖∇f(x) − ∇f(z)‖² with the
    stale term γ²L²δ²G² (PD solid, RPD dashed; the seeds' geometric mean, their range shaded;
    global and large-S exponents with 95% CIs across seeds in the legend; an S⁴ guide), and the
    local slopes between consecutive S with their CIs next to the bound's 4."""
    a, s = out.arrays, out.summary
    with paper_style():
        _draw(a, s, path, methods)


def _draw(a, s, path, methods) -> None:
    S = a["S"].astype(float)
    expo = s.get("exponents", {})
    fig = Figure(figsize=(17.5, 5.2))
    axes = fig.subplots(1, 3)
    panels = (
        ("xz", "bound_xz", "mean ‖x^k − z^k‖²", "bound γ²δ²G²"),
        ("grad_gap", "bound_stale", "mean ‖∇f(x^k) − ∇f(z^k)‖²", "stale term γ²L²δ²G²"),
    )
    for ax, (q, b, qname, bname) in zip(axes, panels):
        for m in methods:
            ls, lab = ("-", "PD") if m == "pd" else ("--", "RPD")
            for key, color, marker, name in ((q, "C0" if m == "pd" else "C2", "o", qname), (b, "C3", "s", bname)):
                ax.plot(
                    S,
                    a[f"{m}_{key}"],
                    marker + ls,
                    color=color,
                    ms=4,
                    label=f"{lab}: {name}{_fit_label(s, f'{m}/{key}')}",
                )
                by_seed = a.get(f"{m}_{key}_by_seed")
                if by_seed is not None and np.ndim(by_seed) == 2 and by_seed.shape[0] > 1:
                    ax.fill_between(S, by_seed.min(axis=0), by_seed.max(axis=0), color=color, alpha=0.15, lw=0)
        if np.ndim(a.get(f"pd_{q}_by_seed")) == 2 and a[f"pd_{q}_by_seed"].shape[0] > 1:
            ax.fill_between([], [], [], color="0.5", alpha=0.3, lw=0, label="shaded: range over seeds")
        ref = a[f"pd_{b}"][-1] * (S / S[-1]) ** 4
        ax.plot(S, ref, ":", color="0.5", label="∝ S⁴ (the bound's exponent)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("number of stages S")
        ax.set_title(qname + " and its bound", fontsize=9)
        ax.legend(fontsize=6)
        ax.grid(True, which="major", alpha=0.3)
    ax = axes[2]
    styles = (
        ("pd/xz", "C0", "o", "-", "PD ‖x − z‖²"),
        ("pd/grad_gap", "C1", "^", "-", "PD ‖∇f(x) − ∇f(z)‖²"),
        ("rpd/xz", "C2", "o", "--", "RPD ‖x − z‖²"),
        ("rpd/grad_gap", "C4", "^", "--", "RPD ‖∇f(x) − ∇f(z)‖²"),
        ("pd/bound_xz", "C3", "s", ":", "PD bound γ²δ²G²"),
    )
    n_styles = len(styles)
    for u, (key, color, marker, ls, name) in enumerate(styles):
        e = expo.get(key)
        if e is None:
            continue
        lo = np.array([x["S_lo"] for x in e["local"]], float)
        hi = np.array([x["S_hi"] for x in e["local"]], float)
        mid = np.sqrt(lo * hi) * 2 ** (0.06 * (u - (n_styles - 1) / 2))  # small offsets, bars apart
        k = np.array([x["slope"] for x in e["local"]])
        ci = np.array([x["ci"] for x in e["local"]])
        err = np.abs(np.vstack([k - ci[:, 0], ci[:, 1] - k])) if np.all(np.isfinite(ci)) else None
        ax.errorbar(
            mid,
            k,
            yerr=err,
            fmt=marker + ls,
            color=color,
            ms=4,
            capsize=2,
            lw=1,
            label=f"{name}: S {e['large_S_range']} {e['large_S_slope']:.2f}, global {e['global_slope']:.2f}",
        )
    ax.axhline(4, color="0.3", ls=":", lw=1.2, label="bound's exponent 4")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("S (between consecutive S, at their geometric mean)")
    ax.set_ylabel("local log-log slope d log y / d log S")
    n_seeds = next(iter(expo.values()))["n_seeds"] if expo else 1
    ax.set_title(f"local exponents, mean over {n_seeds} seeds with 95% CI (t across seeds)", fontsize=9)
    ax.legend(fontsize=6)
    ax.grid(True, which="major", alpha=0.3)
    cfg = s["config"]
    fig.suptitle(
        f"{TITLE}\nrandom quadratic n = {cfg['n']}, d = {cfg['d']}, B = {cfg['batch_size']}, "
        f"N = {cfg['N']} microbatches (K = N·S), fixed γ = {pow2_label(s['gamma_exp'])}, "
        f"δ = ⌊S² − S/2⌋, {n_seeds} seeds (geometric mean, range shaded); "
        "exponents: per-seed least squares, mean with 95% CI across seeds",
        fontsize=9,
    )
    if s.get("setting"):
        fig.text(0.01, 0.005, f"quick setting (full: S = 2..256): {s['setting']}", fontsize=7, color="0.3")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    save(fig, path, dpi=150)
