"""E11's analysis (``rpd.studies.costs_crossover``): the winner of every rung, where it changes
along the α ladder (the crossover), the table rows, and the paper's two claims measured on every
rung. Pure functions of the runs' numbers, no computation of curves."""

from __future__ import annotations

import math
from typing import Any

from rpd.analysis.crossover import crossover_point, fmt
from rpd.studies.costs_config import Config

CLAIMS = {
    "quadratic": "E3: PD beats every LocalSGD H on Nesterov's quadratic",
    "logistic": "E6: at fixed time LocalSGD (R = S, H = 5) beats PD for S >= 4 on logistic regression",
}
UNIT = "unit"


def _value(run: dict, rule: str) -> float:
    v = run["f_at_budget"] if rule == "stable" else run["best_final"]
    return math.inf if v is None else float(v)


def winner(f_pd: float, f_ls: float) -> str:
    """The lower f − f* at the budget wins; a tie goes to PD (the method without averaging)."""
    return "PD" if f_pd <= f_ls else "LocalSGD"


def crossover(alphas, f_pd, f_ls) -> dict:
    """Where the winner changes along a series' α rungs (values at the budget, one per rung).

    ``from``/``to``: the winner at α = alphas[0] and the other one (``to`` None if it never
    wins); ``alpha_lo``/``alpha_hi``: the last rung of the first winner and the first rung of the
    other; ``alpha_star``: log(f_ls / f_pd) interpolated linearly in log2(1 + α) between them to
    0 (None when a value there is not finite and positive); ``frac``: the crossing's position
    between the two rungs in [0, 1]; ``switches``: every rung where the winner differs from the
    rung before (more than one: the ladder is not monotone, the first one is reported)."""
    a = [float(x) for x in alphas]
    w = [winner(p, q) for p, q in zip(f_pd, f_ls)]
    switches = [a[i] for i in range(1, len(w)) if w[i] != w[i - 1]]
    out: dict[str, Any] = dict(
        winners=w,
        switches=switches,
        monotone=len(switches) <= 1,
        alpha_lo=None,
        alpha_hi=None,
        alpha_star=None,
        frac=None,
        **{"from": w[0] if w else None, "to": None},
    )
    if not switches:
        return out
    i = next(j for j in range(1, len(w)) if w[j] != w[0])
    out.update(to=w[i], alpha_lo=a[i - 1], alpha_hi=a[i])
    r: list[float | None] = []
    for j in (i - 1, i):
        p, q = float(f_pd[j]), float(f_ls[j])
        r.append(math.log(q / p) if (math.isfinite(p) and math.isfinite(q) and p > 0 and q > 0) else None)
    r0, r1 = r
    if r0 is not None and r1 is not None and r0 != r1:
        x0, x1 = math.log2(1 + a[i - 1]), math.log2(1 + a[i])
        frac = min(1.0, max(0.0, -r0 / (r1 - r0)))
        out.update(frac=frac, alpha_star=2 ** (x0 + frac * (x1 - x0)) - 1)
    return out


def make_series(cfg: Config, runs: list[dict], panel: str, S: int, c: int) -> dict:
    """One (panel, S, c) series: per rung (unit first, then the α ladder) PD's and the best
    LocalSGD's f − f* at the budget under both selectors, and the crossover along the α rungs."""
    by = {}
    for r in runs:
        if r["panel"] == panel and r["S"] == S:
            by[(r["level"], r["method"], r["H"])] = r
    Hs = cfg.quad_H if panel == "quadratic" else (cfg.log_H,)
    pd_series = by[(f"c{c}_a{cfg.alphas[0]:g}", "pd", None)]  # PD ran once per c (it never averages)
    pd_of = {UNIT: by[(UNIT, "pd", None)], **{f"c{c}_a{a:g}": pd_series for a in cfg.alphas}}
    rungs = []
    for key, alpha in [(UNIT, None)] + [(f"c{c}_a{a:g}", a) for a in cfg.alphas]:
        pd = pd_of[key]
        ls = {H: by[(key, "localsgd", H)] for H in Hs}
        rung = dict(
            level=key,
            alpha=alpha,
            budget=pd["budget"],
            pd_N=pd["N"],
            ls_N={str(H): ls[H]["N"] for H in Hs},
            avg_ticks=ls[Hs[0]]["avg_ticks"],
            pd_gamma_exp=pd["gamma_exp"],
            ls_gamma_exp={str(H): ls[H]["gamma_exp"] for H in Hs},
        )
        for rule in ("stable", "best_final"):
            f_ls = {H: _value(ls[H], rule) for H in Hs}
            best_H = min(Hs, key=lambda H: (f_ls[H], H))
            f_pd = _value(pd, rule)
            rung[rule] = dict(
                f_pd=f_pd if math.isfinite(f_pd) else None,
                f_ls={str(H): (v if math.isfinite(v) else None) for H, v in f_ls.items()},
                best_H=best_H,
                f_ls_best=f_ls[best_H] if math.isfinite(f_ls[best_H]) else None,
                ratio=(
                    f_ls[best_H] / f_pd if f_pd > 0 and math.isfinite(f_pd) and math.isfinite(f_ls[best_H]) else None
                ),
                winner=winner(f_pd, f_ls[best_H]),
            )
        rungs.append(rung)
    ladder = rungs[1:]
    cross = {}
    for rule in ("stable", "best_final"):
        pd_rungs = [math.inf if r[rule]["f_pd"] is None else r[rule]["f_pd"] for r in ladder]
        ls_rungs = [math.inf if r[rule]["f_ls_best"] is None else r[rule]["f_ls_best"] for r in ladder]
        cross[rule] = crossover(cfg.alphas, pd_rungs, ls_rungs)
    return dict(panel=panel, S=S, c=c, rungs=rungs, crossover=cross["stable"], crossover_best_final=cross["best_final"])


