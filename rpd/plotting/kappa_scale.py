"""E18's figure: κ − 1 against parameters N per method, one panel per optimizer (log-log, censored
points as open triangles at their lower bound, the fitted law dashed with γ and its 95 % interval in
the legend), and the relative loss gap at D against N with the DiLoCo development rows' gaps
(Charles et al. 2025) for comparison (``rpd.studies.kappa_scale``; drawn from the saved table and
summary only)."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from rpd.plotting.style import paper_style, save

FLOOR = 1e-3  # κ − 1 <= 0 (no cost) is drawn here, marked "x"


def _num(v) -> float | None:
    """A stored number, or None (a JSON "nan" string, None)."""
    return float(v) if isinstance(v, (int, float)) and np.isfinite(v) else None


def label(method: str, optimizer: str, settings: dict) -> str:
    names = {
        "pipedream": "PD",
        "pipedream_2bw": "2BW",
        "pipemare": "PipeMare",
        "local_sgd": "LocalSGD",
        "diloco": "DiLoCo",
    }
    head = names.get(method, method) + (" +NAsync" if optimizer == "nesterov_async" else "")
    return head + "".join(f" {k}={v}" for k, v in sorted(settings.items()))


def _fit_text(f: dict | None) -> str:
    if f is None or f.get("gamma") is None:
        return " (no fit)"
    ci = f.get("gamma_ci95")
    return f" γ={f['gamma']:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def _panel(ax, rows: list[dict], fits: list[dict], optimizer: str) -> None:
    keys = list(dict.fromkeys((r["method"], r["optimizer"], tuple(sorted(r["settings"].items()))) for r in rows))
    colors = [f"C{i % 10}" for i in range(len(keys))]
    styles = ["-", "--", ":", "-."]
    for j, (key, color) in enumerate(zip(keys, colors)):
        mine = sorted(
            (r for r in rows if (r["method"], r["optimizer"], tuple(sorted(r["settings"].items()))) == key),
            key=lambda r: r["N"],
        )
        f = next((x for x in fits if (x["method"], x["optimizer"], tuple(sorted(x["settings"].items()))) == key), None)
        N = np.array([r["N"] for r in mine], float)
        k = np.array([np.nan if r["kappa"] is None else r["kappa"] - 1 for r in mine])
        shown = np.where(np.isnan(k), np.nan, np.where(k > 0, k, FLOOR))  # censored / diverged: a gap, marked below
        ax.plot(N, shown, styles[j // 10 % 4], color=color, lw=0.8, marker="o", ms=3,
                label=label(*key[:2], dict(key[2])) + _fit_text(f))  # fmt: skip
        for r in mine:
            if r["censored"]:
                ax.plot([r["N"]], [r["kappa_bound"] - 1], "^", mfc="none", color=color, ms=6)
            elif r["kappa"] is not None and r["kappa"] <= 1:
                ax.plot([r["N"]], [FLOOR], "x", color=color, ms=5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("parameters N")
    ax.set_ylabel("κ − 1 (tokens to the reference's loss at D, over D, minus 1)")
    ax.set_title(f"{optimizer}: κ − 1 against N (△ censored: κ above; × no cost)", fontsize=9)
    ax.legend(fontsize=5, ncol=2)


def _gaps(ax, rows: list[dict], dev: dict) -> None:
    dl = [r for r in rows if r["method"] == "diloco" and _num(r["relative_gap"]) is not None]
    for i, M in enumerate(sorted({r["settings"]["M"] for r in dl})):
        for j, H in enumerate(sorted({r["settings"]["H"] for r in dl})):
            for opt_i, opt in enumerate(sorted({r["optimizer"] for r in dl})):
                mine = sorted(
                    (r for r in dl if (r["settings"]["M"], r["settings"]["H"], r["optimizer"]) == (M, H, opt)),
                    key=lambda r: r["N"],
                )
                ax.plot([r["N"] for r in mine], [100 * r["relative_gap"] for r in mine], ["-", "--", ":"][opt_i % 3],
                        color=f"C{i}", marker="os^v"[j % 4], ms=3, lw=0.8, label=f"rpd DiLoCo M={M} H={H} {opt}")  # fmt: skip
    for i, (M, d) in enumerate(sorted(dev.items(), key=lambda x: int(x[0]))):
        ax.plot([35e6, 550e6], [100 * d["gap_35M"], 100 * d["gap_550M"]], "-", color=f"C{i}", lw=2.5, alpha=0.5,
                label=f"Charles et al. 2025 M={M} (H=30): " + ("a gap <= 0: no γ" if _num(d["gamma"]) is None else f"γ={d['gamma']:.2f}"))  # fmt: skip
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xscale("log")
    ax.set_xlabel("parameters N")
    ax.set_ylabel("relative loss gap at D (%)")
    ax.set_title("DiLoCo: (L − L_DP) / L_DP at equal tokens; rpd's tiny LM and the development rows", fontsize=9)
    ax.legend(fontsize=5, ncol=2)


def kappa_scale_figure(out, path) -> None:
    rows = [r for r in out.table if r["status"] == "ok"]
    fits = out.summary["fits"]
    opts = list(dict.fromkeys(r["optimizer"] for r in rows if r["optimizer"] != "nesterov_async"))
    with paper_style():
        fig = Figure(figsize=(6.5 * (len(opts) + 1), 6.0))
        axes = fig.subplots(1, len(opts) + 1, squeeze=False)[0]
        for ax, opt in zip(axes, opts):
            mine = [r for r in rows if r["optimizer"] == opt or (opt == "adamw" and r["optimizer"] == "nesterov_async")]
            _panel(ax, mine, fits, opt + (" (+ PD under nesterov_async)" if opt == "adamw" and len(mine) else ""))
        _gaps(axes[-1], rows, out.summary["diloco_dev"])
        fig.suptitle(out.summary["title"] + f"; D rule: {out.summary['D_rule']}", fontsize=10)
        save(fig, path)
