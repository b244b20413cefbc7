"""E12: does the paper's ranking hold per optimizer? (docs/optimizers.md,
docs/results.md#e12-does-the-papers-ranking-hold-per-optimizer)

PipeDream (PD), Randomized PipeDream (RPD, δ = ⌊S² − S/2⌋, K = PD's block updates), LocalSGD
(R = S replicas, H = 2, 5, 30), DiLoCo (LocalSGD with DiLoCo's outer Nesterov step on the averaged
pseudo-gradient, inner state kept; ``rpd.train.diloco``), PipeDream-2BW and two synchronous
schedules (GPipe and 1F1B with a flush every M microbatches, M the smallest divisor of N that is
>= S) train under SGD, momentum, Adam and Muon (``rpd.train.optimizers``, hyper-parameters pinned
there; Muon only on the MLP chain and the LM: the other objectives' parameter is one vector, on
which Muon would silently be Adam) on Nesterov's quadratic (E3's, tridiagonal Hessian), the same
spectrum on the coordinate axes (``objective.align``: a diagonal Hessian) and in a random basis
(``objective.rotate``), so Adam's dependence on axis alignment shows as a contrast, logistic regression (E4's setting, inferred from the published figure),
the MLP chain and the character LM.

**Equal simulated time, protocol (i)** (docs/science.md#simulated-time): every row processes the same N microbatches of
its objective and is read at one T per objective, the shortest timeline among the rows (PD's,
2N + 2S − 2; ``cut="end"``: the model after T time steps). RPD's block updates are placed on PD's
time axis (``rpd.analysis.simtime.block_updates_at``). LocalSGD's model is the replica mean after
every time step (E3 / E4), on the LM the mean at round ends (E5).

**Step sizes**: each cell (objective, optimizer, method) is tuned on a power-of-two grid of its
(objective, optimizer) (``gamma_exps``: momentum's effective step is about 1/(1 − β) = 10 × SGD's,
Adam's is a per-coordinate step size) by the best-at-T rule (``best_final`` on the curve cut at T;
diverged runs are recorded and never chosen). When the choice sits on an edge of the grid, the
window moves by half its length toward it, up to ``max_shifts`` times (the same grid length: one
compiled program); ``gamma_edge`` in the table says whether the final choice is still on an edge.

Each (objective, optimizer) gets a ranking and a verdict on the paper's claim for that objective
(E3: PD beats LocalSGD; E4: LocalSGD H = 5 beats PD; E5: PD beats LocalSGD), stated whichever way
it goes; the MLP chain has no claim in the paper and reports PD against the best LocalSGD.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from rpd import objectives, schedules
from rpd.analysis import simtime, tuning
from rpd.objectives import corpus
from rpd.objectives.entry import entry_of
from rpd.plotting.optimizers import optimizers_figure
from rpd.results import StudyOutput
from rpd.studies import objective_sizes
from rpd.train import methods, optimizers, plans
from rpd.validation import required

OBJECTIVES = (
    "nesterov_quadratic",
    "aligned_quadratic",
    "rotated_quadratic",
    "logistic_regression",
    "mlp_chain",
    "nanochat",
)
OPTIMIZERS = ("sgd", "momentum", "adam", "muon")  # the figure's; any registered optimizer runs (rpd.train.optimizers)
MATRIX_OBJECTIVES = ("mlp_chain", "nanochat")
PD_FAMILY = ("PD", "RPD", "2BW")
# the paper's claim per objective: (text, kind); kinds are checked in :func:`verdict`
CLAIMS = {
    "nesterov_quadratic": ("E3: PD beats LocalSGD (every H) in simulated time", "pd_beats_localsgd"),
    "aligned_quadratic": ("E3's claim, spectrum on the axes: PD beats LocalSGD (every H)", "pd_beats_localsgd"),
    "rotated_quadratic": ("E3's claim on the rotated spectrum: PD beats LocalSGD (every H)", "pd_beats_localsgd"),
    "logistic_regression": ("E4: LocalSGD with H = 5 beats PD", "h5_beats_pd"),
    "mlp_chain": ("no claim in the paper: PD against the best LocalSGD", "pd_beats_localsgd"),
    "nanochat": ("E5: PD beats LocalSGD on the LM", "pd_beats_localsgd"),
}


def method_labels(H: tuple[int, ...], diloco: bool = True) -> tuple[str, ...]:
    lsgd = tuple(f"LocalSGD H={h}" for h in H) + (tuple(f"DiLoCo H={h}" for h in H) if diloco else ())
    return ("PD", "RPD") + lsgd + ("2BW", "GPipe", "1F1B")


@dataclasses.dataclass(frozen=True)
class Config:
    objectives: tuple[str, ...] = OBJECTIVES
    optimizers: tuple[str, ...] = OPTIMIZERS
    H: tuple[int, ...] = (2, 5, 30)  # LocalSGD / DiLoCo local steps per round (R = S)
    diloco: bool = True  # also the DiLoCo rows (outer Nesterov 0.7 / 0.9, inner state kept)
    # per objective: stages S (= LocalSGD's replicas R) and microbatches N (every row)
    S: dict = dataclasses.field(
        default_factory=lambda: {
            "nesterov_quadratic": 16,
            "aligned_quadratic": 16,
            "rotated_quadratic": 16,
            "logistic_regression": 16,
            "mlp_chain": 8,
            "nanochat": 4,
        }
    )
    N: dict = dataclasses.field(
        default_factory=lambda: {
            "nesterov_quadratic": 600,
            "aligned_quadratic": 600,
            "rotated_quadratic": 600,
            "logistic_regression": 400,
            "mlp_chain": 256,
            "nanochat": 128,
        }
    )
    # problems: E3's quadratic, E4's logistic regression (n = 100, B = 5, σ_g = 0.5, inferred from
    # the published figure; one noise seed), E10's MLP chain, the LM at E10's width
    d: int = 512
    n: int = 600
    batch_size: int = 5
    mu: float = 0.01
    logistic_n: int = 100
    grad_noise: float = 0.5
    mlp_n: int = 512
    mlp_width: int = 16
    mlp_batch: int = 8
    lm_width: int = 32
    lm_seq: int = 32
    lm_batch: int = 8
    lm_heldout_batches: int = 4
    # "objective/optimizer" -> (lo, hi): the γ grid 2^lo..2^hi; a missing key uses the optimizer's
    gamma_exps: dict = dataclasses.field(
        default_factory=lambda: {
            "sgd": (-10, 1),
            "momentum": (-14, -3),
            "adam": (-12, -1),
            "mlp_chain/sgd": (-6, 3),
            "mlp_chain/momentum": (-9, 0),
            "mlp_chain/adam": (-10, -1),
            "mlp_chain/muon": (-10, -1),
            "nanochat/sgd": (-4, 3),
            "nanochat/momentum": (-7, 0),
            "nanochat/adam": (-10, -3),
            "nanochat/muon": (-9, -2),
        }
    )
    max_shifts: int = 1  # moves of the grid window toward an edge the choice sits on
    points: int = 16  # recorded times up to T (the divergence check reads them)
    seed: int = 0


# Laptop size: S = 4, small problems, SGD and Adam, H = 2 and 5, no DiLoCo rows, no rotated quadratic,
# no MLP chain, no LM: the two linear objectives with a claim in the paper (E3's, E4's). The LM's
# cells (E5's claim) were 11 of the quick figure's 34 programs and 3/4 of its compile time; E5
# trains the LM at the quick size. Compiling dominates.
QUICK = dict(
    objectives=("nesterov_quadratic", "logistic_regression"),
    optimizers=("sgd", "adam"),
    H=(2, 5),
    diloco=False,
    S={"nesterov_quadratic": 4, "rotated_quadratic": 4, "logistic_regression": 4, "mlp_chain": 4, "nanochat": 4},
    N={"nesterov_quadratic": 120, "rotated_quadratic": 120, "logistic_regression": 80, "mlp_chain": 64, "nanochat": 48},
    d=64,
    n=120,
    mlp_n=128,
    mlp_width=8,
    lm_width=16,
    lm_seq=16,
    lm_batch=4,
    lm_heldout_batches=2,
    points=8,
)
RULE = "best_final"
RULE_TEXT = "best at T (best-final rule on curves cut at T; diverged runs never chosen)"
T_RULE = "protocol (i): every row runs the same N; T = the shortest timeline among the rows (PD's)"


def corpus_identity(cfg: Config) -> str | None:
    return corpus.identity() if any(entry_of(o).is_lm for o in cfg.objectives) else None


def make_objective(name: str, cfg: Config):
    S = cfg.S[name]
    if name in ("nesterov_quadratic", "aligned_quadratic", "rotated_quadratic"):
        extra = {"rotated_quadratic": {"rotate": True}, "aligned_quadratic": {"align": True}}.get(name, {})
        return objectives.nesterov_quadratic(cfg.n, cfg.d, S, cfg.batch_size, mu=cfg.mu, seed=cfg.seed, **extra)
    if name == "logistic_regression":
        return objectives.logistic_regression(
            cfg.logistic_n, cfg.d, S, cfg.batch_size, grad_noise=cfg.grad_noise, seed=cfg.seed
        )
    if name == "mlp_chain":
        return objective_sizes.mlp_chain(cfg, S, cfg.seed)
    if entry_of(name).is_lm:
        return objective_sizes.lm(cfg, S, cfg.seed)
    raise ValueError(f"objectives: unknown {name!r}; valid: {list(OBJECTIVES)}")


def flush_size(N: int, S: int) -> int:
    """M: the smallest divisor of N that is >= S (whole flushes; 2BW needs M >= S − 1)."""
    return next(m for m in range(S, N + 1) if N % m == 0)


def timelines(S: int, N: int, H: tuple[int, ...]) -> dict[str, schedules.Timeline]:
    M = flush_size(N, S)
    out = {"PD": schedules.pipedream(S, N), "2BW": schedules.pipedream_2bw(S, N, M)}
    out.update(GPipe=schedules.gpipe(S, N, M), **{"1F1B": schedules.one_f_one_b(S, N, M)})
    for h in H:
        out[f"LocalSGD H={h}"] = schedules.local_sgd(S, N, S, h)
    return out


def gamma_window(cfg: Config, objective: str, optimizer: str) -> tuple[int, int]:
    key = f"{objective}/{optimizer}"
    lo, hi = cfg.gamma_exps[key if key in cfg.gamma_exps else optimizer]
    return int(lo), int(hi)


class _Runner:
    """Runs one (objective, optimizer)'s methods on a γ window, values at T."""

    def __init__(self, cfg: Config, objective: str, obj, tls: dict, T: int):
        self.cfg, self.objective, self.obj, self.tls, self.T = cfg, objective, obj, tls, T
        self.at = np.unique(np.linspace(T / cfg.points, T, cfg.points).round().astype(np.int64))
        pd = tls["PD"]
        S = obj.S
        self.delta = S * S - S // 2
        self.rpd_plan = plans.rpd_plan(cfg.seed, len(pd.update_time), S, obj.n_batches, self.delta)
        self.rpd_at = np.unique(np.maximum(simtime.block_updates_at(pd.update_time, self.at), 1))
        self.ring = max(plans.ring_size(self.rpd_plan, S), S + 2)  # PD and RPD share one program:
        self.slots = plans.pipedream_plan(pd, obj.n_batches)[1]  # the same ring and gradient slots

    def curve(self, method: str, grid: np.ndarray, optimizer: str) -> np.ndarray:
        """[G, 1 + points]: the start, then the recorded values up to T (the last one at T)."""
        cfg, obj, opt = self.cfg, self.obj, None if optimizer == "sgd" else optimizer
        if method == "RPD":
            res = methods.run_plan(
                obj,
                self.rpd_plan,
                grid,
                seed=cfg.seed,
                at=self.rpd_at,
                ring_size=self.ring,
                n_slots=self.slots,
                optimizer=opt,
            )
            return res.curve
        if method.startswith(("LocalSGD", "DiLoCo")):
            tl = self.tls["LocalSGD H=" + method.split("=")[1]]
            outer = "nesterov" if method.startswith("DiLoCo") else None
            round_ends = entry_of(self.objective).evaluated == "round_ends"  # the LM's cadence
            res = methods.local_sgd(
                obj, tl, grid, seed=cfg.seed, track_time=not round_ends, optimizer=opt, outer_optimizer=outer
            )
            keep = np.concatenate([[0], self.at])
            idx = np.searchsorted(res.axis, keep, side="right") - 1  # the last point at or before each time
            return res.curve[:, idx]
        tl = self.tls[method]  # one ring and PD's slots for all: the flush schedules and 2BW share a program
        return methods.train(
            obj, tl, grid, seed=cfg.seed, at=self.at, ring_size=self.ring, n_slots=self.slots, optimizer=opt
        ).curve


