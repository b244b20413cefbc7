"""How accurate the plan is, held to runs it was not fitted on (docs/plan.md#accuracy).

The development set is :mod:`rpd.studies.plan_devset`: five published sources (Megatron-LM's
SC'21 Table 1 on DGX A100, Megatron-LM's H100 table and NVIDIA's NeMo GPT-3 175B, Nemotron-4
340B and 15B runs on DGX H100), 37 runs, each with the settings its source ran. Every run goes
through the plan's own machinery (:func:`rpd.model.plan.plan_one`: the model per TP rank, its
stages timed by the preset's compute model and links, the schedule's timeline, Megatron's
overlaps and the DP collectives placed on the nodes); the error of a run is its predicted step
time over its published one, minus one (iteration time, as Calculon reports its own).

Each hardware preset has two fitted parameters, (``gemm_efficiency``, ``traffic``) of
:mod:`rpd.model.compute`; everything else is a vendor figure or a rule. Accuracy is
cross-validated by source: for each source, the parameters are fitted (:func:`fit`) on every
other source and the left-out source predicted with them. A preset whose only source is left out
(the A100's SC'21 table) takes the parameters fitted on the other preset's sources: a prediction
across hardware. :data:`rpd.model.hardware.DGX_FIT` is the fit on every source of each preset.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import numpy as np

from rpd import registry
from rpd.model.hardware import Hardware
from rpd.model.hardware import preset as hardware_preset
from rpd.model.layers import Parallel, gpt_model
from rpd.model.plan import Row, plan_one
from rpd.model.stages import partition, stages
from rpd.model.topology import place
from rpd.plotting.plan import accuracy_figure
from rpd.results import StudyOutput
from rpd.studies.plan_devset import SOURCES, Run, runs

GRID = ([0.55, 0.65, 0.75, 0.85, 0.95], [0.0, 2.0, 4.0, 6.0])  # the fit's start: efficiency x traffic
FINEST = 0.0125  # the fit stops below this efficiency step (traffic step 0.25)


@dataclasses.dataclass(frozen=True)
class Config:
    sources: tuple[str, ...] = tuple(SOURCES)


QUICK: dict = {}  # the same size either way (timing arithmetic)


@functools.lru_cache(maxsize=4096)
def _timeline(*args):
    """The registry's timeline, memoised: the runs of one source share their pipeline."""
    return registry.timeline(*args)


def model_of(run: Run):
    par = Parallel(TP=run.TP, SP=run.SP, attention=run.attention, tp_overlap=run.overlap.tp_comm)
    return gpt_model(run.model, run.recompute, par=par)


def plan_run(run: Run, hw: Hardware) -> Row:
    """The plan's row of ``run`` on ``hw`` (its source's settings)."""
    r = plan_one(
        model_of(run),
        hw,
        run.schedule,
        _timeline,
        run.PP,
        run.M,
        D=run.DP,
        TP=run.TP,
        SP=run.SP,
        v=run.v,
        zero=run.zero,
        recompute=run.recompute,
        grad_bytes=run.grad_bytes,
        overlap=run.overlap,
    )
    if r.error:
        raise ValueError(f"{run.source} {run.name}: {r.error}")
    return r


@functools.lru_cache(maxsize=1 << 16)
def _step(k: int, gemm_efficiency: float, traffic: float) -> float:
    run = runs()[k]
    hw = dataclasses.replace(hardware_preset(run.preset), gemm_efficiency=gemm_efficiency, traffic=traffic)
    return float(plan_run(run, hw).step_time_s)


def mean_error(ks: list[int], gemm_efficiency: float, traffic: float) -> float:
    """Mean |predicted / published step time − 1| over the runs ``ks`` at these parameters."""
    all_runs = runs()
    return float(np.mean([abs(_step(k, gemm_efficiency, traffic) / all_runs[k].step_s - 1) for k in ks]))


def fit(ks: list[int]) -> tuple[float, float]:
    """The (gemm_efficiency, traffic) minimising the mean |error| over runs ``ks``: the best of
    :data:`GRID`, then its neighbours at the current steps (efficiency 0.05, traffic 1), halved
    whenever none improves, until the efficiency step is below :data:`FINEST`."""
    best = min(((g, k) for g in GRID[0] for k in GRID[1]), key=lambda p: mean_error(ks, *p))
    step = (0.05, 1.0)
    while step[0] >= FINEST:
        around = [(round(best[0] + i * step[0], 5), best[1] + j * step[1]) for i in (-1, 0, 1) for j in (-1, 0, 1)]
        around = [p for p in around if 0 < p[0] <= 1 and p[1] >= 0]
        new = min(around, key=lambda p: mean_error(ks, *p))
        if new == best:
            step = (step[0] / 2, step[1] / 2)
        best = new
    return best


