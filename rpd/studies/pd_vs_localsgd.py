"""E3 and E4 (SPEC §9): PipeDream against LocalSGD in simulated time, protocol (i).

Every method processes the same N microbatches on the same S-stage pipeline: PipeDream with its
1F1B timeline (NOAM = S), LocalSGD with R replicas and H local steps per round for each H. Curves
are f(x) − f* of the evaluated model (the replica mean for LocalSGD) after every time step, cut
to the shortest timeline (PD's, T = 2N + 2S − 2); each method's γ is chosen by the stable
selector on its cut curves, and the table compares f − f* at the common cut time.

One ``Config`` serves both figures; ``objective`` picks the problem. Registry names and presets:

- ``e3_nesterov``: Nesterov's quadratic (μ = 0.01), N = 600. Paper: PD wins clearly.
- ``e4_logistic``: logistic regression (λ = 1e-4), N = 400, otherwise as E3. The authors' n, B
  and gradient noise for this figure are not known; we keep E3's n = 600, B = 5 and no noise,
  and the figure states that setting. Paper: LocalSGD with H = 5 beats PD; H = 30 is worst.

Use :func:`config_for` (``config_for("e4_logistic", "full")``) to get either at paper or quick size.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
from matplotlib.figure import Figure

from rpd import methods, objectives, schedules, simtime, tuning
from rpd.plotting import paper_style
from rpd.results import diverged
from rpd.studies import StudyOutput, make_config

OBJECTIVES = ("nesterov_quadratic", "logistic_regression")
TITLES = {
    "nesterov_quadratic": "PipeDream vs LocalSGD, {S} stages, Nesterov quadratic",
    "logistic_regression": "PipeDream vs LocalSGD, {S} stages, logistic regression",
}
CLAIMS = {
    "nesterov_quadratic": "PD wins clearly",
    "logistic_regression": "LocalSGD with H = 5 beats PD; H = 30 is worst",
}
X_LABEL = "time step (simulated wall-clock time)"


@dataclasses.dataclass(frozen=True)
class Config:
    """E3 at the paper's size (SPEC §9); E4 is ``objective="logistic_regression", N=400``."""

    objective: str = "nesterov_quadratic"  # or "logistic_regression"
    S: int = 16  # pipeline stages (= parameter blocks)
    R: int = 16  # LocalSGD replicas
    d: int = 512
    n: int = 600
    batch_size: int = 5
    N: int = 600  # microbatches, the same for every method
    mu: float = 0.01  # Nesterov quadratic: A = tridiag(-1, 2, -1) + mu I
    lam: float = 1e-4  # logistic regression: l2 weight
    grad_noise: float = 0.0  # logistic regression: sigma_g of i.i.d. gradient noise
    H: tuple[int, ...] = (2, 5, 30)  # LocalSGD local steps per round
    pd_gamma_exps: tuple[int, int] = (-12, -3)  # PD grid 2^lo .. 2^hi
    localsgd_gamma_exps: tuple[int, int] = (-8, 2)
    noam: int | None = None  # PD's cap on microbatches in flight (None: S)
    tail_frac: float = 0.2  # stable selector's tail
    seed: int = 0  # data seed (and gradient-noise seed)


PRESETS = {
    "e3_nesterov": {},
    "e4_logistic": {"objective": "logistic_regression", "N": 400},
}
QUICK = dict(S=4, R=4, d=64, n=120, N=120)  # E3 quick; E4 quick keeps E4's N : E3's N = 2 : 3
QUICK_BY_NAME = {
    "e3_nesterov": {**PRESETS["e3_nesterov"], **QUICK},
    "e4_logistic": {**PRESETS["e4_logistic"], **QUICK, "N": 80},
}


def config_for(name: str, size: str = "quick", **overrides) -> Config:
    """The Config registered as ``name`` ("e3_nesterov" | "e4_logistic") at ``size``
    ("quick" | "full"), then ``overrides``."""
    if name not in PRESETS:
        raise ValueError(f"name must be one of {sorted(PRESETS)}, got {name!r}")
    base = PRESETS[name] if size == "full" else {}
    return make_config(Config, size, quick=QUICK_BY_NAME[name], **{**base, **overrides})


