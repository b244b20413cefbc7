"""How accurate the plan is, held to runs it was not fitted on (docs/plan.md#accuracy).

The development set is :mod:`rpd.studies.plan_devset`: five published sources (Megatron-LM's
SC'21 Table 1 on DGX A100, Megatron-LM's H100 table and NVIDIA's NeMo GPT-3 175B, Nemotron-4
340B and 15B runs on DGX H100), 37 runs, each with the settings its source ran. Every run goes
through the plan's own machinery (:func:`rpd.model.plan.plan_one`: the model per TP rank, its
stages timed by the preset's compute model and links, the schedule's timeline, Megatron's
overlaps and the DP collectives placed on the nodes); the error of a run is its predicted step
time over its published one, minus one (iteration time, as Calculon reports its own).

Two parameters are fitted, shared by both hardware presets: η, the share of the GPU's measured
matmul ceiling (:data:`rpd.model.hardware.MATMUL_CEILING`, a benchmark of the chip) that the
framework's GEMMs reach, so a preset's ``gemm_efficiency`` is η × its ceiling; and ``traffic``,
the multiplier on the bytes of memory-bound work (:mod:`rpd.model.compute`). Everything else is a
vendor figure, a benchmark or a rule. Accuracy is cross-validated by source: for each source, η
and ``traffic`` are fitted (:func:`fit`) on every run of the other sources, whatever their GPU,
and the left-out source predicted with them; the A100's only source (SC'21) is then predicted
from H100 runs through the two chips' measured ceilings. :data:`rpd.model.hardware.DGX_FIT` is
the fit on every run.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import numpy as np

from rpd import registry
from rpd.model.hardware import Hardware, dgx_gemm_efficiency
from rpd.model.hardware import preset as hardware_preset
from rpd.model.layers import Parallel, gpt_model
from rpd.model.plan import Row
from rpd.model.stages import partition, stages
from rpd.model.topology import place
from rpd.plotting.plan import accuracy_figure
from rpd.results import StudyOutput
from rpd.studies.plan_devset import SOURCES, Run, runs
from rpd.validation import required

GRID = ([0.55, 0.65, 0.75, 0.85, 0.95], [0.0, 2.0, 4.0, 6.0])  # the fit's start: η x traffic
FINEST = 0.0125  # the fit stops below this η step (traffic step 0.25)


@dataclasses.dataclass(frozen=True)
class Config:
    sources: tuple[str, ...] = tuple(SOURCES)


QUICK: dict = {}  # the same size either way (timing arithmetic)


@functools.lru_cache(maxsize=4096)
def _timeline(*args):
    """The registry's timeline, memoised: the runs of one source share their pipeline."""
    return registry.timeline(*args)


@functools.lru_cache(maxsize=256)
def model_of(run: Run):
    """``run``'s model (frozen; built once per run: the fits ask for it at every (η, traffic))."""
    par = Parallel(TP=run.TP, SP=run.SP, attention=run.attention, tp_overlap=run.overlap.tp_comm)
    return gpt_model(run.model, run.recompute, par=par)


def plan_run(run: Run, hw: Hardware) -> Row:
    """The plan's row of ``run`` on ``hw`` (its source's settings, its attention kernel's rate
    included)."""
    if run.attention_efficiency is not None:
        hw = dataclasses.replace(hw, attention_efficiency=run.attention_efficiency)
    r = run.layout.row(
        model_of(run), hw, _timeline, grad_bytes=run.grad_bytes, overlap=run.overlap, precision=run.precision
    )
    if r.error:
        raise ValueError(f"{run.source} {run.name}: {r.error}")
    return r


def hardware_at(preset: str, eta: float, traffic: float) -> Hardware:
    """DGX preset ``preset`` with the GEMMs at ``eta`` of its matmul ceiling and ``traffic``."""
    return dataclasses.replace(
        hardware_preset(preset), gemm_efficiency=dgx_gemm_efficiency(preset, eta), traffic=traffic
    )


@functools.lru_cache(maxsize=1 << 16)
def _step(k: int, eta: float, traffic: float) -> float:
    run = runs()[k]
    return float(required("step_time_s", plan_run(run, hardware_at(run.preset, eta, traffic)).step_time_s))


def mean_error(ks: list[int], eta: float, traffic: float) -> float:
    """Mean |predicted / published step time − 1| over the runs ``ks`` at these parameters."""
    all_runs = runs()
    return float(np.mean([abs(_step(k, eta, traffic) / all_runs[k].step_s - 1) for k in ks]))


def fit(ks: list[int]) -> tuple[float, float]:
    """The (η, traffic) minimising the mean |error| over runs ``ks`` (any preset; η ≤ 1, the
    ceiling): the best of :data:`GRID`, then its neighbours at the current steps (η 0.05,
    traffic 1), halved whenever none improves, until the η step is below :data:`FINEST`."""
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


