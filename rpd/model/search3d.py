"""N workers as TP × PP × DP, with M microbatches per pipeline: the fastest that fits, synchronous
and asynchronous (docs/plan.md#n-workers).

Candidates: TP a divisor of ``gpus_per_node`` (and of the heads and the hidden size), PP a
divisor of N / TP up to the model's blocks, DP = N / (TP·PP), and a global batch of ``B``
microbatches cut into M = B / DP per pipeline (DP must divide B); for each the synchronous
schedules the caller names (:class:`Searched`: a chunked one, like interleaved, at v = 2 chunks
per rank where every rank gets whole layers; at PP = 1 only the first unchunked one, since every
schedule is then one stage with nothing to overlap) and, where DP = 1, the asynchronous ones. A
configuration uses TP·PP·DP workers, at most N (PP may leave some idle when no divisor fits: the
count is reported). The caller (``experiments/plan_search.py``) reads the facts from the registry.

:func:`search` orders the candidates by an upper bound of their tokens/s -- every rank busy on
its share of the model's F + I + W with no bubble, p2p or DP collective -- and skips those that
cannot fit (their static bytes alone, weights + gradients + master + optimizer of an even share,
above the cap) and, once a fitting one is known, those whose bound is below it (branch and
bound). :func:`brute_force` times every candidate with :func:`rpd.model.plan.plan_one` (the
straightforward loop; the same winners, tested).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from rpd.model.answer import best_first
from rpd.model.compute import layer_seconds
from rpd.model.hardware import Hardware
from rpd.model.layers import Model
from rpd.model.memory import OPTIMIZER_BYTES
from rpd.model.plan import Maker, Row, plan_one
from rpd.model.stages import partition
from rpd.model.workers import pipedream_config
from rpd.validation import check_int, required


@dataclasses.dataclass(frozen=True)
class Searched:
    """A schedule the search tries, with the two facts it reads: synchronous (one weight version
    per step: may run with DP > 1) and chunked (chunks per rank are a parameter, tried at v = 2)."""

    name: str
    synchronous: bool = True
    chunked: bool = False


@dataclasses.dataclass(frozen=True)
class Candidate:
    TP: int
    PP: int
    DP: int
    M: int
    schedule: str
    v: int | None = None

    @property
    def workers(self) -> int:
        return self.TP * self.PP * self.DP


def tp_values(hw: Hardware, n: int, heads: int, hidden: int) -> list[int]:
    """Tensor-parallel widths tried: powers of two inside one node dividing the heads, the hidden
    size and the ``n`` workers."""
    return [
        TP
        for TP in (1, 2, 4, 8, 16)
        if TP <= hw.gpus_per_node and not (hw.gpus_per_node % TP or heads % TP or hidden % TP or n % TP)
    ]


def _all_candidates(models, hw, n, B, schedules, kw) -> list[Candidate]:
    """:func:`candidates` of the search's arguments (``kw``'s ``shape`` = (heads, hidden) taken out)."""
    blocks = sum(1 for x in models(1).layers if x.kind == "block")
    heads, hidden = kw.pop("shape")
    return candidates(n, B, hw, blocks, heads, hidden, schedules)


def candidates(
    n: int, B: int, hw: Hardware, blocks: int, heads: int, hidden: int, schedules: Sequence[Searched]
) -> list[Candidate]:
    """Every (TP, PP, DP, M, schedule) of ``n`` workers and a global batch of ``B`` microbatches."""
    sync = [s for s in schedules if s.synchronous]
    single = [s for s in sync if not s.chunked][:1]  # PP = 1: one stage, every schedule the same
    n, B = check_int("n_workers", n), check_int("pipeline.global_batch", B)
    out = []
    for TP in tp_values(hw, n, heads, hidden):
        for PP in range(1, min(n // TP, blocks) + 1):
            if (n // TP) % PP:
                continue
            DP = n // (TP * PP)
            if B % DP:
                continue
            M = B // DP
            for s in sync if PP > 1 else single:
                if not s.chunked:
                    out.append(Candidate(TP, PP, DP, M, s.name))
                elif not (blocks % (2 * PP) or M % PP):  # whole layers per chunk; Megatron's M rule
                    out.append(Candidate(TP, PP, DP, M, s.name, 2))
            if DP == 1 and PP > 1:
                out += [Candidate(TP, PP, 1, M, s.name) for s in schedules if not s.synchronous]
    return out


def bytes_per_value(kw: dict, shard: int = 1) -> float:
    """Static bytes per parameter: weights, gradients, master weights and optimizer state, the
    last two over ``shard`` ranks (ZeRO-1)."""
    mixed = kw.get("precision", "bf16_mixed") == "bf16_mixed"
    per_value: float = (2 if mixed else 4) + (kw.get("grad_bytes") or 4)
    return per_value + ((4 if mixed else 0) + OPTIMIZER_BYTES[kw.get("optimizer", "adam")]) / shard


def stage_params(model: Model, bounds) -> np.ndarray:
    """int [G]: values each stage of ``bounds`` holds, a tied matrix on both of its stages (as
    :func:`rpd.model.stages.stages` counts them)."""
    stage_of = np.repeat(np.arange(len(bounds)), [b - a for a, b in bounds])
    index = {x.name: j for j, x in enumerate(model.layers)}
    out = np.zeros(len(bounds), np.int64)
    for j, x in enumerate(model.layers):
        out[stage_of[j]] += x.params
        if x.tied_params and x.tied_to is not None and stage_of[index[x.tied_to]] != stage_of[j]:
            out[stage_of[j]] += x.tied_params
    return out


def _static_bytes(model: Model, c: Candidate, kw: dict) -> float:
    """Bytes the fullest rank holds at least: an even share of the weights and their state."""
    return model.params / c.PP * bytes_per_value(kw, c.DP if kw.get("zero", 0) else 1)


def least_devices(
    models: Callable[[int], Model], hw: Hardware, cap: float, heads: int, hidden: int, how: str = "even", **kw
) -> tuple[int, int, int] | None:
    """(devices, TP, PP) of the fewest devices whose fullest rank holds its weights, gradients,
    master weights and optimizer state (one version, one pipeline: ZeRO over more pipelines
    costs more devices in all) within ``cap`` bytes; None when no TP × PP does."""
    best = None
    for TP in tp_values(hw, hw.gpus_per_node, heads, hidden):
        model = models(TP)
        blocks = sum(1 for x in model.layers if x.kind == "block")
        per_value = bytes_per_value(kw)
        for PP in range(1, blocks + 1):
            if best is not None and TP * PP >= best[0]:
                break
            if stage_params(model, partition(model, PP, how, hw)).max() * per_value <= cap:
                best = (TP * PP, TP, PP)
                break
    return best


def _bound(model: Model, c: Candidate, secs: float) -> float:
    """Tokens/s no schedule of ``c`` can beat (module docstring; 1 % over it for the ticks'
    rounding of each op)."""
    return 1.01 * c.DP * model.tokens_per_microbatch * c.PP / secs


def _evaluate(models, hw, make, c: Candidate, kw) -> Row:
    return plan_one(models(c.TP), hw, c.schedule, make, c.PP, c.M, D=c.DP, TP=c.TP, v=c.v, **kw)


@dataclasses.dataclass(frozen=True)
class Found:
    """What :func:`search` did: the rows it timed (best first) and how every candidate ended."""

    rows: list[Row]
    candidates: int  # every (TP, PP, DP, M, schedule) of the space
    over_cap: int  # not timed: static bytes alone above the cap
    bounded: int  # not timed: their bound of tokens/s at most the best found

    @property
    def timed(self) -> int:
        return len(self.rows)


def search(
    models: Callable[[int], Model],
    hw: Hardware,
    make: Maker,
    n: int,
    B: int,
    cap: float,
    schedules: Sequence[Searched],
    **kw,
) -> Found:
    """The rows timed for ``n`` workers, and the counts of those not timed (:class:`Found`).
    ``models(TP)``: the model per TP rank; ``kw``: :func:`rpd.model.plan.plan_one`'s settings
    (optimizer, zero, grad_bytes, margin, SP, recompute, ...)."""
    synchronous = {s.name: s.synchronous for s in schedules}
    cands = _all_candidates(models, hw, n, B, schedules, kw)
    margin = kw.get("margin", 0.0)
    secs = {}
    bounds = []
    for c in cands:
        if c.TP not in secs:
            secs[c.TP] = float(layer_seconds(models(c.TP), hw).sum())
        static = _static_bytes(models(c.TP), c, kw)
        bounds.append((_bound(models(c.TP), c, secs[c.TP]), static <= cap * (1 - margin), c))
    bounds.sort(key=lambda x: -x[0])
    rows, best_sync, best_any, over, bounded = [], 0.0, 0.0, 0, 0
    for bound, may_fit, c in bounds:
        if not may_fit:
            over += 1
            continue
        sync = synchronous[c.schedule]
        if bound <= (best_sync if sync else best_any):
            bounded += 1
            continue
        r = _evaluate(models, hw, make, c, dict(kw, memory_cap=cap))
        rows.append(r)
        if r.error is None and r.fits:
            tokens_per_s = required("tokens_per_s", r.tokens_per_s)  # set on a row without an error
            if sync:
                best_sync = max(best_sync, tokens_per_s)
            best_any = max(best_any, tokens_per_s)
    return Found(best_first(rows), len(cands), over, bounded)


def brute_force(
    models: Callable[[int], Model],
    hw: Hardware,
    make: Maker,
    n: int,
    B: int,
    cap: float,
    schedules: Sequence[Searched],
    **kw,
) -> list[Row]:
    """Every candidate timed (the straightforward loop :func:`search` is checked against)."""
    cands = _all_candidates(models, hw, n, B, schedules, kw)
    return best_first([_evaluate(models, hw, make, c, dict(kw, memory_cap=cap)) for c in cands])


def replicated(
    models: Callable[[int], Model],
    hw: Hardware,
    n: int,
    cap: float,
    heads: int,
    hidden: int,
    straight: bool = False,
    **kw,
) -> list[Row]:
    """PipeDream's partitioner's stages and replicas (1F1B-RR: asynchronous, weights stashed,
    a replicated stage's gradients all-reduced; :func:`rpd.model.workers.pipedream_config`) on
    the n / TP groups of TP workers, for every TP the node and the model allow, as plan rows
    (per microbatch: the stream has no step; ``replicas`` the workers of each stage).
    ``straight``: the search times PipeDream on n / TP unreplicated stages itself, so a
    partition with every replica 1 on all n / TP groups is that configuration, left to it (one
    configuration, one answer)."""
    rows = []
    margin = kw.get("margin", 0.0)
    for TP in tp_values(hw, n, heads, hidden):
        model = models(TP)
        c = pipedream_config(
            model,
            hw,
            n // TP,
            grad_bytes=kw.get("grad_bytes") or 4,
            optimizer=kw.get("optimizer", "adam"),
            precision=kw.get("precision", "bf16_mixed"),
            memory_cap=cap * (1 - margin),
        )
        if straight and set(c.replicas) == {1} and c.S * TP == n:
            continue
        s = c.time_per_microbatch_s
        rows.append(
            Row(
                schedule="pipedream_rr",
                S=c.S,
                M=1,
                TP=TP,
                recompute=kw.get("recompute", "none"),
                synchronous=False,
                step_time_s=s,
                tokens_per_s=c.tokens_per_s,
                mfu=model.model_flops / (s * c.workers * hw.peak_flops) if model.model_flops > 0 else None,
                peak_bytes=[c.peak_bytes],
                fits=c.fits,
                max_delay=c.stash_versions - 1,
                weight_versions=c.stash_versions,
                replicas=c.replicas,
            )
        )
    return rows
