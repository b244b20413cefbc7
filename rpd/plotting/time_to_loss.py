"""The time-to-loss figure (``python -m experiments.time_to_loss``, docs/time_to_loss.md): hours to
the target loss (or to the token budget) against the inter-site bandwidth, log x, one line per
method; a schedule's colour is its registry entry's, DiLoCo's and Streaming DiLoCo's fixed here.
Drawn from the command's rows only; a method without hours at a bandwidth (no κ source, nothing
fits) leaves a gap. A method whose κ is a range (its simulated law read beyond 10× of the sizes it
was fitted on, docs/scale.md#beyond-the-trained-sizes-the-range-rule) is a band between its hours
at κ held at the largest trained size (the line) and at the law read at N (the dashed edge)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from rpd import registry
from rpd.plotting.style import paper_style, save

OUTER_COLOURS = {"diloco": "#9467BD", "streaming_diloco": "#E377C2"}  # not schedules: no registry entry
OUTER_LABELS = {"diloco": "DiLoCo", "streaming_diloco": "Streaming DiLoCo"}


def colour(method: str) -> str:
    """A schedule's registry colour; DiLoCo's and Streaming DiLoCo's from :data:`OUTER_COLOURS`."""
    if method in OUTER_COLOURS:
        return OUTER_COLOURS[method]
    return registry.style(method).colour


def hours_figure(
    gbits: list[float],
    hours: dict[str, list[float | None]],
    path,
    title: str = "",
    labels: dict | None = None,
    trend: dict[str, list[float | None]] | None = None,
) -> Path:
    """``hours[method][i]``: hours at ``gbits[i]`` Gbit/s per site link (None: none). One line
    and marker per method, log-log axes; ``trend[method][i]``, where given, the hours at the range's
    other κ: a band between the two, its far edge dashed."""
    labels = labels or {}
    trend = trend or {}
    with paper_style():
        fig = Figure(figsize=(7.5, 4.6))
        ax = fig.subplots()
        for method, ys in hours.items():
            y = np.array([np.nan if v is None else v for v in ys], float)
            label = labels.get(method, method) + (" (no hours: no κ source)" if np.isnan(y).all() else "")
            t = np.array([np.nan if v is None else v for v in trend.get(method, [None] * len(ys))], float)
            if np.isfinite(t).any():
                label += " (κ a range: held at the largest size trained, band to the trend read at N)"
                ax.fill_between(gbits, y, t, color=colour(method), alpha=0.18, linewidth=0)
                ax.plot(gbits, t, ls="--", color=colour(method), linewidth=1.2)
            ax.plot(gbits, y, marker="o", color=colour(method), label=label, linewidth=2)
        ax.set_xscale("log")
        ax.set_xticks(gbits, labels=[f"{g:g}" for g in gbits])
        ax.minorticks_off()
        if np.isfinite([v for ys in (*hours.values(), *trend.values()) for v in ys if v is not None]).any():
            ax.set_yscale("log")
        ax.set_xlabel("inter-site link per site, Gbit/s each way")
        ax.set_ylabel("hours to the target")
        ax.set_title(title, fontsize=10)
        ax.legend(loc="upper right", fontsize=8)
        return save(fig, path)
