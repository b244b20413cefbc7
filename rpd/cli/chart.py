"""One schedule, drawn (``python -m experiments.schedule``): its Gantt chart (ranks top to bottom,
F / B / I / W coloured, in units of one stage's forward) and its numbers printed in the same units:
makespan, period, both bubble conventions, peak activations and weights per rank.

The schedule is built exactly as ``experiments.train`` builds it (``rpd.registry``), for
``schedule.N`` microbatches (default two flushes, 2 M; or the smallest N reaching ``schedule.T``).
The costs are per stage, as docs/schedules.md and E9 count them: a chunk of a v-chunk schedule
(interleaved, the V schedules, WPipe, BitPipe) costs F/v, B/v, so its timeline runs in ticks of
1/v (:func:`chunk_costs`) and every number is reported per stage's F, as E9 reports it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from rpd import registry
from rpd.cli import checks, footprint, specs
from rpd.cli import config as C
from rpd.cli.config import _value
from rpd.io import store
from rpd.plotting.schedules import schedule_gantt
from rpd.schedules import Timeline
from rpd.schedules.family.post_validation import ValidatedTimeline
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.costs import CostModel, HostLink
from rpd.validation import check_int

WRAP = 48  # time units per row of the chart: a longer schedule goes on in rows below
FLUSHES = 2  # schedule.N when not given: this many flushes (a schedule without flushes: 2 S)


def chunk_costs(costs: CostModel, v: int) -> CostModel:
    """``costs`` (per stage) for a schedule of ``v`` chunks per rank, in ticks of 1/v: a chunk's
    op keeps the stage's number of ticks (so it costs F/v of the stage's ticks, and a chunk's
    activation moves to the host in d2h/v), while every time that is not a chunk's -- the p2p
    latency, the all-reduce, a straggler's delay, the host link's latency -- is v times as many."""
    if v == 1:
        return costs
    alpha, beta = costs.allreduce
    s = costs.straggler
    h = costs.host
    return dataclasses.replace(
        costs,
        p2p=costs.p2p * v,
        allreduce=(alpha * v, beta * v),
        straggler=None if s is None else (s.p, s.ticks * v),  # type: ignore[union-attr]
        host=None if h is None else HostLink(h.d2h, h.h2d, h.latency * v, h.min_gap),  # type: ignore[union-attr]
    )


def chunks_per_rank(pipeline: registry.Pipeline) -> int:
    """Model chunks a rank holds in ``pipeline`` (interleaved: its v)."""
    c = pipeline.entry.chunks_per_rank
    return int(pipeline.params.get(c)) if isinstance(c, str) else int(c)


def _with_n(cfg) -> DictConfig:
    """``cfg`` with schedule.N filled in where neither N nor T is given: two flushes of M."""
    s = cfg.schedule
    if s.N is not None or s.T is not None:
        return cfg
    S = check_int("schedule.S", s.S)
    method = registry.METHODS.get(_value(cfg.method.name))
    name = s.name if s.name is not None or method is None else (method.schedules or (method.default_schedule,))[0]
    base = registry.VARIANTS[name].base if name in registry.VARIANTS else name
    entry = registry.SCHEDULES.get(base)
    N = 2 * S  # no flush (PipeDream, PipeMare, LocalSGD), or a name the checks refuse next
    if entry is not None and entry.flush:
        N = FLUSHES * (check_int("schedule.M", s.M) if s.M is not None else int(entry.default("M", S)))
    out = OmegaConf.merge(cfg, {"schedule": {"N": N}})
    OmegaConf.set_struct(out, True)
    return out  # type: ignore[return-value]  # omegaconf's stub: a union; a DictConfig merged is one


def build(cfg) -> tuple[registry.Pipeline, Timeline, int]:
    """The checked config's pipeline, per stage (chunks at F/v), its timeline and its ticks per
    stage's F."""
    pipeline = specs.run_spec(cfg).pipeline
    v = chunks_per_rank(pipeline)
    if v > 1:
        params = pipeline.params
        if params.T is not None:  # T is in the costs' ticks, the timeline's are 1/v of them
            params = dataclasses.replace(params, T=params.T * v)
        pipeline = dataclasses.replace(pipeline, params=params, costs=chunk_costs(pipeline.costs or CostModel(), v))
    return pipeline, pipeline.timeline(), v * max(1, int(cfg.costs.F))


def _units(cfg, v: int) -> str:
    """What one unit of the chart's time is, for its axis and the printed numbers."""
    F = max(1, int(cfg.costs.F))
    unit = _value(getattr(cfg.costs, "unit", "tick"))
    unit = f"{unit}s" if unit == "tick" and F != 1 else unit
    text = f"one stage's F = {F} {unit}"
    return text + (f"; a chunk's op costs 1/{v} of its stage's" if v > 1 else "")


def chart(cfg) -> dict:
    """Build the schedule of ``cfg``, draw it to ``cfg.out`` and return its numbers (times in
    units of one stage's F)."""
    cfg = checks.typed(cfg, C.ChartConfig)
    cfg = _with_n(cfg)
    footprint.check_config(cfg, checks.validate(cfg))
    store.check_root(Path(cfg.out).resolve().parent, field="out")
    pipeline, tl, scale = build(cfg)
    v = chunks_per_rank(pipeline)
    t = tl.table
    ops = np.stack([t.kind, t.stage, t.mb, t.rank, t.start, t.end, t.fused]).astype(np.int64)
    title = f"{pipeline.name}: S = {tl.S}, N = {tl.N}" + (f", M = {tl.M}" if tl.M else "")
    title += f", v = {v}" if v > 1 else ""
    if tl.concat not in (None, "direct"):  # Chimera's forward doubling / backward halving
        title += f", {tl.concat.replace('_', ' ')}" + (" (ops on half microbatches)" if tl.pieces > 1 else "")
    panel: dict[str, Any] = dict(title=title, ops=ops, scale=scale)
    # ZB-H2 post-validation: forwards a rollback threw away
    if isinstance(tl, ValidatedTimeline) and (wasted := tl.wasted) is not None:
        w = np.stack([wasted.kind, wasted.stage, wasted.mb, wasted.rank, wasted.start, wasted.end, wasted.fused])
        panel["ops"] = np.concatenate([ops, w.astype(np.int64)], axis=1)
        panel["wasted"] = np.arange(panel["ops"].shape[1]) >= ops.shape[1]
        panel["steps"] = np.asarray(tl.step_end)
    if tl.transfers is not None:  # activation offload: the host links' D2H / H2D transfers
        x = tl.transfers
        panel["transfers"] = np.stack([x.kind, x.stage, x.mb, x.rank, x.start, x.end]).astype(np.int64)
        title += f", offload ({len(x.kind) // 2} activations)"
        panel["title"] = title
    units = _units(cfg, v)
    path = schedule_gantt([panel], cfg.out, wrap=WRAP, xlabel=f"Time (units of {units})")
    acts = memory.peak_activations(tl)
    return {
        "schedule": pipeline.name,
        "S": tl.S,
        "N": tl.N,
        "M": tl.M,
        "v": v,
        "concat": tl.concat,
        "makespan": tl.T / scale,
        "period": tl.period() / scale,
        "units": units,
        "bubble_total": tl.bubble_ratio(),
        "bubble_ideal": tl.bubble_overhead(),
        "peak_activations": acts.tolist(),
        "weights": memory.weight_memory(tl).tolist(),
        "path": str(path),
    }
