"""N workers as TP × CP × PP × DP, with M microbatches per pipeline and the knobs that change a
layer's time and bytes: the fastest that fits, synchronous and asynchronous (docs/plan.md#n-workers).

Candidates (:func:`candidates`): TP a power of two inside one node dividing the heads, the KV
heads and the hidden size; CP (:class:`Space`) dividing N / TP with the sequence cut into 2·CP
load-balanced chunks (CP ranks after TP, before DP: Megatron's order); PP dividing N / (TP·CP)
up to the model's blocks; DP the rest, DP dividing the global batch of ``B`` microbatches, M =
B / DP (with ``hardware.sites`` > 1, only the layouts :func:`rpd.model.topology.place` admits). For each, the schedules the caller names (:class:`Searched`): a chunked one (interleaved)
at every v of the space whose chunks get whole layers, with Megatron's M rule; at PP = 1 only the
first unchunked one (one stage has nothing to overlap); the asynchronous ones where DP = CP = 1.
Then recomputation, SP (TP > 1) and ZeRO-1 (DP·CP > 1) as the space gives them. A model per
:class:`Variant` (TP, CP, SP, recompute) comes from the caller's ``models``.

:func:`search` is best first with branch and bound: every candidate gets its static bytes and a
lower bound of its step time (:mod:`rpd.model.search_bounds`) -- an upper bound of its tokens/s;
those whose static bytes exceed the cap are dropped; the rest are taken in the order of their
bound, and each is dropped when its peak bytes, read off its schedule's order at unit costs
(activations live from a forward to its backward: the order fixes them, not the costs), exceed
the cap, else timed by :func:`rpd.model.plan.plan_one`; the search stops when the next bound is
at most the fastest synchronous row that fits (an asynchronous candidate also needs to beat the
fastest row). Unit-cost timelines are built once per (schedule, PP, M, v) and costed ones once
per costs (ZeRO's two rows share them). :func:`brute_force` times every candidate it is given
(the straightforward loop over :func:`candidates`; the same answers, tested).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

from rpd.model.answer import best_first
from rpd.model.hardware import Hardware
from rpd.model.layers import Model
from rpd.model.memory import rank_memory
from rpd.model.plan import Maker, Row, plan_one
from rpd.model.search_bounds import Stages, dp_floor, static_bytes, step_floor
from rpd.model.stages import partition, stages
from rpd.schedules.machinery.ir import BWD_I
from rpd.validation import check_int, required

RECOMPUTE = ("none", "selective", "full")


@dataclasses.dataclass(frozen=True)
class Searched:
    """A schedule the search tries, with the two facts it reads: synchronous (one weight version
    per step: may run with DP > 1) and chunked (chunks per rank are a parameter)."""

    name: str
    synchronous: bool = True
    chunked: bool = False


@dataclasses.dataclass(frozen=True)
class Space:
    """The values tried of each knob beside TP, PP and DP (``v`` None: every v whose chunks
    get whole layers)."""

    recompute: tuple[str, ...] = RECOMPUTE
    SP: tuple[bool, ...] = (False, True)
    zero: tuple[int, ...] = (0, 1)
    CP: tuple[int, ...] = (1, 2, 4, 8, 16)
    v: tuple[int, ...] | None = None


class Shape(NamedTuple):
    """What the candidates read of the model: blocks, heads, KV heads, hidden size, sequence."""

    blocks: int
    heads: int
    kv_heads: int
    hidden: int
    seq: int


class Variant(NamedTuple):
    """What the model per rank depends on."""

    TP: int
    CP: int
    SP: bool
    recompute: str


@dataclasses.dataclass(frozen=True)
class Candidate:
    TP: int
    PP: int
    DP: int
    M: int
    schedule: str
    v: int | None = None
    CP: int = 1
    SP: bool = False
    recompute: str = "none"
    zero: int = 0

    @property
    def workers(self) -> int:
        return self.TP * self.CP * self.PP * self.DP

    @property
    def variant(self) -> Variant:
        return Variant(self.TP, self.CP, self.SP, self.recompute)

    def row(self, model: Model, hw: Hardware, make: Maker, **kw) -> Row:
        """The plan's row of this layout (:func:`rpd.model.plan.plan_one`; ``model`` is its
        :attr:`variant`'s); ``kw``: the plan's other settings."""
        return plan_one(
            model,
            hw,
            self.schedule,
            make,
            self.PP,
            self.M,
            D=self.DP,
            TP=self.TP,
            SP=self.SP,
            v=self.v,
            zero=self.zero,
            recompute=self.recompute,
            CP=self.CP,
            **kw,
        )


@dataclasses.dataclass(frozen=True)
class Found:
    """What :func:`search` did: the rows it timed (best first) and how every candidate ended."""

    rows: list[Row]
    candidates: int  # every candidate of the space
    over_cap: int  # not timed: static bytes, or the peak read off the order, above the cap
    bounded: int  # not timed: their bound of tokens/s at most the best found

    @property
    def timed(self) -> int:
        return len(self.rows)


def tp_values(hw: Hardware, n: int, heads: int, hidden: int, kv_heads: int | None = None) -> list[int]:
    """Tensor-parallel widths tried: powers of two inside one node dividing the heads, the KV
    heads, the hidden size and the ``n`` workers."""
    kv = heads if kv_heads is None else kv_heads
    return [
        TP
        for TP in (1, 2, 4, 8, 16)
        if TP <= hw.gpus_per_node and not (hw.gpus_per_node % TP or heads % TP or kv % TP or hidden % TP or n % TP)
    ]


def chunk_values(blocks: int, PP: int, space: Space) -> list[int]:
    """Chunks per rank tried at PP stages: v >= 2 with whole layers in every chunk."""
    vs = range(2, blocks // PP + 1) if space.v is None else space.v
    return [v for v in vs if v >= 2 and not blocks % (PP * v)]


def candidates(
    n: int, B: int, hw: Hardware, shape: Shape, schedules: Sequence[Searched], space: Space = Space()
) -> list[Candidate]:
    """Every candidate of ``n`` workers and a global batch of ``B`` microbatches (module doc)."""
    n, B = check_int("n_workers", n), check_int("pipeline.global_batch", B)
    sync = [s for s in schedules if s.synchronous]
    single = [s for s in sync if not s.chunked][:1]  # PP = 1: one stage, every schedule the same
    out = []
    for TP in tp_values(hw, n, shape.heads, shape.hidden, shape.kv_heads):
        for CP in space.CP:
            if (n // TP) % CP or (CP > 1 and shape.seq % (2 * CP)):
                continue
            for PP in range(1, min(n // (TP * CP), shape.blocks) + 1):
                if (n // (TP * CP)) % PP or B % (n // (TP * CP * PP)):
                    continue
                DP = n // (TP * CP * PP)
                M = B // DP
                if hw.sites > 1 and DP % hw.sites and not (DP == 1 and PP % hw.sites == 0):
                    continue  # a layout the sites cannot hold (rpd.model.topology.place)
                layouts: list[tuple[str, int | None]] = []
                for s in sync if PP > 1 else single:
                    if not s.chunked:
                        layouts.append((s.name, None))
                    elif not M % PP:  # Megatron's M rule
                        layouts += [(s.name, v) for v in chunk_values(shape.blocks, PP, space)]
                if DP == CP == 1 and PP > 1:
                    layouts += [(s.name, None) for s in schedules if not s.synchronous]
                for name, v in layouts:
                    for rec in space.recompute:
                        for SP in space.SP if TP > 1 else (False,):
                            for zero in space.zero if DP * CP > 1 else (0,):
                                out.append(Candidate(TP, PP, DP, M, name, v, CP, SP, rec, zero))
    return out


def _maker(make: Maker) -> Maker:
    """``make`` remembering its last timelines (a unit-cost order per shape; ZeRO's two rows
    share their costed ones)."""
    return functools.lru_cache(maxsize=48)(make)


def _peak(models, hw, make, c: Candidate, kw) -> float:
    """The worst rank's peak bytes of ``c``, read off its order at unit costs (module doc)."""
    unit = make(c.schedule, c.PP, c.M, c.M, None, 0, c.v)
    model = models(c.variant)
    st = stages(model, partition(model, unit.n_stages, kw.get("how", "even"), hw), hw)
    mem = rank_memory(
        unit,
        st,
        kw.get("optimizer_states", 2),
        kw.get("precision", "bf16_mixed"),
        kw.get("grad_bytes"),
        c.zero,
        c.DP * c.CP,
    )
    return float(mem.peak.max())


