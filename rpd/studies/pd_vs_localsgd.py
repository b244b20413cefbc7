"""E3 and E4 (docs/science.md#the-papers-experiments): PipeDream against LocalSGD in simulated time, protocol (i).

Every method processes the same N microbatches on the same S-stage pipeline: PipeDream with its
1F1B timeline (NOAM = S), LocalSGD with R replicas and H local steps per round for each H. Curves
are f(x) − f* of the evaluated model (the replica mean for LocalSGD) after every time step, cut
to the shortest timeline (PD's, T = 2N + 2S − 2) with the time-cut convention ``cut``
(``rpd.analysis.simtime``; default "authors": ``curve[:T]``, the last point after T − 1 steps, as the
authors' code). Each method's γ is chosen by ``selector`` (default "reference", the rule the
paper's γ were chosen by, docs/science.md#step-sizes) on its cut curves; the strict "stable" and the "best_final"
picks are reported beside it. With gradient noise the runs repeat over ``noise_seeds`` (the
data stays ``seed``): γ is chosen on the seed mean, the figure bands the seeds' min–max, and each
seed's own pick is reported too.

One ``Config`` serves both figures; ``objective`` picks the problem. Registry names and presets:

- ``e3_nesterov``: Nesterov's quadratic (μ = 0.01), N = 600. Paper: PD wins clearly.
- ``e4_logistic``: logistic regression (λ = 1e-4), N = 400, otherwise as E3. The authors'
  repository does not hold this setting; the published figure's data (every curve read from its
  PDF) pins n = 100, B = 5, σ_g = 0.5 (**inferred from the figure**), run over 5 noise seeds. The
  setting used before (n = 600, B = 5, σ_g = 0) is run once beside it as a sensitivity row.
  Paper: LocalSGD with H = 5 beats PD; H = 30 is worst.

Use :func:`config_for` (``config_for("e4_logistic", "full")``) to get either at paper or quick size.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Callable

import numpy as np

from rpd import objectives, schedules
from rpd.analysis import simtime, tuning
from rpd.analysis.tuning import selector_rules
from rpd.plotting.pd_vs_localsgd import figure as pd_vs_localsgd_figure
from rpd.results import Result, StudyOutput, best_final, diverged
from rpd.studies import claim_rows, make_config, picks, selection_keys, summary_head
from rpd.studies.pd_vs_localsgd_claims import CLAIMS, claim_checks
from rpd.studies.units import run_all
from rpd.train import methods
from rpd.validation import required

OBJECTIVES = ("nesterov_quadratic", "logistic_regression")
TITLES = {
    "nesterov_quadratic": "PipeDream vs LocalSGD, {S} stages, Nesterov quadratic",
    "logistic_regression": "PipeDream vs LocalSGD, {S} stages, logistic regression",
}


@dataclasses.dataclass(frozen=True)
class Config:
    """E3 at the paper's size (docs/science.md#the-papers-experiments); E4 is ``objective="logistic_regression",
    N=400``."""

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
    tail_frac: float = 0.2  # selector's tail
    selector: str = "reference"  # rule of the drawn γ (rpd.analysis.tuning.RULES); the others reported beside
    cut: str = "authors"  # time-cut convention (rpd.analysis.simtime.CUTS): "authors" = curve[:T], "end"
    seed: int = 0  # data seed
    noise_seeds: tuple[int, ...] = (0,)  # method seeds (the gradient noise); γ chosen on their mean
    sensitivity_n: int | None = None  # also run n = this, σ_g = sensitivity_grad_noise (first noise
    sensitivity_grad_noise: float = 0.0  # seed), reported beside the figure, not drawn


E4_INFERRED = dict(n=100, batch_size=5, grad_noise=0.5)  # read from the published figure's data
PRESETS = {
    "e3_nesterov": {},
    "e4_logistic": {
        "objective": "logistic_regression",
        "N": 400,
        **E4_INFERRED,
        "noise_seeds": (0, 1, 2, 3, 4),
        "sensitivity_n": 600,
        "sensitivity_grad_noise": 0.0,
    },
}
QUICK = dict(S=4, R=4, d=64, n=120, N=120)  # E3 quick; E4 quick keeps E4's N : E3's N = 2 : 3
QUICK_BY_NAME = {
    "e3_nesterov": {**PRESETS["e3_nesterov"], **QUICK},
    "e4_logistic": {
        **PRESETS["e4_logistic"],
        **QUICK,
        "N": 80,
        "n": 100,
        "noise_seeds": (0, 1, 2),
        "sensitivity_n": None,  # quick: no sensitivity row (its own 7 programs, half the figure's compiling)
    },
}


def config_for(name: str, size: str = "quick", **overrides) -> Config:
    """The Config registered as ``name`` ("e3_nesterov" | "e4_logistic") at ``size``
    ("quick" | "full"), then ``overrides``."""
    if name not in PRESETS:
        raise ValueError(f"name must be one of {sorted(PRESETS)}, got {name!r}")
    base = PRESETS[name] if size == "full" else {}
    return make_config(Config, size, quick=QUICK_BY_NAME[name], **{**base, **overrides})


def n_steps(cfg: Config) -> int:
    """Units of work ``run`` reports to ``progress``: PD, then one per H, per noise seed (and once
    more for the sensitivity setting)."""
    return (1 + len(cfg.H)) * (len(cfg.noise_seeds) + (cfg.sensitivity_n is not None))


def make_objective(cfg: Config):
    if cfg.objective == "nesterov_quadratic":
        return objectives.nesterov_quadratic(
            n=cfg.n, d=cfg.d, S=cfg.S, batch_size=cfg.batch_size, mu=cfg.mu, seed=cfg.seed
        )
    if cfg.objective == "logistic_regression":
        return objectives.logistic_regression(
            n=cfg.n, d=cfg.d, S=cfg.S, batch_size=cfg.batch_size, lam=cfg.lam, grad_noise=cfg.grad_noise, seed=cfg.seed
        )
    raise ValueError(f"objective must be one of {OBJECTIVES}, got {cfg.objective!r}")


def setting(cfg: Config) -> str:
    """The problem as run, for the figure (E4's n, B and noise are our choice, not the paper's)."""
    common = f"d = {cfg.d}, n = {cfg.n}, B = {cfg.batch_size}, N = {cfg.N}, S = {cfg.S}, R = {cfg.R}"
    if cfg.objective == "nesterov_quadratic":
        return f"Nesterov quadratic, μ = {cfg.mu:g}, {common}"
    inferred = all(getattr(cfg, k) == v for k, v in E4_INFERRED.items())
    return f"logistic regression, λ = {cfg.lam:g}, σ_g = {cfg.grad_noise:g}, {common}" + (
        " (n, B, σ_g inferred from the published figure's data)" if inferred else ""
    )


def method_keys(cfg: Config) -> list[str]:
    """Array prefixes, in legend order: "pd", then "localsgd_H{H}" for every H."""
    return ["pd"] + [f"localsgd_H{H}" for H in cfg.H]


def _pow2(gamma) -> str | None:
    return None if gamma is None else f"2^{tuning.log2_exponent(gamma)}"


def select(curves_GxP: np.ndarray, gammas: np.ndarray, tail_frac: float, rule: str = "stable") -> tuning.Selection:
    """``rpd.analysis.tuning.select_gamma`` with ``rule``; a run that blew up to huge finite values
    overflows the tail statistics to inf, which correctly marks it unstable, so overflow is not a
    warning here."""
    with np.errstate(over="ignore", invalid="ignore"):
        return tuning.select_gamma(curves_GxP, gammas, rule=rule, tail_frac=tail_frac)


def seed_mean(curves_NxGxP: np.ndarray) -> np.ndarray:
    """[G, P]: the mean over seeds, NaN for a γ that diverged on any seed (never selected)."""
    c = np.asarray(curves_NxGxP, np.float64)
    bad = np.asarray(diverged(c).any(axis=0))
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(bad[:, None], np.nan, c.mean(axis=0))


def timelines(cfg: Config) -> list[schedules.Timeline]:
    """PD's 1F1B timeline, then LocalSGD's for every H (the same for every noise seed)."""
    return [schedules.pipedream(cfg.S, cfg.N, cfg.noam)] + schedules.local_sgd_many(cfg.S, cfg.N, cfg.R, cfg.H)


CONCURRENT_UNITS = True  # the units share no program state; they run side by side on host threads


def settings(cfg: Config) -> dict[str, Config]:
    """ "main": ``cfg``; "sensitivity" (when ``sensitivity_n`` is set): n = ``sensitivity_n``,
    σ_g = ``sensitivity_grad_noise``, the first noise seed only."""
    if cfg.sensitivity_n is None:
        return {"main": cfg}
    sens = dataclasses.replace(cfg, n=cfg.sensitivity_n, grad_noise=cfg.sensitivity_grad_noise, sensitivity_n=None)
    return {"main": cfg, "sensitivity": dataclasses.replace(sens, noise_seeds=cfg.noise_seeds[:1])}


def units(cfg: Config) -> list[dict]:
    """One unit per (setting, noise seed, method): PD, then LocalSGD per H, over the noise
    seeds; then the sensitivity setting's (``rpd.studies.units``). Checks ``cfg`` first."""
    simtime.last_time(1, cfg.cut)  # checks cut before any work
    selector_rules(cfg.selector)
    if not cfg.noise_seeds:
        raise ValueError("noise_seeds must not be empty")
    return [
        dict(key=f"{name}/seed{seed}/{label}", setting=name, seed=int(seed), m=m)
        for name, c in settings(cfg).items()
        for seed in c.noise_seeds
        for m, label in enumerate(["PD"] + [f"LocalSGD H={H}" for H in c.H])
    ]


