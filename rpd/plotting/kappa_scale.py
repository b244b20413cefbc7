"""E18's figure: κ − 1 against parameters N per method, one panel per optimizer (log-log, censored
points as open triangles at their lower bound, the fitted law dashed with γ and its 95 % interval in
the legend), and every arm's relative loss gap at D against N with the DiLoCo development rows'
gaps (Charles et al. 2025) for comparison (``rpd.studies.kappa_scale``; drawn from the saved table and
summary only)."""

from __future__ import annotations

import matplotlib.ticker
import numpy as np
from matplotlib.figure import Figure

from rpd import registry
from rpd.plotting.style import paper_style, save


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


def colour(method: str) -> str:
    """The schedule's colour from its registry entry (one colour per schedule in every figure);
    DiLoCo runs on LocalSGD's timeline: LocalSGD's colour, told apart by its dashes."""
    return registry.style("local_sgd" if method == "diloco" else method).colour


def _fit_text(f: dict | None) -> str:
    if f is None or f.get("gamma") is None:
        return " (no fit)"
    ci = f.get("gamma_ci95")
    return f" γ={f['gamma']:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def _key(r: dict) -> tuple:
    return r["method"], r["optimizer"], tuple(sorted(r["settings"].items()))


def _panel(ax, rows: list[dict], fits: list[dict], optimizer: str) -> None:
    """κ against N (log N); κ = 1 (no cost) the grey line, κ < 1 below it as measured; a
    censored point an open triangle at its lower bound; the fitted 1 + c·(N/10⁶)^γ dotted."""
    keys = list(dict.fromkeys(_key(r) for r in rows))
    seen: dict[str, int] = {}
    for key in keys:
        mine = sorted((r for r in rows if _key(r) == key), key=lambda r: r["N"])
        f = next((x for x in fits if _key(x) == key), None)
        method = key[0]
        n_same = seen[method] = seen.get(method, -1) + 1
        dash = ["-", "--", ":", "-."][n_same % 4] if method != "diloco" else ["--", "-.", ":"][n_same % 3]
        c = colour(method)
        N = np.array([r["N"] for r in mine], float)
        k = np.array([np.nan if r["kappa"] is None else r["kappa"] for r in mine])
        marker = "s" if key[1] == "nesterov_async" else "ovD^<>"[n_same % 6]
        ax.plot(
            N, k, dash, color=c, lw=1.2, marker=marker, ms=4, label=label(key[0], key[1], dict(key[2])) + _fit_text(f)
        )
        for r in mine:
            if r["censored"]:
                ax.plot([r["N"]], [r["kappa_bound"]], "^", mfc="none", color=c, ms=7)
        if f is not None and _num(f.get("c")) is not None and _num(f.get("gamma")) is not None:
            grid = np.geomspace(N.min(), N.max(), 32)
            ax.plot(grid, 1 + f["c"] * (grid / 1e6) ** f["gamma"], ":", color=c, lw=0.8)
    ax.axhline(1.0, color="0.6", lw=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x / 1e3:g}k"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("parameters N")
    ax.set_ylabel("κ: tokens to the reference's loss at D, over D")
    ax.set_title(f"{optimizer}: κ against N (1: no cost; △ censored, κ above)", fontsize=9)
    ax.legend(fontsize=6, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)


def _si(x: float, _=None) -> str:
    """A parameter count for an axis: 19k, 113k, 35M, 1.2B."""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:g}{unit}"
    return f"{x:g}"


def _gaps(ax, rows: list[dict], dev: dict) -> None:
    """The relative loss gap at D, (L − L_ref) / L_ref, against N: every rpd arm that has one
    (a pipeline in its schedule's colour and its panel's marker; DiLoCo one colour per M, as the
    development rows it is compared with) and DiLoCo's development rows (Charles et al. 2025)."""
    measured = [r for r in rows if _num(r["relative_gap"]) is not None]
    dl = [r for r in measured if r["method"] == "diloco"]
    by_m = {
        M: f"C{i}" for i, M in enumerate(sorted({1, 2, 4, 8, *(r["settings"]["M"] for r in dl)}))
    }  # one colour per M
    seen: dict[str, int] = {}
    for key in dict.fromkeys(_key(r) for r in measured if r["method"] != "diloco"):
        mine = sorted((r for r in measured if _key(r) == key), key=lambda r: r["N"])
        n_same = seen[key[0]] = seen.get(key[0], -1) + 1
        marker = "s" if key[1] == "nesterov_async" else "ovD^<>"[n_same % 6]
        ax.plot([r["N"] for r in mine], [100 * r["relative_gap"] for r in mine], ["-", "--", ":", "-."][n_same % 4],
                color=colour(key[0]), marker=marker, ms=4, lw=1.0, label="rpd " + label(key[0], key[1], dict(key[2])) + ("" if key[1] == "nesterov_async" else f" {key[1]}"))  # fmt: skip
    for M in sorted({r["settings"]["M"] for r in dl}):
        for j, H in enumerate(sorted({r["settings"]["H"] for r in dl})):
            for opt_i, opt in enumerate(sorted({r["optimizer"] for r in dl})):
                mine = sorted(
                    (r for r in dl if (r["settings"]["M"], r["settings"]["H"], r["optimizer"]) == (M, H, opt)),
                    key=lambda r: r["N"],
                )
                if not mine:  # a setting E18 did not run: no line, no legend entry
                    continue
                ax.plot([r["N"] for r in mine], [100 * r["relative_gap"] for r in mine], ["-", "--", ":"][opt_i % 3],
                        color=by_m[M], marker="os^v"[j % 4], ms=4, lw=1.0, label=f"rpd DiLoCo M={M} H={H} {opt}")  # fmt: skip
    for M, d in sorted(dev.items(), key=lambda x: int(x[0])):
        ax.plot([35e6, 550e6], [100 * d["gap_35M"], 100 * d["gap_550M"]], "-", color=by_m[int(M)], lw=2.5, alpha=0.5,
                label=f"Charles et al. 2025 DiLoCo M={M} (H=30): " + ("a gap <= 0: no γ" if _num(d["gamma"]) is None else f"γ={d['gamma']:.2f}"))  # fmt: skip
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_si))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("parameters N")
    ax.set_ylabel("relative loss gap at D (%)")
    ax.set_title("(L − L_ref) / L_ref at equal tokens D: rpd's LM and DiLoCo's development rows", fontsize=9)
    ax.legend(fontsize=6, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)


def kappa_scale_figure(out, path) -> None:
    rows = [r for r in out.table if r["status"] == "ok"]
    fits = out.summary["fits"]
    opts = list(dict.fromkeys(r["optimizer"] for r in rows if r["optimizer"] != "nesterov_async"))
    with paper_style():
        fig = Figure(figsize=(6.5 * (len(opts) + 1), 7.0))
        axes = fig.subplots(1, len(opts) + 1, squeeze=False)[0]
        for ax, opt in zip(axes, opts):
            mine = [r for r in rows if r["optimizer"] == opt or (opt == "adamw" and r["optimizer"] == "nesterov_async")]
            nesterov = any(r["optimizer"] == "nesterov_async" for r in mine)
            _panel(ax, mine, fits, opt + (" (+ PD under nesterov_async)" if nesterov else ""))
        _gaps(axes[-1], rows, out.summary["diloco_dev"])
        fig.suptitle(out.summary["title"] + f"; D rule: {out.summary['D_rule']}", fontsize=10)
        fig.subplots_adjust(bottom=0.3, top=0.9, wspace=0.3)  # the legends under their panels
        save(fig, path)
