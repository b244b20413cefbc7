"""E10: which schedule reaches the lowest loss at a given simulated time and memory
(docs/results.md#e10-every-schedule-trained-loss-against-time-and-memory).

Every schedule of the family trains with its own semantics (``rpd.train.methods.train``) on the same
objectives, at S ∈ {4, 8, 16} stages, under two cost settings of E9 (``F=B``, no latency; and
``B=2F`` with I = W = F for the split schedules and a p2p latency of one F). Per (objective, S,
costs) every schedule gets the same simulated-time budget: the compute time of ``N = mb_per_S·S``
microbatches on one rank with no bubble, N·(tF + tB). Nobody can finish more than N microbatches
in it, so every schedule runs exactly N (N/M flushes of M = ``M_factor``·S for the synchronous
ones and 2BW) and the budget cuts its curve. Reported per schedule:

- loss at the budget: f − f* (the LM: held-out loss) at the last recorded tick <= budget, with γ
  from a power-of-two grid by the stable selector (docs/science.md#step-sizes) and by best-final, both kept;
- time to target: the first recorded tick at which the selected curve is <= the target, the
  loss the best schedule has at half the budget (so the best reaches it by construction; "never"
  is a result);
- peak memory per rank: activations (units of A, one microbatch's input to one stage; split
  schedules count F-not-W) and weights (units of W, one stage's block, all versions and
  replicas held), and their sum in values with the objective's A and W (linear chains: A = B
  partial sums; MLP: B·width; LM: B·seq·width; W = D / S).

Times are in units of one stage's F (the timelines run in E9's quarter-F ticks). The curves are
recorded at ``points`` ticks evenly spaced up to the budget, so time to target has a resolution
of budget/points. LocalSGD's model is the replicas' average, which exists at round ends: its
curve is read there (the last round end at or before each recorded tick). Schedules whose constraint rules them out are listed with the reason (e.g.
none at M = 2S; 2BW needs M >= S − 1).

The survey's remaining systems (docs/schedules.md#gems to #wpipe) are rows too, built as E9 and E16 build them: GEMS,
AMPNet (M = its update interval: a step every M backwards of one stream), AvgPipe (two
pipelines, no advance), WPipe, ZB-H2 with sail-sg's optimizer post-validation (no rollback) and
Chimera with forward doubling / backward halving (E9's ``chimera_fd`` / ``chimera_bh``).
WPipe trains one objective block per stage, 2S (the registry's ``blocks``), as E16 does. On the
linear chains the 2S-block objective is the same function (the same data, w* and f*, only cut
finer), so its loss compares with the S-block rows; its memory is counted in the S-block units
(a chunk's weights and activations are half a stage's). The MLP chain and the LM with 2S blocks
are deeper models, not the same objective: there WPipe's row is n/a, with that reason.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import Callable

import numpy as np

from rpd import objectives, registry, schedules
from rpd.analysis import tuning
from rpd.objectives import corpus
from rpd.objectives.entry import entry_of
from rpd.plotting.frontier import frontier_figure
from rpd.registry import objective_blocks
from rpd.results import StudyOutput
from rpd.schedules.machinery import memory
from rpd.studies import objective_sizes
from rpd.studies.schedule_table import SCALE, build, cost_model, schedule_of
from rpd.studies.units import run_all
from rpd.train import methods


def _drawn(*names: str) -> tuple[tuple[str, str, dict], ...]:
    """Schedules' rows as they are drawn everywhere: each labelled by its entry's compact label."""
    return tuple((registry.style(n).compact, n, {}) for n in names)


# (label, schedule name, options of its semantics)
VARIANTS: tuple[tuple[str, str, dict], ...] = (
    *_drawn("gpipe", "1f1b", "interleaved", "zb_h1", "zb_h2", "zb_v", "dualpipe_v", "chimera"),
    *_drawn("chimera_fd", "chimera_bh"),  # E9's rows: forward doubling / backward halving (M = 2S > S)
    *_drawn("pipedream"),
    ("PipeDream+pred", "pipedream", {"predict": True}),
    *_drawn("pipedream_2bw", "pipemare"),
    ("PipeMare T1+T2", "pipemare", {"t1": True, "t2": True}),
    *_drawn("local_sgd", "gems", "ampnet", "avgpipe", "wpipe"),
    *_drawn("zb_h2_pv"),  # E9's row: ZB-H2 with optimizer post-validation, no rollback
    # the schedules shipped since 2024 (docs/schedules.md): synchronous, DualPipe and BitPipe with
    # their two copies' gradients summed
    *_drawn("looped_bfs", "interleaved_zb", "dualpipe", "v_half", "v_min", "combined_1f1b", "bitpipe"),
)
COST_SETTINGS = {"F=B": ("F=B", 1, 1, 0), "B=2F+lat": ("B=2F", 1, 2, 1)}  # label -> (E9 label, f, b, p2p)
OBJECTIVES = ("nesterov_quadratic", "logistic_regression", "mlp_chain", "nanochat")
BLOCK_FREE = ("nesterov_quadratic", "logistic_regression")  # the same function cut into any number of blocks


@dataclasses.dataclass(frozen=True)
class Config:
    objectives: tuple[str, ...] = OBJECTIVES
    S_values: tuple[int, ...] = (4, 8, 16)
    lm_S_values: tuple[int, ...] = (4, 8)  # the LM's stages (S >= 3); 16 adds hours on 2 cores
    costs: tuple[str, ...] = ("F=B", "B=2F+lat")
    variants: tuple[str, ...] = tuple(v[0] for v in VARIANTS)
    mb_per_S: int = 32  # N = mb_per_S * S microbatches: the budget's worth of work
    M_factor: int = 2  # M = M_factor * S microbatches per flush (DualPipeV needs M >= 2S)
    H: int = 4  # LocalSGD local steps per round (R = S replicas)
    points: int = 64  # recorded ticks per curve
    tail_frac: float = 0.2
    # problems (E3/E4's sizes, docs/science.md#the-papers-experiments; the MLP chain and LM at laptop sizes)
    n: int = 600
    d: int = 512
    batch_size: int = 5
    mlp_n: int = 512
    mlp_width: int = 16
    mlp_batch: int = 8
    lm_width: int = 32
    lm_batch: int = 8
    lm_seq: int = 32
    lm_heldout_batches: int = 8
    gamma_exps: dict = dataclasses.field(
        default_factory=lambda: {name: entry_of(name).gamma_exps for name in OBJECTIVES}  # each one's default
    )  # 2^-5..2^-1 put 52 of 56 best-final picks on the top edge
    seed: int = 0


# Laptop size: Nesterov's quadratic at S = 4, every schedule (the other objectives at the paper size:
# the LM and the MLP chain were 2/3 of E10's quick compile, logistic regression another 1/6, and E5
# and E18 train the LM at the quick size); full: the four objectives, S = 4, 8, 16. The others' quick
# sizes below stay for a user's objectives=[...] at the quick size.
QUICK = dict(
    objectives=("nesterov_quadratic",),
    S_values=(4,),
    lm_S_values=(4,),
    mb_per_S=24,
    lm_width=16,
    lm_seq=16,
    lm_batch=4,
    lm_heldout_batches=2,
    gamma_exps={
        "nesterov_quadratic": (-10, 0),
        "logistic_regression": (-8, 2),
        "mlp_chain": (-6, 3),
        "nanochat": (-3, 1),
    },
)


def corpus_identity(cfg: Config) -> str | None:
    """The SHA-256 of the LM's text (the fetched corpus) when the LM is one of the objectives:
    part of the stored output's key."""
    return corpus.identity() if any(entry_of(o).is_lm for o in cfg.objectives) else None


