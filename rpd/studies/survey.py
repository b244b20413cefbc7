"""E16: the pipeline survey's comparison table, measured (docs/results.md#e16-the-pipeline-surveys-table-measured).

The survey is Guan et al., "Advances of Pipeline Model Parallelism for Deep Learning Training: An
Overview", JCST 39(3), 2024. Its table is an image; what was read of it is the secondary note
``UnbearableFate/PaperReadingNote DL&NN/pipelines.md`` (@09e5656c) and docs/schedules.md#the-seeds-claims: the
statements checked below (:data:`CLAIMS`) are those texts' words, not the table's cells one by one.

Every system of the survey is a row (:data:`SYSTEMS`), built by rpd's registry of schedules at S
ranks, M = ``M_factor``·S microbatches per step, two steps; columns:

- bubble f_total = idle / (T·S) at F = B and at B = 2F (split backward: I = W = B/2, chunked
  schedules at half a stage's cost per chunk, E9's convention, in quarter-F ticks);
- peak activations per device (units of A; split backward: F-not-W) and weights held per
  device (units of one stage's weights: every version and replica; prediction keeps one more);
- extra compute and communication per step, by construction of the implemented rule
  (:data:`EXTRA`; not timed);
- loss at equal simulated time on Nesterov's quadratic: every system trains N = ``mb_per_S``·S
  microbatches with its own semantics at B = 2F and is read at the budget N·(tF + tB), with the
  step size tuned over a power-of-two grid (best final, never a diverged γ).

AvgPipe and WPipe are reconstructions (:mod:`rpd.schedules.family.avgpipe`, :mod:`rpd.schedules.family.frontier`);
ZB-H2 runs with sail-sg's optimizer post-validation and no rollback; XPipe / SpecTrain is
PipeDream with weight prediction; Chimera also runs with forward doubling and backward halving
(M = 2S > S; a reconstruction, :mod:`rpd.schedules.family.bidirectional`). The schedules shipped since
2024 (:data:`SINCE_2024`: looped BFS, interleaved ZB, DualPipe, V-Half, V-Min, combined 1F1B,
BitPipe) are rows too, measured alike, marked ``in_survey = False``; the verdicts read the
survey's systems only.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from rpd import objectives, registry, schedules
from rpd.analysis import tuning
from rpd.plotting.survey import survey_figure
from rpd.results import StudyOutput
from rpd.schedules.family import post_validation
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.costs import CostModel
from rpd.studies import schedule_table
from rpd.train import methods

SCALE = 4  # ticks per F: a chunk costs half a stage, I = W = B/2
# (label, schedule, constructor options, training options)
SYSTEMS: tuple[tuple[str, str, dict, dict], ...] = (
    ("GPipe", "gpipe", {}, {}),
    ("GEMS", "gems", {}, {}),
    ("DAPPLE / 1F1B", "1f1b", {}, {}),
    ("Chimera", "chimera", {}, {}),
    ("Chimera, forward doubling", "chimera", {"concat": "forward_doubling"}, {}),
    ("Chimera, backward halving", "chimera", {"concat": "backward_halving"}, {}),
    ("Megatron interleaved", "interleaved", {}, {}),
    ("ZB-H1", "zb_h1", {}, {}),
    ("ZB-H2", "zb_h2", {"post_validation": True}, {}),
    ("ZB-V", "zb_v", {}, {}),
    ("AMPNet", "ampnet", {}, {}),
    ("PipeDream", "pipedream", {}, {}),
    ("XPipe / SpecTrain", "pipedream", {}, {"predict": True}),
    ("PipeDream-2BW", "pipedream_2bw", {}, {}),
    ("PipeMare", "pipemare", {}, {}),
    ("AvgPipe", "avgpipe", {}, {}),
    ("WPipe", "wpipe", {}, {}),
)
# rows beside the survey's: the schedules shipped since 2024 (docs/schedules.md), measured alike;
# the survey's statements are judged on the survey's systems only
SINCE_2024: tuple[tuple[str, str, dict, dict], ...] = (
    ("looped BFS", "looped_bfs", {}, {}),
    ("interleaved ZB", "interleaved_zb", {}, {}),
    ("DualPipe", "dualpipe", {}, {}),
    ("V-Half", "v_half", {}, {}),
    ("V-Min", "v_min", {}, {}),
    ("combined 1F1B", "combined_1f1b", {}, {}),
    ("BitPipe", "bitpipe", {}, {}),
)
ROWS = SYSTEMS + SINCE_2024
# per device per optimizer step, by construction of the rule rpd implements (not timed)
EXTRA = {
    "GEMS": ("none", "all-reduce of both replicas' stages (2 stage-weight vectors)"),
    "Chimera": ("none", "all-reduce of both replicas' stages (2 stage-weight vectors)"),
    "Chimera, forward doubling": ("none", "all-reduce of both replicas' stages (2 stage-weight vectors)"),
    "Chimera, backward halving": (
        "none (half-microbatch backwards; their lower efficiency is not modelled)",
        "all-reduce of both replicas' stages (2 stage-weight vectors)",
    ),
    "ZB-H2": (
        "on a rollback: the step redone, min(2(S-1-s), M-1) forwards rerun",
        "grad-norm chain 0 -> S-1 -> 0 (2 scalars)",
    ),
    "XPipe / SpecTrain": ("one weight prediction per forward (a stage-weight axpy)", "none"),
    "AvgPipe": (
        "elastic step per replica and centre (2 stage-weight axpys per pipeline)",
        "none (centre on the device)",
    ),
    "DualPipe": ("none", "all-reduce of both copies' stages (2 stage-weight vectors)"),
    "BitPipe": ("none", "all-reduce of both copies' stages (2 stage-weight vectors)"),
}
COSTS = {"F=B": (1, 1), "B=2F": (1, 2)}


@dataclasses.dataclass(frozen=True)
class Config:
    S_values: tuple[int, ...] = (4, 8)
    M_factor: int = 2  # M = M_factor * S
    steps: int = 8  # optimizer steps (flushes) of the bubble and memory columns
    mb_per_S: int = 24  # the training budget: N = mb_per_S * S microbatches' F + B
    points: int = 32  # recorded ticks per curve
    n: int = 400
    d: int = 128
    batch_size: int = 5
    gamma_exps: tuple[int, int] = (-10, 0)
    seed: int = 0


QUICK = dict(S_values=(4,), mb_per_S=16, n=200, d=64, gamma_exps=(-8, -1), points=24)


def cost_model(name: str, f: int, b: int) -> CostModel:
    """Quarter-F ticks, per chunk for the chunked schedules (E9's convention)."""
    return schedule_table.cost_model(name, f, b, 0)


def build(name: str, S: int, N: int, M: int, costs: CostModel, **kw) -> schedules.Timeline:
    return registry.make(name, S, N, M, costs, **kw)


def measure(label: str, name: str, kw: dict, opts: dict, S: int, M: int, steps: int = 8) -> dict:
    """A row's bubble and memory columns (``steps`` steps of M microbatches)."""
    row = dict(system=label, schedule=name, S=S, M=M, in_survey=any(label == x[0] for x in SYSTEMS))
    for cost_label, (f, b) in COSTS.items():
        tl = build(name, S, steps * M, M, cost_model(name, f, b), **kw)
        row[f"bubble_{cost_label}"] = tl.bubble_ratio()
        if cost_label == "B=2F":
            acts = memory.peak_activations(tl, until="W") if tl.split else memory.peak_activations(tl)
            row["activations"] = float(acts.max())
            row["weights"] = float(memory.weight_memory(tl).max()) + (1.0 if opts.get("predict") else 0.0)
            row["weight_versions"] = int(memory.weight_versions(tl).max())
    row["extra_compute"], row["extra_comm"] = EXTRA.get(label, ("none", "none"))
    return row


def train_rows(cfg: Config, S: int, rows: list[dict]) -> dict:
    """Loss at equal simulated time (B = 2F) for every row of size S; returns the curves."""
    N, M = cfg.mb_per_S * S, cfg.M_factor * S
    budget = N * 3 * SCALE  # N microbatches of one stage's F + B = 2F, no bubble
    at = np.unique(np.linspace(budget / cfg.points, budget, cfg.points).round().astype(np.int64))
    grid = tuning.pow2_grid(*cfg.gamma_exps)
    objs = {}
    curves = {}
    for row, (label, name, kw, opts) in zip(rows, ROWS):
        blocks = registry.objective_blocks(name, S)
        if blocks not in objs:
            objs[blocks] = objectives.nesterov_quadratic(cfg.n, cfg.d, blocks, cfg.batch_size, mu=0.01, seed=cfg.seed)
        tl = build(name, S, N, M, cost_model(name, 1, 2), **kw)
        sem = registry.entry_of(name).semantics
        res = methods.train(objs[blocks], tl, grid, seed=cfg.seed, at=at[at <= tl.T], semantics=sem, **opts)
        curve = res.curve
        if curve.shape[1] < len(at) + 1:  # ended before the budget: its last point holds
            curve = np.concatenate([curve, np.repeat(curve[:, -1:], len(at) + 1 - curve.shape[1], axis=1)], axis=1)
        s = tuning.select_gamma(curve, grid, rule="best_final")
        row["budget"] = budget / SCALE
        row["gamma"] = None if s.index is None else float(grid[s.index])
        row["loss"] = float("nan") if s.index is None else float(curve[s.index, -1])
        curves[f"S{S}/{label}"] = curve[s.index] if s.index is not None else np.full(curve.shape[1], np.nan)
    curves[f"S{S}/axis"] = np.concatenate([[0], at]) / SCALE
    return curves


def claims(rows: list[dict], zb_lost: float) -> list[dict]:
    """The survey's statements (module doc), each with a verdict computed from the survey's rows."""
    by: dict[int, dict[str, dict]] = {}
    for r in rows:
        if not r.get("in_survey", True):
            continue
        by.setdefault(r["S"], {})[r["system"]] = r
    S0 = min(by)
    t = by[S0]
    sync = [r for r in t.values() if registry.entry_of(r["schedule"]).synchronous]
    asyn = [r for r in t.values() if not registry.entry_of(r["schedule"]).synchronous]
    out = []

    def add(claim, verdict, why):
        out.append(dict(claim=claim, verdict=verdict, measured=why))

    sb = {r["system"]: r["bubble_B=2F"] for r in sync if r["system"] != "ZB-H2"}
    # the asynchronous streams; AvgPipe's reconstruction runs each pipeline in synchronous steps
    ab = {r["system"]: r["bubble_B=2F"] for r in asyn if r["system"] != "AvgPipe"}
    worst_async = max(ab.values())
    above = sorted(k for k, v in sb.items() if v > worst_async + 1e-12)
    add(
        "bubble: synchronous > asynchronous, ZB-H2 excepted",
        "agrees" if len(above) == len(sb) else "disagrees" if not above else "depends",
        f"S={S0}, B=2F, {t['GPipe']['M']}-microbatch steps: async bubbles <= {worst_async:.3f} "
        f"({', '.join(f'{k} {v:.3f}' for k, v in ab.items())}); sync above that: {above}; "
        f"sync at or below: {sorted(set(sb) - set(above))}; ZB-H2 {t['ZB-H2']['bubble_B=2F']:.3f}; "
        f"AvgPipe (reconstruction, iterations in turn per device) {t['AvgPipe']['bubble_B=2F']:.3f}",
    )
    sl = {r["system"]: r["loss"] for r in sync}
    al = {r["system"]: r["loss"] for r in asyn}
    best_sync, best_async = min(sl.values()), min(al.values())
    add(
        "convergence: synchronous > asynchronous",
        "agrees" if best_sync < best_async else "disagrees",
        f"quadratic, S={S0}, equal time, tuned γ: best sync {min(sl, key=sl.__getitem__)} {best_sync:.3g}, "
        f"best async {min(al, key=al.__getitem__)} {best_async:.3g}",
    )
    one = ("GPipe", "DAPPLE / 1F1B", "ZB-H1", "ZB-H2", "ZB-V", "AMPNet", "XPipe / SpecTrain", "PipeMare")
    w = {k: t[k]["weights"] for k in one}
    add(
        "weights: GPipe, DAPPLE, ZB, AMPNet, XPipe, SpecTrain, PipeMare keep one copy",
        "agrees" if all(v == 1 for v in w.values()) else "depends",
        "; ".join(f"{k} {v:g}" for k, v in w.items()) + " (prediction keeps a velocity buffer)",
    )
    acts = {k: r["activations"] for k, r in t.items()}
    low = min(acts.values())
    add(
        "activations: GEMS the lowest (one input activation)",
        "agrees" if acts["GEMS"] <= low else "disagrees",
        f"GEMS {acts['GEMS']:g} A, lowest {low:g} A ({sorted(k for k, v in acts.items() if v <= low)})",
    )
    if len(by) > 1:
        ch = {S: by[S]["Chimera"]["activations"] for S in sorted(by)}
        add(
            "activations: Chimera depends on the pipeline depth",
            "agrees" if len(set(ch.values())) > 1 else "disagrees",
            "; ".join(f"S={S}: {v:g} A" for S, v in ch.items()),
        )
    stash = sorted(k for k, r in t.items() if r["weight_versions"] > 1)
    add(
        "extra memory from weight stashing: PipeDream, PipeDream-2BW, WPipe",
        "agrees" if set(stash) == {"PipeDream", "XPipe / SpecTrain", "PipeDream-2BW", "WPipe"} else "depends",
        f"blocks with more than one version: {stash}",
    )
    g = {S: by[S]["GEMS"]["bubble_F=B"] for S in sorted(by)}
    add(
        "GEMS bubble 1 - Θ(1/D)",
        "agrees" if all(v >= 0.5 for v in g.values()) else "disagrees",
        "; ".join(f"D={S}: {v:.3f} = 1 - {S * (1 - v):.2f}/D" for S, v in g.items()),
    )
    amp, best = t["AMPNet"]["loss"], min(r["loss"] for r in t.values())
    add(
        "AMPNet convergence poor",
        "agrees" if amp > 10 * best else "depends",
        f"AMPNet {amp:.3g} against the best {best:.3g} at equal time (S={S0})",
    )
    add(
        "ZB: about 8 % throughput lost without the optimizer post-validation (sail-sg README)",
        "agrees" if 0.04 <= zb_lost <= 0.12 else "depends",
        f"S={S0}, M={t['ZB-H2']['M']}, F=I=W, no latency, 20 steps: {100 * zb_lost:.1f} % more time per step",
    )
    return out


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    rows, arrays = [], {}
    for S in cfg.S_values:
        M = cfg.M_factor * S
        cell = [measure(label, name, kw, opts, S, M, cfg.steps) for label, name, kw, opts in ROWS]
        arrays.update(train_rows(cfg, S, cell))
        rows += cell
        if progress is not None:
            progress(f"S={S}")
    S, M, Q = min(cfg.S_values), cfg.M_factor * min(cfg.S_values), 20
    barrier = post_validation.zb_h2_barrier(S, Q * M, M).T
    validated = post_validation.zb_h2_validated(S, Q * M, M).T
    verdicts = claims(rows, (barrier - validated) / validated)
    return StudyOutput(arrays=arrays, summary=dict(claims=verdicts, scale=SCALE), table=rows)


def figure(out: StudyOutput, path) -> None:
    survey_figure(out, path)