def bounds(models, hw, make, cands: list[Candidate], cap: float, schedules, **kw) -> list[tuple[float, float]]:
    """(upper bound of tokens/s, static bytes of the fullest rank) of each candidate."""
    split = {
        s.name: bool((make(s.name, 2, 4, 4, None, 0, 2 if s.chunked else None).table.kind == BWD_I).any())
        for s in schedules
    }
    flush = {s.name: s.synchronous for s in schedules}
    sums: dict[Variant, Stages] = {}
    out = []
    for c in cands:
        if c.variant not in sums:
            sums[c.variant] = Stages(models(c.variant), hw, kw.get("how", "even"))
        fiw, params, out_bytes = sums[c.variant](c.PP * (c.v or 1))
        static = static_bytes(params, c.PP, kw, c.DP * c.CP if c.zero else 1)
        p2p = hw.p2p_seconds(out_bytes, c.workers <= hw.gpus_per_node) if c.PP > 1 else 0.0
        step = step_floor(fiw, c.PP, c.M, p2p, split=split[c.schedule], flush=flush[c.schedule])
        step += dp_floor(hw, params, c.TP, c.CP, c.DP, c.PP, c.zero, kw)
        out.append((c.DP * c.M * models(c.variant).tokens_per_microbatch / step, static))
    return out