def prepare(cfg: Config) -> dict:
    """Per setting: its objective (the data is ``cfg.seed``'s for every noise seed), timelines, Config."""
    return {name: (make_objective(c), timelines(c), c) for name, c in settings(cfg).items()}


def run_unit(cfg: Config, unit: dict, shared: dict | None = None) -> dict:
    """One method on one noise seed, read after every time step (uncut): its γ grid, axis, curve
    and T."""
    obj, tls, c = (shared or prepare(cfg))[unit["setting"]]
    m, seed = unit["m"], unit["seed"]
    if m == 0:
        grid = tuning.pow2_grid(*c.pd_gamma_exps)
        res = simtime.per_tick(methods.pipedream(obj, tls[0], grid, seed=seed), tls[0])
    else:
        grid = tuning.pow2_grid(*c.localsgd_gamma_exps)
        res = simtime.per_tick(methods.local_sgd(obj, tls[m], grid, seed=seed), tls[m])
    meta = {k: res.meta[k] for k in ("T", "time_axis") if k in res.meta}
    return dict(
        method=res.method, gammas=res.gammas, axis=res.axis, axis_name=res.axis_name, curve=res.curve, meta=meta
    )


def _result(p: dict) -> Result:
    return Result(p["method"], p["gammas"], p["axis"], p["axis_name"], p["curve"], {}, np.empty((0, 0)), p["meta"])


