"""E13's figure (rpd.studies.optim_staleness): slowdown in updates to target and the stale-read
error against S, per optimizer and correction arm; drawn from saved numbers only."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from rpd.plotting.style import paper_style, save

ARM_STYLE = {"none": "-", "pipemare_lr": "--", "delay_beta1": ":", "dc_asgd": "-."}


def figure(out, path) -> None:
    """Two log-x panels against S: the slowdown in updates to target relative to S = 1, and the
    run mean ‖x − z‖² with an S⁴ guide; one colour per optimizer, one line style per arm."""
    a, s = out.arrays, out.summary
    S = np.asarray(a["S"], np.float64)
    names = s["config"]["optimizers"]
    with paper_style():
        fig = Figure(figsize=(13, 5))
        ax_slow, ax_xz = fig.subplots(1, 2)
        for i, name in enumerate(names):
            for arm, ls in ARM_STYLE.items():
                key = f"{name}_{arm}"
                if f"{key}_slowdown" not in a:
                    continue
                label = f"{name}, {arm}"
                ax_slow.plot(S, a[f"{key}_slowdown"], "o" + ls, color=f"C{i}", ms=4, label=label)
                xz = np.asarray(a[f"{key}_xz"], np.float64)
                slope = s["measured"][key]["xz_global_slope"]
                ax_xz.plot(S[1:], xz[1:], "o" + ls, color=f"C{i}", ms=4, label=f"{label} (slope {slope:.2f})")
        if len(S) > 2:
            ref = [np.asarray(a[k], np.float64)[1] for k in a if k.endswith("_xz")]
            guide = np.nanmedian(ref) * (S[1:] / S[1]) ** 4
            ax_xz.plot(S[1:], guide, color="0.5", lw=1, label="S⁴ guide")
        for ax, ylabel in ((ax_slow, "updates to target / updates at S = 1"), (ax_xz, "mean ‖x^k − z^k‖²")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("stages S")
            ax.set_ylabel(ylabel)
            ax.legend(fontsize=7)
        ax_xz.set_yscale("log")
        fig.suptitle(f"E13: staleness under momentum and Adam ({s['objective']})", fontsize=10)
        save(fig, path)
