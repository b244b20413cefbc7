"""E18: the staleness cost against model size, measured by rpd (docs/results.md#e18-the-staleness-cost-against-model-size).

The char LM (:func:`rpd.objectives.nanochat.nanochat`, held-out loss) at several widths and depths
(``widths[i]`` with ``stages[i]`` − 2 transformer blocks, one stage per block plus the embedding and
the head) trains with every method, each against a synchronous reference of the same global batch:

- PipeDream (PD), PipeMare (no T1 / T2) and PD under ``nesterov_async``: one microbatch per update,
  against 1F1B with a flush every microbatch (M = 1: minibatch training on B sequences);
- PipeDream-2BW with M microbatches per update, against 1F1B with the same M (the same minibatches, no delay);
- LocalSGD and DiLoCo (outer Nesterov 0.7 / 0.9, inner state kept; :mod:`rpd.train.diloco`) with
  M replicas and H local steps, against 1F1B with a flush every M microbatches: data-parallel
  training with the global batch of M replicas, the baseline of Charles et al. 2025 (arXiv 2503.09799).
  LocalSGD with M = 1 *is* its reference (averaging one replica is the identity): a row saying so.

under SGD, AdamW and Muon (``nesterov_async`` is its own optimizer: its reference is 1F1B under
``nesterov_async`` with no delay, torch's NAdam). The 1F1B reference's semantics equal minibatch
training (docs/science.md), so where it sits in the pipeline does not matter: only its batch does.

**Tokens.** A pipeline curve is recorded after whole microbatches' worth of block updates (k block
updates carry k·M/S microbatches of B·seq tokens: the tokens whose gradients have been applied);
LocalSGD's and DiLoCo's model is the replicas' average after the outer step, recorded at round
ends (every M·H microbatches). D, the reference's token budget, is the same at every size
(``D_mb`` microbatches): D / N falls from 6.9 to 0.37 tokens per parameter across the paper
sizes, so the trend in N is at a fixed token budget, not at a fixed D / N. Every method trains to
``kappa_max``·D tokens; one that never reaches the reference's loss at D is censored (κ >
kappa_max).

**Step sizes** (E10 / E12's protocol: power-of-two grids, one compiled program per grid, the window
moved by half its length toward an edge the choice sits on, up to ``max_shifts`` times): the
reference's γ is the best at D (:func:`rpd.analysis.tuning.select_gamma`, ``best_final`` on the
curve cut at D). A method's γ for κ is the one that reaches L* = L_sync(D) in the fewest tokens
(the tuned method against the tuned reference); for the loss gap at equal tokens its γ is the best
at D. Diverged runs are recorded and never chosen. κ and the fit: :mod:`rpd.analysis.kappa`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from rpd import schedules
from rpd.analysis import kappa as K
from rpd.analysis import tuning
from rpd.objectives import corpus
from rpd.objectives.nanochat import nanochat
from rpd.plotting.kappa_scale import kappa_scale_figure
from rpd.results import StudyOutput
from rpd.studies.kappa_arms import ARMS, PIPELINES, parse_arm
from rpd.studies.kappa_scale_fits import dev_trend, finite, fits
from rpd.train import methods, plans


@dataclasses.dataclass(frozen=True)
class Config:
    widths: tuple[int, ...] = (8, 16, 32)  # the LM's width per size
    stages: tuple[int, ...] = (3, 4, 5)  # per size: S = transformer blocks + 2 (embedding, head)
    heads: int = 2
    arms: tuple[str, ...] = ARMS  # "optimizer/method[/M=m][/H=h]", any of FULL_ARMS
    D_mb: int = 256  # D, the reference's budget, in microbatches (the same at every size)
    kappa_max: float = 2.0  # every method trains to kappa_max·D tokens
    record_mb: int = 16  # pipelines recorded every record_mb microbatches
    lm_seq: int = 16
    lm_batch: int = 4
    lm_heldout_batches: int = 8
    # the γ grid 2^lo..2^hi per optimizer (E12's LM choices at its centre)
    gamma_exps: dict = dataclasses.field(
        default_factory=lambda: {"sgd": (-2, 1), "adamw": (-8, -5), "muon": (-7, -4), "nesterov_async": (-8, -5)}
    )
    max_shifts: int = 1
    seed: int = 0


# two widths at one block, SGD, PD (LocalSGD M = 1 is its reference: a row, no run): 2 programs (PD's,
# which its 1F1B M = 1 reference shares, per width). DiLoCo M = 2 was 4 of the 8 programs before:
# at the paper size only (compiling an LM program is ~12 CPU-s whatever its width).
QUICK = dict(
    widths=(8, 16),
    stages=(3, 3),
    arms=("sgd/pipedream", "sgd/local_sgd/M=1/H=2"),
    D_mb=48,
    record_mb=8,
    lm_heldout_batches=2,
    gamma_exps={"sgd": (-1, 1)},
    max_shifts=0,
)
KAPPA_RULE = "the γ that reaches L* = L_sync(D) in the fewest tokens (none reaches it: censored)"
REF_RULE = "best at D (best_final on the curve cut at D)"


def corpus_identity(cfg: Config) -> str | None:
    return corpus.identity()


def check(cfg: Config) -> None:
    """Refuse a config whose arms or token axes do not line up, naming the field."""
    if len(cfg.widths) != len(cfg.stages):
        raise ValueError(f"widths and stages must have equal lengths, got {len(cfg.widths)} and {len(cfg.stages)}")
    if min(cfg.stages) < 3:
        raise ValueError(f"stages must be >= 3 (embedding, a block, the head), got {list(cfg.stages)}")
    if cfg.kappa_max < 1:
        raise ValueError(f"kappa_max must be >= 1, got {cfg.kappa_max}")
    run_mb = round(cfg.kappa_max * cfg.D_mb)
    if cfg.D_mb % cfg.record_mb or run_mb % cfg.record_mb:
        raise ValueError(f"record_mb ({cfg.record_mb}) must divide D_mb ({cfg.D_mb}) and kappa_max·D_mb ({run_mb})")
    for arm in cfg.arms:
        ident, M = parse_arm(arm)
        if ident["optimizer"] not in cfg.gamma_exps:
            raise ValueError(f"gamma_exps: no grid for {ident['optimizer']!r} (arm {arm!r})")
        if cfg.record_mb % M:
            raise ValueError(f"arms: {arm!r}: M = {M} must divide record_mb ({cfg.record_mb})")
        round_mb = M * ident["settings"].get("H", 1)
        if cfg.D_mb % round_mb or run_mb % round_mb:
            raise ValueError(f"arms: {arm!r}: rounds of M·H = {round_mb} must divide D_mb ({cfg.D_mb}) and {run_mb}")


def params(width: int, S: int, vocab: int, seq: int) -> int:
    """The LM's parameter count: (V + T)·W + (S − 2)(12W² + 13W) + W·V + 2W."""
    return (vocab + seq) * width + (S - 2) * (12 * width * width + 13 * width) + width * vocab + 2 * width


