"""E1 (docs/science.md#the-papers-experiments): PipeDream against Randomized PipeDream on the random quadratic.

E1 (``Config``, ``run``, ``figure``): f − f* against the block update K for PD (its 1F1B
timeline, cyclic data) and RPD for several delay bounds δ, each at the γ the selector picks on
the same power-of-two grid. The paper's message: at δ = S² − S/2 (= 60 for S = 8) RPD tracks PD.

E8, the best RPD objective against δ, is :mod:`rpd.studies.delta` on the same runs
(:func:`pd_and_rpd`, :func:`select`).

γ is chosen by ``selector`` (default "reference", the rule the paper's γ were chosen by, docs/science.md#step-sizes;
the strict "stable" and "best_final" picks are reported beside it): PD on its curve with tail
``tail_frac`` (0.2), RPD, as the authors did, with tail ``rpd_tail_frac`` (1.0: the whole curve)
on its curve without x⁰ (the first point; ``rpd_skip_x0``).

RPD curves are averaged over ``seeds`` (the RPD sampling seed; the data seed is ``seed``);
γ is selected on the seed-mean curve, so a γ that diverges for any seed is never chosen, and
figures band the selected γ's curves from the smallest to the largest seed. All RPD runs of a
study share one compiled program: every plan runs with one history ring, sized for the
largest delay bound (:func:`rpd.train.plans.ring_size` over all plans).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import numpy as np

from rpd import objectives, schedules
from rpd.analysis import theory, tuning
from rpd.analysis.tuning import AUTHORS_OVERRIDE, RULE_TEXT, selector_rules
from rpd.plotting.pd_vs_rpd import e1_figure
from rpd.results import StudyOutput
from rpd.runtime import concurrency
from rpd.studies import claim_rows, trend
from rpd.train import methods, plans


@dataclasses.dataclass(frozen=True)
class Config:
    """E1 at the paper's size (docs/science.md#the-papers-experiments)."""

    S: int = 8
    n: int = 2000
    d: int = 512
    batch_size: int = 100
    N: int = 400  # microbatches of PD; RPD runs K = N·S block updates
    noam: int = 8
    seed: int = 0  # data seed of the random quadratic
    deltas: tuple[int, ...] = (8, 30, 60, 180, 420)
    gamma_exps: tuple[int, int] = (-8, 0)  # γ grid 2^lo .. 2^hi, for PD and RPD
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)  # RPD sampling seeds (curves averaged / banded)
    selector: str = "reference"  # rule of the drawn γ (rpd.analysis.tuning.RULES); the others reported beside
    tail_frac: float = 0.2  # PD's selector tail
    rpd_tail_frac: float = 1.0  # RPD's selector tail (the authors': the whole curve ...)
    rpd_skip_x0: bool = True  # ... without x⁰, its first point
    stride: int = 1  # record f − f* every `stride` block updates


QUICK = dict(n=400, d=64, batch_size=20, N=100, gamma_exps=(-6, 0), seeds=(0, 1))


def n_steps(cfg) -> int:
    """Units of work ``run`` (and E8's, :mod:`rpd.studies.delta`) report to ``progress``: PD, then
    every (δ, seed)."""
    return 1 + len(cfg.deltas) * len(cfg.seeds)


def setting_text(cfg) -> str:
    """The fields that differ from the paper's setting, for the figure ("" at paper size)."""
    paper = type(cfg)()
    diff = [
        f"{f.name}={getattr(cfg, f.name)}"
        for f in dataclasses.fields(cfg)
        if getattr(cfg, f.name) != getattr(paper, f.name)
    ]
    return ", ".join(diff)


