"""E6 (SPEC §9): fixed-time scaling in the number of stages S, protocol (ii).

Logistic regression with i.i.d. gradient noise, the same data for every S (only the cut into S
blocks changes). For each S and a wall-clock budget of T time steps:

- PipeDream takes the smallest N whose 1F1B timeline reaches T (N = ⌈(T − 2S + 2)/2⌉);
- Randomized PipeDream (δ = ⌊S² − S/2⌋) takes K = the number of backward ops in PD's timeline;
- LocalSGD (R = S, H local steps) takes the smallest N whose timeline reaches T.

Each method's γ is chosen by the stable selector (tail ``tail_frac``) on its curve up to T (PD,
LocalSGD: f − f* after every time step; RPD: after every ``S`` block updates, about one PD time
step's worth), and the figure shows f − f* at T (RPD: after its K updates) against S.
Paper: PD and RPD stay flat near 1e-2; LocalSGD improves with S and wins for S ≥ 4.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
from matplotlib.figure import Figure

from rpd import methods, objectives, schedules, simtime, theory, tuning
from rpd.plotting import paper_style
from rpd.studies import StudyOutput
from rpd.studies.pd_vs_localsgd import best_final, select

TITLE = "Fixed-time scaling vs number of stages"
CLAIM = "PD and RPD stay flat near 1e-2; LocalSGD improves with S and wins for S >= 4"
METHODS = ("pd", "rpd", "localsgd")


@dataclasses.dataclass(frozen=True)
class Config:
    """E6 at the paper's size (SPEC §9)."""

    S_values: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128)
    T: int = 3180  # time budget (simulated time steps)
    n: int = 50
    d: int = 512
    batch_size: int = 1
    lam: float = 1e-4
    grad_noise: float = 0.5  # sigma_g
    H: int = 5  # LocalSGD local steps; R = S
    pd_gamma_exps: tuple[int, int] = (-12, -3)  # PD and RPD grid ("grids as E3")
    localsgd_gamma_exps: tuple[int, int] = (-8, 2)
    tail_frac: float = 0.01
    seed: int = 0  # data seed (and gradient-noise / RPD sampling seed)


QUICK = dict(S_values=(2, 4, 8), T=400)


def n_steps(cfg: Config) -> int:
    """Units of work ``run`` reports to ``progress``: three methods per S."""
    return 3 * len(cfg.S_values)


def setting(cfg: Config) -> str:
    return (f"logistic regression, n = {cfg.n}, d = {cfg.d}, B = {cfg.batch_size}, λ = {cfg.lam:g}, "
            f"σ_g = {cfg.grad_noise:g}, T = {cfg.T}")


def budgets(S: int, T: int, H: int) -> dict:
    """Protocol (ii) for one S: PD's and LocalSGD's timelines (smallest N reaching T) and RPD's
    K (backward ops in PD's timeline) and δ."""
    pd_tl = simtime.smallest_n_reaching(T, lambda n: schedules.pipedream(S, n))
    ls_tl = simtime.smallest_n_reaching(T, lambda n: schedules.local_sgd(S, n, S, H))
    return dict(pd_tl=pd_tl, ls_tl=ls_tl, K=simtime.block_updates_in(pd_tl), delta=theory.pd_delta(S))


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    """Every (S, method) on its grid; selected γ and f − f* at T per (S, method)."""
    report = progress or (lambda msg: None)
    grids = dict(pd=tuning.pow2_grid(*cfg.pd_gamma_exps), rpd=tuning.pow2_grid(*cfg.pd_gamma_exps),
                 localsgd=tuning.pow2_grid(*cfg.localsgd_gamma_exps))
    arrays: dict[str, np.ndarray] = {"S": np.asarray(cfg.S_values, np.int64)}
    arrays.update({f"{m}_gammas": grids[m] for m in METHODS})
    per_S, rows = [], []
    for S in cfg.S_values:
        obj = objectives.logistic_regression(n=cfg.n, d=cfg.d, S=S, batch_size=cfg.batch_size,
                                             lam=cfg.lam, grad_noise=cfg.grad_noise, seed=cfg.seed)
        b = budgets(S, cfg.T, cfg.H)
        res = {}
        res["pd"] = simtime.cut_to(methods.pipedream(obj, b["pd_tl"], grids["pd"], seed=cfg.seed), cfg.T)
        report(f"S={S} PD")
        res["rpd"] = methods.rpd(obj, b["K"], grids["rpd"], b["delta"], seed=cfg.seed, stride=S)
        report(f"S={S} RPD")
        res["localsgd"] = simtime.cut_to(methods.local_sgd(obj, b["ls_tl"], grids["localsgd"], seed=cfg.seed), cfg.T)
        report(f"S={S} LocalSGD")
        entry = dict(S=S, pd_N=b["pd_tl"].N, pd_T=b["pd_tl"].T, rpd_K=b["K"], rpd_delta=b["delta"],
                     localsgd_N=b["ls_tl"].N, localsgd_T=b["ls_tl"].T, f_star=float(obj.f_star))
        for m in METHODS:
            r = res[m]
            sel = select(r.curve, r.gammas, cfg.tail_frac)
            idx = -1 if sel.index is None else sel.index
            arrays[f"{m}_S{S}_axis"] = r.axis
            arrays[f"{m}_S{S}_curves"] = r.curve  # [G, P]: up to T (PD, LocalSGD) or K (RPD)
            entry[m] = dict(gamma_index=idx, gamma=None if idx < 0 else sel.gamma,
                            gamma_exp=None if idx < 0 else tuning.log2_exponent(sel.gamma), rule=sel.rule,
                            f_at_T=None if idx < 0 else float(r.curve[idx, -1]),
                            tail_mean=None if idx < 0 else float(sel.reports[idx].tail_mean),
                            best_final=best_final(r.curve))
        per_S.append(entry)
        rows.append(dict(S=S, **{f"{m}_gamma": None if entry[m]["gamma_exp"] is None else f"2^{entry[m]['gamma_exp']}"
                                 for m in METHODS},
                         **{f"{m}_f_at_T": entry[m]["f_at_T"] for m in METHODS},
                         **{f"{m}_best_final": entry[m]["best_final"] for m in METHODS},
                         pd_N=entry["pd_N"], localsgd_N=entry["localsgd_N"], rpd_K=entry["rpd_K"],
                         rpd_delta=entry["rpd_delta"]))
    for m in METHODS:
        arrays[f"{m}_f_at_T"] = np.array([np.nan if e[m]["f_at_T"] is None else e[m]["f_at_T"] for e in per_S])
        arrays[f"{m}_gamma_index"] = np.array([e[m]["gamma_index"] for e in per_S], np.int64)
    checks = claim_checks(arrays)
    rows += [dict(S="paper claim", paper=c["statement"], holds=c["holds"], measured=c["measured"])
             for c in checks]
    summary = dict(study="e6_scaling", title=TITLE, setting=setting(cfg), config=dataclasses.asdict(cfg),
                   per_S=per_S, claim=CLAIM, checks=checks)
    return StudyOutput(arrays=arrays, summary=summary, table=rows)