def folds(sources: tuple[str, ...]) -> dict[str, dict[str, tuple[float, float]]]:
    """{left-out source: {preset: its parameters fitted without that source}}: a preset with no
    other source takes the parameters fitted on every remaining run (module docstring)."""
    all_runs = runs()
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for left in sources:
        kept = [k for k, r in enumerate(all_runs) if r.source != left and r.source in sources]
        params = {}
        for preset in sorted({r.preset for r in all_runs if r.source in sources}):
            mine = [k for k in kept if all_runs[k].preset == preset]
            params[preset] = fit(mine or kept)
        out[left] = params
    return out


def first_stage(model, hw, PP: int) -> tuple[float, float, float]:
    """(values held, model FLOPs per microbatch, F + I + W seconds) of the first of ``PP`` even
    stages of ``model``."""
    st = stages(model, partition(model, PP, "even", hw), hw)
    return float(st.params[0]), float(st.model_flops[0]), float(st.t_f[0] + st.t_i[0] + st.t_w[0])


def least_compute_mfu(first, hw, M: int, D: int, where, step_s: float, grad_bytes: int = 4) -> float:
    """The least fraction of peak the first pipeline rank (:func:`first_stage`) must compute at
    for a 1F1B step of ``step_s`` seconds under Megatron's overlapped distributed optimizer, its
    DP group placed as ``where`` (docs/plan.md#accuracy): its gradients (``grad_bytes`` per value)
    reduce-scattered and its 16-bit weights all-gathered over the DP links, at most one
    microbatch's compute (C/M) hiding them, so step >= C·(M−1)/M + R + A. A bound from the link
    rates and byte counts alone (inf where the links alone exceed the step)."""
    values, flops, _ = first
    per_node = where.dp_per_node
    room = step_s - hw.half_seconds(grad_bytes * values, D, per_node) - hw.half_seconds(2.0 * values, D, per_node)
    return float(flops * (M - 1) / room / hw.peak_flops) if room > 0 else float("inf")


def row_of(run: Run, hw: Hardware) -> dict:
    """One table row: the run, its prediction on ``hw`` and its error."""
    r = plan_run(run, hw)
    out: dict[str, Any] = dict(
        source=run.source,
        preset=run.preset,
        name=run.name,
        GPUs=run.gpus,
        TP=run.TP,
        PP=run.PP,
        DP=run.DP,
        v=run.v,
        M=run.M,
        micro_batch=run.model.micro_batch,
        recompute=run.recompute,
        grad_bytes=run.grad_bytes,
        overlap=dataclasses.asdict(run.overlap),
        published=run.published,
        unit=run.unit,
        published_step_s=run.step_s,
        predicted_step_s=r.step_time_s,
        error=r.step_time_s / run.step_s - 1,
        gemm_efficiency=hw.gemm_efficiency,
        traffic=hw.traffic,
    )
    if run.schedule == "1f1b" and run.zero and run.overlap.grad_reduce:
        model = model_of(run)
        first = first_stage(model, hw, run.PP)
        where = place(hw, run.TP, run.DP, run.PP)
        out["plan_compute_mfu"] = first[1] / first[2] / hw.peak_flops
        out["least_compute_mfu"] = least_compute_mfu(first, hw, run.M, run.DP, where, run.step_s, run.grad_bytes)
    return out


def _summary(rows: list[dict]) -> dict:
    err = np.abs([r["error"] for r in rows])
    return dict(
        mean_abs_error=float(err.mean()),
        max_abs_error=float(err.max()),
        within_5pct=int((err <= 0.05).sum()),
        rows=len(rows),
    )


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    for s in cfg.sources:
        if s not in SOURCES:
            raise ValueError(f"sources must be among {sorted(SOURCES)}, got {s!r}")
    all_runs = runs()
    params = folds(cfg.sources)
    table: list[dict] = []
    summary: dict[str, Any] = {}
    for source in cfg.sources:
        g_k = params[source]
        rows = []
        for run_ in (r for r in all_runs if r.source == source):
            g, k = g_k[run_.preset]
            hw = dataclasses.replace(hardware_preset(run_.preset), gemm_efficiency=g, traffic=k)
            rows.append(dict(row_of(run_, hw), fitted_without=source))
        summary[source] = dict(_summary(rows), title=SOURCES[source][0], preset=SOURCES[source][1], fitted=g_k)
        table += rows
        if progress is not None:
            s = summary[source]
            progress(f"{source} (left out): mean {s['mean_abs_error']:.1%}, max {s['max_abs_error']:.1%}")
    summary["cross_validated"] = _summary(table)
    by_preset = {}
    for preset in sorted({r.preset for r in all_runs if r.source in cfg.sources}):
        ks = [k for k, r in enumerate(all_runs) if r.preset == preset and r.source in cfg.sources]
        g, k = fit(ks)
        by_preset[preset] = dict(gemm_efficiency=g, traffic=k, in_sample_mean_abs_error=mean_error(ks, g, k))
    summary["fit_on_every_source"] = by_preset
    return StudyOutput(arrays={}, summary=summary, table=table)


def figure(out: StudyOutput, path) -> None:
    accuracy_figure(out.table, out.summary, path)