def folds(sources: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """{left-out source: (η, traffic) fitted on every run of the other sources} (module
    docstring): one pair for both presets, so a source is predicted from runs on either GPU."""
    all_runs = runs()
    out: dict[str, tuple[float, float]] = {}
    for left in sources:
        out[left] = fit([k for k, r in enumerate(all_runs) if r.source != left and r.source in sources])
    return out


def first_stage(model, hw, PP: int) -> tuple[float, float, float]:
    """(values held, model FLOPs per microbatch, F + I + W seconds) of the first of ``PP`` even
    stages of ``model``."""
    st = stages(model, partition(model, PP, "even", hw), hw)
    return float(st.params[0]), float(st.model_flops[0]), float(st.t_f[0] + st.t_i[0] + st.t_w[0])


def least_compute_mfu(first, hw, M: int, D: int, where, step_s: float, grad_bytes: int = 4, PP: int = 1) -> float:
    """The least fraction of peak the first pipeline rank (:func:`first_stage`) must compute at
    for a 1F1B step of ``step_s`` seconds over ``PP`` even stages under Megatron's overlapped
    distributed optimizer, its DP group placed as ``where`` (docs/plan.md#accuracy): the first
    microbatch crosses PP − 1 stages before the last stage starts and the last one crosses them
    back, so the step holds M + PP − 1 microbatches of a stage's compute c (every stage at least
    the first one's); its gradients (``grad_bytes`` per value) are reduce-scattered and its 16-bit
    weights all-gathered over the DP links, at most one microbatch (its first forward, its last
    backward) hiding them: step >= (M + PP − 2)·c + R + A. A bound from the link rates and byte
    counts alone (inf where the links alone exceed the step)."""
    values, flops, _ = first
    per_node = where.dp_per_node
    room = step_s - hw.half_seconds(grad_bytes * values, D, per_node) - hw.half_seconds(2.0 * values, D, per_node)
    return float(flops * (M + PP - 2) / room / hw.peak_flops) if room > 0 else float("inf")


def row_of(run: Run, hw: Hardware) -> dict:
    """One table row: the run, its prediction on ``hw`` and its error."""
    r = plan_run(run, hw)
    step_s = required("step_time_s", r.step_time_s)
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
        predicted_step_s=step_s,
        error=step_s / run.step_s - 1,
        gemm_efficiency=hw.gemm_efficiency,
        traffic=hw.traffic,
    )
    if run.schedule == "1f1b" and run.zero and run.overlap.grad_reduce:
        model = model_of(run)
        first = first_stage(model, hw, run.PP)
        where = place(hw, run.TP, run.DP, run.PP)
        out["plan_compute_mfu"] = first[1] / first[2] / hw.peak_flops
        out["least_compute_mfu"] = least_compute_mfu(
            first, hw, run.M, run.DP, where, run.step_s, run.grad_bytes, run.PP
        )
    out["out_of_reach"] = out_of_reach(out)
    return out


def out_of_reach(row: dict) -> bool:
    """Whether a row's published step needs faster compute than the plan's own (its bound)."""
    return row.get("least_compute_mfu", 0.0) > row.get("plan_compute_mfu", float("inf"))


def _summary(rows: list[dict]) -> dict:
    err = np.abs([r["error"] for r in rows])
    reach = np.abs([r["error"] for r in rows if not out_of_reach(r)])
    return dict(
        mean_abs_error=float(err.mean()),
        max_abs_error=float(err.max()),
        within_5pct=int((err <= 0.05).sum()),
        rows=len(rows),
        out_of_reach=len(rows) - len(reach),
        mean_abs_error_within_reach=float(reach.mean()) if len(reach) else None,
        max_abs_error_within_reach=float(reach.max()) if len(reach) else None,
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
        eta, k = params[source]
        rows = []
        for run_ in (r for r in all_runs if r.source == source):
            row = row_of(run_, hardware_at(run_.preset, eta, k))
            rows.append(dict(row, software_efficiency=eta, fitted_without=source))
        fitted = dict(software_efficiency=eta, traffic=k)
        summary[source] = dict(_summary(rows), title=SOURCES[source][0], preset=SOURCES[source][1], fitted=fitted)
        table += rows
        if progress is not None:
            s = summary[source]
            progress(f"{source} (left out): mean {s['mean_abs_error']:.1%}, max {s['max_abs_error']:.1%}")
    summary["cross_validated"] = _summary(table)
    ks = [k for k, r in enumerate(all_runs) if r.source in cfg.sources]
    eta, k = fit(ks)
    every: dict[str, Any] = dict(software_efficiency=eta, traffic=k, in_sample_mean_abs_error=mean_error(ks, eta, k))
    for preset in sorted({all_runs[i].preset for i in ks}):
        mine = [i for i in ks if all_runs[i].preset == preset]
        every[preset] = dict(
            gemm_efficiency=dgx_gemm_efficiency(preset, eta), in_sample_mean_abs_error=mean_error(mine, eta, k)
        )
    summary["fit_on_every_source"] = every
    return StudyOutput(arrays={}, summary=summary, table=table)


def figure(out: StudyOutput, path) -> None:
    accuracy_figure(out.table, out.summary, path)