def describe(x: dict, alphas) -> str:
    """A crossover in words, e.g. "PD from α ≈ 37 (between 16 and 64)"."""
    if x["to"] is None:
        return f"{x['from']} at every α up to {max(alphas):g} (no crossover)"
    star = "" if x["alpha_star"] is None else f" ≈ {x['alpha_star']:.3g}"
    text = f"{x['to']} from α{star} (between {x['alpha_lo']:g} and {x['alpha_hi']:g})"
    if not x["monotone"]:
        text += f"; not monotone: the winner also changes at α = {', '.join(f'{s:g}' for s in x['switches'][1:])}"
    return text


def table_rows(series: list[dict]) -> list[dict]:
    """The answer first: one crossover row per series; then one row per rung (the unit rung
    once per panel and S: it is the same in every c series)."""
    rows = []
    for s in series:
        alphas = [r["alpha"] for r in s["rungs"][1:]]
        rows.append(
            dict(
                panel=s["panel"],
                S=s["S"],
                c=s["c"],
                alpha="crossover",
                winner=describe(s["crossover"], alphas),
                winner_best_final=describe(s["crossover_best_final"], alphas),
            )
        )
    seen = set()
    for s in series:
        for r in s["rungs"]:
            if r["alpha"] is None and (s["panel"], s["S"]) in seen:
                continue
            seen.add((s["panel"], s["S"]))
            st, bf = r["stable"], r["best_final"]
            rows.append(
                dict(
                    panel=s["panel"],
                    S=s["S"],
                    c=s["c"] if r["alpha"] is not None else "-",
                    alpha="unit" if r["alpha"] is None else r["alpha"],
                    avg_ticks=r["avg_ticks"],
                    budget=r["budget"],
                    pd_N=r["pd_N"],
                    ls_N=" ".join(str(v) for v in r["ls_N"].values()),
                    f_pd=st["f_pd"],
                    f_ls_best=st["f_ls_best"],
                    best_H=st["best_H"],
                    ratio=st["ratio"],
                    winner=st["winner"],
                    winner_best_final=bf["winner"],
                )
            )
    return rows


def claim_checks(cfg: Config, series: list[dict]) -> list[dict]:
    """The paper's two messages, measured on every rung (claim, measured, holds, verdict)."""
    alphas = cfg.alphas
    out = []
    quad = [s for s in series if s["panel"] == "quadratic"]
    unit = quad[0]["rungs"][0]["stable"]
    pd_all = all(r["stable"]["winner"] == "PD" for s in quad for r in s["rungs"])
    parts = [f"unit: best LocalSGD / PD = {fmt(unit['ratio'])}"]
    for s in quad:
        lad = s["rungs"][1:]
        parts.append(
            f"c = {s['c']}: {fmt(lad[0]['stable']['ratio'])} at α = {alphas[0]:g}, "
            f"{fmt(lad[-1]['stable']['ratio'])} at α = {alphas[-1]:g}"
        )
    verdict = "; ".join(
        f"c = {s['c']}: {describe(s['crossover'], alphas)} [best final: {describe(s['crossover_best_final'], alphas)}]"
        for s in quad
    )
    out.append(
        dict(
            claim=CLAIMS["quadratic"] + " -- on every rung?",
            holds=bool(pd_all),
            measured="; ".join(parts),
            verdict=verdict,
        )
    )

    log = [s for s in series if s["panel"] == "logistic"]
    for c in cfg.p2p:
        ss = [s for s in log if s["c"] == c]
        wins0 = [s["S"] for s in ss if s["rungs"][1]["stable"]["winner"] == "LocalSGD"]
        unit_wins = [s["S"] for s in ss if s["rungs"][0]["stable"]["winner"] == "LocalSGD"]
        big = [s["S"] for s in ss if s["S"] >= 4]
        stars = []
        for s in ss:
            x = s["crossover"]
            if x["from"] == "PD" and x["to"] is None:
                stars.append(f"S={s['S']}: PD throughout")
            elif x["from"] == "LocalSGD" and x["to"] is None:
                stars.append(f"S={s['S']}: LocalSGD throughout (> {alphas[-1]:g})")
            else:
                stars.append(f"S={s['S']}: {x['from']} -> {describe(x, alphas)}")
        grows = crossover_grows(ss, alphas)
        out.append(
            dict(
                claim=f"{CLAIMS['logistic']} -- at tB = {cfg.tB}tF, c = {c}, α = {alphas[0]:g}, and how far in α",
                holds=bool(big and set(big) <= set(wins0)),
                measured=(
                    f"LocalSGD wins at S = {wins0} at α = {alphas[0]:g} (unit costs: S = {unit_wins}); "
                    f"PD takes over: " + "; ".join(stars)
                ),
                verdict=(
                    f"the crossover α grows with S over the S where LocalSGD starts ahead: {grows}"
                    if grows is not None
                    else "LocalSGD is ahead at α = 0 for fewer than two S"
                ),
            )
        )
    return out


def crossover_grows(ss: list[dict], alphas) -> bool | None:
    """Whether the point where PD overtakes LocalSGD is non-decreasing in S (over the S where
    LocalSGD starts ahead); None for fewer than two such S."""
    found = [crossover_point(s["crossover"], alphas) for s in sorted(ss, key=lambda s: s["S"])]
    pts = [p for p in found if p is not None]
    if len(pts) < 2:
        return None
    return bool(all(b >= a for a, b in zip(pts, pts[1:])))