def make_objective(name: str, S: int, cfg: Config):
    """The objective with S blocks and its activation size A (values per microbatch per stage)."""
    if name == "nesterov_quadratic":
        return objectives.nesterov_quadratic(cfg.n, cfg.d, S, cfg.batch_size, mu=0.01, seed=cfg.seed), cfg.batch_size
    if name == "logistic_regression":
        return objectives.logistic_regression(cfg.n, cfg.d, S, cfg.batch_size, seed=cfg.seed), cfg.batch_size
    if name == "mlp_chain":
        return objective_sizes.mlp_chain(cfg, S, cfg.seed), cfg.mlp_batch * cfg.mlp_width
    if entry_of(name).is_lm:
        return objective_sizes.lm(cfg, S, cfg.seed), cfg.lm_batch * cfg.lm_seq * cfg.lm_width
    entry = objectives.OBJECTIVES.get(name)
    if entry is not None and entry.build is not None:  # another registered objective: built by its entry
        sizes = types.SimpleNamespace(
            n=cfg.n, d=cfg.d, batch_size=cfg.batch_size, seed=cfg.seed, rotate=False, align=False
        )
        return entry.build(sizes, S), cfg.batch_size  # at the linear models' sizes
    raise ValueError(f"objectives: unknown {name!r}; valid: {list(OBJECTIVES)} or a registered objective")


def objective_for(objective: str, S: int, name: str, cfg: Config, made: dict):
    """The objective schedule ``name`` trains at S ranks, with its A (``made``: by block count,
    filled as needed). ``ValueError`` where its block count gives another objective."""
    blocks = objective_blocks(schedule_of(name), S)
    if blocks != S and objective not in BLOCK_FREE:
        raise ValueError(f"{name} trains {blocks} blocks: {objective} with {blocks} blocks is a deeper model")
    if blocks not in made:
        made[blocks] = make_objective(objective, blocks, cfg)
    return made[blocks]