@dataclasses.dataclass
class _Size:
    """One size's objective and its token axes."""

    obj: object
    width: int
    S: int
    N: int  # parameters
    tpm: int  # tokens per microbatch
    run_mb: int  # microbatches every run trains
    ring: int = 1  # PD's history ring and gradient slots: every one-point pipeline run and
    slots: int = 1  # reference gets them, so a reference and its arm share one compiled program

    def pipeline_tokens(self, cfg: Config) -> np.ndarray:
        """Tokens at the start and every ``record_mb`` microbatches."""
        return np.arange(0, self.run_mb + 1, cfg.record_mb) * self.tpm

    def replica_tokens(self, R: int, H: int) -> np.ndarray:
        """Tokens at the start and every round end (R·H microbatches)."""
        return np.arange(0, self.run_mb + 1, R * H) * self.tpm

    def pipeline_run(self, cfg: Config, tl, optimizer: str, mb_per_update: int):
        """grid -> curves [G, P] on :meth:`pipeline_tokens`: k block updates carry k·M/S microbatches.
        A one-point run (not PipeMare's) gets PD's ring and slots (``methods.train``: the same numbers
        bit for bit, one program for 1F1B M = 1 and PD, and for 1F1B M and 2BW M)."""
        at = np.arange(cfg.record_mb, self.run_mb + 1, cfg.record_mb) * self.S // mb_per_update
        share = {} if tl.kind == "pipemare" else dict(ring_size=self.ring, n_slots=self.slots)

        def run(grid):
            return methods.train(
                self.obj, tl, grid, seed=cfg.seed, axis="block_update", at=at, optimizer=_opt(optimizer), **share
            ).curve

        return run

    def replica_run(self, cfg: Config, R: int, H: int, optimizer: str, outer):
        """grid -> curves [G, P] on :meth:`replica_tokens` (the replicas' mean after each round)."""
        tl = schedules.local_sgd(self.S, self.run_mb, R, H)

        def run(grid):
            res = methods.local_sgd(
                self.obj, tl, grid, seed=cfg.seed, track_time=False, optimizer=_opt(optimizer), outer_optimizer=outer
            )
            assert res.curve.shape[1] == self.run_mb // (R * H) + 1, res.curve.shape
            return res.curve

        return run