def _per_seed(c: Config, payloads: list[dict]) -> list[tuple[list, list]]:
    """Per noise seed, (full results, results cut by protocol (i) with ``c.cut``)."""
    k = 1 + len(c.H)
    per_seed = [[_result(p) for p in payloads[i : i + k]] for i in range(0, len(payloads), k)]
    return [(full, simtime.cut_to_shortest(full, c.cut)) for full in per_seed]


def _measure(cfg: Config, per_seed: list[tuple[list, list]]) -> tuple[dict, list[dict], int]:
    """Every method over the noise seeds: arrays, one entry per method, T_cut."""
    rules = selector_rules(cfg.selector)
    full, cut0 = per_seed[0]
    t_last = int(cut0[0].axis[-1])
    arrays: dict[str, np.ndarray] = {"time": cut0[0].axis}
    entries = []
    for m, (key, H) in enumerate(zip(method_keys(cfg), (None,) + tuple(cfg.H))):
        seeds_c = np.stack([cut[m].curve for _, cut in per_seed])  # [n_seed, G, P]
        gammas = cut0[m].gammas
        mean = seed_mean(seeds_c)
        arrays[f"{key}_gammas"] = gammas
        arrays[f"{key}_curves"] = mean  # [G, P]: the seed mean (NaN where a seed diverged)
        arrays[f"{key}_seed_curves"] = seeds_c
        sels = {r: select(mean, gammas, cfg.tail_frac, r) for r in rules}
        sel = sels[cfg.selector]
        idx = -1 if sel.index is None else sel.index
        by_rule = picks(sels, f_at_cut=lambda i: float(mean[i, -1]))
        seed_picks = []
        for s, c in zip(cfg.noise_seeds, seeds_c):
            x = select(c, gammas, cfg.tail_frac, cfg.selector)
            seed_picks.append(
                dict(
                    seed=int(s),
                    gamma_exp=None if x.index is None else tuning.log2_exponent(x.gamma),
                    f_at_cut=None if x.index is None else float(c[x.index, -1]),
                )
            )
        entries.append(
            dict(
                key=key,
                method="PD" if H is None else "LocalSGD",
                H=H,
                T=int(full[m].meta["T"]),
                gamma_index=idx,
                gamma=None if idx < 0 else sel.gamma,
                gamma_exp=None if idx < 0 else tuning.log2_exponent(sel.gamma),
                rule=sel.rule,
                f_at_cut=None if idx < 0 else float(mean[idx, -1]),
                f_at_cut_seed_min=None if idx < 0 else float(seeds_c[:, idx, -1].min()),
                f_at_cut_seed_max=None if idx < 0 else float(seeds_c[:, idx, -1].max()),
                tail_mean=None if idx < 0 else float(sel.reports[idx].tail_mean),
                by_rule=by_rule,
                per_seed=seed_picks,
                best_final_any_gamma=best_final(mean),  # diagnostic, not the selection
                diverged_gamma_exps=[tuning.log2_exponent(g) for g, r in zip(gammas, sel.reports) if r.diverged],
                reports=[r._asdict() for r in sel.reports],
            )
        )
    return arrays, entries, t_last


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    """All runs on both grids, protocol (i) with ``cfg.cut``, over the noise seeds; the γ every
    rule picks per method, and f − f* at the cut (seed mean, min, max, and per seed at its own
    pick); the sensitivity setting (if any) the same way, reported only. Every unit of
    :func:`units` here, then :func:`assemble` (``rpd.studies.units.run_all``)."""
    return run_all(sys.modules[__name__], cfg, progress)


