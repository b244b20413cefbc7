"""E19's figure (``rpd.studies.stochastic_time``) from its saved summary: step time and time to a target
loss against the straggler's factor f and the jitter's CV, relative to the exact timeline, one line
per schedule (its family in the legend)."""

from __future__ import annotations

import textwrap

import numpy as np
from matplotlib.figure import Figure

from rpd import registry
from rpd.plotting.style import paper_style, save
from rpd.results import StudyOutput


def stochastic_time_figure(out: StudyOutput, path) -> None:
    """``path`` (PNG) and ``<stem>.pdf``: (a) step time / exact vs f (one straggler, mean over its
    rank), (b) vs the jitter CV (mean over seeds, ± one sd), (c) time to target / exact vs f (the
    straggler on the training rank), (d) vs CV (mean ± sd over the trained seeds); y = f dashed in
    (a) and (c)."""
    with paper_style():
        _draw(out.summary, path)


def _line(ax, x, y, name: str, yerr=None) -> None:
    e = registry.style(name)
    ax.errorbar(x, y, yerr=yerr, marker=e.marker, color=e.colour, lw=1.6, ms=5, capsize=2, label=e.compact)


def _draw(s: dict, path) -> None:
    cfg, per = s["config"], s["schedules"]
    factors, cvs = [float(f) for f in cfg["factors"]], [float(c) for c in cfg["cvs"]]
    fig = Figure(figsize=(13.0, 9.0), layout="constrained")
    (a, b), (c, d) = fig.subplots(2, 2)
    for name, p in per.items():
        _line(a, factors, [p["straggler"][f"{f:g}"]["ratio_mean"] for f in factors], name)
        jit = [p["jitter"][f"{v:g}"] for v in cvs]
        _line(b, cvs, [j["ratio_mean"] for j in jit], name, yerr=[j["ratio_sd"] for j in jit])
        ttt = p["time_to_target"]
        if ttt:
            ys = [(ttt.get(f"straggler/{f:g}") or {}).get("ratio") for f in factors]
            _line(c, factors, [np.nan if y is None else y for y in ys], name)
            key = lambda v: "straggler/1" if v == 0 else f"jitter/{v:g}"  # noqa: E731
            got = [ttt.get(key(v)) or {} for v in cvs]
            ys = [np.nan if g.get("ratio") is None else g["ratio"] for g in got]
            _line(d, cvs, ys, name, yerr=[g.get("ratio_sd") or 0.0 for g in got])
    for ax in (a, c):
        ax.plot(factors, factors, "k--", lw=0.8, label="y = f")
        ax.set_xlabel("straggler factor f (one rank's compute ops × f, every step)")
    for ax in (b, d):
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xlabel("jitter CV (lognormal, mean 1, every op type)")
    a.set_ylabel("step time / step time at f = 1")
    a.set_title("(a) step time, one straggler (mean over its rank)", fontsize=10)
    b.set_ylabel("step time / exact step time")
    b.set_title(f"(b) step time under jitter (mean ± sd over {cfg['seeds']} seeds)", fontsize=10)
    c.set_ylabel("time to target / time at f = 1")
    rank = cfg["S"] - 1 if cfg["train_rank"] is None else cfg["train_rank"]
    target = "n/a" if s.get("target") is None else f"{s['target']:.4g}"
    c.set_title(f"(c) time to target loss {target}, straggler on rank {rank}", fontsize=10)
    d.set_ylabel("time to target / exact")
    d.set_title(f"(d) time to target under jitter (mean ± sd over {cfg['train_seeds']} seeds)", fontsize=10)
    a.legend(fontsize=8, ncol=2)
    fig.suptitle(s["title"] + "\n" + "\n".join(textwrap.wrap(s["setting"], 160)), fontsize=9)
    save(fig, path)
