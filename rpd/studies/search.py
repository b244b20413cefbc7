"""E14: schedules found by search against the hand-written ones (docs/schedules.md#schedules-found-by-search), makespan
against the per-rank activation cap.

For each pipeline size (S ranks, one stage each, M microbatches, one flush) and each cost model,
every integer cap from 1 to 2S (in A, one microbatch's activations on one stage, counted from the
start of F until W ends: ``memory.peak_activations(tl, until="W")``) gets

* the heuristic's makespan (:func:`rpd.schedules.machinery.search.search`, ``method="heuristic"``);
* the exact makespan (``method="exact"``, CP-SAT) with the solver's bound and whether it is proven
  optimal within ``time_limit`` seconds;
* every hand-written one-stage-per-rank schedule (GPipe, 1F1B, ZB-H1, ZB-H2), timed by the same
  timer for one flush, with its peak activations: it counts at a cap only when its peak fits.

Cost models: ``unit`` (F = I = W = 1, no p2p), ``latency`` (F = I = W = 1, p2p = 1) and
``imbalanced``: the per-stage F, I, W of a real model's layers (``model``, default GPT-2 medium)
cut into S even stages, embedding joined to the first stage and the head to the last
(:func:`rpd.model.stages.partition` with ``how="even"``), on ``hardware``, with the p2p latency
of the slowest boundary's message, in the ticks of :func:`rpd.model.stages.stage_costs`
(1 % of the shortest op). The embedding lookup does no matmul, so only the last stage comes out
heavier.

Table rows: cost model, S, M, cap, heuristic, exact (proven or with its bound), the best
hand-written schedule that fits and its name, gain = best hand-written / exact search (and the
heuristic's gain); times in units of one F for ``unit`` / ``latency``, in ms for ``imbalanced``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import numpy as np

from rpd import schedules
from rpd.model.hardware import preset as hardware_preset
from rpd.model.layers import preset as model_preset
from rpd.model.stages import partition, stage_costs, stages
from rpd.plotting.search import search_figure
from rpd.results import StudyOutput
from rpd.schedules.family.searched import search
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.costs import CostModel

COST_MODELS = ("unit", "latency", "imbalanced")
HAND_WRITTEN = {  # name -> constructor of one flush (S, N = M, M, costs)
    "gpipe": schedules.gpipe,
    "1f1b": schedules.one_f_one_b,
    "zb_h1": schedules.zb_h1,
    "zb_h2": schedules.zb_h2,
}
NAMES = {
    "gpt2_medium": "GPT-2 medium",
    "gpt3_1.3b": "GPT-3 1.3B",
    "a100_80g_flat": "A100 80GB",
    "h100_80g_flat": "H100 80GB",
}


@dataclasses.dataclass(frozen=True)
class Config:
    sizes: tuple[tuple[int, int], ...] = ((4, 8), (8, 16))  # (S, M)
    cost_models: tuple[str, ...] = COST_MODELS
    cap_step: int = 1  # caps 1, 1 + step, ... and 2S
    time_limit: float = 10.0  # seconds of CP-SAT per instance
    workers: int | None = None  # CP-SAT threads (None: the search's default)
    model: str = "gpt2_medium"  # the imbalanced costs
    hardware: str = "a100_80g_flat"  # the first plan's flat A100 (rpd.model.hardware)


QUICK: dict = dict(sizes=((4, 8),), time_limit=2.0)


def cost_model(name: str, S: int, cfg: Config) -> tuple[CostModel, float, str, str]:
    """(costs in ticks, what one tick is worth in the reported unit, the unit's name, a title)."""
    if name == "unit":
        return CostModel(F=1, I=1, W=1, p2p=0), 1.0, "F", "unit costs: F = I = W = 1, no p2p"
    if name == "latency":
        return CostModel(F=1, I=1, W=1, p2p=1), 1.0, "F", "with latency: F = I = W = 1, p2p = 1"
    if name == "imbalanced":
        model, hw = model_preset(cfg.model), hardware_preset(cfg.hardware)
        costs, tick_s = stage_costs(stages(model, partition(model, S, "even"), hw), hw)
        title = f"imbalanced: {NAMES.get(cfg.model, cfg.model)} in even stages, {NAMES.get(cfg.hardware, cfg.hardware)}"
        return costs, tick_s * 1e3, "ms", title
    raise ValueError(f"cost_models: unknown {name!r}; valid: {list(COST_MODELS)}")


def caps(S: int, step: int) -> list[int]:
    return sorted({*range(1, 2 * S + 1, step), 2 * S})


def _per_stage(ticks, S: int) -> list[int]:
    return [int(v) for v in np.broadcast_to(np.asarray(ticks), (S,))]


def hand_written(S: int, M: int, costs: CostModel) -> dict[str, dict]:
    """name -> makespan of one flush (ticks) and peak activations per rank (A, until W)."""
    out = {}
    for name, make in HAND_WRITTEN.items():
        tl = make(S, M, M, costs)
        out[name] = dict(T=int(tl.T), peak=int(round(float(memory.peak_activations(tl, until="W").max()))))
    return out


def panel(S: int, M: int, name: str, cfg: Config) -> dict:
    """Every cap of one (size, cost model): the numbers the figure and the table are read from."""
    costs, unit_scale, unit, title = cost_model(name, S, cfg)
    hand = hand_written(S, M, costs)
    out: dict[str, Any] = dict(
        costs=name,
        S=S,
        M=M,
        title=title,
        unit=unit,
        unit_per_tick=unit_scale,
        cost_model=dict(
            F=_per_stage(costs.F, S), I=_per_stage(costs.I, S), W=_per_stage(costs.W, S), p2p=int(costs.p2p)
        ),
        hand=hand,
        caps=[],
        heuristic=[],
        heuristic_source=[],
        heuristic_s=[],
        exact=[],
        bound=[],
        optimal=[],
        exact_status=[],
        exact_s=[],
        peak_heuristic=[],
        peak_exact=[],
    )
    for cap in caps(S, cfg.cap_step):
        t0 = time.perf_counter()
        h = search(S, M, costs, cap, method="heuristic")
        t1 = time.perf_counter()
        e = search(S, M, costs, cap, method="exact", time_limit=cfg.time_limit, workers=cfg.workers)
        t2 = time.perf_counter()
        out["caps"].append(cap)
        out["heuristic"].append(int(h.search_info.value))
        out["heuristic_source"].append(h.search_info.source)
        out["heuristic_s"].append(t1 - t0)
        out["exact"].append(int(e.search_info.value))
        out["bound"].append(int(e.search_info.bound))
        out["optimal"].append(bool(e.search_info.optimal))
        out["exact_status"].append(e.search_info.status)
        out["exact_s"].append(t2 - t1)
        out["peak_heuristic"].append(int(round(float(memory.peak_activations(h, until="W").max()))))
        out["peak_exact"].append(int(round(float(memory.peak_activations(e, until="W").max()))))
    return out


def rows_of(p: dict) -> list[dict]:
    """The table's rows of one panel: one per cap."""
    scale = p["unit_per_tick"]

    def val(ticks):
        return ticks if p["unit"] == "F" else round(ticks * scale, 4)

    rows = []
    for i, cap in enumerate(p["caps"]):
        fits = {n: h["T"] for n, h in p["hand"].items() if h["peak"] <= cap}
        best = min(fits, key=lambda n: (fits[n], n)) if fits else None
        h, e = p["heuristic"][i], p["exact"][i]
        rows.append(
            dict(
                costs=p["costs"],
                S=p["S"],
                M=p["M"],
                cap=cap,
                unit=p["unit"],
                heuristic=val(h),
                exact=val(e),
                exact_proven=p["optimal"][i],
                exact_bound=val(p["bound"][i]),
                best_hand_written=val(fits[best]) if best else None,
                hand_written=best,
                gain=round(fits[best] / e, 4) if best else None,
                gain_heuristic=round(fits[best] / h, 4) if best else None,
                heuristic_gap=round(h / e - 1, 4),
                exact_s=round(p["exact_s"][i], 3),
            )
        )
    return rows


def gains(rows: list[dict]) -> list[dict]:
    """Per (cost model, size): the largest gain of the exact search over the best fitting
    hand-written schedule, at which cap and over which schedule; caps where none fits; and the
    memory the search saves: the fastest hand-written schedule, the smallest cap it fits, and the
    smallest cap at which the search is as fast."""
    out = []
    for key in dict.fromkeys((r["costs"], r["S"], r["M"]) for r in rows):
        sub = [r for r in rows if (r["costs"], r["S"], r["M"]) == key]
        fit = [r for r in sub if r["gain"] is not None]
        top = max(fit, key=lambda r: (r["gain"], -r["cap"])) if fit else None
        # memory: the smallest cap at which the search is as fast as the fastest hand-written
        # schedule at any cap, against the smallest cap at which that one fits
        hand = min(fit, key=lambda r: (r["best_hand_written"], r["cap"])) if fit else None
        same = [r["cap"] for r in sub if hand and r["exact"] <= hand["best_hand_written"]]
        out.append(
            dict(
                costs=key[0],
                S=key[1],
                M=key[2],
                max_gain=top["gain"] if top else None,
                at_cap=top["cap"] if top else None,
                over=top["hand_written"] if top else None,
                caps_gaining=[r["cap"] for r in fit if r["gain"] > 1],
                caps_without_hand_written=[r["cap"] for r in sub if r["gain"] is None],
                fastest_hand_written=hand["hand_written"] if hand else None,
                fastest_hand_written_cap=hand["cap"] if hand else None,
                search_same_time_cap=min(same) if same else None,
                all_proven=all(r["exact_proven"] for r in sub),
                max_heuristic_gap=max(r["heuristic_gap"] for r in sub),
            )
        )
    return out


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    unknown = set(cfg.cost_models) - set(COST_MODELS)
    if unknown:
        raise ValueError(f"cost_models: unknown {sorted(unknown)}; valid: {list(COST_MODELS)}")
    if not isinstance(cfg.cap_step, int) or cfg.cap_step < 1:
        raise ValueError(f"cap_step must be a positive integer, got {cfg.cap_step!r}")
    panels, rows = [], []
    for S, M in cfg.sizes:
        for name in cfg.cost_models:
            p = panel(S, M, name, cfg)
            panels.append(p)
            rows += rows_of(p)
            if progress is not None:
                progress(f"S={S}, M={M}, {name}")
    summary = dict(panels=panels, gains=gains(rows), hand_written=list(HAND_WRITTEN), memory="A, F start to W end")
    return StudyOutput(arrays={}, summary=summary, table=rows)


def figure(out: StudyOutput, path) -> None:
    search_figure(out.summary["panels"], path)
