"""The S⁴ study (docs/science.md#theory): how the stale-read error grows with the number of stages S.

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

The whole study is repeated over ``n_seeds`` seeds (seed i: data seed ``seed + i`` and RPD plan
seed ``rpd_seed + i``; the fixed γ is chosen on seed 0 and must converge on every seed). The
exponents are reported three ways, each as the mean over seeds with a t-based 95% CI across
seeds (mean ± t_{0.975, n_seeds − 1} · sd/√n_seeds, :func:`seed_ci`):

- global: one least-squares log-log fit over every S, per seed;
- local: the slope (log y_{i+1} − log y_i)/(log S_{i+1} − log S_i) between consecutive S, per
  seed (:func:`local_slopes`) -- whether the curve steepens;
- large-S: the least-squares fit over S >= ``large_S`` (the last few S), per seed.

The pooled fits of earlier versions (:func:`rpd.analysis.theory.loglog_fit` on the seeds' geometric mean,
CI from the scatter about the line) stay in ``fits``. All are reported as measured next to the
bound's 4.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import stats

from rpd import objectives, schedules
from rpd.analysis import theory, tuning
from rpd.plotting.staleness import figure as staleness_figure
from rpd.results import StudyOutput
from rpd.train import methods

METHODS = ("pd", "rpd")
# measured quantity -> the bound it is compared with in the same panel
QUANTITIES = {"xz": "bound_xz", "grad_gap": "bound_stale"}


@dataclasses.dataclass(frozen=True)
class Config:
    """The S⁴ study at full size (docs/science.md#theory: S = 2..128)."""

    S_values: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128, 256)
    n: int = 1024
    d: int = 512  # divisible by max(S_values): even blocks for every power of two
    batch_size: int = 32
    N: int = 512  # microbatches for every S (K = N·S); N >= 2·max S keeps PD mostly in steady state
    seed: int = 0  # data seed of seed 0 (seed i uses seed + i)
    rpd_seed: int = 0  # RPD plan seed of seed 0 (seed i uses rpd_seed + i)
    n_seeds: int = 4  # repetitions over (data, RPD) seeds: the CIs of the exponents are across them
    # candidate fixed γ's, largest first; 2^-6 and 2^-7 fail at S = 256 (recorded in gamma_trail),
    # so the grid's top is above the pick and the narrower grid picks what (-12, -2) would
    gamma_exps: tuple[int, int] = (-10, -6)
    large_S: int = 64  # the large-S exponent: fit over S >= large_S (64, 128, 256)


QUICK = {"S_values": (2, 4, 8), "n": 256, "d": 128, "N": 64, "n_seeds": 3, "gamma_exps": (-9, -3), "large_S": 4}

CONFIDENCE = 0.95


def n_steps(cfg: Config) -> int:
    """Units of work reported to ``progress`` when the first γ holds: the grid at the largest S,
    then PD and RPD for every other (S, seed)."""
    return 1 + 2 * (len(cfg.S_values) * cfg.n_seeds - 1)


def seed_ci(values, confidence: float = CONFIDENCE) -> tuple[Any, tuple[Any, Any]]:
    """Mean over seeds (axis 0) and its t-based CI: mean ± t_{(1+c)/2, n−1} · sd/√n (sd with
    n − 1). With one seed the CI is (nan, nan). Works elementwise on [n_seeds, ...] arrays
    (returns arrays then)."""
    v = np.asarray(values, np.float64)
    n = v.shape[0]
    mean = v.mean(axis=0)
    if n < 2:
        nan = np.full_like(mean, np.nan)
        return _scalar(mean), (_scalar(nan), _scalar(nan))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * v.std(axis=0, ddof=1) / np.sqrt(n)
    return _scalar(mean), (_scalar(mean - half), _scalar(mean + half))


def _scalar(x):
    return float(x) if np.ndim(x) == 0 else x


