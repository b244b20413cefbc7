"""A fixed number of workers: pipeline depth, data parallelism and replication chosen together
(docs/plan.md#a-fixed-number-of-workers-rpdmodelworkers).

Every configuration is PipeDream's: contiguous stages, stage g on r_g workers taking microbatches
round-robin (1F1B-RR, :mod:`rpd.schedules.family.pipedream_rr`), weights stashed, a replicated stage's
gradients all-reduced (ring, over the all-reduce bandwidth) on a channel of its own. In that
family the usual choices are points:

* **pure DP**: one stage on all n workers, ``replicas=(n,)``;
* **pure PP**: n stages of one worker (needs n <= the model's blocks);
* **even S × D**: the blocks split evenly into S stages, each replicated D = n / S times (D
  pipelines; in PipeDream's framework D pipelines are every stage replicated D times);
* **pipedream**: PipeDream's partitioner's own stages and replicas
  (:func:`rpd.model.partition.partition_model`), with at most n workers.

:func:`evaluate` times a configuration with the one timer under the stages' own costs
(:func:`rpd.model.stages.stage_costs`) for N and 2N microbatches; the time per microbatch is
(T(2N) − T(N)) / N, so tokens/s = tokens per microbatch / that. Bytes per device are
:func:`rpd.model.memory.rank_memory` of the timeline (weight stashing: the versions each
replica holds at once, counted on the timeline; about (W_{>=g} − 1) // r_g + 1 on stage g, W_{>=g}
the workers of stages g and after, more or fewer where replicas admit microbatches unevenly). ``allreduce_bytes``: what each worker sends per update
of its stage (ring, 2(r − 1)/r of its gradient bytes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from rpd.model.compute import layer_seconds
from rpd.model.hardware import Hardware
from rpd.model.layers import Model
from rpd.model.memory import precision_bytes, rank_memory
from rpd.model.partition import partition_model
from rpd.model.plan import Row
from rpd.model.search_bounds import ROUNDING, stage_params
from rpd.model.stages import partition, stage_costs, stages
from rpd.schedules.family.pipedream_rr import pipedream_rr, stashed_versions
from rpd.validation import check_int

# PipeDream's partitioner and its 1F1B-RR timeline are not run on more groups of TP workers:
# both grow as groups² (GPT-3 175B: 0.8 s on 64 groups, 3.8 s on 128, about a minute on 1024)
RR_GROUPS = 64


@dataclasses.dataclass(frozen=True)
class Config:
    """One configuration of n workers, timed and sized (times in seconds, bytes per device)."""

    name: str
    workers: int
    bounds: tuple
    replicas: tuple
    time_per_microbatch_s: float
    tokens_per_s: float
    peak_bytes: float  # the worst device
    weight_bytes: float  # weights + stashed versions, the worst device
    stash_versions: int  # most weight versions one device keeps of its stage
    fits: bool = False
    allreduce_bytes: float = 0.0  # per update of its stage, the worst device
    predicted_s: float | None = None  # PipeDream's partitioner's bottleneck (its own model)
    error: str | None = None

    @property
    def S(self) -> int:
        return len(self.replicas)


def _N(replicas, workers: int) -> int:
    lcm = int(np.lcm.reduce(np.asarray(replicas, np.int64)))
    base = max(4 * workers, 8)
    return lcm * -(-base // lcm) if lcm <= base else base


def evaluate(
    model: Model,
    hw: Hardware,
    bounds,
    replicas,
    name: str = "",
    *,
    optimizer_states: int = 2,
    precision: str = "bf16_mixed",
    grad_bytes: int = 4,
    memory_cap: float | None = None,
    tick_s: float | None = None,
    predicted_s: float | None = None,
    depth="cover",
) -> Config:
    """The :class:`Config` of ``bounds`` (layer ranges) on ``replicas`` workers each (module doc);
    ``depth``: the warm-up rule (:func:`rpd.schedules.family.pipedream_rr.warmup`; "cover" by default, so
    a replicated stage is not starved by PipeDream's runtime default)."""
    replicas = tuple(int(r) for r in replicas)
    n = int(sum(replicas))
    st = stages(model, bounds, hw)
    costs, tick = stage_costs(st, hw, tick_s, replicas=2, grad_bytes=grad_bytes)  # allreduce per value
    N = _N(replicas, n)
    values = st.params.astype(np.int64)
    one = pipedream_rr(len(replicas), N, replicas, costs, values=values, depth=depth)
    two = pipedream_rr(len(replicas), 2 * N, replicas, costs, values=values, depth=depth)
    per_mb = (two.T - one.T) / N * tick
    mem = rank_memory(two, st, optimizer_states, precision, grad_bytes)
    cap = float(hw.memory_bytes if memory_cap is None else memory_cap)
    rank_stage = np.repeat(np.arange(len(replicas)), replicas)
    ar = [hw.ring_bytes(float(st.params[g]) * grad_bytes, replicas[g]) for g in rank_stage]
    return Config(
        name=name,
        workers=n,
        bounds=tuple(tuple(b) for b in bounds),
        replicas=replicas,
        time_per_microbatch_s=per_mb,
        tokens_per_s=model.tokens_per_microbatch / per_mb,
        peak_bytes=float(mem.peak.max()),
        weight_bytes=float((mem.weights + mem.stash).max()),
        stash_versions=int(stashed_versions(two).max()),
        fits=bool(mem.peak.max() <= cap),
        allreduce_bytes=float(max(ar)),
        predicted_s=predicted_s,
    )


def even_config(model: Model, hw: Hardware, n: int, S: int, name: str | None = None, how: str = "even", **kw) -> Config:
    """``S`` stages cut by rule ``how`` (:func:`rpd.model.stages.partition`: even, layers, time,
    memory, pipedream), each on n / S workers (D = n / S pipelines); S = 1 is pure DP."""
    if n % S:
        raise ValueError(f"n_workers={n} is not a multiple of S={S}")
    bounds = ((0, len(model.layers)),) if S == 1 else partition(model, S, how, hw)
    label = name or ("pure DP" if S == 1 else ("pure PP" if S == n else f"{how} S={S} x D={n // S}"))
    return evaluate(model, hw, bounds, (n // S,) * S, label, **kw)


def pipedream_config(model: Model, hw: Hardware, n: int, grad_bytes: int = 4, **kw) -> Config:
    """PipeDream's partitioner's configuration for at most ``n`` workers (its stages are layer
    ranges (first, last, replicas))."""
    part = partition_model(model, hw, n, grad_bytes=grad_bytes)
    bounds = tuple((a, b + 1) for a, b, _ in part.stages)
    reps = tuple(r for _, _, r in part.stages)
    return evaluate(model, hw, bounds, reps, "pipedream", grad_bytes=grad_bytes, predicted_s=part.bottleneck, **kw)


def configurations(model: Model, hw: Hardware, n_workers: int, how: str = "even", **kw) -> list[Config]:
    """Every S × D split of ``n_workers`` (S dividing n, S <= the model's blocks; S = 1 pure DP,
    S = n pure PP; stages cut by rule ``how``) and PipeDream's partitioner's configuration;
    sorted: those that fit by tokens/s (fastest first), then the rest."""
    n = check_int("n_workers", n_workers)
    blocks = sum(1 for x in model.layers if x.kind == "block")
    out = []
    for S in range(1, n + 1):
        if n % S == 0 and S <= blocks:
            out.append(even_config(model, hw, n, S, how=how, **kw))
    out.append(pipedream_config(model, hw, n, **kw))
    return sorted(out, key=lambda c: (not c.fits, -(c.tokens_per_s or 0.0)))


def format_configs(configs: list[Config]) -> str:
    """A fixed-width table of :func:`configurations`."""
    head = f"{'configuration':<22} {'workers':>7} {'S':>3}  {'replicas':<24} {'ms/mb':>7} {'tokens/s':>10} "
    head += f"{'peak GiB':>8} {'versions':>8} {'AR MiB':>7} fits"
    lines = [head, "-" * len(head)]
    for c in configs:
        reps = ",".join(map(str, c.replicas))
        reps = reps if len(reps) <= 24 else reps[:21] + "..."
        lines.append(
            f"{c.name:<22} {c.workers:>7} {c.S:>3}  {reps:<24} {c.time_per_microbatch_s * 1e3:>7.2f} "
            f"{c.tokens_per_s:>10,.0f} {c.peak_bytes / 2**30:>8.1f} {c.stash_versions:>8} "
            f"{c.allreduce_bytes / 2**20:>7.0f} {'yes' if c.fits else 'no'}"
        )
    return "\n".join(lines)


def replicated(
    models: Callable[[int], Model],
    hw: Hardware,
    n: int,
    cap: float,
    TPs: list[int],
    best: float = 0.0,
    straight: bool = False,
    **kw,
) -> tuple[list[Row], int, list[int]]:
    """PipeDream's partitioner's stages and replicas (1F1B-RR: asynchronous, weights stashed, a
    replicated stage's gradients all-reduced; :func:`pipedream_config`) on the n / TP groups of
    TP workers, for each TP of ``TPs`` (``models(TP)``), as plan rows (per microbatch: the stream
    has no step; ``replicas`` the workers of each stage): (rows, how many were dropped untimed,
    the TPs whose groups exceed :data:`RR_GROUPS`).

    Not timed: a partition whose fullest rank's weights (one version), gradients and optimizer
    state exceed the cap; one whose bound of
    tokens/s (every stage busy on its F + I + W over its replicas) is at most ``best``; and,
    with ``straight`` (the search times PipeDream on n / TP unreplicated stages itself), a
    partition with every replica 1 on all n / TP groups: that configuration, left to it."""
    rows, dropped, skipped = [], 0, []
    limit = cap * (1 - kw.get("margin", 0.0))
    w, master, state_value = precision_bytes(kw.get("precision", "bf16_mixed"))
    gb = kw.get("grad_bytes") or 4
    for TP in TPs:
        if n // TP > RR_GROUPS:
            skipped.append(TP)
            continue
        model = models(TP)
        part = partition_model(model, hw, n // TP, grad_bytes=gb)
        reps = part.replicas
        if straight and set(reps) == {1} and len(reps) * TP == n:
            continue
        bounds = part.bounds
        p = stage_params(model, bounds).astype(float)
        state = gb + master + state_value * kw.get("optimizer_states", 2)
        static = p * (w + state)
        secs = np.add.reduceat(layer_seconds(model, hw).sum(axis=1), [a for a, _ in bounds])
        bound = model.tokens_per_microbatch / (ROUNDING * float((secs / np.asarray(reps)).max()))
        if static.max() > limit or bound <= best:
            dropped += 1
            continue
        c = evaluate(
            model,
            hw,
            bounds,
            reps,
            "pipedream",
            grad_bytes=gb,
            predicted_s=part.bottleneck,
            optimizer_states=kw.get("optimizer_states", 2),
            precision=kw.get("precision", "bf16_mixed"),
            memory_cap=limit,
        )
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
    return rows, dropped, skipped
