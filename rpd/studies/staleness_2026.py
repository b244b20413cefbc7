"""E17: the 2025-2026 results on optimizers under pipeline staleness, at rpd's scale
(docs/results.md, docs/optimizers.md). Three claims, each a falsifiable question with its protocol
fixed here (and in configs/experiment/e17_staleness_2026.yaml) before any run:

(a) one-step delay (Zmushko et al. 2026): under PipeDream-2BW (S = ``a_S``, M = ``a_M``
    microbatches per minibatch, τ_s = 1 optimizer step on every stage), is AdamW's gap to
    synchronous AdamW (1F1B with flushes, the same minibatches) larger than Muon's, and does error
    feedback (``optimizer.correction=error_feedback``, a reconstruction) shrink each gap? Gap =
    (loss under 2BW - loss synchronous) / loss synchronous, at equal updates (both end after N/M
    minibatch steps) and at equal simulated time (2BW's T); MLP chain and char LM.
(b) Nesterov's look-ahead (Ajanthan et al. 2025): at S = ``b_S`` and equal simulated time (T of
    PipeDream, whose timeline is the shortest), is PipeDream with ``nesterov_async`` lower than
    PipeDream with NAdam, with momentum, and than synchronous 1F1B (flushes, NAdam)?
(c) basis rotation (Jung, Shin, Lee 2026): is Adam's slowdown in updates to a target (PipeDream
    over the staleness-free run of the same blocks, minibatch SGD's plan) growing with S, and does
    ``adam_rotated`` remove most of it (removed fraction (s_adam - s_rot) / (s_adam - 1) >= 1/2 at
    the largest S, in every seed)? On the rotated quadratic and its axis-aligned control (the char
    LM with ``c_lm_S``; empty by default: adam_rotated on the LM costs minutes per run here).

Every arm: ``seeds`` (each seed draws the data / the model's initialisation), γ tuned per arm
over the seeds (:func:`rpd.studies.staleness_2026_tuning.tune`: widened until the choice is not
on an edge). Verdicts (holds / fails / depends, with the numbers) are computed by :func:`verdicts`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from rpd import objectives, schedules
from rpd.objectives import corpus
from rpd.objectives.entry import entry_of
from rpd.plotting import staleness_2026_text as text
from rpd.plotting.staleness_2026 import figure as draw
from rpd.results import StudyOutput, diverged
from rpd.studies import objective_sizes, trend
from rpd.studies.staleness_2026_tuning import delay_units, tune, updates_to_target
from rpd.train import methods, plans
from rpd.train import semantics as sem
from rpd.validation import required


@dataclasses.dataclass(frozen=True)
class Config:
    """E17 at paper size."""

    seeds: tuple[int, ...] = (0, 1, 2)
    mlp_n: int = 256
    mlp_width: int = 16
    mlp_batch: int = 8
    lm_width: int = 32
    lm_seq: int = 16
    lm_batch: int = 8
    lm_heldout_batches: int = 2
    a_objectives: tuple[str, ...] = ("mlp_chain", "nanochat")
    a_S: int = 4
    a_M: int = 4
    a_N: tuple[int, ...] = (256, 192)  # microbatches, per a_objectives
    b_objectives: tuple[str, ...] = ("mlp_chain", "nanochat")
    b_S: int = 8
    b_N: tuple[int, ...] = (256, 128)  # per b_objectives
    b_rivals: tuple[tuple[str, str], ...] = (("PD", "nadam"), ("PD", "momentum"), ("1F1B", "nadam"))
    c_S: tuple[int, ...] = (4, 8, 16, 32)  # the quadratics
    c_lm_S: tuple[int, ...] = ()  # the LM (a stage per transformer block), e.g. (4, 8): see docs/results.md
    quad_n: int = 256  # Nesterov's quadratic (E3's problem family), μ = quad_mu, rotated / aligned
    quad_d: int = 64  # divisible by every S
    quad_batch: int = 16
    quad_mu: float = 0.05
    c_N: int = 512  # microbatches: PipeDream at S = 32 needs more than 256 to reach the target
    c_lm_N: int = 64
    target: float = 1e-2  # quadratics: f - f* <= target (f(x0) - f*); LM: synchronous Adam's loss half-way
    # initial γ windows 2^lo..2^hi (widened by the tuning when a choice sits on an edge)
    grids: tuple[tuple[str, int, int], ...] = (
        ("adamw", -9, -3),
        ("muon", -8, -2),
        ("adam", -9, -3),
        ("adam_rotated", -9, -3),
        ("nadam", -9, -3),
        ("nesterov_async", -9, -3),
        ("momentum", -10, -4),
    )
    max_widen: int = 3


QUICK = {
    "seeds": (0, 1),
    "mlp_n": 64,
    "mlp_width": 8,
    "a_objectives": ("mlp_chain",),
    "a_S": 3,
    "a_M": 3,
    "a_N": (48,),
    "b_objectives": ("mlp_chain",),
    "b_S": 4,
    "b_N": (48,),
    "b_rivals": (("PD", "nadam"), ("1F1B", "nadam")),
    "c_S": (4, 8),
    "c_lm_S": (),
    "quad_n": 128,
    "quad_d": 32,
    "c_N": 128,
    "max_widen": 1,
}
# the arms' optimizers: adam_rotated with plain Adam's β and no decay, so the two differ in the basis
# (the covariance EMA keeps the code's 0.95)
ADAM_ROTATED = {"name": "adam_rotated", "b1": 0.9, "b2": 0.999, "weight_decay": 0.0, "shampoo_beta": 0.95}


def corpus_identity(cfg: Config) -> str | None:
    lm = any(entry_of(o).is_lm for o in cfg.a_objectives + cfg.b_objectives) or bool(cfg.c_lm_S)
    return corpus.identity() if lm else None


def make_objective(cfg: Config, name: str, S: int, seed: int, kind: str = ""):
    if name == "mlp_chain":
        return objective_sizes.mlp_chain(cfg, S, seed)
    if entry_of(name).is_lm:
        return objective_sizes.lm(cfg, S, seed)
    rot = {"rotate": kind == "rotated", "align": kind == "aligned"}
    return objectives.nesterov_quadratic(cfg.quad_n, cfg.quad_d, S, cfg.quad_batch, mu=cfg.quad_mu, seed=seed, **rot)


def _bad(curve_GP: np.ndarray, column: int) -> np.ndarray:
    v = np.asarray(curve_GP[:, column], np.float64)
    return np.where(diverged(curve_GP) | ~np.isfinite(v), np.inf, v)


def _grid(cfg: Config, name: str) -> tuple[int, int]:
    return next((lo, hi) for n, lo, hi in cfg.grids if n == name)


def _opt_name(opt) -> str:
    return opt if isinstance(opt, str) else opt["name"]


def _tuned(cfg: Config, run, score, opt) -> dict:
    return tune(run, score, list(cfg.seeds), *_grid(cfg, _opt_name(opt)), max_widen=cfg.max_widen)


def _row(part: str, key: dict, t: dict, values: dict) -> dict:
    out = dict(part=part, **key, gamma_exp=t["exp"], gamma_edge=t["edge"], widened=t["widened"], grid=t["exps"])
    for k, v in values.items():
        v = np.asarray(v, np.float64)
        out[k] = [float(x) for x in v]
        out[k + "_mean"], out[k + "_sd"] = float(np.mean(v)), float(np.std(v, ddof=1)) if v.size > 1 else 0.0
    return out


def part_a(cfg: Config, progress) -> tuple[list[dict], dict]:
    rows, delays = [], {}
    for name, N in zip(cfg.a_objectives, cfg.a_N):
        S, M = cfg.a_S, cfg.a_M
        tls = {"sync": schedules.one_f_one_b(S, N, M), "2bw": schedules.pipedream_2bw(S, N, M)}
        T = int(tls["2bw"].T)
        planned = {k: required("plan", sem.of(tl).plan)(tl, S, N) for k, tl in tls.items()}
        delays[name] = {k: delay_units(planned[k][0], S, tl) for k, tl in tls.items()}
        # One compiled program for an optimizer's sync and 2BW arms: both hold the larger ring and
        # slot count (versions and gradients no update of the other reads: the numbers bit for bit)
        # and record two points; 2BW's first (T - 1) is read by nothing, its last is at T.
        shared = dict(
            ring_size=max(plans.ring_size(p, S) for p, _ in planned.values()),
            n_slots=max(int(n or np.max(p.slot) + 1) for p, n in planned.values()),
        )
        sync_at = np.unique([T, int(tls["sync"].T)])
        tuned = {}
        for opt in ("adamw", "muon"):
            for arm in ("sync", "2bw", "2bw_ef"):
                tl = tls["sync" if arm == "sync" else "2bw"]
                at = sync_at if arm == "sync" or len(sync_at) == 1 else np.array([T - 1, T])
                o = {"name": opt, **({"correction": "error_feedback"} if arm == "2bw_ef" else {})}

                def run(seed, g, tl=tl, at=at, o=o):
                    obj = make_objective(cfg, name, S, seed)
                    return methods.train(obj, tl, g, seed=seed, at=at, optimizer=o, **shared).curve

                tuned[opt, arm] = _tuned(cfg, run, lambda s, c: _bad(c, -1), o)
                if progress:
                    progress(f"(a) {name} {opt} {arm}")
        for (opt, arm), t in tuned.items():
            sync = tuned[opt, "sync"]["curves"]  # columns: start, at 2BW's T, at its own T
            u = t["curves"][:, -1]
            vals = {"loss": u}
            if arm != "sync":  # equal updates: both ends; equal time: the synchronous run at 2BW's T
                vals.update(gap_updates=(u - sync[:, -1]) / sync[:, -1], gap_time=(u - sync[:, 1]) / sync[:, 1])
            rows.append(_row("a", dict(objective=name, optimizer=opt, arm=arm, T=T), t, vals))
    return rows, delays


def part_b(cfg: Config, progress) -> tuple[list[dict], dict]:
    rows, delays = [], {}
    arms = (("PD", "nesterov_async"),) + tuple(tuple(r) for r in cfg.b_rivals)
    for name, N in zip(cfg.b_objectives, cfg.b_N):
        S = cfg.b_S
        tls = {"PD": schedules.pipedream(S, N), "1F1B": schedules.one_f_one_b(S, N, S)}
        T = int(tls["PD"].T)
        delays[name] = {k: delay_units(required("plan", sem.of(tl).plan)(tl, S, N)[0], S, tl) for k, tl in tls.items()}
        for sched, opt in arms:
            tl = tls[sched]
            at = np.unique([T, int(tl.T)])

            def run(seed, g, tl=tl, at=at, opt=opt):
                obj = make_objective(cfg, name, S, seed)
                return methods.train(obj, tl, g, seed=seed, at=at, optimizer=opt).curve

            t = _tuned(cfg, run, lambda s, c: _bad(c, 1), opt)
            vals = {"loss_time": t["curves"][:, 1], "loss_end": t["curves"][:, -1]}
            rows.append(_row("b", dict(objective=name, schedule=sched, optimizer=opt, T=T), t, vals))
            if progress:
                progress(f"(b) {name} {sched} {opt}")
    return rows, delays


def _c_runs(cfg: Config, name: str, kind: str, S: int, N: int):
    """{(sched, arm): run(seed, gammas) -> curve per microbatch}, memoised per (seed, γ)."""
    memo: dict = {}
    stride = S
    tl = schedules.pipedream(S, N)
    # The synchronous run holds PipeDream's ring and gradient slots (versions and gradients no
    # update of it reads: its numbers bit for bit): both run N·S block updates recorded alike, so
    # an optimizer's PD and sync arms share one compiled program.
    pd_plan, pd_slots = plans.pipedream_plan(tl, 1)
    shared = dict(ring_size=plans.ring_size(pd_plan, S), n_slots=pd_slots)

    def make(sched, opt):
        def run(seed, g):
            missing = [x for x in g if (sched, _opt_name(opt), seed, x) not in memo]
            if missing:
                obj = make_objective(cfg, name, S, seed, kind)
                if sched == "PD":
                    res = methods.pipedream(obj, tl, g, seed=seed, axis="block_update", stride=stride, optimizer=opt)
                else:
                    res = methods.sgd(obj, N, g, seed=seed, stride=stride, optimizer=opt, **shared)
                for x, row in zip(g, res.curve):  # the whole grid asked for: G is a compiled shape
                    memo[sched, _opt_name(opt), seed, x] = row
            return np.stack([memo[sched, _opt_name(opt), seed, x] for x in g])

        return run

    return {
        (sched, a): make(sched, o)
        for sched in ("PD", "sync")
        for a, o in (("adam", "adam"), ("adam_rotated", ADAM_ROTATED))
    }


def part_c(cfg: Config, progress) -> tuple[list[dict], dict]:
    rows, delays = [], {}
    cases = [("quadratic", kind, S, cfg.c_N) for kind in ("rotated", "aligned") for S in cfg.c_S]
    cases += [("nanochat", "", S, cfg.c_lm_N) for S in cfg.c_lm_S]
    for name, kind, S, N in cases:
        runs = _c_runs(cfg, name, kind, S, N)
        label = f"{kind}_quadratic" if kind else name
        tl = schedules.pipedream(S, N)
        delays[f"{label} S={S}"] = delay_units(plans.pipedream_plan(tl, 1)[0], S, tl)
        if entry_of(name).is_lm:  # the target: synchronous Adam's loss half-way (its best-final γ)
            ref = _tuned(cfg, runs["sync", "adam"], lambda s, c: _bad(c, -1), "adam")
            half = {s: float(ref["curves"][i, ref["curves"].shape[1] // 2]) for i, s in enumerate(cfg.seeds)}
            score = lambda s, c: updates_to_target(c, half[s])  # noqa: E731
        else:
            score = lambda s, c: updates_to_target(c, cfg.target * c[:, :1])  # noqa: E731
        n = {}
        for (sched, arm), run in runs.items():
            t = _tuned(cfg, run, score, arm)
            n[sched, arm] = np.where(np.isfinite(t["scores"]), t["scores"], N + 1)  # censored: > N
            t["scores"] = n[sched, arm]
            rows.append(
                _row("c", dict(objective=label, S=S, schedule=sched, optimizer=arm), t, {"updates": t["scores"]})
            )
        for arm in ("adam", "adam_rotated"):
            slow = n["PD", arm] / n["sync", arm]  # a lower bound where PipeDream missed the target (censored)
            cut = int(np.sum(n["PD", arm] > N))
            row = dict(part="c", objective=label, S=S, schedule="PD/sync", optimizer=arm, censored=cut)
            rows.append(dict(row, **_stats("slowdown", slow)))
        if progress:
            progress(f"(c) {label} S={S}")
    return rows, delays


def _stats(key: str, v) -> dict:
    v = np.asarray(v, np.float64)
    sd = float(np.std(v, ddof=1)) if v.size > 1 else 0.0
    return {key: [float(x) for x in v], key + "_mean": float(np.mean(v)), key + "_sd": sd}


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    if any(cfg.quad_d % S for S in cfg.c_S):
        raise ValueError(f"quad_d={cfg.quad_d} must be divisible by every S of c_S={cfg.c_S}")
    if len(cfg.a_N) != len(cfg.a_objectives) or len(cfg.b_N) != len(cfg.b_objectives):
        raise ValueError("a_N / b_N: one microbatch count per objective of a_objectives / b_objectives")
    ra, da = part_a(cfg, progress)
    rb, db = part_b(cfg, progress)
    rc, dc = part_c(cfg, progress)
    rows = ra + rb + rc
    summary = {
        "study": "e17_staleness_2026",
        "config": dataclasses.asdict(cfg),
        "delays": {"a (2BW vs 1F1B)": da, "b (PipeDream vs 1F1B)": db, "c (PipeDream)": dc},
        "verdicts": verdicts(rows, cfg),
    }
    return StudyOutput(arrays={}, summary=summary, table=rows)


def _pick(rows, **key) -> dict:
    return next(r for r in rows if all(r.get(k) == v for k, v in key.items()))


def _combine(parts: list[str]) -> str:
    return parts[0] if len(set(parts)) == 1 else "depends"


def _every(a, b) -> str:
    """holds: a < b in every seed; fails: a >= b in every seed; depends otherwise."""
    a, b = np.asarray(a), np.asarray(b)
    return "holds" if np.all(a < b) else "fails" if np.all(a >= b) else "depends"


def verdicts(rows: list[dict], cfg: Config) -> dict:
    """The three claims' verdicts from the table's numbers (docs/results.md quotes them)."""
    out: dict[str, dict] = {}
    a1, ev = [], {}
    a2: dict[str, list[str]] = {"adamw": [], "muon": []}
    for name in cfg.a_objectives:
        g = {
            (o, arm): _pick(rows, part="a", objective=name, optimizer=o, arm=arm)
            for o in ("adamw", "muon")
            for arm in ("2bw", "2bw_ef")
        }
        a1.append(_every(g["muon", "2bw"]["gap_updates"], g["adamw", "2bw"]["gap_updates"]))
        for o in ("adamw", "muon"):
            a2[o].append(_every(g[o, "2bw_ef"]["gap_updates"], g[o, "2bw"]["gap_updates"]))
        ev[name] = {f"{o}{'+EF' if arm == '2bw_ef' else ''}": round(g[o, arm]["gap_updates_mean"], 4) for (o, arm) in g}
    out["a_adamw_degrades_more_than_muon"] = {"verdict": _combine(a1), "per_objective": a1, "gap_mean": ev}
    for o in ("adamw", "muon"):
        out[f"a_error_feedback_shrinks_{o}_gap"] = {"verdict": _combine(a2[o]), "per_objective": a2[o]}
    for rival in cfg.b_rivals:
        parts, nums = [], {}
        for name in cfg.b_objectives:
            mine = _pick(rows, part="b", objective=name, schedule="PD", optimizer="nesterov_async")
            other = _pick(rows, part="b", objective=name, schedule=rival[0], optimizer=rival[1])
            parts.append(_every(mine["loss_time"], other["loss_time"]))
            nums[name] = [round(mine["loss_time_mean"], 5), round(other["loss_time_mean"], 5)]
        out[f"b_nesterov_async_beats_{rival[0]}_{rival[1]}"] = {
            "verdict": _combine(parts),
            "per_objective": parts,
            "loss_at_T": nums,
        }
    labels = ["rotated_quadratic", "aligned_quadratic"] + (["nanochat"] if cfg.c_lm_S else [])
    for label in labels:
        Ss = list(cfg.c_lm_S if entry_of(label).is_lm else cfg.c_S)
        slow = {
            a: [
                _pick(rows, part="c", objective=label, S=S, schedule="PD/sync", optimizer=a)["slowdown_mean"]
                for S in Ss
            ]
            for a in ("adam", "adam_rotated")
        }
        rho, ratio = trend(Ss, slow["adam"])
        grows = "holds" if rho > 0 and ratio > 1.5 else "fails" if rho <= 0 or ratio <= 1 else "depends"
        sa, sr = slow["adam"][-1], slow["adam_rotated"][-1]
        removed = (sa - sr) / (sa - 1) if np.isfinite(sa) and sa > 1 else float("nan")
        seeds = [
            _pick(rows, part="c", objective=label, S=Ss[-1], schedule="PD/sync", optimizer=a)["slowdown"]
            for a in ("adam", "adam_rotated")
        ]
        per_seed = [(a - r) / (a - 1) if a > 1 else float("nan") for a, r in zip(*seeds)]
        # most of the slowdown removed (>= 1/2) in every seed: holds; in none: fails
        most = "holds" if all(f >= 0.5 for f in per_seed) else "fails" if all(f < 0.5 for f in per_seed) else "depends"
        out[f"c_{label}"] = {
            "adam_slowdown_grows_with_S": grows,
            "rotation_removes_most": most if np.isfinite(removed) else "depends",
            "S": Ss,
            "slowdown_adam": [round(x, 3) for x in slow["adam"]],
            "slowdown_adam_rotated": [round(x, 3) for x in slow["adam_rotated"]],
            "removed_fraction_at_S_max": round(removed, 3) if np.isfinite(removed) else None,
            "removed_fraction_per_seed": [round(f, 3) for f in per_seed],
            "spearman_rho": round(rho, 3),
        }
    return out


def n_steps(cfg: Config) -> int:
    """Progress units of :func:`run`: one per arm of (a) and (b), one per case of (c)."""
    a = 6 * len(cfg.a_objectives)  # (adamw, muon) x (sync, 2bw, 2bw_ef)
    b = (1 + len(cfg.b_rivals)) * len(cfg.b_objectives)
    return a + b + 2 * len(cfg.c_S) + len(cfg.c_lm_S)


def console(table: list[dict], summary: dict) -> str:
    """What ``experiments.figure`` prints: the verdicts, the caveat of a run smaller than the
    paper's and a table of means of at most 160 columns (:mod:`rpd.plotting.staleness_2026_text`)."""
    return text.console(table, summary, paper=dataclasses.asdict(Config()))


def figure(out: StudyOutput, path) -> None:
    """The figure from saved numbers (:func:`rpd.plotting.staleness_2026.figure`), with the
    verdicts and, for a run smaller than the paper's, what it leaves out."""
    draw(out, path, paper=dataclasses.asdict(Config()))
