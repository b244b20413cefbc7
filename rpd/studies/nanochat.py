"""E5 (docs/science.md#the-papers-experiments): PipeDream against LocalSGD on the small character LM, protocol (ii).

PD runs N microbatches on its 1F1B timeline (NOAM = S); its length T = 2N + 2S − 2 is the
time budget. LocalSGD (R replicas, H local steps per round) takes, for every H of ``H_grid``,
the smallest N whose timeline reaches T. Every method runs the whole γ grid.

Metric (the paper's "last-stage forward loss"): at time step t, the minibatch loss of the most
recent microbatch whose forward on the last stage S − 1 ran at or before t (NaN before the
first one). For PD that loss is the core's ``loss_z`` of the microbatch's fresh update (its
first backward, on stage S − 1): weight stashing makes it exactly the loss of the forward pass
F(m, S − 1); for LocalSGD it is the replica's minibatch loss. Curves cover time steps
0..T − 1. γ is chosen per method by ``selector`` (default "reference", the rule the paper's γ
were chosen by, docs/science.md#step-sizes; the strict "stable" rule with the LM thresholds and "best_final" are
reported beside it; ``tuning.LM``, tail ``tail_frac``) on that raw curve from the first
last-stage forward on.
The figure draws it smoothed by a trailing mean over ``smooth_window`` time steps (the raw
curve faint underneath); the held-out loss is PD's at a stride and LocalSGD's at round ends.

PD and the LocalSGD runs share no program and run two at a time on host threads
(``rpd.runtime.concurrency``); every number is the same as one after another (tested).

Paper: PD reaches a clearly lower training loss. The table reports what comes out.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable

import numpy as np

from rpd import schedules
from rpd.analysis import simtime, tuning
from rpd.analysis.tuning import selector_rules
from rpd.objectives import corpus
from rpd.objectives import nanochat as nc
from rpd.plotting.nanochat import figure as nanochat_figure
from rpd.results import Result, StudyOutput
from rpd.runtime.concurrency import default_workers, run_concurrently
from rpd.studies import claim_rows, picks, selection_keys, summary_head
from rpd.train import methods
from rpd.validation import check_int

TITLE = "PD vs. LocalSGD on NanoChat"
CLAIM = "PD reaches a clearly lower training loss"


@dataclasses.dataclass(frozen=True)
class Config:
    """E5 at the paper's size (docs/science.md#the-papers-experiments). Cost on 2 CPU cores: ~25k gradients of ~0.14 s
    (about an hour); see BENCHMARKS.md "NanoChat E5"."""

    S: int = 16  # pipeline stages: embedding, S − 2 transformer blocks, head
    R: int = 16  # LocalSGD replicas
    N: int = 1024  # PD's microbatches; T = PD's timeline length is the budget
    H: tuple[int, ...] = (1, 4, 8)  # LocalSGD local steps drawn in the figure (subset of H_grid)
    H_grid: tuple[int, ...] = (1, 2, 4, 8, 16)  # LocalSGD local steps run (the paper's H grid)
    gamma_exps: tuple[int, int] = (-5, -1)  # γ grid 2^lo .. 2^hi, both methods
    tail_frac: float = 0.2  # selector's tail (LM thresholds)
    selector: str = "reference"  # rule of the drawn γ (rpd.analysis.tuning.RULES); the others reported beside
    batch_size: int = 16
    seq_len: int = 32
    width: int = 64
    heads: int = 4
    text_path: str | None = None  # None: the fetched corpus (python -m rpd.objectives.corpus fetch)
    heldout_frac: float = 0.1
    heldout_batches: int = 8
    heldout_points: int = 32  # PD's held-out loss every ⌈T / heldout_points⌉ time steps
    smooth_window: int = 128  # trailing mean (time steps) of the drawn and reported training loss
    noam: int | None = None  # PD's cap on microbatches in flight (None: S)
    seed: int = 0  # model initialisation


# Laptop size (~40 CPU-s cold): 4 stages (2 transformer blocks), width 32, N = 128, LocalSGD at H = 4
# only (H = 1 shared H = 4's program; it cost its run and a held-out program; N = 256 before).
QUICK = dict(S=4, R=4, N=128, H=(4,), H_grid=(4,), gamma_exps=(-3, -1), width=32, smooth_window=32)


def corpus_identity(cfg: Config) -> str:
    """The SHA-256 of the text this study trains on: part of its stored output's key."""
    return corpus.identity(cfg.text_path)