def n_steps(cfg: Config) -> int:
    """Units of work ``run`` reports to ``progress``: PD, then one per H."""
    return 1 + len(cfg.H)


def make_objective(cfg: Config):
    if cfg.objective == "nesterov_quadratic":
        return objectives.nesterov_quadratic(n=cfg.n, d=cfg.d, S=cfg.S, batch_size=cfg.batch_size,
                                             mu=cfg.mu, seed=cfg.seed)
    if cfg.objective == "logistic_regression":
        return objectives.logistic_regression(n=cfg.n, d=cfg.d, S=cfg.S, batch_size=cfg.batch_size,
                                              lam=cfg.lam, grad_noise=cfg.grad_noise, seed=cfg.seed)
    raise ValueError(f"objective must be one of {OBJECTIVES}, got {cfg.objective!r}")


def setting(cfg: Config) -> str:
    """The problem as run, for the figure (E4's n, B and noise are our choice, not the paper's)."""
    common = f"d = {cfg.d}, n = {cfg.n}, B = {cfg.batch_size}, N = {cfg.N}, S = {cfg.S}, R = {cfg.R}"
    if cfg.objective == "nesterov_quadratic":
        return f"Nesterov quadratic, μ = {cfg.mu:g}, {common}"
    return f"logistic regression, λ = {cfg.lam:g}, σ_g = {cfg.grad_noise:g}, {common}"


def method_keys(cfg: Config) -> list[str]:
    """Array prefixes, in legend order: "pd", then "localsgd_H{H}" for every H."""
    return ["pd"] + [f"localsgd_H{H}" for H in cfg.H]


def best_final(curves_GxP: np.ndarray) -> float | None:
    """Diagnostic only (never the selection): the lowest final value over non-diverged γ
    (``rpd.results.diverged``)."""
    ok = ~diverged(curves_GxP)
    return float(curves_GxP[ok, -1].min()) if ok.any() else None


def _pow2(gamma) -> str | None:
    return None if gamma is None else f"2^{tuning.log2_exponent(gamma)}"


def select(curves_GxP: np.ndarray, gammas: np.ndarray, tail_frac: float) -> tuning.Selection:
    """The stable selector; a run that blew up to huge finite values overflows the tail
    statistics to inf, which correctly marks it unstable, so overflow is not a warning here."""
    with np.errstate(over="ignore", invalid="ignore"):
        return tuning.select_gamma(curves_GxP, gammas, rule="stable", tail_frac=tail_frac)


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    """All runs on both grids, protocol (i), the selected γ per method, and f − f* at the cut."""
    report = progress or (lambda msg: None)
    obj = make_objective(cfg)
    pd_gammas = tuning.pow2_grid(*cfg.pd_gamma_exps)
    ls_gammas = tuning.pow2_grid(*cfg.localsgd_gamma_exps)
    pd_tl = schedules.pipedream(cfg.S, cfg.N, cfg.noam)
    results = [methods.pipedream(obj, pd_tl, pd_gammas, seed=cfg.seed)]
    report("PD")
    for H in cfg.H:
        results.append(methods.local_sgd(obj, schedules.local_sgd(cfg.S, cfg.N, cfg.R, H), ls_gammas,
                                         seed=cfg.seed))
        report(f"LocalSGD H={H}")
    cut = simtime.cut_to_shortest(results)
    T_cut = int(cut[0].axis[-1])
    arrays: dict[str, np.ndarray] = {"time": cut[0].axis}
    entries, rows = [], []
    claim = CLAIMS[cfg.objective]
    for key, H, full, res in zip(method_keys(cfg), (None,) + tuple(cfg.H), results, cut):
        sel = select(res.curve, res.gammas, cfg.tail_frac)
        idx = -1 if sel.index is None else sel.index
        arrays[f"{key}_gammas"] = res.gammas
        arrays[f"{key}_curves"] = res.curve  # [G, T_cut + 1]
        f_cut = None if idx < 0 else float(res.curve[idx, -1])
        entry = dict(key=key, method="PD" if H is None else "LocalSGD", H=H, T=int(full.meta["T"]),
                     gamma_index=idx, gamma=None if idx < 0 else sel.gamma,
                     gamma_exp=None if idx < 0 else tuning.log2_exponent(sel.gamma), rule=sel.rule,
                     f_at_cut=f_cut, tail_mean=None if idx < 0 else float(sel.reports[idx].tail_mean),
                     best_final_any_gamma=best_final(res.curve),  # diagnostic, not the selection
                     diverged_gamma_exps=[tuning.log2_exponent(g) for g, r in zip(res.gammas, sel.reports)
                                          if r.diverged])
        entries.append(entry)
        rows.append(dict(method=entry["method"], H=H, gamma=_pow2(entry["gamma"]), rule=sel.rule,
                         T_own=entry["T"], T_cut=T_cut, f_minus_fstar_at_cut=f_cut,
                         best_final_any_gamma=entry["best_final_any_gamma"]))
    checks = claim_checks(cfg.objective, entries)
    rows += [dict(method="paper claim", paper=c["statement"], holds=c["holds"], measured=c["measured"])
             for c in checks]
    summary = dict(
        study="e3_nesterov" if cfg.objective == "nesterov_quadratic" else "e4_logistic",
        title=TITLES[cfg.objective].format(S=cfg.S), setting=setting(cfg),
        config=dataclasses.asdict(cfg), T_cut=T_cut, L=float(obj.L), f_star=float(obj.f_star),
        f0=float(results[0].curve[0, 0]), methods=entries, claim=claim, checks=checks,
    )
    return StudyOutput(arrays=arrays, summary=summary, table=rows)


