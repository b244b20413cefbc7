"""The seeds' claims on memory, communication and efficiency, measured on a real model's stages
(docs/plan.md#the-seeds-claims-on-memory-and-communication; E9 checks their bubble claims the same way).

Every number comes from the plan's machinery (:func:`rpd.model.plan.plan_one`: a schedule timed
under the model's per-stage costs on the hardware, bytes per rank from its timeline), for
``model`` (default GPT-3 1.3B, 24 layers) in bf16 mixed precision with Adam on ``hardware``
(default A100 80GB), even partitions (embedding on the first stage, the head on the last).

1. **"Activation memory: GPipe holds M microbatches, 1F1B min(S − s, M) on rank s."** Measured:
   each rank's peak activation bytes over its own stage's bytes per microbatch, for GPipe and
   1F1B at every (S, M) of ``sizes``; holds if every ratio equals the claim.
2. **"Communication volume = 2 × hidden × seq × M per stage"** (per step, elements). Measured:
   the bytes each interior rank sends per step (activations forward, gradients back) in 16-bit
   elements, for 1F1B and interleaved (v = 2) at every (S, M): against 2·h·s·b·M.
3. **"Pipeline efficiency 60–80 %"**. Measured: 1 − f_total (busy share of S ranks over a step)
   and MFU for 1F1B at S = ``eff_S`` and M in ``eff_M``, with even stages and with stages
   balanced by time (``partitions``); holds in the cells inside [60 %, 80 %].
4. **"Beyond 16 stages the bubble dominates"**. Measured: 1F1B's f_total against S in
   ``stage_counts`` (a divisor of the layer count) at a fixed M = ``fixed_M`` (one global batch
   cut into more stages) and at M = 4S, stages balanced by time; "dominates" read as f_total > 50 %.

Each claim gets ``holds`` (True, False, or None for "depends") and a verdict computed from the
numbers, not written by hand.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from rpd import registry
from rpd.model.hardware import preset as hardware_preset
from rpd.model.layers import PRESETS
from rpd.model.layers import preset as model_preset
from rpd.model.plan import plan_one, staged
from rpd.plotting.claims import claims_figure
from rpd.results import StudyOutput


@dataclasses.dataclass(frozen=True)
class Config:
    model: str = "gpt3_1.3b"
    hardware: str = "a100_80g_flat"  # the first plan's flat A100 (rpd.model.hardware)
    sizes: tuple[tuple[int, int], ...] = ((4, 2), (4, 4), (4, 8), (4, 16), (8, 4), (8, 8), (8, 16), (8, 32))
    eff_S: int = 8
    partitions: tuple[str, ...] = ("even", "time")  # rpd.model.stages: the efficiency claim under each
    eff_M: tuple[int, ...] = (8, 16, 32, 64, 128)
    stage_counts: tuple[int, ...] = (2, 4, 8, 12, 24)
    fixed_M: int = 16


QUICK: dict = {}  # pure timing arithmetic: the paper size takes seconds


def _row(model, hw, name, S, M, how="even"):
    r = plan_one(model, hw, name, registry.timeline, S, M, how=how)
    if r.error:
        raise ValueError(f"{name} at S={S}, M={M}: {r.error}")
    return r


def _one_f_one_b(model, hw, claim, S, M, how):
    """1F1B's plan row at S, M on partition ``how``, and the fields of a claim's row that say so."""
    return _row(model, hw, "1f1b", S, M, how), dict(claim=claim, schedule="1f1b", partition=how, S=S, M=M)


# microbatches of its stage's activations the claim says rank s holds, per schedule
ACTIVATIONS_CLAIMED = {
    "gpipe": lambda S, M: np.full(S, M),
    "1f1b": lambda S, M: np.minimum(S - np.arange(S), M),
}


def activation_claim(model, hw, sizes) -> tuple[dict, list[dict]]:
    rows = []
    for S, M in sizes:
        for name, claimed in ACTIVATIONS_CLAIMED.items():
            r = _row(model, hw, name, S, M)
            st, *_ = staged(model, hw, registry.timeline(name, S, M, M))
            held = np.asarray(r.peak_activation_bytes) / st.act
            claim = claimed(S, M)
            rows.append(dict(claim="activations", schedule=name, S=S, M=M, held=held.tolist(), claimed=claim.tolist()))
    err = max(float(np.max(np.abs(np.asarray(r["held"]) - r["claimed"]))) for r in rows)
    holds = err < 1e-9
    verdict = (
        f"holds exactly on every rank in {len(rows)} of {len(rows)} (schedule, S, M) cells: GPipe's rank s holds "
        "M of its stage's microbatch activations, 1F1B's min(S − s, M)"
        if holds
        else f"off by up to {err:.3g} microbatches on some rank"
    )
    return dict(
        claim="GPipe keeps M microbatches' activations, 1F1B min(S − s, M) on rank s",
        holds=holds,
        measured=f"largest deviation {err:.3g} microbatches",
        verdict=verdict,
    ), rows


def comm_claim(model, hw, sizes, gpt) -> tuple[dict, list[dict]]:
    h, s, b = gpt.d_model, gpt.seq, gpt.micro_batch
    rows = []
    for S, M in sizes:
        for name, v in (("1f1b", 1), ("interleaved", 2)):
            if S < 3 or (v > 1 and M < S):  # no interior rank; Megatron's interleaving needs M >= S
                continue
            r = _row(model, hw, name, S, M)
            inner = np.asarray(r.p2p_bytes_per_step[1:-1], float) / 2  # interior ranks, 16-bit values
            rows.append(
                dict(claim="p2p", schedule=name, S=S, M=M, v=v, elements=inner.tolist(), claimed=2 * h * s * b * M)
            )
    one = [r for r in rows if r["v"] == 1]  # 1F1B's rows
    ratio_1 = sorted({round(e / r["claimed"], 6) for r in one for e in r["elements"]})
    ratio_v = sorted({round(e / r["claimed"], 6) for r in rows if r["v"] == 2 for e in r["elements"]})
    holds = ratio_1 == [1.0]
    verdict = (
        f"holds for one stage per rank: every interior rank of 1F1B sends 2·h·s·b·M 16-bit values per step "
        f"(M activations forward, M gradients back); interleaved (v = 2) sends {ratio_v} × that, "
        "one pair per chunk boundary, and the end ranks half of it (one neighbour)"
        if holds
        else f"1F1B's interior ranks send {ratio_1} × 2·h·s·b·M values per step"
    )
    return dict(
        claim="communication volume = 2 × hidden × seq × M per stage",
        holds=holds,
        measured=f"1F1B {ratio_1} ×, interleaved {ratio_v} ×",
        verdict=verdict,
    ), rows


def efficiency_claim(model, hw, S, Ms, partitions) -> tuple[dict, list[dict]]:
    rows = []
    for how in partitions:
        for M in Ms:
            r, row = _one_f_one_b(model, hw, "efficiency", S, M, how)
            rows.append(dict(row, efficiency=1 - r.bubble_total, mfu=r.mfu, ideal=M / (M + S - 1)))
    eff = np.array([r["efficiency"] for r in rows])
    inside = [(r["partition"], r["M"]) for r in rows if 0.6 <= r["efficiency"] <= 0.8]
    holds = True if len(inside) == len(rows) else (False if not inside else None)
    parts = "; ".join(
        f"{how} stages {min(r['efficiency'] for r in rows if r['partition'] == how):.0%}–"
        f"{max(r['efficiency'] for r in rows if r['partition'] == how):.0%}"
        for how in partitions
    )
    verdict = (
        f"depends on M and on the partition: 1 − bubble at S = {S}, M = {Ms[0]}..{Ms[-1]}: {parts} "
        f"(balanced stages without p2p would give {rows[0]['ideal']:.0%}–{rows[len(Ms) - 1]['ideal']:.0%}); "
        f"inside 60–80 % in {len(inside)} of {len(rows)} cells; MFU {min(r['mfu'] for r in rows):.0%}–"
        f"{max(r['mfu'] for r in rows):.0%} (the hardware's efficiency times that)"
    )
    return dict(
        claim="pipeline efficiency 60–80 %", holds=holds, measured=f"{eff.min():.1%}–{eff.max():.1%}", verdict=verdict
    ), rows


def stages_claim(model, hw, counts, fixed_M, how) -> tuple[dict, list[dict]]:
    rows = []
    for S in counts:
        for rule, M in (("fixed", fixed_M), ("4S", 4 * S)):
            r, row = _one_f_one_b(model, hw, "stages", S, M, how)
            rows.append(dict(row, rule=rule, bubble=r.bubble_total, ideal=(S - 1) / (M + S - 1)))
    fixed = [r for r in rows if r["rule"] == "fixed"]
    scaled = [r for r in rows if r["rule"] == "4S"]
    first = next((r["S"] for r in fixed if r["bubble"] > 0.5), None)
    worst_scaled = max(r["bubble"] for r in scaled)
    holds = None
    verdict = (
        f"depends on M, not on 16: at a fixed M = {fixed_M} the bubble passes 50 % at S = {first} "
        if first is not None
        else f"at a fixed M = {fixed_M} the bubble stays below 50 % up to S = {counts[-1]} "
    ) + (
        f"(f_total {', '.join(format(r['bubble'], '.0%') for r in fixed)} at S = {list(counts)}, "
        f"{how} partition); with M = 4S it reaches {worst_scaled:.0%}, where balanced stages without p2p "
        f"give (S − 1)/(M + S − 1) ≤ {max(r['ideal'] for r in scaled):.0%}: the rest is stage imbalance "
        "(S stages of whole layers, the head on the last) and p2p"
    )
    return dict(
        claim="beyond 16 stages the bubble dominates",
        holds=holds,
        measured=f"fixed M = {fixed_M}: first S over 50 %: {first}; M = 4S: at most {worst_scaled:.1%}",
        verdict=verdict,
    ), rows


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    model, hw = model_preset(cfg.model), hardware_preset(cfg.hardware)
    for S in cfg.stage_counts:
        if S > len(model.layers):
            raise ValueError(f"stage_counts: S = {S} exceeds {cfg.model}'s {len(model.layers)} layers")
    claims, table = [], []
    for fn, args in (
        (activation_claim, (cfg.sizes,)),
        (comm_claim, (cfg.sizes, PRESETS[cfg.model])),
        (efficiency_claim, (cfg.eff_S, cfg.eff_M, cfg.partitions)),
        (stages_claim, (cfg.stage_counts, cfg.fixed_M, cfg.partitions[-1])),
    ):
        c, rows = fn(model, hw, *args)
        claims.append(c)
        table += rows
        if progress is not None:
            progress(c["claim"])
    summary = dict(model=cfg.model, hardware=cfg.hardware, claims=claims)
    return StudyOutput(arrays={}, summary=summary, table=table)


def figure(out: StudyOutput, path) -> None:
    claims_figure(out.summary, out.table, path)
