"""A measured trace's straggler heatmap (docs/replay.md): the slowdown S_w attributed to each
(stage, dp rank) worker (Lin et al., OSDI '25, Eq. 4 and Fig. 14), from saved numbers."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from rpd.plotting.style import save


def straggler_heatmap(by_worker, slowdown: float, path, title: str = "") -> Path:
    """Heatmap of ``by_worker`` [pp, dp] (S_w: the worker's measured durations, the rest
    ideal, over the ideal step), stages down, dp ranks across, each cell printed; the job's S
    in the title. Writes ``path`` (PNG, and a PDF beside it)."""
    S_w = np.asarray(by_worker, float)
    pp, dp = S_w.shape
    fig, ax = plt.subplots(figsize=(1.2 + 0.5 * max(dp, 4), 1.0 + 0.45 * max(pp, 3)))
    im = ax.imshow(S_w, cmap="Reds", vmin=1.0, vmax=max(float(S_w.max()), 1.01), aspect="auto")
    if pp * dp <= 256:
        for s in range(pp):
            for r in range(dp):
                ax.text(r, s, f"{S_w[s, r]:.3f}", ha="center", va="center", fontsize=7)
    ax.set_xlabel("dp rank")
    ax.set_ylabel("stage (pipeline rank)")
    ax.set_xticks(range(dp))
    ax.set_yticks(range(pp))
    ax.set_title(f"{title} S = {slowdown:.3f}: slowdown kept by each worker".strip(), fontsize=9)
    fig.colorbar(im, ax=ax, label="S_w (worker measured, rest ideal)")
    out = save(fig, path)
    plt.close(fig)
    return out
