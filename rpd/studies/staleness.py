"""The S⁴ study (SPEC §8): how the stale-read error grows with the number of stages S.

The bound's stale-read term is γ²L²δ²G² with δ = ⌊S² − S/2⌋, i.e. Θ(S⁴) at a fixed γ (and
2L(f(x⁰) − f*)δ²/K = Θ(S⁴/K) at the tuned γ). Its proof bounds ‖∇f(x^k) − ∇f(z^k)‖² ≤
L²‖x^k − z^k‖² ≤ γ²L²δ²G². This study measures both sides along real runs:

- one fixed objective for every S: the random quadratic with fixed (n, d, B, data seed), d
  divisible by the largest S so that every block layout is even; only the cut into S blocks
  changes with S;
- the same number of microbatches N for every S (K = N·S block updates): every run then does
  the same amount of optimisation -- N minibatch gradients applied to every block -- so the
  gradients along the runs are comparable and the difference between S is the staleness;
- one fixed γ for every S and both methods: the largest power of two of ``gamma_exps`` whose PD
  and RPD runs converge at the largest S; then every S is run at it, and if any run fails to
  converge the next smaller γ is tried (the trail is in the summary);
- PD (1F1B timeline, NOAM = S) and RPD (δ = ⌊S² − S/2⌋, uniform everything);
- ‖x^k − z^k‖², ‖∇f(x^k) − ∇f(z^k)‖², ‖∇f(x^k)‖² recorded every S + 1 updates (coprime with
  S, so PD's sample is not locked to one stage) and averaged over the run, as the bound's
  (1/K)Σ_k is; G = the largest block-gradient norm of the run.

Slopes of log-quantity against log S are least-squares fits with t-based 95% CIs
(:func:`rpd.theory.loglog_fit`), reported as measured next to the bound's 4.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
from matplotlib.figure import Figure

from rpd import methods, objectives, schedules, theory, tuning
from rpd.plotting import _save, paper_style, pow2_label
from rpd.studies import StudyOutput

TITLE = "Stale-read error against the number of stages S"
METHODS = ("pd", "rpd")
# measured quantity -> the bound it is compared with in the same panel
QUANTITIES = {"xz": "bound_xz", "grad_gap": "bound_stale"}


@dataclasses.dataclass(frozen=True)
class Config:
    """The S⁴ study at full size (SPEC §8: S = 2..128)."""

    S_values: tuple[int, ...] = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
    n: int = 1024
    d: int = 512  # divisible by max(S_values): even blocks for every power of two
    batch_size: int = 32
    N: int = 512  # microbatches for every S (K = N·S); N >= 3·max S keeps PD mostly in steady state
    seed: int = 0  # data seed
    rpd_seed: int = 0
    gamma_exps: tuple[int, int] = (-12, -2)  # candidate fixed γ's, largest first
    large_S: int = 8  # second fit over S >= large_S (the asymptotic regime)


QUICK = dict(S_values=(2, 4, 8, 16), n=256, d=128, N=64, gamma_exps=(-9, -3), large_S=4)


def n_steps(cfg: Config) -> int:
    """Units of work reported to ``progress`` when the first γ holds: the grid at the largest S,
    then PD and RPD for every other S."""
    return 1 + 2 * (len(cfg.S_values) - 1)


def converging(curve_P: np.ndarray, f0: float) -> bool:
    """A run at a usable fixed γ: finite, never above its start, ends below half of it, and its
    tail does not grow (the stable selector's log-slope test). The selector's CV test is not
    used: it rejects every linearly converging tail, and these quadratics converge linearly."""
    if not np.all(np.isfinite(curve_P)):
        return False
    rep = tuning.gamma_report(curve_P, 1.0)
    return bool(curve_P.max() <= f0 and curve_P[-1] <= 0.5 * f0
                and rep.log_slope <= tuning.DEFAULT.max_log_slope)


def _objective(cfg: Config, S: int):
    return objectives.random_quadratic(n=cfg.n, d=cfg.d, S=S, batch_size=cfg.batch_size, seed=cfg.seed)


def _runs(cfg: Config, S: int, gammas, diag: bool):
    """PD and RPD at S on the γ's: {method: Result}; one point per microbatch (stride S)."""
    obj = _objective(cfg, S)
    tl = schedules.pipedream(S, cfg.N)
    ds = S + 1 if diag else 0
    pd = methods.pipedream(obj, tl, gammas, axis="block_update", stride=S, diag_stride=ds)
    rp = methods.rpd(obj, tl.K, gammas, theory.pd_delta(S), seed=cfg.rpd_seed, stride=S, diag_stride=ds)
    return obj, {"pd": pd, "rpd": rp}


def measure(obj, res: methods.Result, g: int, S: int, delta: int, gamma: float) -> dict:
    """Run means of the diagnostics for grid index g, and the bound's terms from the run's G."""
    diag = res.traces["diag"][g]  # [K, 3], NaN where not recorded
    diag = diag[np.all(np.isfinite(diag), axis=1)]
    K = res.traces["block_grad_norm"].shape[1]
    f0 = float(res.curve[g, 0])
    rb = theory.bound_from_run(res.traces["block_grad_norm"][g], gamma, S, K, obj.L, delta, f0 + obj.f_star,
                               obj.f_star)
    return dict(
        xz=float(diag[:, 0].mean()), grad_gap=float(diag[:, 1].mean()), grad_sq=float(diag[:, 2].mean()),
        n_diag=int(diag.shape[0]), G=rb.G, bound_stale=rb.at_gamma.stale,
        bound_xz=gamma**2 * delta**2 * rb.G**2,  # the proof's bound on ‖x − z‖²
        stale_tuned=theory.stale_term_tuned(obj.L, delta, K, f0 + obj.f_star, obj.f_star),
        final=float(res.curve[g, -1]),
    )


def _converging_grid(res: methods.Result) -> np.ndarray:
    return np.array([converging(res.curve[i], float(res.curve[i, 0])) for i in range(len(res.gammas))])


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    """Measure mean ‖x − z‖², ‖∇f(x) − ∇f(z)‖² and the bound's stale term for every S at one
    fixed γ, on PD and RPD, and fit their log-log slopes in S.

    The largest S runs the whole candidate grid (with diagnostics, so it is also that S's
    measurement); the fixed γ is the largest candidate whose PD and RPD runs both converge there;
    every other S runs at that γ alone, and γ is halved (within the grid) while any S fails."""
    S_values = sorted(cfg.S_values)
    if max(S_values) > cfg.d:
        raise ValueError(f"every S must be <= d={cfg.d}, got max S = {max(S_values)}")
    S_max = S_values[-1]
    grid = tuning.pow2_grid(*cfg.gamma_exps)[::-1]  # largest first
    obj_max, res_max = _runs(cfg, S_max, grid, diag=True)
    ok = {m: _converging_grid(res_max[m]) for m in METHODS}
    trail = [dict(S=S_max, method=m, converging={f"2^{tuning.log2_exponent(g)}": bool(o) for g, o in zip(grid, ok[m])})
             for m in METHODS]
    if progress is not None:
        progress(f"γ grid at S={S_max}")
    candidates = [i for i in range(len(grid)) if all(ok[m][i] for m in METHODS)]
    if not candidates:
        raise RuntimeError(f"no γ in 2^{cfg.gamma_exps[0]}..2^{cfg.gamma_exps[1]} converges at S={S_max}; "
                           "lower gamma_exps")
    for gi in range(candidates[0], len(grid)):
        gamma = float(grid[gi])
        if not all(ok[m][gi] for m in METHODS):
            continue
        rows, failed = {m: [] for m in METHODS}, []
        for S in S_values[:-1]:
            obj, res = _runs(cfg, S, np.array([gamma]), diag=True)
            for m in METHODS:
                if not converging(res[m].curve[0], float(res[m].curve[0, 0])):
                    failed.append(dict(S=S, method=m))
                rows[m].append(measure(obj, res[m], 0, S, theory.pd_delta(S), gamma))
                if progress is not None:
                    progress(f"{m.upper()} S={S}")
        for m in METHODS:
            rows[m].append(measure(obj_max, res_max[m], gi, S_max, theory.pd_delta(S_max), gamma))
        trail.append(dict(gamma_exp=tuning.log2_exponent(gamma), failed=failed))
        if not failed:
            break

    S_arr = np.asarray(S_values, np.float64)
    arrays = dict(S=np.asarray(S_values, np.int64), delta=np.array([theory.pd_delta(S) for S in S_values]),
                  gamma=np.asarray(gamma))
    for m in METHODS:
        for key in rows[m][0]:
            arrays[f"{m}_{key}"] = np.array([r[key] for r in rows[m]])
    fits, table = {}, []
    for m in METHODS:
        for q in ("xz", "grad_gap", "bound_xz", "bound_stale", "stale_tuned"):
            y = arrays[f"{m}_{q}"]
            for name, keep in (("all", S_arr > 0), ("large", S_arr >= cfg.large_S)):
                if keep.sum() < 3 or not np.all(y[keep] > 0):
                    continue
                f = theory.loglog_fit(S_arr[keep], y[keep])
                fits[f"{m}/{q}/{name}"] = dict(slope=f.slope, ci=list(f.slope_ci), intercept=f.intercept,
                                               r2=f.r2, n=f.n)
                table.append(dict(method=m.upper(), quantity=q, S_range=f"{int(S_arr[keep].min())}..{int(S_arr[keep].max())}",
                                  slope=round(f.slope, 3), ci95=[round(c, 3) for c in f.slope_ci],
                                  bound_exponent=4 if q != "stale_tuned" else 3))
    summary = dict(
        study="staleness_scaling", config=dataclasses.asdict(cfg), setting=_setting(cfg),
        gamma=gamma, gamma_exp=tuning.log2_exponent(gamma), gamma_trail=trail,
        gamma_rule=("largest power of two in the grid whose PD and RPD runs converge at the largest S "
                    "(finite, never above f(x⁰) − f*, final below half of it, tail log-slope <= 1e-4), "
                    "then checked at every S (halved while any S fails)"),
        converged_everywhere=not trail[-1]["failed"],
        objective=f"random quadratic n={cfg.n}, d={cfg.d}, B={cfg.batch_size}, seed={cfg.seed}; same N={cfg.N} "
                  f"microbatches for every S (K = N·S)",
        fits=fits,
        claim="bound: stale-read term γ²L²δ²G² = Θ(S⁴) at fixed γ (Θ(S⁴/K) = Θ(S³) at the tuned γ with K = N·S)",
    )
    return StudyOutput(arrays=arrays, summary=summary, table=table)


def _setting(cfg: Config) -> str:
    paper = Config()
    return ", ".join(f"{f.name}={getattr(cfg, f.name)}" for f in dataclasses.fields(cfg)
                     if getattr(cfg, f.name) != getattr(paper, f.name))


def _fit_label(fits, key) -> str:
    f = fits.get(key)
    return "" if f is None else f", slope {f['slope']:.2f} [{f['ci'][0]:.2f}, {f['ci'][1]:.2f}]"


def figure(out: StudyOutput, path) -> None:
    """Two log-log panels against S: ‖x − z‖² with its bound γ²δ²G², and ‖∇f(x) − ∇f(z)‖² with
    the stale term γ²L²δ²G²; PD solid, RPD dashed; fitted slopes (95% CI) in the legend and an
    S⁴ guide."""
    a, s = out.arrays, out.summary
    with paper_style():
        _draw(a, s, path)


def _draw(a, s, path) -> None:
    S = a["S"].astype(float)
    fits = s["fits"]
    fig = Figure(figsize=(12.5, 4.8))
    axes = fig.subplots(1, 2)
    panels = (("xz", "bound_xz", "mean ‖x^k − z^k‖²", "bound γ²δ²G²"),
              ("grad_gap", "bound_stale", "mean ‖∇f(x^k) − ∇f(z^k)‖²", "stale term γ²L²δ²G²"))
    for ax, (q, b, qname, bname) in zip(axes, panels):
        for u, m in enumerate(METHODS):
            ls, lab = ("-", "PD") if m == "pd" else ("--", "RPD")
            ax.plot(S, a[f"{m}_{q}"], "o" + ls, color="C0", ms=4,
                    label=f"{lab}: {qname}{_fit_label(fits, f'{m}/{q}/all')}")
            ax.plot(S, a[f"{m}_{b}"], "s" + ls, color="C3", ms=4,
                    label=f"{lab}: {bname}{_fit_label(fits, f'{m}/{b}/all')}")
        ref = a[f"pd_{b}"][-1] * (S / S[-1]) ** 4
        ax.plot(S, ref, ":", color="0.5", label="∝ S⁴")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("number of stages S")
        ax.set_title(qname + " and its bound", fontsize=9)
        ax.legend(fontsize=6.5)
        ax.grid(True, which="major", alpha=0.3)
    cfg = s["config"]
    fig.suptitle(f"{TITLE}\nrandom quadratic n = {cfg['n']}, d = {cfg['d']}, B = {cfg['batch_size']}, "
                 f"N = {cfg['N']} microbatches (K = N·S), fixed γ = {pow2_label(s['gamma_exp'])}, "
                 f"δ = ⌊S² − S/2⌋; slopes: least squares with 95% CI", fontsize=9)
    if s.get("setting"):
        fig.text(0.01, 0.005, f"quick setting (paper: S = 2..128): {s['setting']}", fontsize=7, color="0.3")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    _save(fig, path, dpi=150)