def assemble(cfg: Config, payloads: list[dict]) -> StudyOutput:
    """The study's output from every unit's payload, in the order of :func:`units`."""
    n_main = len(cfg.noise_seeds) * (1 + len(cfg.H))
    arrays, entries, t_last = _measure(cfg, _per_seed(cfg, payloads[:n_main]))
    obj = make_objective(cfg)
    T_cut = min(e["T"] for e in entries)
    rows = []
    for e in entries:
        rows.append(
            dict(
                method=e["method"],
                H=e["H"],
                gamma=_pow2(e["gamma"]),
                rule=e["rule"],
                stable_gamma=_exp(e["by_rule"]["stable"]["gamma_exp"]),
                T_own=e["T"],
                T_cut=T_cut,
                t_last=t_last,
                f_minus_fstar_at_cut=e["f_at_cut"],
                seed_min=e["f_at_cut_seed_min"],
                seed_max=e["f_at_cut_seed_max"],
                f_at_stable_gamma=e["by_rule"]["stable"]["f_at_cut"],
                best_final_any_gamma=e["best_final_any_gamma"],
            )
        )
    checks = claim_checks(cfg.objective, entries)
    rows += claim_rows(checks, method="paper claim")
    sensitivity = None
    if cfg.sensitivity_n is not None:
        cfg2 = settings(cfg)["sensitivity"]
        _, ent2, _ = _measure(cfg2, _per_seed(cfg2, payloads[n_main:]))
        checks2 = claim_checks(cfg.objective, ent2)
        keep = ("key", "method", "H", "gamma_exp", "rule", "f_at_cut", "by_rule", "best_final_any_gamma")
        sensitivity = dict(
            setting=setting(cfg2),
            n=cfg2.n,
            grad_noise=cfg2.grad_noise,
            methods=[{k: e[k] for k in keep} for e in ent2],
            checks=checks2,
        )
        rows += [
            dict(
                method=f"sensitivity n={cfg2.n} σ={cfg2.grad_noise:g}: {e['method']}",
                H=e["H"],
                gamma=_pow2(e["gamma"]),
                rule=e["rule"],
                stable_gamma=_exp(e["by_rule"]["stable"]["gamma_exp"]),
                f_minus_fstar_at_cut=e["f_at_cut"],
                f_at_stable_gamma=e["by_rule"]["stable"]["f_at_cut"],
            )
            for e in ent2
        ]
        rows += claim_rows(checks2, method=f"sensitivity n={cfg2.n} σ={cfg2.grad_noise:g}: paper claim")
    study = "e3_nesterov" if cfg.objective == "nesterov_quadratic" else "e4_logistic"
    summary = dict(
        **summary_head(study, TITLES[cfg.objective].format(S=cfg.S), setting(cfg), cfg),
        T_cut=T_cut,
        t_last=t_last,
        cut=cfg.cut,
        cut_text=CUT_TEXT[cfg.cut].format(T=T_cut, t=t_last),
        **selection_keys(cfg.selector, selector_rules(cfg.selector)),
        L=float(required("L", obj.L)),
        f_star=float(obj.f_star),
        f0=float(arrays["pd_curves"][0, 0]),
        noise_seeds=list(cfg.noise_seeds),
        methods=entries,
        claim=CLAIMS[cfg.objective],
        checks=checks,
        sensitivity=sensitivity,
    )
    return StudyOutput(arrays=arrays, summary=summary, table=rows)


CUT_TEXT = {
    "authors": "curves cut at T = {T} as the authors' code (curve[:T]: the last point after {t} steps)",
    "end": "curves cut at T = {T} (the last point after {t} steps)",
}


def _exp(k) -> str | None:
    return None if k is None else f"2^{k}"


def figure(out: StudyOutput, path) -> None:
    """The figure, drawn from the saved output (:func:`rpd.plotting.pd_vs_localsgd.figure`)."""
    pd_vs_localsgd_figure(out, path)