def claim_checks(arrays: dict) -> list[dict]:
    """The paper's statements as measured facts (never used to tune)."""
    S = arrays["S"]
    pd, rpd, ls = arrays["pd_f_at_T"], arrays["rpd_f_at_T"], arrays["localsgd_f_at_T"]
    fmt = lambda v: "[" + ", ".join(f"{x:.3g}" for x in v) + "]"  # noqa: E731
    spread = lambda v: float(np.nanmax(v) / np.nanmin(v))  # noqa: E731
    wins = [int(s) for s, a, b, c in zip(S, ls, pd, rpd) if a < min(b, c)]
    big = S >= 4
    return [
        dict(statement="PD flat near 1e-2", holds=bool(spread(pd) < 3 and 3e-3 < np.nanmedian(pd) < 3e-2),
             measured=f"PD {fmt(pd)}, max/min {spread(pd):.3g}"),
        dict(statement="RPD flat near 1e-2", holds=bool(spread(rpd) < 3 and 3e-3 < np.nanmedian(rpd) < 3e-2),
             measured=f"RPD {fmt(rpd)}, max/min {spread(rpd):.3g}"),
        dict(statement="LocalSGD improves with S", holds=bool(np.all(np.diff(ls) < 0)),
             measured=f"LocalSGD {fmt(ls)}"),
        dict(statement="LocalSGD wins for S >= 4", holds=bool(np.all(np.isin(S[big], wins))),
             measured=f"LocalSGD lowest at S = {wins}"),
    ]


def figure(out: StudyOutput, path) -> None:
    """f − f* at the time budget against S (log-log), each method at its selected γ per S
    (solid), and the lowest final value over its γ grid (dotted diagnostic)."""
    with paper_style():
        _draw(out.arrays, out.summary, path)


def _draw(a: dict, s: dict, path) -> None:
    S = a["S"]
    H = s["config"]["H"]
    labels = dict(pd="PipeDream", rpd="Randomized PipeDream, δ = ⌊S² − S/2⌋", localsgd=f"LocalSGD, R = S, H = {H}")
    styles = dict(pd=dict(color="k", marker="o"), rpd=dict(color="C3", marker="s", ls="--"),
                  localsgd=dict(color="C0", marker="^"))
    fig = Figure(figsize=(7.0, 4.6))
    ax = fig.subplots()
    for m in METHODS:
        y = a[f"{m}_f_at_T"]
        ax.plot(S, y, label=labels[m], **styles[m])
        for x, v, j in zip(S, y, a[f"{m}_gamma_index"]):
            if j >= 0 and np.isfinite(v):
                ax.annotate(f"$2^{{{tuning.log2_exponent(float(a[f'{m}_gammas'][j]))}}}$", (x, v),
                            textcoords="offset points", xytext=(0, 6), fontsize=6, ha="center",
                            color=styles[m]["color"])
        # Diagnostic, never used to choose: the lowest final value over the whole grid per S.
        best = [np.nan if (b := best_final(a[f"{m}_S{int(v)}_curves"])) is None else b for v in S]
        ax.plot(S, best, color=styles[m]["color"], ls=":", lw=1.0, alpha=0.6)
    ax.plot([], [], color="0.4", ls=":", lw=1.0, label="dotted: best final over the γ grid (diagnostic)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(S, [str(int(v)) for v in S])
    ax.set_xlabel("number of stages S")
    ax.set_ylabel(f"f(x) − f* at time step T = {s['config']['T']}")
    ax.set_title(f"{s['title']}\n{s['setting']}; stable γ (labels: γ per point)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    fig.savefig(path, bbox_inches="tight")
