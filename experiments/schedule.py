"""One schedule, drawn: its Gantt chart (ranks top to bottom, F / B / I / W coloured, in units
of one stage's forward) and its numbers printed: makespan, period, both bubble conventions,
peak activations and weights per rank.

    python -m experiments.schedule schedule=zb_h2 schedule.S=4 schedule.M=8 costs=b2f_latency out=zb_h2.png
    python -m experiments.schedule schedule=dualpipe_v schedule.S=4 schedule.M=8 schedule.N=8

The schedule is built exactly as ``experiments.train`` builds it (``rpd.registry``), for
``schedule.N`` microbatches (or the smallest N reaching ``schedule.T``).
"""

from __future__ import annotations

from pathlib import Path

import hydra
import numpy as np
from omegaconf import DictConfig

from experiments import checks, compose_check, specs
from experiments import config as C
from rpd.io import store
from rpd.plotting.schedules import schedule_gantt
from rpd.runtime.interrupt import run_main
from rpd.schedules import memory

WRAP = 48  # time units per row of the chart: a longer schedule goes on in rows below


def chart(cfg) -> dict:
    """Build the schedule of ``cfg``, draw it to ``cfg.out`` and return its numbers."""
    cfg = checks.typed(cfg, C.ChartConfig)
    checks.validate(cfg)
    store.check_root(Path(cfg.out).resolve().parent, field="out")
    pipeline = specs.run_spec(cfg).pipeline
    tl = pipeline.timeline()
    t = tl.table
    ops = np.stack([t.kind, t.stage, t.mb, t.rank, t.start, t.end, t.fused]).astype(np.int64)
    scale = max(1, int(cfg.costs.F))
    title = f"{pipeline.name}: S = {tl.S}, N = {tl.N}" + (f", M = {tl.M}" if tl.M else "")
    if tl.concat not in (None, "direct"):  # Chimera's forward doubling / backward halving
        title += f", {tl.concat.replace('_', ' ')}" + (" (ops on half microbatches)" if tl.pieces > 1 else "")
    panel = dict(title=title, ops=ops, scale=scale)
    wasted = getattr(tl, "wasted", None)  # ZB-H2 post-validation: forwards a rollback threw away
    if wasted is not None:
        w = np.stack([wasted.kind, wasted.stage, wasted.mb, wasted.rank, wasted.start, wasted.end, wasted.fused])
        panel["ops"] = np.concatenate([ops, w.astype(np.int64)], axis=1)
        panel["wasted"] = np.arange(panel["ops"].shape[1]) >= ops.shape[1]
        panel["steps"] = np.asarray(tl.step_end)
    if tl.transfers is not None:  # activation offload: the host links' D2H / H2D transfers
        x = tl.transfers
        panel["transfers"] = np.stack([x.kind, x.stage, x.mb, x.rank, x.start, x.end]).astype(np.int64)
        title += f", offload ({len(x.kind) // 2} activations)"
        panel["title"] = title
    path = schedule_gantt([panel], cfg.out, wrap=WRAP)
    acts = memory.peak_activations(tl)
    return {
        "schedule": pipeline.name,
        "S": tl.S,
        "N": tl.N,
        "M": tl.M,
        "concat": tl.concat,
        "makespan": int(tl.T),
        "period": int(tl.period()),
        "bubble_total": tl.bubble_ratio(),
        "bubble_ideal": tl.bubble_overhead(),
        "peak_activations": acts.tolist(),
        "weights": memory.weight_memory(tl).tolist(),
        "path": str(path),
    }


@hydra.main(version_base="1.3", config_path="../configs", config_name="chart")
def main(cfg: DictConfig) -> None:
    try:
        numbers = chart(cfg)
    except (ValueError, TypeError) as exc:
        checks.refuse(exc)
    print(
        f"{numbers['schedule']}: S = {numbers['S']}, N = {numbers['N']}, M = {numbers['M']}; "
        f"makespan {numbers['makespan']} ticks, period {numbers['period']}, "
        f"bubble {numbers['bubble_total']:.3f} of the time ({numbers['bubble_ideal']:.3f} of the ideal)"
    )
    for r, (a, w) in enumerate(zip(numbers["peak_activations"], numbers["weights"])):
        print(f"  rank {r}: peak activations {a:g} A, weights {w:g} W")
    print(f"chart: {numbers['path']}")


if __name__ == "__main__":
    run_main(compose_check.one_line(main, "chart"))  # Ctrl-C: a clean message and exit 130
