"""E11 (docs/results.md#e11-the-papers-comparison-under-real-costs): the paper's comparison under real costs, and where
its winner changes.

E3 (PipeDream against LocalSGD on Nesterov's quadratic, PD wins) and E6 (fixed-time scaling in
S on logistic regression, LocalSGD wins for S >= 4) are run again on a ladder of cost models,
and for every series the study reports the cost level at which the winner changes (the
crossover), not a yes/no.

**Cost ladder** (one parameter, the all-reduce latency α). Rung "unit" is the paper's model:
F = B = 1 tick, free communication, free averaging. Every other rung has tF = 1 and tB = 2
ticks (a tick is one forward), a point-to-point latency of c ticks on every dependency that
crosses ranks (c in ``p2p``, one series each, held fixed along the ladder) and a LocalSGD
averaging of ``⌈α + β·D⌉`` ticks at the end of every round, D = ⌈d/S⌉ values (the largest
block: every stage averages its own block across the R replicas, the round waits for the
slowest); α climbs ``alphas`` with β fixed. PD has no averaging, so its timeline, and its
value, is the same on every α rung of a series (tested).

**Budget** (what makes rungs comparable). Time is counted in ticks. At each rung the budget is
the paper's budget stretched by PipeDream's own slowdown under that rung's costs:
``budget = ⌈T_paper · T_PD(N_paper; costs) / T_PD(N_paper; unit)⌉``, with T_paper the paper's
budget in unit time steps and N_paper the microbatches PD runs in it (E3: N = 600 and T_paper =
PD's makespan 2N + 2S − 2; E6: T = 3180 and N = ⌈(T − 2S + 2)/2⌉). PD therefore does the
paper's work at every rung (exactly so for E3, up to rounding for E6), at tB = 2tF and c = 0 the
budget is 1.5·T_paper, and the α rungs of a series share one budget. The question each rung
answers: in the wall-clock time PD needs for the paper's work under these costs, how far does
LocalSGD get?

**Protocols.** Each panel keeps its paper experiment's protocol. Quadratic (E3, protocol (i)):
every method runs the same N microbatches and every curve is cut to PD's makespan, the budget
(LocalSGD's timeline is longer at every rung; if it were not, it would get the smallest N
reaching the budget). LocalSGD rounds that start after the budget are not simulated: rounds are
separated by a barrier, so they change nothing before it (tested). Logistic regression (E6,
protocol (ii)): PD and LocalSGD (R = S, H = 5) each take the smallest N whose timeline reaches
the budget; the gradient noise is drawn for each seed of ``log_seeds`` and the curves averaged
(E6 runs one seed; with ``log_seeds=(0,)`` this panel's unit rung is E6). At the unit rung both
panels are E3 and E6 (tested against ``pd_vs_localsgd`` and ``scaling``, to rounding); RPD is
not part of E11 (it has no timeline to put costs on).

**Selection and what is compared.** Each run's γ is chosen by the stable selector (E3's tail 0.2,
E6's 0.01) on its curve up to the budget, seen at T_paper + 1 points evenly spaced over [0,
budget]: the selector's per-point tests then mean the same at every rung (at the unit rung these
are every time step, as in E3/E6). The number compared is f − f* at the budget. The best final
value over the γ grid is reported beside it, with its own crossover, never used to choose. The
winner of a rung is the method with the lower f − f* (the quadratic: PD against the best
LocalSGD H); the crossover of a series (panel, S, c) is the first α rung whose winner differs
from the α = 0 rung's, given as the bracket of the two rungs and a point interpolated linearly
in log2(1 + α) on log(f_LocalSGD / f_PD); a ladder whose winner changes more than once is
flagged "not monotone".

Table columns: ``budget`` (ticks), ``avg_ticks`` (one averaging, ⌈α + β·D⌉), ``pd_N`` and
``ls_N`` (microbatches simulated per LocalSGD H: the quadratic's are those in rounds that start
before the budget), ``f_pd`` and ``f_ls_best`` (f − f* at the budget, stable γ; ``best_H`` is
the LocalSGD H that is lowest), ``ratio`` = f_ls_best / f_pd (above 1: PD wins), ``winner`` and
``winner_best_final`` (the same with the best final value over γ).

The LocalSGD runs of one (panel, S, H) share compiled programs (``pad_to`` of
:func:`rpd.train.localsgd.local_sgd`), and independent runs go side by side on host threads. The
ladder and budget arithmetic lives in :mod:`rpd.studies.cost_ladder`.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from rpd import objectives, schedules
from rpd.analysis import simtime, tuning
from rpd.plotting.costs import costs_figure
from rpd.results import StudyOutput, best_final
from rpd.runtime import concurrency
from rpd.studies import summary_head
from rpd.studies.cost_ladder import (
    Level,
    block_values,
    budget,
    levels,
    logistic_n_paper,
    pd_only,
    reached_rounds,
    resample,
    series_keys,
)
from rpd.studies.costs_config import QUICK, Config  # noqa: F401 (the study's Config and QUICK)
from rpd.studies.crossover import (  # noqa: F401
    CLAIMS,
    UNIT,
    claim_checks,
    crossover,
    crossover_grows,
    describe,
    make_series,
    table_rows,
)
from rpd.studies.pd_vs_localsgd import select
from rpd.train import localsgd, methods

TITLE = "PipeDream vs LocalSGD under costs: where the winner changes"
PANELS = ("quadratic", "logistic")


def n_steps(cfg: Config) -> int:
    """Units of work ``run`` reports: one per run (PD once per c and at the unit rung)."""
    n_levels = 1 + len(cfg.p2p) * len(cfg.alphas)
    pd_runs = 1 + len(cfg.p2p)
    return (pd_runs + n_levels * len(cfg.quad_H)) + len(cfg.log_S_values) * (pd_runs + n_levels)


def _quad_objective(cfg: Config):
    return objectives.nesterov_quadratic(
        n=cfg.quad_n, d=cfg.quad_d, S=cfg.quad_S, batch_size=cfg.quad_batch_size, mu=cfg.quad_mu, seed=cfg.seed
    )


def _log_objective(cfg: Config, S: int):
    return objectives.logistic_regression(
        n=cfg.log_n,
        d=cfg.log_d,
        S=S,
        batch_size=cfg.log_batch_size,
        lam=cfg.log_lam,
        grad_noise=cfg.log_grad_noise,
        seed=cfg.seed,
    )


def setting(cfg: Config) -> dict:
    """The two problems as run, for the figure."""
    return dict(
        quadratic=(
            f"Nesterov quadratic, μ = {cfg.quad_mu:g}, d = {cfg.quad_d}, n = {cfg.quad_n}, "
            f"B = {cfg.quad_batch_size}, N = {cfg.quad_N}, S = {cfg.quad_S}, R = {cfg.quad_R}"
        ),
        logistic=(
            f"logistic regression, n = {cfg.log_n}, d = {cfg.log_d}, B = {cfg.log_batch_size}, "
            f"λ = {cfg.log_lam:g}, σ_g = {cfg.log_grad_noise:g}, T = {cfg.log_T}, R = S, H = {cfg.log_H}"
        ),
        ladder=(
            f"rungs: unit (F = B = 1, c = 0, free averaging); then tF = {cfg.tF}, tB = {cfg.tB}, "
            f"p2p c ∈ {{{', '.join(str(c) for c in cfg.p2p)}}}, averaging ⌈α + β·D⌉ ticks, "
            f"β = {cfg.beta:g}, D = ⌈d/S⌉, α ∈ {{{', '.join(f'{a:g}' for a in cfg.alphas)}}}"
        ),
    )


# ----------------------------------------------------------------------------- the runs

PAD_BYTES = 1 << 28  # largest padded LocalSGD state one program may hold: G × (ticks × d + rounds × ticks) float64


@dataclasses.dataclass
class Job:
    """One run: a method on one rung's timeline, and what its numbers are compared against."""

    panel: str
    S: int
    level: Level
    method: str  # "pd" | "localsgd"
    H: int | None
    obj: objectives.Objective
    tl: schedules.Timeline  # the timeline that is run
    budget: int  # ticks
    T_paper: int  # the selector sees T_paper + 1 points over [0, budget]
    tail_frac: float
    T_own: int  # the timeline of the protocol's N (protocol (i): before dropping unreached rounds)
    seeds: tuple[int, ...] = (0,)  # curves averaged over these noise seeds
    avg_ticks: int = 0
    pad: tuple[int, int] | None = None

    @property
    def key(self) -> str:
        return run_key(self.panel, self.S, self.level.key, self.method, self.H)

    @property
    def label(self) -> str:
        return f"{self.panel} S={self.S} {self.level.key} " + ("PD" if self.method == "pd" else f"LocalSGD H={self.H}")