def claim_checks(objective: str, entries: list[dict]) -> list[dict]:
    """The paper's statements as measured facts at the common cut time (never used to tune)."""
    f = {e["key"]: (np.inf if e["f_at_cut"] is None else e["f_at_cut"]) for e in entries}
    pd = f.pop("pd")
    if not f:
        return []
    best_ls = min(f, key=f.get)
    if objective == "nesterov_quadratic":
        return [dict(statement="PD ends below every LocalSGD", holds=bool(pd < f[best_ls]),
                     measured=f"PD {pd:.3g} vs best LocalSGD ({best_ls}) {f[best_ls]:.3g}, "
                              f"ratio {f[best_ls] / pd:.3g}")]
    out = []
    if "localsgd_H5" in f:
        out.append(dict(statement="LocalSGD H = 5 ends below PD", holds=bool(f["localsgd_H5"] < pd),
                        measured=f"H=5 {f['localsgd_H5']:.3g} vs PD {pd:.3g}"))
    if "localsgd_H30" in f:
        worst = max({**f, "pd": pd}.items(), key=lambda kv: kv[1])[0]
        out.append(dict(statement="H = 30 is worst", holds=worst == "localsgd_H30",
                        measured=f"worst is {worst} ({max(max(f.values()), pd):.3g})"))
    return out


def figure(out: StudyOutput, path) -> None:
    """f − f* (log) against the time step for every method at its selected γ, from saved arrays."""
    with paper_style():
        _draw(out.arrays, out.summary, path)


def _draw(a: dict, s: dict, path) -> None:
    t = a["time"]
    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.subplots()
    for i, e in enumerate(s["methods"]):
        j = int(e["gamma_index"])
        if j < 0:
            continue
        g = tuning.log2_exponent(float(a[f"{e['key']}_gammas"][j]))
        if e["method"] == "PD":
            label, style = f"PipeDream, γ = $2^{{{g}}}$", dict(color="k", lw=2.0)
        else:
            label, style = f"LocalSGD, H = {e['H']}, γ = $2^{{{g}}}$", dict(color=f"C{i - 1}", lw=1.4)
        ax.plot(t, a[f"{e['key']}_curves"][j], label=label, **style)
    ax.set_yscale("log")
    ax.set_xlabel(X_LABEL)
    ax.set_ylabel("f(x) − f*")
    ax.set_title(f"{s['title']}\n{s['setting']}; stable γ, curves cut at T = {s['T_cut']}", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    fig.savefig(path, bbox_inches="tight")