def local_slopes(S, Y) -> np.ndarray:
    """Log-log slopes between consecutive S: (log Y[..., i+1] − log Y[..., i]) /
    (log S[i+1] − log S[i]), shape [..., len(S) − 1]. S increasing, Y > 0."""
    lS, lY = np.log(np.asarray(S, np.float64)), np.log(np.asarray(Y, np.float64))
    if lS.ndim != 1 or lY.shape[-1] != lS.size or lS.size < 2 or np.any(np.diff(lS) <= 0):
        raise ValueError(
            f"S must be 1-D increasing with >= 2 values matching Y's last axis, got {lS.shape}, {lY.shape}"
        )
    return np.diff(lY, axis=-1) / np.diff(lS)


def fit_slopes(S, Y) -> np.ndarray:
    """Least-squares log-log slope of every row of Y ([n_seeds, len(S)]) against S."""
    lS, lY = np.log(np.asarray(S, np.float64)), np.log(np.atleast_2d(np.asarray(Y, np.float64)))
    xc = lS - lS.mean()
    return (lY - lY.mean(axis=1, keepdims=True)) @ xc / float(xc @ xc)


def exponents(S, Y, large_S: int, confidence: float = CONFIDENCE) -> dict:
    """Global, local and large-S log-log exponents of Y ([n_seeds, len(S)], > 0) against S, each
    the mean over seeds with its t-based CI across seeds (:func:`seed_ci`)."""
    S = np.asarray(S, np.float64)
    Y = np.atleast_2d(np.asarray(Y, np.float64))
    big = S >= large_S
    if big.sum() < 2:
        raise ValueError(f"large_S={large_S} leaves fewer than 2 S values in {S.tolist()}")
    g, gci = seed_ci(fit_slopes(S, Y), confidence)
    lg, lgci = seed_ci(fit_slopes(S[big], Y[:, big]), confidence)
    loc, (llo, lhi) = seed_ci(local_slopes(S, Y), confidence)
    return {
        "global_slope": g,
        "global_ci": list(gci),
        "large_S_slope": lg,
        "large_S_ci": list(lgci),
        "large_S_range": f"{int(S[big].min())}..{int(S[big].max())}",
        "local": [
            {"S_lo": int(S[i]), "S_hi": int(S[i + 1]), "slope": float(loc[i]), "ci": [float(llo[i]), float(lhi[i])]}
            for i in range(S.size - 1)
        ],
        "n_seeds": int(Y.shape[0]),
        "confidence": confidence,
    }


def converging(curve_P: np.ndarray, f0: float) -> bool:
    """A run at a usable fixed γ: finite, never above its start, ends below half of it, and its
    tail does not grow (the stable selector's log-slope test). The selector's CV test is not
    used: it rejects every linearly converging tail, and these quadratics converge linearly."""
    if not np.all(np.isfinite(curve_P)):
        return False
    rep = tuning.gamma_report(curve_P, 1.0)
    return bool(curve_P.max() <= f0 and curve_P[-1] <= 0.5 * f0 and rep.log_slope <= tuning.DEFAULT.max_log_slope)


def _objective(cfg: Config, S: int, seed: int = 0):
    return objectives.random_quadratic(n=cfg.n, d=cfg.d, S=S, batch_size=cfg.batch_size, seed=cfg.seed + seed)


def _runs(cfg: Config, S: int, gammas, diag: bool, seed: int = 0):
    """PD and RPD at S on the γ's for seed index ``seed``: {method: Result}; one point per
    microbatch (stride S)."""
    obj = _objective(cfg, S, seed)
    tl = schedules.pipedream(S, cfg.N)
    ds = S + 1 if diag else 0
    pd = methods.pipedream(obj, tl, gammas, axis="block_update", stride=S, diag_stride=ds)
    rp = methods.rpd(obj, tl.K, gammas, theory.pd_delta(S), seed=cfg.rpd_seed + seed, stride=S, diag_stride=ds)
    return obj, {"pd": pd, "rpd": rp}


