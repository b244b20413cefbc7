"""E9: the seeds' schedule comparison table, measured (docs/schedules.md#the-seeds-claims).

Every schedule of the family, and the survey's remaining systems (E16's conventions:
GEMS, AMPNet with M = its ``min_update_interval``, AvgPipe with two pipelines and no advance,
WPipe's 2S stages, ZB-H2 with sail-sg's optimizer post-validation, ``zb_h2_pv``, no
rollback, and Chimera's forward doubling and backward halving, ``chimera_fd`` / ``chimera_bh``), at S ∈ {4, 8, 16}, M ∈ {S, 4S, 16S}, two flushes (N = 2M), under
two cost settings -- F = B (the seeds' unit) and B = 2F with I = W = F for the split-backward
schedules, so split and unsplit schedules do the same work -- each without and with a p2p
latency of one F. Costs are per stage; the interleaved (v = 2), V and WPipe schedules run chunks
at half a stage's cost, so every timeline is simulated in quarter-F ticks and reported in units of
one stage's F. Reported per cell: makespan T, bubble in both conventions (f_total = idle /
(T·S), r_ideal = idle / compute), the period (ZB-H2 / ZB-V also without the flush barrier),
peak activations per rank in units of A (split: F-not-I and F-not-W), weight versions, weight
memory. The seeds' four numeric claims get a verdict each, computed from these timelines.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from rpd import registry, schedules
from rpd.plotting.schedules import frontier_table_figure, schedule_gantt
from rpd.results import StudyOutput
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.costs import CostModel

SCALE = 4  # ticks per unit of F: a chunk of a v = 2 schedule costs half a stage, I = W = B/2
COSTS = {"F=B": (1, 1), "B=2F": (1, 2)}
ORDER = (
    "gpipe",
    "1f1b",
    "interleaved",
    "zb_h1",
    "zb_h2",
    "zb_v",
    "dualpipe_v",
    "chimera",
    "chimera_fd",
    "chimera_bh",
    "pipedream",
    "pipedream_2bw",
    "pipemare",
    "gems",
    "ampnet",
    "avgpipe",
    "wpipe",
    "zb_h2_pv",
    "looped_bfs",  # the schedules shipped since 2024 (docs/schedules.md)
    "interleaved_zb",
    "dualpipe",
    "v_half",
    "v_min",
    "combined_1f1b",
    "bitpipe",
)
PICTURE_SIZE = dict(S=4, M=8)


@dataclasses.dataclass(frozen=True)
class Config:
    S_values: tuple[int, ...] = (4, 8, 16)
    M_factors: tuple[int, ...] = (1, 4, 16)  # M = factor * S
    p2p: tuple[int, ...] = (0, 1)  # latency in units of F
    schedules: tuple[str, ...] = ORDER
    flushes: int = 2


QUICK: dict = {}  # the whole table takes seconds


def schedule_of(name: str) -> str:
    """The registry schedule a row runs (a row may be a :data:`rpd.registry.VARIANTS` name)."""
    return registry.variant(name)[0]


def chunks(entry: registry.ScheduleEntry, S: int) -> int:
    """Model chunks per rank of a schedule at its defaults (interleaved: v = 2)."""
    c = entry.chunks_per_rank
    return int(entry.default(c, S)) if isinstance(c, str) else int(c)


def cost_model(name: str, f: int, b: int, c: int, S: int = 4) -> CostModel:
    """Quarter-F ticks; per chunk for the chunked schedules; I = W = B/2 where B is split."""
    entry = registry.entry_of(name)
    per = SCALE // chunks(entry, S)
    if entry.split_backward:
        return CostModel(F=f * per, I=b * per // 2, W=b * per // 2, p2p=c * SCALE)
    return CostModel(F=f * per, B=b * per, p2p=c * SCALE)


def build(name: str, S: int, M: int, N: int, costs: CostModel, **kw) -> schedules.Timeline:
    """The timeline of row ``name`` (a schedule, or a :data:`rpd.registry.VARIANTS` name) at its
    defaults; for AMPNet M is the update interval of one stream of N microbatches."""
    return registry.make(name, S, N, M, costs, **kw)


def _cell(name, S, M, N, label, f, b, c) -> dict:
    row = dict(schedule=name, S=S, M=M, costs=label, p2p=c)
    try:
        tl = build(name, S, M, N, cost_model(name, f, b, c))
    except ValueError as err:  # a constraint of the schedule (e.g. DualPipeV needs M >= 2S)
        return dict(row, status="n/a", reason=str(err))
    acts = memory.peak_activations(tl)
    row.update(
        status="ok",
        T=tl.T / SCALE,
        period=tl.period() / SCALE,
        bubble_f_total=tl.bubble_ratio(),
        bubble_r_ideal=tl.bubble_overhead(),
        act_max=float(acts.max()),
        act_rank0=float(acts[0]),
        act_W_max=float(memory.peak_activations(tl, until="W").max()) if tl.split else float(acts.max()),
        weight_versions=int(memory.weight_versions(tl).max()),
        weight_memory=float(memory.weight_memory(tl).max()),
    )
    if "overlapped" in registry.entry_of(name).own_names and name not in registry.VARIANTS:
        free = build(name, S, M, N, cost_model(name, f, b, c), overlapped=True)
        row.update(T_overlapped=free.T / SCALE, period_overlapped=free.period() / SCALE)
    return row


def claims(rows: list[dict], flushes: int) -> list[dict]:
    """The seeds' four numeric claims (docs/schedules.md#the-seeds-claims), each checked on the measured rows: ``holds``
    and every sentence of ``verdict`` are computed from the timelines (closed forms are only
    compared against, never substituted)."""

    def at(name, S, M, label="F=B", c=0):  # the table's cell, or the same cell computed here
        hit = [r for r in rows if (r["schedule"], r["S"], r["M"], r["costs"], r["p2p"]) == (name, S, M, label, c)]
        return hit[0] if hit else _cell(name, S, M, flushes * M, label, *COSTS[label], c)

    def near(x, y, tol=1e-9):
        return bool(abs(x - y) <= tol)

    out = []
    # 1. GPipe: "(K-1)/M of total time, 18.75% at K = 4, M = 16"
    K, M = 4, 16
    g = at("gpipe", K, M)
    f, r = g["bubble_f_total"], g["bubble_r_ideal"]
    holds = near(f, 0.1875, 5e-5)
    which = (
        "f_total (idle / wall time)"
        if holds
        else "r_ideal (idle / compute)"
        if near(r, 0.1875, 5e-5)
        else "neither convention"
    )
    text = f"18.75% is {which}: measured f_total {f:.2%}, r_ideal {r:.2%}"
    if near(f, (K - 1) / (M + K - 1)):
        text += "; the share of wall time is (K-1)/(M+K-1)"
    if near(r, (K - 1) / M):
        text += ", and (K-1)/M is idle over compute"
    g2 = at("gpipe", K, M, "B=2F")
    if near(g2["bubble_f_total"], f):
        text += "; the same at B = 2F"
    out.append(
        dict(
            claim="GPipe bubble (K-1)/M of total time: 18.75% at K=4, M=16",
            measured=f"f_total {f:.2%}, r_ideal {r:.2%}",
            holds=holds,
            verdict=text,
        )
    )

    # 2. 1F1B: "reduces the bubble to (K-1)/(M+K-1), 15.8%"
    o = at("1f1b", K, M)
    number = near(round(o["bubble_f_total"], 3), 0.158, 1e-12)
    pairs = []  # (gpipe, 1f1b) at every cell of the table
    for x in rows:
        if x["schedule"] == "gpipe" and x["status"] == "ok":
            y = [
                z
                for z in rows
                if z["schedule"] == "1f1b"
                and z["status"] == "ok"
                and (z["S"], z["M"], z["costs"], z["p2p"]) == (x["S"], x["M"], x["costs"], x["p2p"])
            ]
            if y:
                pairs.append((x, y[0]))

    def count(test, c):
        sub = [(a, b) for a, b in pairs if (a["p2p"] > 0) == c]
        return f"{sum(test(b['T'], a['T']) for a, b in sub)} of {len(sub)}"

    reduces = o["bubble_f_total"] < g["bubble_f_total"] - 1e-12
    text = (
        f"the number {'holds' if number else 'does not hold'} ({o['bubble_f_total']:.2%}"
        + (" = (K-1)/(M+K-1)" if near(o["bubble_f_total"], (K - 1) / (M + K - 1)) else "")
        + "); "
        + (
            f"it is below GPipe's {g['bubble_f_total']:.2%}"
            if reduces
            else f"GPipe's bubble is {g['bubble_f_total']:.2%}, so 1F1B reduces nothing"
        )
        + "; 1F1B's makespan against GPipe's, without latency: shorter in "
        f"{count(lambda x, y: x < y, False)} cells, equal in {count(lambda x, y: x == y, False)}; with a "
        f"p2p latency: shorter in {count(lambda x, y: x < y, True)}, longer in "
        f"{count(lambda x, y: x > y, True)}; what it cuts is peak activations, "
        f"{o['act_rank0']:g} A against GPipe's {g['act_rank0']:g} A"
    )
    out.append(
        dict(
            claim="1F1B reduces the bubble to (K-1)/(M+K-1): 15.8% at K=4, M=16",
            measured=f"1F1B f_total {o['bubble_f_total']:.2%}, GPipe {g['bubble_f_total']:.2%}; "
            f"activations {o['act_rank0']:g} vs {g['act_rank0']:g}",
            holds=bool(number and reduces),
            number_holds=number,
            verdict=text,
        )
    )

    # 3. interleaved: "5-10%"
    inter = [x for x in rows if x["schedule"] == "interleaved" and x["status"] == "ok"] or [at("interleaved", K, M)]
    share = [x["bubble_f_total"] for x in inter]
    inside = [x for x in inter if 0.05 <= x["bubble_f_total"] <= 0.10]
    free = [x for x in inter if x["p2p"] == 0]
    law = [x for x in free if near(x["bubble_f_total"], (x["S"] - 1) / (2 * x["M"] + x["S"] - 1))]
    first: dict[
        tuple[int, int], float
    ] = {}  # (S, M) -> f_total without latency (the two cost settings agree: scale-free)
    for x in free:
        first.setdefault((x["S"], x["M"]), x["bubble_f_total"])
    by_size = ", ".join(f"{f_:.1%} (S={S_}, M={M_})" for (S_, M_), f_ in sorted(first.items(), key=lambda kv: kv[1]))
    text = (
        f"{len(inside)} of {len(inter)} cells fall inside 5-10% (f_total {min(share):.1%}-{max(share):.1%}); "
        f"without latency f_total equals (S-1)/(vM+S-1) at v = 2 in {len(law)} of {len(free)} cells"
        + (", so it is set by M and S, not by the schedule" if free and len(law) == len(free) else "")
        + f": {by_size}"
    )
    lat = [x["bubble_f_total"] for x in inter if x["p2p"] > 0]
    if lat:
        text += f"; with a p2p latency of one F: {min(lat):.1%}-{max(lat):.1%}"
    out.append(
        dict(
            claim="interleaved 1F1B achieves a 5-10% bubble",
            measured=f"f_total {min(share):.1%}-{max(share):.1%} over {len(inter)} cells; {len(inside)} inside 5-10%",
            holds=bool(len(inside) == len(inter)),
            verdict=text,
        )
    )

    # 4. "K = 8, M = 32: 8 x 0.82 = 6.6x speed-up" (one device runs all K stages serially)
    K, M = 8, 32

    def speedup(name, label="F=B", c=0):
        x = at(name, K, M, label, c)
        f_, b_ = COSTS[label]
        return flushes * K * M * (f_ + b_) / x["T"], x

    sp, k8 = speedup("1f1b")
    holds = near(sp, 6.6, 0.05)
    text = (
        f"{sp:.2f}x "
        + ("= KM/(M+K-1) " if near(sp, K * M / (M + K - 1)) else "")
        + f"({'rounds to' if holds else 'is not'} 6.6x) for balanced stages without p2p cost; "
        f"B = 2F: {speedup('1f1b', 'B=2F')[0]:.2f}x; GPipe: {speedup('gpipe')[0]:.2f}x; "
        f"with a p2p latency of one F: 1F1B {speedup('1f1b', 'F=B', 1)[0]:.2f}x, "
        f"GPipe {speedup('gpipe', 'F=B', 1)[0]:.2f}x"
    )
    out.append(
        dict(
            claim="K=8, M=32 with 1F1B: 8 x 0.82 = 6.6x speed-up",
            measured=f"{sp:.2f}x (T = {k8['T'] / flushes:g} F-units per flush for {K * M * 2} of work)",
            holds=holds,
            verdict=text,
        )
    )
    return out


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    valid = [*registry.SCHEDULES, *registry.VARIANTS]
    unknown = set(cfg.schedules) - set(valid)
    if unknown:
        raise ValueError(f"schedules: unknown {sorted(unknown)}; valid: {valid}")
    rows = []
    for S in cfg.S_values:
        for factor in cfg.M_factors:
            M = factor * S
            for name in cfg.schedules:
                for label, (f, b) in COSTS.items():
                    for c in cfg.p2p:
                        rows.append(_cell(name, S, M, cfg.flushes * M, label, f, b, c))
            if progress is not None:
                progress(f"S={S}, M={M}")
    arrays = {f"{k}/ops": v for k, v in pictures(cfg.schedules).items()}
    verdicts = claims(rows, cfg.flushes)
    summary = dict(
        claims=verdicts,
        scale=SCALE,
        picture=PICTURE_SIZE,
        na=[
            f"{r['schedule']} S={r['S']} M={r['M']}: {r['reason']}"
            for r in rows
            if r["status"] == "n/a" and r["costs"] == "F=B" and r["p2p"] == 0
        ],
    )
    return StudyOutput(arrays=arrays, summary=summary, table=rows)


def pictures(names, b: int = 2) -> dict[str, np.ndarray]:
    """One flush of every schedule at S = 4, M = 8, F = 1, B = ``b`` (I = W = B/2, with B = 2
    for the split schedules when b = 1), no latency: int [7, n] op tables (kind, stage, mb,
    rank, start, end, fused) in quarter-F ticks."""
    S, M = PICTURE_SIZE["S"], PICTURE_SIZE["M"]
    out = {}
    for name in names:
        tl = build(name, S, M, M, cost_model(name, 1, max(b, 2) if registry.entry_of(name).split_backward else b, 0))
        t = tl.table
        out[name] = np.stack([t.kind, t.stage, t.mb, t.rank, t.start, t.end, t.fused]).astype(np.int64)
    return out


def figure(out: StudyOutput, path) -> None:

    frontier_table_figure(out.table, path, claims=out.summary.get("claims"))
    panels = [
        dict(title=name, ops=out.arrays[f"{name}/ops"], scale=out.summary["scale"])
        for name in ORDER
        if f"{name}/ops" in out.arrays
    ]
    from pathlib import Path

    p = Path(path)
    schedule_gantt(panels, p.with_name(p.stem + "_pictures.png"))