def tune(run: Callable[[np.ndarray], np.ndarray], lo: int, hi: int, max_shifts: int) -> dict:
    """Best-at-T over the union of the windows tried: the window 2^lo..2^hi, moved by half its
    length toward an edge the choice sits on (at most ``max_shifts`` times)."""
    tried: dict[int, np.ndarray] = {}
    shifts = 0
    while True:
        for k, row in zip(range(lo, hi + 1), run(tuning.pow2_grid(lo, hi))):
            tried[k] = row
        ks = sorted(tried)
        curves = np.stack([tried[k] for k in ks])
        sel = tuning.select_gamma(curves, np.ldexp(1.0, ks), rule=RULE)
        step = max(1, (hi - lo + 1) // 2)
        if sel.index is None:  # every γ diverged: smaller steps
            edge, move = "all_diverged", -step
        elif sel.index == 0:
            edge, move = "low", -step
        elif sel.index == len(ks) - 1:
            edge, move = "high", step
        else:
            edge, move = None, 0
        if move == 0 or shifts >= max_shifts:
            break
        lo, hi, shifts = lo + move, hi + move, shifts + 1
    final = curves[:, -1]
    dead = np.array([r.diverged for r in sel.reports])
    i = sel.index
    return dict(
        status="ok" if i is not None else "all_diverged",
        gamma=None if i is None else float(sel.gamma),
        gamma_exp=None if i is None else int(ks[i]),
        loss=float("nan") if i is None else float(final[i]),
        gamma_edge=None if edge == "all_diverged" else edge,
        grid_exps=[int(ks[0]), int(ks[-1])],
        shifts=shifts,
        n_diverged=int(dead.sum()),
        diverged_exps=[int(k) for k, d in zip(ks, dead) if d],
        finals={int(k): (None if d else float(v)) for k, v, d in zip(ks, final, dead)},
    )


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    unknown = set(cfg.objectives) - set(OBJECTIVES)
    if unknown:
        raise ValueError(f"objectives: unknown {sorted(unknown)}; valid: {list(OBJECTIVES)}")
    unknown = set(cfg.optimizers) - set(optimizers.OPTIMIZERS)
    if unknown:
        raise ValueError(f"optimizers: unknown {sorted(unknown)}; valid: {sorted(optimizers.OPTIMIZERS)}")
    labels = method_labels(cfg.H, cfg.diloco)
    rows, meta = [], {}
    for objective in cfg.objectives:
        base = dict(objective=objective, S=cfg.S[objective], N=cfg.N[objective])
        obj = make_objective(objective, cfg)
        tls = timelines(obj.S, cfg.N[objective], cfg.H)
        T = min(tl.T for tl in tls.values())
        meta[objective] = dict(
            T=int(T), S=obj.S, N=cfg.N[objective], M=int(required("M", tls["GPipe"].M)), delta=obj.S**2 - obj.S // 2
        )
        runner = _Runner(cfg, objective, obj, tls, T)
        for optimizer in cfg.optimizers:
            for method in labels:
                row = dict(base, optimizer=optimizer, method=method, T=int(T))
                if optimizers.entry(optimizer).matrices and objective not in MATRIX_OBJECTIVES:
                    rows.append(dict(row, status="n/a", reason="one parameter vector: no weight matrices for Muon"))
                    continue
                lo, hi = gamma_window(cfg, objective, optimizer)
                own = tls.get(method) or tls.get("LocalSGD H=" + method.split("=")[-1])
                row["timeline_T"] = int(own.T) if own is not None and method != "RPD" else int(T)
                row.update(tune(lambda g: runner.curve(method, g, optimizer), lo, hi, cfg.max_shifts))
                rows.append(row)
            if progress is not None:
                progress(f"{objective} {optimizer}")
    return StudyOutput(arrays={}, summary=summarise(rows, meta), table=rows)


def verdict(objective: str, losses: dict[str, float]) -> dict:
    """The paper's claim on this objective, checked on the losses at T (NaN: no usable cell)."""
    text, kind = CLAIMS[objective]
    lsgd = {m: v for m, v in losses.items() if m.startswith("LocalSGD") and np.isfinite(v)}
    pd = losses.get("PD", float("nan"))
    if not np.isfinite(pd) or not lsgd:
        return dict(claim=text, holds=None, verdict="not testable: PD or LocalSGD has no usable cell")
    best = min(lsgd, key=lsgd.__getitem__)
    if kind == "pd_beats_localsgd":
        holds = bool(pd < lsgd[best])
        ratio = lsgd[best] / pd
        words = f"PD {pd:.4g} vs best LocalSGD ({best}) {lsgd[best]:.4g}: ratio {ratio:.3g}"
    else:
        h5 = lsgd.get("LocalSGD H=5", float("nan"))
        holds = bool(np.isfinite(h5) and h5 < pd)
        ratio = pd / h5 if np.isfinite(h5) else float("nan")
        words = f"LocalSGD H=5 {h5:.4g} vs PD {pd:.4g}: PD / H=5 = {ratio:.3g}"
    if objective == "mlp_chain":
        return dict(
            claim=text, holds=None, pd_wins=holds, verdict=("PD ahead: " if holds else "LocalSGD ahead: ") + words
        )
    return dict(claim=text, holds=holds, ratio=float(ratio), verdict=("holds: " if holds else "fails: ") + words)


def summarise(rows: list[dict], meta: dict) -> dict:
    cells = []
    for objective in dict.fromkeys(r["objective"] for r in rows):
        for optimizer in dict.fromkeys(r["optimizer"] for r in rows if r["objective"] == objective):
            mine = [r for r in rows if (r["objective"], r["optimizer"]) == (objective, optimizer)]
            ok = [r for r in mine if r["status"] == "ok"]
            if not ok:
                reasons = sorted({r.get("reason", r["status"]) for r in mine})
                cells.append(dict(objective=objective, optimizer=optimizer, ranking=[], verdict="n/a", reasons=reasons))
                continue
            losses = {r["method"]: r["loss"] for r in ok}
            ranking = sorted(losses, key=losses.__getitem__)
            cells.append(
                dict(
                    objective=objective,
                    optimizer=optimizer,
                    ranking=ranking,
                    losses=[losses[m] for m in ranking],
                    best=ranking[0],
                    on_edge=[r["method"] for r in ok if r["gamma_edge"]],
                    not_run=[r["method"] for r in mine if r["status"] != "ok"],
                    **verdict(objective, losses),
                )
            )
    return dict(
        cells=cells,
        objectives=meta,
        rule=RULE,
        rule_text=RULE_TEXT,
        T_rule=T_RULE,
        muon="Muon only on the MLP chain and the LM: the other objectives' parameter is one vector",
    )


def n_steps(cfg: Config) -> int:
    return len(cfg.objectives) * len(cfg.optimizers)


def figure(out: StudyOutput, path) -> None:
    optimizers_figure(out, path)