def rpd_sweep(
    obj,
    K: int,
    gammas,
    deltas,
    seeds,
    *,
    stride: int = 1,
    progress: Callable[[str], None] | None = None,
    timeline: schedules.Timeline | None = None,
    workers: int | None = None,
) -> tuple[np.ndarray, np.ndarray, methods.Result | None]:
    """RPD curves for every (δ, seed) on one γ grid, and optionally PD on ``timeline`` (same K):
    (axis [P], curves [n_delta, n_seed, G, P], PD's result or None), all on the block-update
    axis.

    Every run shares one compiled program: plans are sampled first and all run with the largest
    history ring any of them needs and PD's number of gradient slots. Runs are independent, so
    they execute side by side on ``workers`` host threads (:mod:`rpd.runtime.concurrency`)."""
    if timeline is not None and timeline.K != K:
        raise ValueError(f"PD's timeline has K={timeline.K} block updates, the sweep K={K}")
    grid = [[plans.rpd_plan(s, K, obj.S, obj.n_batches, int(dl)) for s in seeds] for dl in deltas]
    pd_plan, n_slots = plans.pipedream_plan(timeline, obj.n_batches) if timeline is not None else (None, 1)
    all_plans = [p for row in grid for p in row] + ([pd_plan] if pd_plan is not None else [])
    C = max(plans.ring_size(p, obj.S) for p in all_plans)
    shared: dict[str, Any] = dict(stride=stride, ring_size=C, n_slots=n_slots, axis="block_update")
    tasks, labels = [], []
    if timeline is not None and pd_plan is not None:  # both or neither
        tasks.append(
            functools.partial(
                methods.run_plan,
                obj,
                pd_plan,
                gammas,
                T=timeline.T,
                method="pd",
                meta=dict(N=timeline.N, T=timeline.T, noam=timeline.noam),
                **shared,
            )
        )
        labels.append("PD")
    for dl, row in zip(deltas, grid):
        for s, plan in zip(seeds, row):
            tasks.append(
                functools.partial(
                    methods.run_plan, obj, plan, gammas, seed=s, method="rpd", meta=dict(delta=int(dl)), **shared
                )
            )
            labels.append(f"RPD δ={dl} seed={s}")
    results = []
    for i, res in concurrency.run_concurrently(tasks, workers=workers):  # in order of i
        results.append(res)
        if progress is not None:
            progress(labels[i])
    pd = results.pop(0) if timeline is not None else None
    axis = results[0].axis
    curves = np.asarray([r.curve for r in results]).reshape((len(deltas), len(seeds)) + results[0].curve.shape)
    return axis, curves, pd


RULES = tuning.RULES


def rules_of(cfg) -> tuple[str, ...]:
    """The configured selector first, then the other rules: all are cheap on the same curves.
    On this interpolating quadratic they disagree: the strict test's CV limit rejects every
    linearly converging tail, so "stable" picks the smallest γ."""
    return selector_rules(cfg.selector)


def select(curves_GxP, gammas, rule, cfg, method: str = "pd") -> tuple[int, tuning.Selection]:
    """PD: tail ``tail_frac`` on the whole curve; RPD: tail ``rpd_tail_frac`` on the curve
    without x⁰ when ``rpd_skip_x0`` (the divergence scale stays x⁰'s value)."""
    c = np.asarray(curves_GxP, np.float64)
    if method == "rpd":
        start = c[:, 0]
        if cfg.rpd_skip_x0:
            c = c[:, 1:]
        sel = tuning.select_gamma(c, gammas, rule=rule, tail_frac=cfg.rpd_tail_frac, start=start)
    else:
        sel = tuning.select_gamma(c, gammas, rule=rule, tail_frac=cfg.tail_frac)
    return (-1 if sel.index is None else sel.index), sel


def pd_and_rpd(cfg, progress):
    obj = objectives.random_quadratic(n=cfg.n, d=cfg.d, S=cfg.S, batch_size=cfg.batch_size, seed=cfg.seed)
    gammas = tuning.pow2_grid(*cfg.gamma_exps)
    tl = schedules.pipedream(cfg.S, cfg.N, cfg.noam)
    axis, rpd_curves, pd = rpd_sweep(
        obj, tl.K, gammas, cfg.deltas, cfg.seeds, stride=cfg.stride, progress=progress, timeline=tl
    )
    if not np.array_equal(axis, pd.axis):
        raise AssertionError("PD and RPD curves must share the block-update axis")
    return obj, gammas, tl, pd, axis, rpd_curves


def _entry(sel: tuning.Selection, idx: int, curve_P) -> dict:
    if idx < 0:
        return dict(gamma=None, gamma_exp=None, rule=sel.rule, final=None, tail_mean=None)
    return dict(
        gamma=sel.gamma,
        gamma_exp=tuning.log2_exponent(sel.gamma),
        rule=sel.rule,
        final=float(curve_P[-1]),
        tail_mean=float(sel.reports[idx].tail_mean),
    )


def log_gap(a_P: np.ndarray, b_P: np.ndarray) -> float:
    """Mean over recorded points of |log10 a − log10 b| (how far apart two curves run)."""
    tiny = np.finfo(np.float64).tiny
    return float(np.mean(np.abs(np.log10(np.maximum(a_P, tiny)) - np.log10(np.maximum(b_P, tiny)))))


