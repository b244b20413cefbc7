"""E13: the staleness study under momentum and Adam, with and without the correction arms
(docs/optimizers.md#e13-the-staleness-study-under-momentum-and-adam).

PipeDream (1F1B, weight stashing, NOAM = S) on one random quadratic (fixed n, d, B, data seed;
only its cut into S blocks changes with S), for every optimizer of ``optimizers`` and every arm
of ``arms`` (``none`` or a correction of :mod:`rpd.train.corrections`; ``delay_beta1`` needs a
momentum and is skipped for SGD), at every S of ``S_values`` (S = 1 is staleness-free: the arms
are identities there, so it runs once per optimizer). Each run has the same N microbatches and
the optimizer's whole γ grid (vmapped). Two numbers per (optimizer, arm, S):

- updates to target: the fewest microbatches (= updates of every block) after which
  f − f* ≤ ``target`` · (f(x⁰) − f*), over the γ grid (γ tuned per cell; ∞ if no γ reaches it);
  the slowdown is that count over the same optimizer's at S = 1 (the metric the asynchronous
  pipeline literature reports);
- the stale-read error: the run mean of ‖x^k − z^k‖² (recorded every S + 1 updates) at one γ
  per (optimizer, arm), the tuned γ at the largest S (:func:`tuned`), and its local log-log slopes between
  consecutive S ≥ 2 (the S⁴ study's measure, :mod:`rpd.studies.staleness`, here under each
  optimizer).

``rotate`` runs the quadratic with its Hessian in a random eigenbasis (objective.rotate), ``align``
with its Hessian diagonal (objective.align, the axis-aligned control).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

from rpd import objectives, schedules
from rpd.analysis import tuning
from rpd.plotting.optim_staleness import figure as optim_figure
from rpd.results import StudyOutput
from rpd.runtime.concurrency import run_concurrently
from rpd.studies.staleness import fit_slopes, local_slopes
from rpd.train import methods, optimizers

GRIDS = {"sgd": (-8, 0), "momentum": (-11, -3), "nesterov": (-11, -3), "adam": (-12, -2), "adamw": (-12, -2)}


@dataclasses.dataclass(frozen=True)
class Config:
    """E13 at full size."""

    S_values: tuple[int, ...] = (1, 2, 4, 8, 16)
    n: int = 512
    d: int = 64  # divisible by every S
    batch_size: int = 16
    N: int = 256  # microbatches for every S (K = N·S)
    seed: int = 0
    rotate: bool = False
    align: bool = False  # the Hessian diagonal (objective.align): the axis-aligned control
    optimizers: tuple[str, ...] = ("sgd", "momentum", "adam")
    arms: tuple[str, ...] = ("none", "pipemare_lr", "delay_beta1", "dc_asgd")
    target: float = 1e-3  # f - f* <= target · (f(x⁰) - f*)


QUICK = {
    "S_values": (1, 2, 4),
    "n": 256,
    "d": 32,
    "batch_size": 16,
    "N": 96,
    "optimizers": ("momentum", "adam"),
    "arms": ("none", "pipemare_lr"),
}


def _optimizer(name: str, arm: str):
    return optimizers.make(name, correction=None if arm == "none" else arm)


def _cells(cfg: Config) -> list[tuple[str, str, int]]:
    """(optimizer, arm, S) of every run: S = 1 once per optimizer (arm "none")."""
    cells = []
    for name in cfg.optimizers:
        arms = [a for a in cfg.arms if not (a == "delay_beta1" and not optimizers.entry(name).momentum)]
        for S in cfg.S_values:
            cells += [(name, "none", S)] if S == 1 else [(name, a, S) for a in arms]
    return cells


def objective(cfg: Config, S: int):
    """The random quadratic cut into S blocks (as given, rotated or aligned)."""
    return objectives.random_quadratic(
        cfg.n, cfg.d, S, cfg.batch_size, seed=cfg.seed, rotate=cfg.rotate, align=cfg.align
    )


def _run(cfg: Config, name: str, arm: str, S: int) -> methods.Result:
    obj = objective(cfg, S)
    grid = tuning.pow2_grid(*GRIDS[name])
    tl = schedules.pipedream(S, cfg.N)
    return methods.pipedream(
        obj, tl, grid, axis="block_update", stride=S, diag_stride=S + 1 if S > 1 else 0, optimizer=_optimizer(name, arm)
    )


def updates_to_target(curve_GP: np.ndarray, target: float) -> np.ndarray:
    """float [G]: per γ, the first recorded point (a microbatch count) where the curve is at or
    below ``target`` · curve[:, 0]; inf where it never is (a diverged run's NaN never is)."""
    c = np.asarray(curve_GP, np.float64)
    hit = np.isfinite(c) & (c <= target * c[:, :1])
    return np.where(hit.any(axis=1), np.argmax(hit, axis=1), np.inf).astype(np.float64)


def tuned(res: methods.Result, target: float) -> int:
    """The γ index with the fewest updates to target; where no γ reaches it, the lowest final
    value (NaN: diverged, last)."""
    n = updates_to_target(res.curve, target)
    if np.isfinite(n).any():
        return int(np.argmin(n))
    return int(np.argmin(np.nan_to_num(res.curve[:, -1], nan=np.inf)))


def _xz(res: methods.Result, g: int) -> float:
    diag = res.traces["diag"][g]
    diag = diag[np.all(np.isfinite(diag), axis=1)]
    return float(diag[:, 0].mean()) if diag.size else float("nan")


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    """Every (optimizer, arm, S) run on its γ grid; updates to target, slowdown and ‖x − z‖²."""
    S_values = sorted(cfg.S_values)
    if S_values[0] != 1:
        raise ValueError(f"S_values must start at 1 (the slowdown's reference), got {S_values}")
    bad = [S for S in S_values if cfg.d % S]
    if bad:
        raise ValueError(f"d={cfg.d} must be divisible by every S, not by {bad}")
    unknown = sorted(set(cfg.optimizers) - set(GRIDS))
    if unknown:
        raise ValueError(f"optimizers {unknown} have no γ grid here (known: {sorted(GRIDS)})")
    cells = _cells(cfg)
    results = {}
    for i, res in run_concurrently([functools.partial(_run, cfg, *c) for c in cells], first_alone=False):
        results[cells[i]] = res
        if progress is not None:
            progress("{} {} S={}".format(*cells[i]))

    arrays = {"S": np.asarray(S_values, np.int64)}
    table, verdicts = [], {}
    for name in cfg.optimizers:
        arms = sorted({a for (o, a, _) in cells if o == name}, key=list(cfg.arms).index)
        ref = results[(name, "none", 1)]
        n1 = updates_to_target(ref.curve, cfg.target)
        g1 = int(np.argmin(n1))
        for arm in arms:
            runs = [results[(name, "none" if S == 1 else arm, S)] for S in S_values]
            n_target = np.array([updates_to_target(r.curve, cfg.target).min() for r in runs])
            g_star = np.array([tuned(r, cfg.target) for r in runs])
            gammas = np.array([r.gammas[g] for r, g in zip(runs, g_star)])
            g_fix = g_star[-1]  # the tuned γ at the largest S, for the stale-read error at every S
            xz = np.array([_xz(r, g_fix) if S > 1 else 0.0 for r, S in zip(runs, S_values)])
            key = f"{name}_{arm}"
            arrays[f"{key}_n_target"] = n_target
            arrays[f"{key}_slowdown"] = n_target / n1[g1]
            arrays[f"{key}_gamma"] = gammas
            arrays[f"{key}_xz"] = xz
            S_big = np.asarray(S_values[1:], np.float64)
            ok = np.all(xz[1:] > 0) and len(S_big) >= 2
            loc = local_slopes(S_big, xz[1:]).tolist() if ok else []
            glob = float(fit_slopes(S_big, xz[1:][None])[0]) if ok else float("nan")
            slow = arrays[f"{key}_slowdown"]
            verdicts[key] = {
                "slowdown_at_S_max": float(slow[-1]),
                "slowdown": slow.tolist(),
                "updates_to_target": n_target.tolist(),
                "gamma_exp": [tuning.log2_exponent(g) for g in gammas],
                "xz_gamma_exp": tuning.log2_exponent(runs[-1].gammas[g_fix]),
                "xz_local_slopes": loc,
                "xz_global_slope": glob,
            }
            table.append(
                {
                    "optimizer": name,
                    "arm": arm,
                    "slowdown": [round(float(x), 2) for x in slow],
                    "updates": [int(x) if np.isfinite(x) else None for x in n_target],
                    "xz_local_slopes": [round(x, 2) for x in loc],
                    "xz_slope": round(glob, 2) if np.isfinite(glob) else None,
                }
            )
    summary = {
        "study": "e13_optim_staleness",
        "config": dataclasses.asdict(cfg),
        "objective": f"random quadratic n={cfg.n}, d={cfg.d}, B={cfg.batch_size}, seed {cfg.seed}"
        + (", Hessian rotated (objective.rotate)" if cfg.rotate else "")
        + (", Hessian diagonal (objective.align)" if cfg.align else ""),
        "method": (
            f"PipeDream 1F1B at each S, N={cfg.N} microbatches; updates to target = fewest microbatches "
            f"to f - f* <= {cfg.target:g}·(f(x⁰) - f*) over the optimizer's γ grid; slowdown = that over "
            "S = 1's (same optimizer, no staleness, arms identities); ‖x - z‖² = run mean every S + 1 "
            "updates at the tuned γ of the largest S; local slopes between consecutive S >= 2"
        ),
        "grids": {name: list(GRIDS[name]) for name in cfg.optimizers},
        "measured": verdicts,
    }
    return StudyOutput(arrays=arrays, summary=summary, table=table)


def figure(out: StudyOutput, path) -> None:
    """The figure from saved numbers (:func:`rpd.plotting.optim_staleness.figure`)."""
    optim_figure(out, path)