def n_steps(cfg: Config) -> int:
    """Units of work ``run`` reports to ``progress``: PD, then one per H of ``H_grid``."""
    return 1 + len(cfg.H_grid)


def setting(cfg: Config) -> str:
    return (
        f"S = {cfg.S}, R = {cfg.R}, PD N = {cfg.N}, width {cfg.width}, {cfg.heads} heads, "
        f"B = {cfg.batch_size}, seq {cfg.seq_len}"
    )


def method_keys(cfg: Config) -> list[str]:
    """Array prefixes: "pd", then "localsgd_H{H}" for every H of ``H_grid``."""
    return ["pd"] + [f"localsgd_H{H}" for H in cfg.H_grid]


def last_stage_curve(loss_GxN: np.ndarray, time_N: np.ndarray, T: int) -> np.ndarray:
    """float [G, T]: at time step t, the loss of the most recent microbatch whose last-stage
    forward ran at or before t (``time_N[m]``, increasing in m); NaN before the first."""
    time_N = np.asarray(time_N)
    if np.any(np.diff(time_N) <= 0):
        raise ValueError("last-stage forward times must increase with the microbatch index")
    m_T = np.searchsorted(time_N, np.arange(T), side="right") - 1
    loss = np.asarray(loss_GxN, np.float64)
    return np.where(m_T[None, :] >= 0, loss[:, np.maximum(m_T, 0)], np.nan)