def _opt(name: str):
    return None if name == "sgd" else name


def _sweep(cfg: Config, run, optimizer: str, choose) -> tuple[dict[int, np.ndarray], int | None, str | None, int]:
    """Curves per γ exponent over the window (moved toward an edge ``choose`` sits on), the
    chosen exponent, its edge and the shifts made. ``choose(ks, curves) -> index | None``."""
    lo, hi = cfg.gamma_exps[optimizer]
    tried: dict[int, np.ndarray] = {}
    shifts = 0
    while True:
        for k, row in zip(range(lo, hi + 1), run(tuning.pow2_grid(lo, hi))):
            tried[k] = row
        ks = sorted(tried)
        i = choose(ks, np.stack([tried[k] for k in ks]))
        step = max(1, (hi - lo + 1) // 2)
        edge = "all_diverged" if i is None else "low" if i == 0 else "high" if i == len(ks) - 1 else None
        move = {"all_diverged": -step, "low": -step, "high": step}.get(edge or "", 0)
        if move == 0 or shifts >= cfg.max_shifts:
            return tried, None if i is None else ks[i], edge, shifts
        lo, hi, shifts = lo + move, hi + move, shifts + 1


def _selection(ks, curves) -> tuning.Selection:
    return tuning.select_gamma(curves, np.ldexp(1.0, ks), rule="best_final")


def _best_at(iD: int):
    """choose: best_final on the curves cut at column iD (diverged never chosen)."""
    return lambda ks, curves: _selection(ks, curves[:, : iD + 1]).index


def _fastest(tokens: np.ndarray, target: float):
    """choose: the fewest tokens to ``target`` among the non-diverged; none: the best at the end."""

    def choose(ks, curves):
        dead = [r.diverged for r in _selection(ks, curves).reports]
        reach = [None if d else K.tokens_to_reach(tokens, c, target) for c, d in zip(curves, dead)]
        ok = [i for i, t in enumerate(reach) if t is not None]
        if ok:
            return min(ok, key=lambda i: (reach[i], ks[i]))
        return _selection(ks, curves).index

    return choose


def _reference(cfg: Config, size: _Size, optimizer: str, M: int) -> dict:
    """1F1B with a flush every M microbatches, γ best at D."""
    tokens = size.pipeline_tokens(cfg)
    run = size.pipeline_run(cfg, schedules.one_f_one_b(size.S, size.run_mb, M), optimizer, M)
    tried, k, edge, shifts = _sweep(cfg, run, optimizer, _best_at(cfg.D_mb // cfg.record_mb))
    D = cfg.D_mb * size.tpm
    base = dict(optimizer=optimizer, M=M, N=size.N, width=size.width, S=size.S, D=D)
    if k is None:
        return dict(base, status="all_diverged", n_diverged=len(tried))
    return dict(
        base, status="ok", gamma_exp=k, gamma_edge=edge, shifts=shifts, target=K.loss_at(tokens, tried[k], D),
        final=float(tried[k][-1]), _tokens=tokens, _curve=tried[k],
    )  # fmt: skip


def _row(cfg: Config, size: _Size, ref: dict, tokens: np.ndarray, run, optimizer: str, base: dict) -> dict:
    """A method's row against ``ref``: κ on its fastest γ, the gap at D on its best γ at D."""
    row = dict(base, N=size.N, width=size.width, S=size.S, blocks=size.S - 2, D=ref["D"], reference_M=ref["M"])
    if ref["status"] != "ok":
        return dict(
            row, status="n/a", reason="the reference diverged at every γ", kappa=None, censored=False, relative_gap=None
        )
    tried, k, edge, shifts = _sweep(cfg, run, optimizer, _fastest(tokens, ref["target"]))
    ks = sorted(tried)
    curves = np.stack([tried[j] for j in ks])
    dead = [r.diverged for r in _selection(ks, curves).reports]
    row.update(n_gammas=len(ks), n_diverged=int(sum(dead)), diverged_exps=[j for j, d in zip(ks, dead) if d])
    row.update(shifts=shifts, gamma_edge=edge, target=ref["target"], reference_gamma_exp=ref["gamma_exp"])
    if k is None:
        return dict(row, status="all_diverged", kappa=None, censored=False, relative_gap=None, diverged=True)
    got = K.kappa(ref["_tokens"], ref["_curve"], tokens, tried[k], ref["D"])
    iD = int(np.searchsorted(tokens, ref["D"]))
    k_gap = ks[_selection(ks, curves[:, : iD + 1]).index or 0]
    gap = K.kappa(ref["_tokens"], ref["_curve"], tokens, tried[k_gap], ref["D"]).relative_gap
    return dict(
        row,
        status="ok",
        kappa=got.kappa,
        censored=got.censored,
        kappa_bound=got.kappa_bound,
        diverged=got.diverged,
        gamma_exp=k,
        relative_gap=finite(gap),
        gamma_exp_gap=k_gap,
        _tokens=tokens,
        _curve=tried[k],
    )


def arms(cfg: Config) -> list[tuple[dict, int]]:
    """(row identity, the reference's M) of every arm."""
    return [parse_arm(a) for a in cfg.arms]


def _size(cfg: Config, width: int, S: int) -> _Size:
    obj = nanochat(
        S, batch_size=cfg.lm_batch, seq_len=cfg.lm_seq, width=width, heads=cfg.heads, seed=cfg.seed,
        heldout_batches=cfg.lm_heldout_batches,
    )  # fmt: skip
    assert obj.D == params(width, S, obj.meta["vocab_size"], cfg.lm_seq)
    run_mb = round(cfg.kappa_max * cfg.D_mb)
    pd, slots = plans.pipedream_plan(schedules.pipedream(S, run_mb), obj.n_batches)
    return _Size(obj, width, S, int(obj.D), cfg.lm_batch * cfg.lm_seq, run_mb, plans.ring_size(pd, S), slots)


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    check(cfg)
    rows: list[dict] = []
    refs: list[dict] = []
    walls = []
    for width, S in zip(cfg.widths, cfg.stages):
        t0 = time.perf_counter()
        size = _size(cfg, width, S)
        made: dict[tuple[str, int], dict] = {}

        def ref_of(optimizer: str, M: int) -> dict:
            if (optimizer, M) not in made:
                made[optimizer, M] = _reference(cfg, size, optimizer, M)
            return made[optimizer, M]

        for ident, M in arms(cfg):
            method, optimizer, st = ident["method"], ident["optimizer"], ident["settings"]
            if method == "local_sgd" and st["M"] == 1:
                rows.append(dict(ident, N=size.N, width=width, S=S, blocks=S - 2, status="n/a", kappa=1.0, censored=False,
                                 relative_gap=0.0, reason="LocalSGD with M = 1 is its reference: averaging one replica is the identity"))  # fmt: skip
                continue
            if method == "pipedream_2bw" and st["M"] < S - 1:
                rows.append(dict(ident, N=size.N, width=width, S=S, status="n/a", kappa=None, censored=False, relative_gap=None,
                                 reason=f"2BW needs M >= S - 1 = {S - 1}"))  # fmt: skip
                continue
            ref = ref_of(optimizer, M)
            if method in PIPELINES:
                tl = getattr(schedules, method)(S, size.run_mb, *([st["M"]] if "M" in st else []))
                tokens, run_ = size.pipeline_tokens(cfg), size.pipeline_run(cfg, tl, optimizer, st.get("M", 1))
            else:
                outer = "nesterov" if method == "diloco" else None
                tokens, run_ = (
                    size.replica_tokens(st["M"], st["H"]),
                    size.replica_run(cfg, st["M"], st["H"], optimizer, outer),
                )
            try:
                rows.append(_row(cfg, size, ref, tokens, run_, optimizer, ident))
            except ValueError as err:  # a combination the method refuses (its own check): said, not hidden
                rows.append(dict(ident, N=size.N, width=width, S=S, status="n/a", kappa=None, censored=False,
                                 relative_gap=None, reason=str(err)))  # fmt: skip
            if progress is not None:
                progress(f"N={size.N} {method} {optimizer} {st}")
        refs += made.values()
        walls.append(dict(N=size.N, width=width, S=S, wall_s=time.perf_counter() - t0))
    arrays = {}
    for i, r in enumerate(rows + refs):
        if "_curve" in r:
            arrays[f"curve_{i}"] = np.stack([r.pop("_tokens"), r.pop("_curve")])
            r["curve_key"] = f"curve_{i}"
    return StudyOutput(arrays=arrays, summary=summarise(cfg, rows, refs, walls), table=rows)


def summarise(cfg: Config, rows: list[dict], refs: list[dict], walls: list[dict]) -> dict:
    kap, gap = fits(rows)
    return dict(
        title="E18: the staleness cost κ against model size (char LM, held-out loss)",
        fits=kap,
        gap_fits=gap,
        references=refs,
        diloco_dev=dev_trend(),
        walls=walls,
        kappa_rule=KAPPA_RULE,
        reference_rule=REF_RULE,
        D_rule=f"D = {cfg.D_mb} microbatches × {cfg.lm_batch}·{cfg.lm_seq} tokens at every size",
        fit_method="least squares on log(κ − 1) against log(N/1e6); 95 % t-interval on the slope, n − 2 dof",
        unit="tokens (microbatches of B·seq tokens whose gradients were applied); κ dimensionless",
    )


def numbers(summary: dict, table: list[dict]) -> dict:
    """The figure JSON's top-level keys for readers of κ (the "rpd simulation" source of κ)."""
    keep = (
        "method",
        "optimizer",
        "settings",
        "N",
        "kappa",
        "censored",
        "relative_gap",
        "kappa_bound",
        "status",
        "S",
        "width",
    )
    return dict(
        fits=[
            {k: f[k] for k in ("method", "optimizer", "settings", "c", "gamma", "gamma_ci95", "n_sizes", "N_range")}
            for f in summary["fits"]
        ],
        rows=[{k: r.get(k) for k in keep} for r in table],
    )


def n_steps(cfg: Config) -> int:
    return len(cfg.widths) * len(arms(cfg))


def figure(out: StudyOutput, path) -> None:
    kappa_scale_figure(out, path)