def measure(obj, res: methods.Result, g: int, S: int, delta: int, gamma: float) -> dict:
    """Run means of the diagnostics for grid index g, and the bound's terms from the run's G."""
    diag = res.traces["diag"][g]  # [K, 3], NaN where not recorded
    diag = diag[np.all(np.isfinite(diag), axis=1)]
    K = res.traces["block_grad_norm"].shape[1]
    f0 = float(res.curve[g, 0])
    rb = theory.bound_from_run(res.traces["block_grad_norm"][g], gamma, S, K, obj.L, delta, f0 + obj.f_star, obj.f_star)
    return {
        "xz": float(diag[:, 0].mean()),
        "grad_gap": float(diag[:, 1].mean()),
        "grad_sq": float(diag[:, 2].mean()),
        "n_diag": int(diag.shape[0]),
        "G": rb.G,
        "bound_stale": rb.at_gamma.stale,
        "bound_xz": gamma**2 * delta**2 * rb.G**2,  # the proof's bound on ‖x − z‖²
        "stale_tuned": theory.stale_term_tuned(obj.L, delta, K, f0 + obj.f_star, obj.f_star),
        "final": float(res.curve[g, -1]),
    }


def _converging_grid(res: methods.Result) -> np.ndarray:
    return np.array([converging(res.curve[i], float(res.curve[i, 0])) for i in range(len(res.gammas))])