def trailing_mean(curve_GxT: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` points at or before t, over points that are not the leading
    NaNs (before the first last-stage forward); a NaN/inf later on propagates (divergence)."""
    y = np.asarray(curve_GxT, np.float64)
    window = check_int("smooth_window", window)
    started = ~np.all(np.isnan(y), axis=0)  # the same for every γ: the schedule decides it
    out = np.full_like(y, np.nan)
    t0 = int(np.argmax(started)) if started.any() else y.shape[1]
    c = np.concatenate([np.zeros((y.shape[0], 1)), np.cumsum(y[:, t0:], axis=1)], axis=1)
    hi = np.arange(1, c.shape[1])
    lo = np.maximum(hi - window, 0)
    with np.errstate(invalid="ignore"):
        out[:, t0:] = (c[:, hi] - c[:, lo]) / (hi - lo)
    return out


def pd_microbatch_losses(res: Result, tl: schedules.Timeline) -> np.ndarray:
    """float [G, N]: PD's loss_z at each microbatch's fresh update (its first backward, on
    stage S − 1), i.e. the loss of its last-stage forward under weight stashing."""
    _, first_k = np.unique(tl.update_mb, return_index=True)
    if not np.all(tl.update_stage[first_k] == tl.S - 1):
        raise AssertionError("a PD microbatch's first backward is not on the last stage")
    return np.asarray(res.traces["loss_z"])[:, first_k]


def select(
    train_GxT: np.ndarray, gammas: np.ndarray, tail_frac: float, rule: str = "stable"
) -> tuple[tuning.Selection, int]:
    """The selector ``rule`` with the LM thresholds on the raw curve from its first defined
    point; returns the selection and that first time step."""
    t0 = int(np.argmax(~np.all(np.isnan(train_GxT), axis=0)))
    with np.errstate(over="ignore", invalid="ignore"):
        sel = tuning.select_gamma(train_GxT[:, t0:], gammas, rule=rule, tail_frac=tail_frac, thresholds=tuning.LM)
    return sel, t0


def make_objective(cfg: Config):
    return nc.nanochat(
        cfg.S,
        path=cfg.text_path,
        batch_size=cfg.batch_size,
        seq_len=cfg.seq_len,
        width=cfg.width,
        heads=cfg.heads,
        seed=cfg.seed,
        heldout_frac=cfg.heldout_frac,
        heldout_batches=cfg.heldout_batches,
    )


def _check(cfg: Config) -> None:
    if not set(cfg.H) <= set(cfg.H_grid):
        raise ValueError(f"H {cfg.H} must be a subset of H_grid {cfg.H_grid}")
    if len(set(cfg.H_grid)) != len(cfg.H_grid):
        raise ValueError(f"H_grid has repeated values: {cfg.H_grid}")


def _pow2(gamma) -> str | None:
    return None if gamma is None else f"2^{tuning.log2_exponent(gamma)}"


def _fin(v) -> float | None:
    return float(v) if v is not None and np.isfinite(v) else None


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    """PD and LocalSGD (every H of ``H_grid``) on the γ grid at a common time budget T; the
    selected γ per method, its final smoothed training loss at T and its final held-out loss."""
    _check(cfg)
    rules = selector_rules(cfg.selector)
    report = progress or (lambda msg: None)
    obj = make_objective(cfg)
    gammas = tuning.pow2_grid(*cfg.gamma_exps)
    S = cfg.S
    pd_tl = schedules.pipedream(S, cfg.N, cfg.noam)
    T = pd_tl.T
    stride = max(1, math.ceil(T / cfg.heldout_points))
    cells: list[tuple[str, int | None, schedules.Timeline]] = [("pd", None, pd_tl)]

    def localsgd_tl(H: int) -> schedules.Timeline:
        return simtime.smallest_n_reaching(T, lambda n: schedules.local_sgd(S, n, cfg.R, H))

    cells += [(f"localsgd_H{H}", H, localsgd_tl(H)) for H in cfg.H_grid]

    def run_cell(H, tl):
        if H is None:
            return simtime.per_tick(methods.pipedream(obj, tl, gammas, seed=cfg.seed, stride=stride), tl)
        return methods.local_sgd(obj, tl, gammas, seed=cfg.seed, track_time=False)

    # The runs share no program, so they start side by side on host threads: one LM gradient
    # keeps ~1.4 of 2 cores busy, two all of them (paper size: 16.2 min against 21 min one
    # after another). At most two at once: a paper-size LocalSGD run holds ~5.6 GB of XLA
    # temporaries (80 replica gradients), PD's ~1.9 GB (BENCHMARKS.md, E5); RPD_WORKERS=1
    # runs them one after another.
    tasks = [functools.partial(run_cell, H, tl) for _, H, tl in cells]
    runs = []
    for i, res in run_concurrently(tasks, workers=min(2, default_workers()), first_alone=False):
        key, H, tl = cells[i]
        runs.append((key, H, tl, res))
        report("PD" if H is None else f"LocalSGD H={H}")

    arrays: dict[str, np.ndarray] = {"time": np.arange(T)}
    entries, rows = [], []
    for key, H, tl, res in runs:
        loss_GxN = pd_microbatch_losses(res, tl) if H is None else np.asarray(res.traces["loss_z"])
        time_N = tl.f_time[:, S - 1]
        train = last_stage_curve(loss_GxN, time_N, T)
        smooth = trailing_mean(train, cfg.smooth_window)
        sels = {u: select(train, gammas, cfg.tail_frac, u)[0] for u in rules}
        sel, t0 = sels[cfg.selector], int(np.argmax(~np.all(np.isnan(train), axis=0)))
        idx = -1 if sel.index is None else sel.index
        arrays.update(
            {
                f"{key}_gammas": gammas,
                f"{key}_train": train,
                f"{key}_train_smooth": smooth,
                f"{key}_mb_loss": loss_GxN,
                f"{key}_mb_time": time_N,
                f"{key}_heldout": res.curve,
                f"{key}_heldout_time": res.axis,
            }
        )
        # the method's own per-update trace, so the curve can be checked against it
        arrays[f"{key}_loss_z" if H is None else f"{key}_loss_time"] = (
            res.traces["loss_z"] if H is None else res.traces["loss_time"]
        )
        final_smooth = None if idx < 0 else _fin(smooth[idx, -1])
        # standard error of the final window's mean over the microbatches it holds (a noise scale)
        in_win = (time_N >= T - cfg.smooth_window) & (time_N < T)
        sem = (
            None
            if idx < 0 or in_win.sum() < 2
            else _fin(np.std(loss_GxN[idx, in_win], ddof=1) / math.sqrt(in_win.sum()))
        )
        entry = dict(
            key=key,
            method="PD" if H is None else "LocalSGD",
            H=H,
            N=int(tl.N),
            T_own=int(tl.T),
            gamma_index=idx,
            gamma=None if idx < 0 else sel.gamma,
            gamma_exp=None if idx < 0 else tuning.log2_exponent(sel.gamma),
            rule=sel.rule,
            first_loss_time=t0,
            train_smooth_final=final_smooth,
            train_final_sem=sem,
            train_raw_final=None if idx < 0 else _fin(train[idx, -1]),
            tail_mean=None if idx < 0 else _fin(sel.reports[idx].tail_mean),
            heldout_final=None if idx < 0 else _fin(res.curve[idx, -1]),
            heldout_final_time=int(res.axis[-1]),
            shown=H is None or H in cfg.H,
            by_rule=picks(sels, train_smooth_final=lambda i: _fin(smooth[i, -1])),
            gamma_reports=[
                dict(
                    gamma_exp=tuning.log2_exponent(r.gamma),
                    stable=r.stable,
                    diverged=r.diverged,
                    tail_mean=_fin(r.tail_mean),
                    train_smooth_final=_fin(smooth[i, -1]),
                    heldout_final=_fin(res.curve[i, -1]),
                    reasons=list(r.reasons),
                )
                for i, r in enumerate(sel.reports)
            ],
        )
        entries.append(entry)
        rows.append(
            dict(
                method=entry["method"],
                H=H,
                N=entry["N"],
                T_own=entry["T_own"],
                gamma=_pow2(entry["gamma"]),
                rule=sel.rule,
                stable_gamma=_pow2(sels["stable"].gamma if sels["stable"].index is not None else None),
                train_loss_smoothed_at_T=final_smooth,
                train_loss_sem=sem,
                heldout_loss_final=entry["heldout_final"],
            )
        )
    checks = claim_checks(entries)
    rows += claim_rows(checks, method="paper claim")
    summary = dict(
        **summary_head("e5_nanochat", TITLE, setting(cfg), cfg),
        T=T,
        heldout_stride=stride,
        smooth_window=cfg.smooth_window,
        D=obj.D,
        stage_sizes=list(obj.layout.sizes),
        vocab_size=obj.meta["vocab_size"],
        corpus=obj.meta["source"],
        n_batches=obj.n_batches,
        methods=entries,
        claim=CLAIM,
        checks=checks,
        **selection_keys(cfg.selector, rules),
    )
    return StudyOutput(arrays=arrays, summary=summary, table=rows)


def claim_checks(entries: list[dict]) -> list[dict]:
    """The paper's statement as a measured fact at T (never used to tune): PD's smoothed
    training loss against the best LocalSGD over the whole H grid."""
    final = {e["key"]: (np.inf if e["train_smooth_final"] is None else e["train_smooth_final"]) for e in entries}
    sem = {e["key"]: e["train_final_sem"] or 0.0 for e in entries}
    pd = final.pop("pd")
    if not final:
        return []
    best = min(final, key=final.__getitem__)
    gap = final[best] - pd
    noise = math.hypot(sem["pd"], sem[best])
    return [
        dict(
            statement="PD ends below every LocalSGD (smoothed training loss at T)",
            holds=bool(pd < final[best]),
            measured=f"PD {pd:.4g} vs best LocalSGD ({best}) {final[best]:.4g}: gap {gap:+.3g} "
            f"({gap / max(noise, 1e-300):+.1f} standard errors of the window means)",
        )
    ]


def figure(out: StudyOutput, path) -> None:
    """The figure, drawn from the saved output (:func:`rpd.plotting.nanochat.figure`)."""
    nanochat_figure(out, path)
