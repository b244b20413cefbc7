"""E19: how each schedule family's step time and time to a target loss degrade under stragglers
and jitter (docs/results.md#e19-stragglers-and-jitter).

Stochastic time (docs/science.md#stochastic-time, :mod:`rpd.schedules.machinery.jitter`) on the
schedules of four families: synchronous flushes (GPipe, 1F1B), the zero-bubble family (ZB-H1,
ZB-H2), the asynchronous streams (PipeDream, PipeDream-2BW) and LocalSGD (R = S replicas, H local
steps). S ranks, M = ``M_factor``·S microbatches per step (the flushes' and 2BW's minibatch; for
PipeDream and LocalSGD, M microbatches of their stream). Costs in ticks: F = ``tF``, B = ``tB``
(I = W = tB/2 for the split schedules, so every schedule does the same work), a p2p latency
``p2p`` on every cross-rank dependency, LocalSGD's averaging ``avg`` ticks per round; times are
reported in units of one F.

**Step time.** Makespan of ``flushes``·M microbatches × M / N: the mean time per M microbatches
over the run, which is a flush for the synchronous schedules and the same amount of work for the
streams and LocalSGD. (i) One persistent straggler (k = 1): rank r's compute ops take f times as
long in every step, for f in ``factors``; every rank r in turn, and the mean over r reported (the
straggler's position is exact, not sampled). (ii) Jitter: every op type's duration (F, B, I, W,
p2p, averaging) times an independent lognormal factor of mean 1 and CV c, for c in ``cvs``, mean
(and standard deviation) over ``seeds`` seeded timelines; the same seed gives every schedule the
same draws for the same op (common random numbers). Reported: step(f) / step(1) and step(c) /
step(0).

**Time to a target loss** (E10's protocol, docs/results.md#e10-every-schedule-trained-loss-against-time-and-memory): each schedule trains N_train =
``mb_per_S``·S microbatches through its own semantics (:func:`rpd.train.methods.train`) on E10's
MLP chain with one block per stage, on its timeline under the straggler (on rank
``train_rank``, the last by default: the paper's most common straggler, an overloaded last
stage) or the jitter (seeds 0 .. ``train_seeds`` - 1, the mean reported); the curve is read at ``points`` instants evenly spaced up to the
run's own makespan, γ by the stable selector (tail ``tail_frac``) on a power-of-two grid. The
target is fixed once, as the loss every schedule reaches on its exact timeline (f = 1, c = 0): the
largest over schedules of each one's lowest recorded loss in its N_train microbatches. (E10's
target, the best loss at half the budget, is reached by the fastest schedule alone at these sizes,
which leaves the others' degradation unmeasured; here the question is each schedule's own
slowdown.) Time to target: the first recorded instant at or below it (resolution: the run's
makespan / ``points``), "never" if not reached in N_train microbatches. A schedule's order, and
so the weight versions each gradient reads, does not depend on the costs (the static orders, and
PipeDream's and LocalSGD's readiness orders timed under costs), so time to target moves with
the timeline; what the training adds is where on the timeline each update lands.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from rpd import registry
from rpd.analysis import tuning
from rpd.plotting.stochastic_time import stochastic_time_figure
from rpd.results import StudyOutput
from rpd.schedules.machinery.costs import CostModel
from rpd.studies import objective_sizes, summary_head
from rpd.train import methods

TITLE = "Stragglers and jitter: step time and time to a loss per schedule family"
SCHEDULES = ("gpipe", "1f1b", "zb_h1", "zb_h2", "pipedream", "pipedream_2bw", "local_sgd")
FAMILY = {
    "gpipe": "synchronous flush",
    "1f1b": "synchronous flush",
    "zb_h1": "zero bubble",
    "zb_h2": "zero bubble",
    "pipedream": "asynchronous stream",
    "pipedream_2bw": "asynchronous stream",
    "local_sgd": "LocalSGD",
}


@dataclasses.dataclass(frozen=True)
class Config:
    S: int = 8
    M_factor: int = 2  # M = M_factor * S microbatches per step
    flushes: int = 8  # step time: a run of flushes * M microbatches
    factors: tuple[float, ...] = (1.0, 1.25, 1.5, 1.75, 2.0)  # the straggler's slowdown f (k = 1)
    cvs: tuple[float, ...] = (0.0, 0.1, 0.2, 0.4)  # jitter CV of every op type
    seeds: int = 16  # jittered timelines per (schedule, CV)
    train_seeds: int = 4  # jittered timelines trained per (schedule, CV)
    tF: int = 100  # ticks of one F (fine enough that rounding a jittered op moves it < 0.5 %)
    tB: int = 200
    p2p: int = 10
    avg: int = 200  # LocalSGD: ticks of one averaging
    H: int = 4  # LocalSGD local steps per round (R = S)
    schedules: tuple[str, ...] = SCHEDULES
    train: bool = True  # time to a target loss (the MLP chain)
    train_schedules: tuple[str, ...] | None = None  # the schedules trained; None: every one of schedules
    train_rank: int | None = None  # the straggler's rank in training; None: the last
    mb_per_S: int = 32  # N_train = mb_per_S * S
    points: int = 64
    mlp_n: int = 512
    mlp_width: int = 16
    mlp_batch: int = 8
    gamma_exps: tuple[int, int] = (-6, 3)  # the γ grid 2^lo..2^hi
    tail_frac: float = 0.2
    seed: int = 0  # the objective's data and init


# Laptop size: S = 4, three factors, one CV, 3 seeds, 4 steps; 1F1B and PipeDream trained (each
# runner's first compile is most of a run at this size), N_train = 16 S, a narrower γ grid.
QUICK = dict(
    S=4,
    factors=(1.0, 1.5, 2.0),
    cvs=(0.0, 0.2),
    seeds=3,
    train_seeds=1,
    train_schedules=("1f1b", "pipedream"),
    flushes=4,
    mb_per_S=16,
    points=16,
    gamma_exps=(-2, 2),
)


def check(cfg: Config) -> None:
    """Refuse a bad config before any work, naming the field."""
    unknown = [s for s in cfg.schedules if s not in FAMILY]
    if unknown:
        raise ValueError(f"schedules: unknown {unknown}; valid: {list(FAMILY)}")
    other = [s for s in cfg.train_schedules or () if s not in cfg.schedules]
    if other:
        raise ValueError(f"train_schedules: {other} are not in schedules {list(cfg.schedules)}")
    if not cfg.factors or 1.0 not in cfg.factors or min(cfg.factors) <= 0:
        raise ValueError(f"factors must include 1.0 (the reference) and be > 0, got {list(cfg.factors)}")
    if not cfg.cvs or 0.0 not in cfg.cvs or min(cfg.cvs) < 0:
        raise ValueError(f"cvs must include 0.0 (the reference) and be >= 0, got {list(cfg.cvs)}")
    if cfg.tB % 2:
        raise ValueError(f"tB must be even (I = W = tB/2 for the split schedules), got {cfg.tB}")
    if cfg.train_rank is not None and not 0 <= cfg.train_rank < cfg.S:
        raise ValueError(f"train_rank must be a rank 0..{cfg.S - 1}, got {cfg.train_rank}")


def costs(cfg: Config, name: str, slow=None, cv: float = 0.0, seed: int = 0) -> CostModel:
    """The cost model of schedule ``name``: F, B (I = W = B/2 when split), p2p, averaging; a
    persistent straggler ``slow`` = (rank, f) and jitter of CV ``cv`` on every op type."""
    split = registry.entry_of(name).split_backward
    half = cfg.tB // 2
    return CostModel(
        F=cfg.tF,
        B=None if split else cfg.tB,
        I=half if split else None,
        W=half if split else None,
        p2p=cfg.p2p,
        allreduce=(float(cfg.avg), 0.0),
        jitter=(cv,) * 5 if cv > 0 else None,
        slow=((slow[0],), slow[1]) if slow is not None and slow[1] != 1 else None,
        seed=seed,
    )


def timeline(cfg: Config, name: str, N: int, c: CostModel):
    M = cfg.M_factor * cfg.S
    kw = {"R": cfg.S, "H": cfg.H} if name == "local_sgd" else {}
    return registry.make(name, cfg.S, N, M, c, **kw)


def step_time(cfg: Config, name: str, c: CostModel) -> float:
    """Mean time per M microbatches in units of F: makespan · M / N over ``flushes`` steps."""
    M = cfg.M_factor * cfg.S
    N = cfg.flushes * M
    return timeline(cfg, name, N, c).T * M / N / cfg.tF


def step_rows(cfg: Config) -> list[dict]:
    """Step time per (schedule, f, straggler rank) and per (schedule, CV, seed)."""
    rows = []
    for name in cfg.schedules:
        base = step_time(cfg, name, costs(cfg, name))
        for f in cfg.factors:
            for r in range(cfg.S) if f != 1 else (None,):
                t = base if r is None else step_time(cfg, name, costs(cfg, name, slow=(r, f)))
                rows.append(dict(kind="straggler", schedule=name, f=f, rank=r, step=t, ratio=t / base))
        for cv in cfg.cvs:
            for s in range(cfg.seeds) if cv > 0 else (0,):
                t = base if cv == 0 else step_time(cfg, name, costs(cfg, name, cv=cv, seed=s))
                rows.append(dict(kind="jitter", schedule=name, cv=cv, seed=s, step=t, ratio=t / base))
    return rows


def _train(cfg: Config, obj, name: str, c: CostModel, grid: np.ndarray) -> dict:
    N = cfg.mb_per_S * cfg.S
    tl = timeline(cfg, name, N, c)
    at = np.unique(np.linspace(tl.T / cfg.points, tl.T, cfg.points).round().astype(np.int64))
    sem = registry.entry_of(name).semantics
    ring = None if tl.synchronous or sem.runner != "plan" else 2 * cfg.S + 4  # programs shared across timelines
    res = methods.train(obj, tl, grid, seed=cfg.seed, at=at, ring_size=ring, semantics=sem)
    curve = np.asarray(res.curve)
    i = tuning.select_gamma(curve, grid, rule="stable", tail_frac=cfg.tail_frac).index
    axis = np.asarray(res.axis, np.float64) / cfg.tF
    return dict(
        T=tl.T / cfg.tF,
        gamma=None if i is None else float(grid[i]),
        loss=None if i is None else float(curve[i, -1]),
        n_diverged=int(np.asarray(res.diverged).sum()),
        _curve=curve[i] if i is not None else np.full(curve.shape[1], np.nan),
        _axis=axis,
    )


def train_rows(cfg: Config, progress: Callable[[str], None]) -> list[dict]:
    """Each schedule trained under each f (straggler on ``train_rank``) and each CV (seeds 0 ..
    ``train_seeds`` - 1 of the jitter), with time to the target of the module doc."""
    obj = objective_sizes.mlp_chain(cfg, cfg.S, cfg.seed)
    grid = tuning.pow2_grid(*cfg.gamma_exps)
    r = cfg.S - 1 if cfg.train_rank is None else cfg.train_rank
    rows = []
    for name in cfg.schedules if cfg.train_schedules is None else cfg.train_schedules:
        for f in cfg.factors:
            row = dict(kind="straggler", schedule=name, f=f, cv=0.0, rank=r if f != 1 else None)
            rows.append(dict(row, **_train(cfg, obj, name, costs(cfg, name, slow=(r, f)), grid)))
        for cv in cfg.cvs:
            for s in range(cfg.train_seeds) if cv > 0 else ():
                row = dict(kind="jitter", schedule=name, f=1.0, cv=cv, rank=None, seed=s)
                rows.append(dict(row, **_train(cfg, obj, name, costs(cfg, name, cv=cv, seed=s), grid)))
        progress(f"{name}: trained")
    ref = [x for x in rows if x["f"] == 1.0 and x["cv"] == 0.0 and x["loss"] is not None]
    target = max(float(np.nanmin(x["_curve"])) for x in ref) if ref else float("nan")
    for x in rows:
        hit = np.nonzero(x["_curve"] <= target)[0]
        x.update(target=target, time_to_target=float(x["_axis"][hit[0]]) if hit.size else None)
    return rows


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    """Step times (every schedule, f, rank, CV, seed), then time to the target (``cfg.train``)."""
    check(cfg)
    report = progress or (lambda msg: None)
    steps = step_rows(cfg)
    report(f"{len(steps)} timelines")
    trained = train_rows(cfg, report) if cfg.train else []
    arrays = {}
    for x in trained:
        key = f"{x['schedule']}/{x['kind']}/f{x['f']:g}/cv{x['cv']:g}/seed{x.get('seed', 0)}"
        arrays[key + "/curve"] = x.pop("_curve")
        arrays[key + "/axis"] = x.pop("_axis")
    summary = summarise(cfg, steps, trained)
    for name in cfg.schedules:  # every straggler position's and seed's step time, for the record
        for kind, by in (("straggler", "f"), ("jitter", "cv")):
            for v in cfg.factors if kind == "straggler" else cfg.cvs:
                xs = [x["step"] for x in steps if x["schedule"] == name and x["kind"] == kind and x[by] == v]
                arrays[f"step/{name}/{kind}/{v:g}"] = np.asarray(xs)
    return StudyOutput(arrays=arrays, summary=summary, table=table_rows(summary, trained))


def table_rows(summary: dict, trained: list[dict]) -> list[dict]:
    """One row per (schedule, straggler f or jitter CV): the step slowdown (mean over the
    straggler's rank / over seeds) and, where trained, time to target and its ratio to exact."""
    rows = []
    for name, p in summary["schedules"].items():
        for kind, block in (("straggler", p["straggler"]), ("jitter", p["jitter"])):
            for v, x in block.items():
                t = p["time_to_target"].get(f"{kind}/{v}") or (
                    p["time_to_target"].get("straggler/1") if kind == "jitter" and v == "0" else None
                )
                rows.append(
                    dict(
                        schedule=name,
                        family=p["family"],
                        kind=kind,
                        value=float(v),
                        step=p["step"] * x["ratio_mean"],
                        step_ratio=x["ratio_mean"],
                        step_sd=x.get("ratio_sd"),
                        worst_rank=x.get("worst_rank"),
                        time_to_target=None if t is None else t["time_to_target"],
                        ttt_ratio=None if t is None else t["ratio"],
                        gamma=None if t is None else t["gamma"],
                    )
                )
    return rows


def summarise(cfg: Config, steps: list[dict], trained: list[dict]) -> dict:
    """Per schedule: the mean step slowdown at each f (over the straggler's rank) and each CV
    (mean and sd over seeds), the worst rank, and the time to target and its ratio to f = 1."""
    per: dict[str, dict] = {}
    for name in cfg.schedules:
        st = [x for x in steps if x["schedule"] == name]
        base = next(x["step"] for x in st if x["kind"] == "straggler" and x["f"] == 1.0)
        strag = {}
        for f in cfg.factors:
            xs = [x for x in st if x["kind"] == "straggler" and x["f"] == f]
            worst = max(xs, key=lambda x: x["ratio"])
            strag[f"{f:g}"] = dict(
                ratio_mean=float(np.mean([x["ratio"] for x in xs])),
                ratio_by_rank=[x["ratio"] for x in xs],
                worst_rank=worst["rank"],
            )
        jit = {}
        for cv in cfg.cvs:
            ratios = [float(x["ratio"]) for x in st if x["kind"] == "jitter" and x["cv"] == cv]
            jit[f"{cv:g}"] = dict(ratio_mean=float(np.mean(ratios)), ratio_sd=float(np.std(ratios)), n=len(ratios))
        tr = [x for x in trained if x["schedule"] == name]
        t0 = next((x["time_to_target"] for x in tr if x["f"] == 1.0 and x["cv"] == 0.0), None)
        groups: dict[str, list[dict]] = {}
        for x in tr:
            groups.setdefault(f"{x['kind']}/{x['f'] if x['kind'] == 'straggler' else x['cv']:g}", []).append(x)
        ttt = {key: _time_summary(xs, t0) for key, xs in groups.items()}
        per[name] = dict(family=FAMILY[name], step=base, straggler=strag, jitter=jit, time_to_target=ttt)
    setting = (
        f"S = {cfg.S}, M = {cfg.M_factor * cfg.S}, F = {cfg.tF}, B = {cfg.tB} ticks (I = W = B/2), p2p {cfg.p2p}, "
        f"LocalSGD R = S, H = {cfg.H}, averaging {cfg.avg} ticks; step = makespan of {cfg.flushes} steps / "
        f"{cfg.flushes}, in units of F; straggler: one rank x f (mean over its position); jitter: lognormal "
        f"CV c on every op type, {cfg.seeds} seeds; training: MLP chain (n = {cfg.mlp_n}, width {cfg.mlp_width}), "
        f"N = {cfg.mb_per_S * cfg.S}, stable γ, straggler on rank "
        f"{cfg.S - 1 if cfg.train_rank is None else cfg.train_rank}, jitter over {cfg.train_seeds} seeds"
    )
    target = trained[0]["target"] if trained else None
    return dict(**summary_head("e19_stragglers", TITLE, setting, cfg), schedules=per, target=target)


def _time_summary(xs: list[dict], t0: float | None) -> dict:
    """Time to target of one (schedule, f or CV) over its runs (one, or one per jitter seed): the
    mean when every run reached the target (None otherwise), its ratio to exact, the γ picked."""
    times = [x["time_to_target"] for x in xs]
    mean = None if any(t is None for t in times) else float(np.mean(times))
    return dict(
        time_to_target=mean,
        ratio=None if t0 is None or mean is None else mean / t0,
        ratio_sd=None if t0 is None or mean is None or len(xs) < 2 else float(np.std(times)) / t0,
        reached=sum(t is not None for t in times),
        n=len(xs),
        loss=xs[0]["loss"],
        gamma=xs[0]["gamma"],
    )


def figure(out: StudyOutput, path) -> None:
    stochastic_time_figure(out, path)