FIT_QUANTITIES = ("xz", "grad_gap", "bound_xz", "bound_stale", "stale_tuned")


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    """Measure mean ‖x − z‖², ‖∇f(x) − ∇f(z)‖² and the bound's stale term for every S and seed
    at one fixed γ, on PD and RPD, and fit their log-log slopes in S (global, local, large-S).

    The largest S runs the whole candidate grid on seed 0 (with diagnostics, so it is also that
    (S, seed)'s measurement); the fixed γ is the largest candidate whose PD and RPD runs both
    converge there; every other (S, seed) runs at that γ alone, and γ is halved (within the grid)
    while any run fails."""
    S_values = sorted(cfg.S_values)
    if max(S_values) > cfg.d:
        raise ValueError(f"every S must be <= d={cfg.d}, got max S = {max(S_values)}")
    if cfg.n_seeds < 1:
        raise ValueError(f"n_seeds must be >= 1, got {cfg.n_seeds}")
    S_max = S_values[-1]
    seeds = range(cfg.n_seeds)
    grid = tuning.pow2_grid(*cfg.gamma_exps)[::-1]  # largest first
    obj_max, res_max = _runs(cfg, S_max, grid, diag=True)
    ok = {m: _converging_grid(res_max[m]) for m in METHODS}
    trail = [
        {
            "S": S_max,
            "seed": 0,
            "method": m,
            "converging": {f"2^{tuning.log2_exponent(g)}": bool(o) for g, o in zip(grid, ok[m])},
        }
        for m in METHODS
    ]
    if progress is not None:
        progress(f"γ grid at S={S_max}")
    candidates = [i for i in range(len(grid)) if all(ok[m][i] for m in METHODS)]
    if not candidates:
        raise RuntimeError(
            f"no γ in 2^{cfg.gamma_exps[0]}..2^{cfg.gamma_exps[1]} converges at S={S_max}; lower gamma_exps"
        )
    for gi in range(candidates[0], len(grid)):
        gamma = float(grid[gi])
        if not all(ok[m][gi] for m in METHODS):
            continue
        rows: dict[str, list[list[dict]]] = {m: [[] for _ in seeds] for m in METHODS}
        failed = []
        for seed in seeds:
            for S in S_values:
                if seed == 0 and S == S_max:
                    obj, res, g = obj_max, res_max, gi
                else:
                    obj, res = _runs(cfg, S, np.array([gamma]), diag=True, seed=seed)
                    g = 0
                for m in METHODS:
                    if not converging(res[m].curve[g], float(res[m].curve[g, 0])):
                        failed.append({"S": S, "seed": seed, "method": m})
                    rows[m][seed].append(measure(obj, res[m], g, S, theory.pd_delta(S), gamma))
                    if progress is not None and g == 0:
                        progress(f"{m.upper()} S={S} seed={seed}")
        trail.append({"gamma_exp": tuning.log2_exponent(gamma), "failed": failed})
        if not failed:
            break

    S_arr = np.asarray(S_values, np.float64)
    arrays = {
        "S": np.asarray(S_values, np.int64),
        "delta": np.array([theory.pd_delta(S) for S in S_values]),
        "gamma": np.asarray(gamma),
        "seeds": np.arange(cfg.n_seeds),
    }
    for m in METHODS:
        for key in rows[m][0][0]:
            v = np.array([[r[key] for r in rows[m][i]] for i in seeds])  # [n_seeds, n_S]
            arrays[f"{m}_{key}_by_seed"] = v
            # the seeds' geometric mean (what the pooled fits and the figure's lines use)
            arrays[f"{m}_{key}"] = np.exp(np.log(v).mean(axis=0)) if np.all(v > 0) else v.mean(axis=0)
    fits, table, expo = {}, [], {}
    for m in METHODS:
        for q in FIT_QUANTITIES:
            bound_exp = 4 if q != "stale_tuned" else 3
            y = arrays[f"{m}_{q}"]
            for name, keep in (("all", S_arr > 0), ("large", S_arr >= cfg.large_S)):
                if keep.sum() < 3 or not np.all(y[keep] > 0):
                    continue
                f = theory.loglog_fit(S_arr[keep], y[keep])
                fits[f"{m}/{q}/{name}"] = {
                    "slope": f.slope,
                    "ci": list(f.slope_ci),
                    "intercept": f.intercept,
                    "r2": f.r2,
                    "n": f.n,
                }
            Y = arrays[f"{m}_{q}_by_seed"]
            if np.all(Y > 0):
                e = exponents(S_arr, Y, cfg.large_S)
                expo[f"{m}/{q}"] = dict(e, bound_exponent=bound_exp)
                table.append(
                    {
                        "method": m.upper(),
                        "quantity": q,
                        "S_range": f"{S_values[0]}..{S_values[-1]}",
                        "slope": round(e["global_slope"], 3),
                        "ci95": _r(e["global_ci"]),
                        "large_S_range": e["large_S_range"],
                        "large_S_slope": round(e["large_S_slope"], 3),
                        "large_S_ci95": _r(e["large_S_ci"]),
                        "local": [round(x["slope"], 2) for x in e["local"]],
                        "bound_exponent": bound_exp,
                    }
                )
    summary = {
        "study": "staleness_scaling",
        "config": dataclasses.asdict(cfg),
        "setting": _setting(cfg),
        "gamma": gamma,
        "gamma_exp": tuning.log2_exponent(gamma),
        "gamma_trail": trail,
        "gamma_rule": (
            "largest power of two in the grid whose PD and RPD runs converge at the largest S on seed 0 "
            "(finite, never above f(x⁰) − f*, final below half of it, tail log-slope <= 1e-4), "
            "then checked at every S and seed (halved while any run fails)"
        ),
        "converged_everywhere": not trail[-1]["failed"],
        "objective": f"random quadratic n={cfg.n}, d={cfg.d}, B={cfg.batch_size}, data seeds {cfg.seed}.."
        f"{cfg.seed + cfg.n_seeds - 1}, RPD seeds {cfg.rpd_seed}..{cfg.rpd_seed + cfg.n_seeds - 1}; "
        f"same N={cfg.N} microbatches for every S (K = N·S)",
        "fits": fits,
        "exponents": expo,
        "exponent_method": (
            f"per seed: global = least-squares log-log slope over all S, large-S = the same over "
            f"S >= {cfg.large_S}, local = slope between consecutive S; reported as the mean over "
            f"{cfg.n_seeds} seeds ± t_(0.975, {cfg.n_seeds - 1})·sd/√{cfg.n_seeds} (95% CI across seeds)"
        ),
        "claim": "bound: stale-read term γ²L²δ²G² = Θ(S⁴) at fixed γ (Θ(S⁴/K) = Θ(S³) at the tuned γ with K = N·S)",
    }
    return StudyOutput(arrays=arrays, summary=summary, table=table)


def _r(ci) -> list:
    return [round(c, 3) for c in ci]


def _setting(cfg: Config) -> str:
    paper = Config()
    return ", ".join(
        f"{f.name}={getattr(cfg, f.name)}"
        for f in dataclasses.fields(cfg)
        if getattr(cfg, f.name) != getattr(paper, f.name)
    )


def figure(out: StudyOutput, path) -> None:
    """The figure, drawn from the saved output (:func:`rpd.plotting.staleness.figure`)."""
    staleness_figure(out, path, METHODS)