def run_key(panel: str, S: int, level: str, method: str, H: int | None) -> str:
    """Array prefix of one run: ``quadratic_S16_c1_a64_localsgd_H5``, ``logistic_S8_unit_pd``."""
    return f"{panel}_S{S}_{level}_{method}" + ("" if H is None else f"_H{H}")


def _jobs(cfg: Config, lv: list[Level]) -> list[Job]:
    """Every run with its timeline; LocalSGD runs of one (panel, S, H) share padded shapes."""
    jobs: list[Job] = []
    pd_levels = [lv[0]] + [next(x for x in lv if x.c == c) for c in cfg.p2p]  # unit, then one per c
    # (panel, S, objective, R, H values, d, N, budget, tail fraction, seeds)
    panels: list[tuple[str, int, objectives.Objective, int, tuple[int, ...], int, int, int, float, tuple[int, ...]]] = [
        (
            "quadratic",
            cfg.quad_S,
            _quad_objective(cfg),
            cfg.quad_R,
            cfg.quad_H,
            cfg.quad_d,
            cfg.quad_N,
            schedules.pipedream(cfg.quad_S, cfg.quad_N).T,
            cfg.quad_tail_frac,
            (cfg.seed,),
        )
    ]
    for S in cfg.log_S_values:
        panels.append(
            (
                "logistic",
                S,
                _log_objective(cfg, S),
                S,
                (cfg.log_H,),
                cfg.log_d,
                logistic_n_paper(S, cfg.log_T),
                cfg.log_T,
                cfg.log_tail_frac,
                tuple(cfg.log_seeds),
            )
        )
    for panel, S, obj, R, Hs, d, N_paper, T_paper, tail, seeds in panels:
        proto_i = panel == "quadratic"
        budgets = {L.c: budget(T_paper, N_paper, S, L.costs) for L in pd_levels}
        for L in pd_levels:
            B, costs = budgets[L.c], pd_only(L.costs)
            tl = (
                schedules.pipedream(S, N_paper, costs=costs)
                if proto_i
                else simtime.smallest_n_reaching(B, lambda n: schedules.pipedream(S, n, costs=costs), N_paper)
            )
            jobs.append(Job(panel, S, L, "pd", None, obj, tl, B, T_paper, tail, T_own=tl.T, seeds=seeds))
        D = block_values(d, S)
        for H in Hs:
            group = []
            for L in lv:
                B = budgets[L.c]

                def make(n, L=L, H=H):
                    return schedules.local_sgd(S, n, R, H, costs=L.costs, values=D)

                full = make(N_paper)
                if proto_i and full.T >= B:
                    n_run = reached_rounds(full, B)
                    tl = full if n_run == full.N else make(n_run)
                else:  # protocol (ii), or a LocalSGD shorter than PD's makespan (then it runs longer)
                    tl = simtime.smallest_n_reaching(B, make, max(1, N_paper * B // full.T))
                avg = 0 if L.costs is None else L.costs.allreduce_ticks(D)
                group.append(
                    Job(
                        panel,
                        S,
                        L,
                        "localsgd",
                        H,
                        obj,
                        tl,
                        B,
                        T_paper,
                        tail,
                        T_own=full.T if proto_i else tl.T,
                        seeds=seeds,
                        avg_ticks=avg,
                    )
                )
            _pad(group, len(tuning.pow2_grid(*cfg.localsgd_gamma_exps)), obj.D)
            jobs += group
    return jobs


def _pad(group: list[Job], G: int, D: int, waste: float = 2.0) -> None:
    """Padded program shapes for the LocalSGD runs of one (panel, S, H): runs sorted by round
    length join a group while its padded work (runs × rounds × round ticks) stays within
    ``waste`` times their own and the padded program's state (per γ a round's tick buffer,
    ticks × d, and the curve, rounds × ticks, float64) within ``PAD_BYTES``. Each group compiles
    once (``pad_to`` of :func:`rpd.train.localsgd.local_sgd`, which gives every run's numbers bit for
    bit whatever the padding)."""
    shape = {id(j): localsgd.round_shape(j.tl) for j in group}
    groups: list[list[Job]] = [[]]
    for j in sorted(group, key=lambda j: shape[id(j)][::-1]):
        trial = groups[-1] + [j]
        Q = max(shape[id(x)][0] for x in trial)
        T = max(shape[id(x)][1] for x in trial)
        own = sum(shape[id(x)][0] * shape[id(x)][1] for x in trial)
        if groups[-1] and (len(trial) * Q * T > waste * own or G * (T * D + Q * T) * 8 > PAD_BYTES):
            groups.append([j])
        else:
            groups[-1] = trial
    for g in groups:
        pad = (max(shape[id(x)][0] for x in g), max(shape[id(x)][1] for x in g))
        for j in g:
            j.pad = pad


def _execute(job: Job, pd_gammas, ls_gammas) -> np.ndarray:
    """The job's f − f* on the selector's grid [G, T_paper + 1], averaged over its seeds."""
    curves = []
    for seed in job.seeds:
        if job.method == "pd":
            res = methods.pipedream(job.obj, job.tl, pd_gammas, seed=seed)
        else:
            res = methods.local_sgd(job.obj, job.tl, ls_gammas, seed=seed, pad_to=job.pad)
        if int(res.axis[-1]) < job.budget:
            raise RuntimeError(f"{job.label}: the timeline ends at {int(res.axis[-1])} < budget {job.budget}")
        curves.append(resample(simtime.cut_to(res, job.budget), job.budget, job.T_paper))
    return curves[0] if len(curves) == 1 else np.mean(curves, axis=0)


def run(cfg: Config, progress: Callable[[str], None] | None = None, workers: int | None = None) -> StudyOutput:
    """Every run of both panels on every rung, the selected γ and f − f* at the budget, every
    series' winners and its crossover, and the paper's two claims measured against them.
    Runs are independent and go side by side on ``workers`` host threads (results do not depend
    on it)."""
    report = progress or (lambda msg: None)
    if not cfg.alphas or not cfg.p2p or len(set(cfg.alphas)) != len(cfg.alphas) or len(set(cfg.p2p)) != len(cfg.p2p):
        raise ValueError(f"alphas and p2p must be non-empty and distinct, got {cfg.alphas}, {cfg.p2p}")
    lv = levels(cfg)
    pd_g, ls_g = tuning.pow2_grid(*cfg.pd_gamma_exps), tuning.pow2_grid(*cfg.localsgd_gamma_exps)
    jobs = _jobs(cfg, lv)
    arrays: dict[str, np.ndarray] = {"pd_gammas": pd_g, "localsgd_gammas": ls_g}
    runs = []
    # The first run of every compiled program goes first: the rest reuse what it compiled
    # instead of compiling it again on the other thread.
    seen: set[tuple] = set()
    leaders: list[int] = []
    followers: list[int] = []
    for i, j in enumerate(jobs):
        prog = (j.panel, j.S, j.method, j.H, j.level.c if j.method == "pd" else j.pad)
        (followers if prog in seen else leaders).append(i)
        seen.add(prog)
    order = leaders + followers
    tasks = [lambda j=jobs[i]: _execute(j, pd_g, ls_g) for i in order]
    curves = {}
    for k, curve in concurrency.run_concurrently(tasks, workers=workers):
        curves[order[k]] = curve
        report(jobs[order[k]].label)
    for i, j in enumerate(jobs):
        curve = curves[i]
        gammas = pd_g if j.method == "pd" else ls_g
        sel = select(curve, gammas, j.tail_frac)
        idx = -1 if sel.index is None else sel.index
        n_tail = tuning.tail_length(curve.shape[1], j.tail_frac)
        arrays[f"{j.key}/tail"] = curve[:, -n_tail:]  # what the selector looked at; [:, -1] is f at the budget
        runs.append(
            dict(
                key=j.key,
                panel=j.panel,
                S=j.S,
                level=j.level.key,
                c=j.level.c,
                alpha=j.level.alpha,
                method=j.method,
                H=j.H,
                N=j.tl.N,
                T_run=j.tl.T,
                T_own=j.T_own,
                budget=j.budget,
                avg_ticks=j.avg_ticks,
                rounds=None if j.method == "pd" else len(j.tl.sync_time),
                pad=j.pad,
                gamma_index=idx,
                gamma_exp=None if idx < 0 else tuning.log2_exponent(sel.gamma),
                rule=sel.rule,
                f_at_budget=None if idx < 0 else float(curve[idx, -1]),
                best_final=best_final(curve),
                diverged_gamma_exps=[tuning.log2_exponent(r.gamma) for r in sel.reports if r.diverged],
            )
        )
    series = [make_series(cfg, runs, panel, S, c) for panel, S, c in series_keys(cfg)]
    rows = table_rows(series)
    checks = claim_checks(cfg, series)
    summary = dict(
        **summary_head("e11_costs", TITLE, setting(cfg), cfg),
        levels=[dict(key=L.key, c=L.c, alpha=L.alpha) for L in lv],
        runs=runs,
        series=series,
        claims=checks,
        claim=CLAIMS,
    )
    return StudyOutput(arrays=arrays, summary=summary, table=rows)


def figure(out: StudyOutput, path) -> None:
    costs_figure(out.summary, path)