def search(
    models: Callable[[Variant], Model],
    hw: Hardware,
    make: Maker,
    n: int,
    B: int,
    cap: float,
    schedules: Sequence[Searched],
    shape: Shape,
    space: Space = Space(),
    progress: Callable[[str], None] | None = None,
    **kw,
) -> Found:
    """The rows timed for ``n`` workers, best first, and the counts of those not timed
    (:class:`Found`; module docstring). ``kw``: :func:`rpd.model.plan.plan_one`'s other
    settings (optimizer_states, precision, grad_bytes, margin, how, overlap, ...)."""
    say = progress or (lambda message: None)
    make = _maker(make)
    synchronous = {s.name: s.synchronous for s in schedules}
    cands = candidates(n, B, hw, shape, schedules, space)
    limit = cap * (1 - kw.get("margin", 0.0))
    say(f"{len(cands)} candidates; bounding their tokens/s and static bytes")
    ranked = sorted(
        (
            (b, c)
            for (b, static), c in zip(bounds(models, hw, make, cands, cap, schedules, **kw), cands)
            if static <= limit
        ),
        key=lambda x: -x[0],
    )
    over = len(cands) - len(ranked)
    say(f"{over} over the cap on static bytes alone; timing the rest best bound first")
    rows: list[Row] = []
    best_sync = best_any = 0.0
    bounded = 0
    offload = kw.get("offload", False)
    for k, (bound, c) in enumerate(ranked):
        if bound <= best_sync:  # every later bound is at most this one
            bounded += len(ranked) - k
            break
        if bound <= best_any and not synchronous[c.schedule]:
            bounded += 1
            continue
        if not offload and _peak(models, hw, make, c, kw) > limit:
            over += 1
            continue
        r = c.row(models(c.variant), hw, make, **dict(kw, memory_cap=cap))
        rows.append(r)
        if r.error is None and r.fits:
            tokens_per_s = required("tokens_per_s", r.tokens_per_s)  # set on a row without an error
            best_any = max(best_any, tokens_per_s)
            if synchronous[c.schedule]:
                best_sync = max(best_sync, tokens_per_s)
        if len(rows) % 25 == 0:
            say(f"{len(rows)} timed, {over} over the cap; best {best_sync:,.0f} tokens/s")
    say(f"done: {len(rows)} timed, {over} over the cap, {bounded} bounded below the best")
    return Found(best_first(rows), len(cands), over, bounded)


def brute_force(
    models: Callable[[Variant], Model], hw: Hardware, make: Maker, cands: Sequence[Candidate], cap: float, **kw
) -> list[Row]:
    """Every candidate timed, best first (the straightforward loop :func:`search` is checked
    against, over :func:`candidates`' list)."""
    return best_first([c.row(models(c.variant), hw, make, **dict(kw, memory_cap=cap)) for c in cands])