def timeline(name: str, S: int, N: int, M: int, H: int, setting: str) -> schedules.Timeline:
    label, f, b, c = COST_SETTINGS[setting]
    costs = cost_model(name, f, b, c)
    return build(name, S, M, N, costs, **({"R": S, "H": H} if "H" in registry.entry_of(name).own_names else {}))


def peak_memory(tl: schedules.Timeline, A: int, W: float, opts: dict) -> dict:
    """Peak per rank; prediction and T2 keep one velocity buffer per block (+1 W)."""
    acts = memory.peak_activations(tl, until="W") if tl.split else memory.peak_activations(tl)
    weights = memory.weight_memory(tl) + (1.0 if opts.get("predict") or opts.get("t2") else 0.0)
    per_rank = acts * A + weights * W
    r = int(np.argmax(per_rank))
    return dict(act_A=float(acts[r]), weights_W=float(weights[r]), memory=float(per_rank[r]))


def _cell(cfg: Config, made: dict, objective: str, S: int, setting: str, grid: np.ndarray) -> list[dict]:
    N, M = cfg.mb_per_S * S, cfg.M_factor * S
    _, f, b, _ = COST_SETTINGS[setting]
    budget = N * (f + b) * SCALE  # ticks: N microbatches of one stage's F + B, no bubble
    at = np.unique(np.linspace(budget / cfg.points, budget, cfg.points).round().astype(np.int64))
    lm = entry_of(objective).is_lm
    rows = []
    for label, name, opts in VARIANTS:
        if label not in cfg.variants:
            continue
        row = dict(objective=objective, S=S, costs=setting, schedule=label, budget=budget / SCALE)
        try:
            obj, A = objective_for(objective, S, name, cfg, made)
            tl = timeline(name, S, N, M, cfg.H, setting)
        except ValueError as err:  # a schedule's own constraint, or WPipe's 2S blocks
            rows.append(dict(row, status="n/a", reason=str(err)))
            continue
        sem = registry.entry_of(name).semantics
        # one ring for both costs, and at least 2BW's two gradient slots: the flushes run in 2BW's program
        # (methods.train raises both to what a plan needs; the numbers are the same bit for bit)
        plan = sem.runner == "plan"
        res = methods.train(
            obj, tl, grid, seed=cfg.seed, at=at, semantics=sem, ring_size=2 * S + 4 if plan else None,
            n_slots=2 if plan else None, **opts,
        )  # fmt: skip
        curve = res.curve  # [G, 1 + len(at)]: the start, then every recorded tick
        th = tuning.LM if lm else tuning.DEFAULT
        sel = {
            rule: tuning.select_gamma(curve, grid, rule=rule, tail_frac=cfg.tail_frac, thresholds=th)
            for rule in ("stable", "best_final")
        }
        row.update(
            status="ok",
            T=tl.T / SCALE,
            M=tl.M,
            **peak_memory(tl, A, obj.D / S, opts),  # W: one stage's weights (WPipe: two blocks)
            n_diverged=int(res.diverged.sum()),
        )
        for rule, s in sel.items():
            i = s.index
            row[f"gamma_{rule}"] = None if i is None else float(grid[i])
            row[f"loss_{rule}"] = float("nan") if i is None else float(curve[i, -1])
        i = sel["stable"].index
        rows.append(row)
        row["_curve"] = curve[i] if i is not None else np.full(curve.shape[1], np.nan)
        row["_axis"] = res.axis / SCALE
    _time_to_target(rows)
    return rows