def pow2(gamma) -> str | None:
    return None if gamma is None else f"2^{tuning.log2_exponent(gamma)}"


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    """E1: PD and RPD(δ) curves on the γ grid, the γ each selector rule picks (the configured
    rule first), and how closely each RPD curve tracks PD's at the picked γ's: the mean over K
    of |log10 RPD − log10 PD| ("log10_gap_to_pd")."""
    rules = rules_of(cfg)
    obj, gammas, tl, pd, axis, rpd_curves = pd_and_rpd(cfg, progress)
    rpd_mean = rpd_curves.mean(axis=1)  # [n_delta, G, P]; inf/NaN of any seed propagates
    pd_idx = np.full(len(rules), -1, np.int64)
    rpd_idx = np.full((len(rules), len(cfg.deltas)), -1, np.int64)
    by_rule, rows = {}, []
    for u, rule in enumerate(rules):
        pd_idx[u], sel = select(pd.curve, gammas, rule, cfg)
        pd_best = pd.curve[pd_idx[u]] if pd_idx[u] >= 0 else None
        pd_entry, per_delta = _entry(sel, pd_idx[u], pd_best), []
        for i, dl in enumerate(cfg.deltas):
            rpd_idx[u, i], sel = select(rpd_mean[i], gammas, rule, cfg, "rpd")
            j = rpd_idx[u, i]
            e = _entry(sel, j, rpd_mean[i, j] if j >= 0 else None)
            e["delta"] = int(dl)
            e["log10_gap_to_pd"] = log_gap(rpd_mean[i, j], pd_best) if j >= 0 and pd_best is not None else None
            per_delta.append(e)
        gaps = np.array([np.nan if e["log10_gap_to_pd"] is None else e["log10_gap_to_pd"] for e in per_delta])
        closest = None if np.all(np.isnan(gaps)) else int(cfg.deltas[int(np.nanargmin(gaps))])
        by_rule[rule] = dict(pd=pd_entry, rpd=per_delta, closest_delta=closest)
        rows.append(
            dict(
                selector=rule,
                method="PD",
                delta=None,
                gamma=pow2(pd_entry["gamma"]),
                final=pd_entry["final"],
                tail_mean=pd_entry["tail_mean"],
                log10_gap_to_pd=0.0,
            )
        )
        rows += [
            dict(
                selector=rule,
                method="RPD",
                delta=e["delta"],
                gamma=pow2(e["gamma"]),
                final=e["final"],
                tail_mean=e["tail_mean"],
                log10_gap_to_pd=e["log10_gap_to_pd"],
            )
            for e in per_delta
        ]
    delta_pd = theory.pd_delta(cfg.S)
    checks = e1_claim_checks(cfg.deltas, by_rule[rules[0]], delta_pd)
    rows += claim_rows(checks, selector=rules[0], method="paper claim")
    summary = dict(
        study="e1_pd_vs_rpd",
        config=dataclasses.asdict(cfg),
        setting=setting_text(cfg),
        selectors=list(rules),
        K=int(tl.K),
        L=float(obj.L),
        f0=float(pd.curve[0, 0]),
        delta_pd=delta_pd,
        **by_rule,
        claim=f"at δ = S² − S/2 = {delta_pd}, RPD tracks PD",
        checks=checks,
        checks_stable_rule=e1_claim_checks(cfg.deltas, by_rule["stable"], delta_pd),
        selector_text=RULE_TEXT[rules[0]],
        authors_override=AUTHORS_OVERRIDE,
    )
    arrays = dict(
        K=axis,
        gammas=gammas,
        deltas=np.asarray(cfg.deltas, np.int64),
        seeds=np.asarray(cfg.seeds, np.int64),
        pd_curves=pd.curve,
        rpd_curves=rpd_curves,  # [G, P], [n_delta, n_seed, G, P]
        pd_gamma_index=pd_idx,
        rpd_gamma_index=rpd_idx,  # [n_rule], [n_rule, n_delta]; -1: none
    )
    return StudyOutput(arrays=arrays, summary=summary, table=rows)


def e1_claim_checks(deltas, picks: dict, delta_pd: int) -> list[dict]:
    """E1's message as the paper states it, measured at one rule's γ (never used to tune):
    RPD's final worsens as δ grows (a trend: Spearman ρ(δ, final) > 0), and of the δ shown,
    δ = S² − S/2 is the one whose curve runs closest to PD's (mean |log10 RPD − log10 PD|)."""
    fin = np.array([np.nan if e["final"] is None else e["final"] for e in picks["rpd"]])
    gaps = [e["log10_gap_to_pd"] for e in picks["rpd"]]
    rho, ratio = trend(deltas, fin)
    fmt = ", ".join(f"δ={d}: {g:.2f}" for d, g in zip(deltas, gaps) if g is not None)
    out = [
        dict(
            statement="RPD's final worsens as δ grows (trend)",
            holds=bool(rho > 0),
            measured=f"finals {', '.join(f'{v:.3g}' for v in fin)} (PD {picks['pd']['final']:.3g}); "
            f"Spearman ρ(δ, f) = {rho:.2f}",
        )
    ]
    if delta_pd in deltas:
        out.append(
            dict(
                statement=f"at δ = S² − S/2 = {delta_pd} RPD tracks PD (closest δ)",
                holds=picks["closest_delta"] == delta_pd,
                measured=f"closest δ = {picks['closest_delta']}; mean |log10 gap| to PD: {fmt}",
            )
        )
    return out


def figure(out: StudyOutput, path) -> None:
    """E1's figure from the saved output (:func:`rpd.plotting.pd_vs_rpd.e1_figure`)."""
    e1_figure(out, path)