def _time_to_target(rows: list[dict]) -> None:
    """Target = the lowest loss any schedule has at half the budget (selected γ)."""
    ok = [r for r in rows if r["status"] == "ok" and np.isfinite(r["loss_stable"])]
    if not ok:
        return
    half = [r["_curve"][np.searchsorted(r["_axis"], r["budget"] / 2, side="right") - 1] for r in ok]
    target = float(np.nanmin(half))
    for r in ok:
        hit = np.nonzero(r["_curve"] <= target)[0]
        r["target"] = target
        r["time_to_target"] = float(r["_axis"][hit[0]]) if hit.size else None


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates (<= in both coordinates, < in one;
    lower is better), ordered by the first coordinate. Tied points are all on the front."""
    front = [
        i
        for i, (m, v) in enumerate(points)
        if not any((m2 <= m and v2 < v) or (m2 < m and v2 <= v) for m2, v2 in points)
    ]
    return sorted(front, key=lambda i: points[i])


def units(cfg: Config) -> list[dict]:
    """One unit per (objective, S), its cost settings' cells together (``rpd.studies.units``):
    they share every compiled program (one ring for both costs), so a unit of each would compile
    them twice where the units run in two processes. Checks ``cfg`` first."""
    unknown = set(cfg.variants) - {v[0] for v in VARIANTS}
    if unknown:
        raise ValueError(f"variants: unknown {sorted(unknown)}; valid: {[v[0] for v in VARIANTS]}")
    unknown = set(cfg.costs) - set(COST_SETTINGS)
    if unknown:
        raise ValueError(f"costs: unknown {sorted(unknown)}; valid: {list(COST_SETTINGS)}")
    return [
        dict(key=f"{objective}/S{S}", objective=objective, S=S)
        for objective in cfg.objectives
        for S in (cfg.lm_S_values if entry_of(objective).is_lm else cfg.S_values)
    ]


def prepare(cfg: Config) -> dict:
    """The objectives the cells of one process share: (objective, S) -> {block count: (obj, A)}."""
    return {}


def run_unit(cfg: Config, unit: dict, shared: dict | None = None) -> list[list[dict]]:
    """The unit's cells, one per cost setting of ``cfg.costs``: each cell's rows (every
    variant), with time to target."""
    objective, S = unit["objective"], unit["S"]
    made = (shared if shared is not None else {}).setdefault((objective, S), {})
    if S not in made:
        made[S] = make_objective(objective, S, cfg)
    grid = tuning.pow2_grid(*cfg.gamma_exps[objective])
    return [_cell(cfg, made, objective, S, setting, grid) for setting in cfg.costs]


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    """Every cell of :func:`units` here, then :func:`assemble` (``rpd.studies.units.run_all``)."""
    return run_all(sys.modules[__name__], cfg, progress)


def assemble(cfg: Config, payloads: list[list[list[dict]]]) -> StudyOutput:
    """The study's output from every unit's cells, in the order of :func:`units` and, within
    a unit, of ``cfg.costs``: curves as arrays, the Pareto front per cell, the summary."""
    rows: list[dict] = []
    arrays: dict[str, np.ndarray] = {}
    for unit, cells in zip(units(cfg), payloads):
        for setting, cell in zip(cfg.costs, cells):
            rows += _assembled(f"{unit['key']}/{setting}", cell, arrays)
    return StudyOutput(arrays=arrays, summary=summarise(rows), table=rows)


def _assembled(cell_key: str, cell: list[dict], arrays: dict) -> list[dict]:
    """One (objective, S, costs) cell's rows, its curves moved into ``arrays`` and its Pareto
    front marked."""
    for r in cell:
        if r["status"] == "ok":
            key = f"{cell_key}/{r['schedule']}"
            arrays[key + "/curve"] = r.pop("_curve")
            arrays[key + "/axis"] = r.pop("_axis")
    ok = [r for r in cell if r["status"] == "ok" and np.isfinite(r["loss_stable"])]
    for j in pareto([(r["memory"], r["loss_stable"]) for r in ok]):
        ok[j]["pareto"] = True
    return cell


def summarise(rows: list[dict]) -> dict:
    """Per (objective, S, costs): the winner at the budget, the Pareto front, the fastest to
    the target; and how often each schedule wins or sits on the front."""
    cells = []
    wins: dict[str, int] = {}
    fronts: dict[str, int] = {}
    keys = sorted({(r["objective"], r["S"], r["costs"]) for r in rows}, key=str)
    for key in keys:
        ok = [
            r
            for r in rows
            if (r["objective"], r["S"], r["costs"]) == key and r["status"] == "ok" and np.isfinite(r["loss_stable"])
        ]
        if not ok:
            continue
        low = min(r["loss_stable"] for r in ok)
        best = [r["schedule"] for r in ok if r["loss_stable"] <= low + 1e-9 * abs(low)]  # ties: all of them
        timed = [r["time_to_target"] for r in ok if r.get("time_to_target") is not None]
        fastest = [r["schedule"] for r in ok if timed and r.get("time_to_target") == min(timed)]
        front = [r["schedule"] for r in sorted(ok, key=lambda r: r["memory"]) if r.get("pareto")]
        cells.append(
            dict(
                objective=key[0],
                S=key[1],
                costs=key[2],
                best=best,
                best_loss=low,
                front=front,
                fastest=fastest,
                fastest_time=min(timed) if timed else None,
                target=ok[0].get("target"),
                budget=ok[0]["budget"],
            )
        )
        for name in best:
            wins[name] = wins.get(name, 0) + 1
        for name in front:
            fronts[name] = fronts.get(name, 0) + 1
    na = sorted({f"{r['schedule']} (S={r['S']}): {r['reason']}" for r in rows if r["status"] == "n/a"})
    return dict(cells=cells, wins=wins, on_front=fronts, na=na, scale=SCALE)


def figure(out: StudyOutput, path) -> None:

    frontier_figure(out, path)
