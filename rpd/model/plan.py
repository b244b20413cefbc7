"""The plan (docs/plan.md#the-plan-command): every schedule timed and sized for one model on one device.

:func:`plan` takes plain values and a schedule maker, ``make(name, S, N, M, costs, values) ->
Timeline`` (the entry point passes the registry's; this layer imports none), and for each
schedule and M:

1. builds the schedule at unit costs once to learn its global stages (S, or S·v chunks) and
   partitions the model into that many contiguous stages (:mod:`rpd.model.stages`);
2. times it under the stages' own costs (unequal end stages included) for one and for two
   minibatches of M microbatches; the step is the difference, T(2M) − T(M): a flush and its
   barrier for the synchronous schedules, the steady state for the asynchronous ones;
3. reports, per step: bubble as f_total = idle / (step·S) and r_ideal = idle / busy (both
   from the step's busy ticks), tokens/s = M·tokens / step, MFU = M·model FLOPs / (step · S ·
   peak FLOP/s) (recomputation is not model FLOPs), bytes per rank (:mod:`rpd.model.memory`,
   the peak over the two-minibatch run) and fits = every rank's peak <= ``memory_cap``, p2p
   bytes each rank sends (an activation forward, its gradient back, for every dependency
   that crosses ranks), all-reduce bytes each rank sends (ring, 2(D−1)/D: a tied embedding's
   gradient between the end ranks, Chimera's two replicas per stage, LocalSGD's R replicas once
   per round of R·H microbatches), the largest delay of a gradient in updates of its block, and
   the most weight versions.

With ``D`` > 1 data-parallel pipelines (each of S ranks, the same partition) a step takes D·M
microbatches: after its last backward of the step each rank all-reduces its gradients with its D
− 1 peers (ring, latency + 2(D−1)/D · gradient bytes / all-reduce bandwidth). Not overlapped
(default): every rank waits for the flush, so the step grows by the slowest rank's all-reduce;
``overlap_allreduce``: a rank starts as soon as its own backwards are done, during the drain, and
the step grows by max(0, max_r(last backward_r + all-reduce_r) − flush). With ``hardware.sites``
> 1 (:mod:`rpd.model.topology`) the DP rings that span the sites run at the slower of their
in-site ring and the site link; one pipeline split over the sites (D = 1) keeps its p2p timed
in-site by the timer (its latency is one number for every boundary) and its step is at least
what its cut carries over the site link, M activations one way and M gradients the other:
step >= M · TP · CP · out_cut / (site_bandwidth / 8) (+ 2 · site_latency for a flush, whose critical
path crosses the cut both ways). ``site_bytes_per_step``: what each site sends over its link per
step. ``dp_allreduce_s`` is
what the step grew by (counted as idle in the bubbles); tokens/s = D·M·tokens / step, MFU per
device is unchanged in form (D cancels); bytes per rank do not change (no sharding). The
asynchronous schedules (no flush: PipeDream, PipeMare, 2BW, LocalSGD) have no point where D
pipelines' gradients meet in this model and are refused for D > 1.

Tensor parallelism is in the model (its layers are per rank, :mod:`rpd.model.tensor`); the plan
places TP × D × S ranks (:mod:`rpd.model.topology`): p2p over NVLink when the whole job sits in
one node, the DP collectives over the ports of the DP group's members in each node. ``zero`` 1
(the distributed optimizer): the gradients reduce-scattered and the 16-bit weights all-gathered
in place of the all-reduce (the same ring bytes for 16-bit gradients, 6 instead of 8 per value
for fp32 ones), master weights and optimizer state sharded over D (:mod:`rpd.model.memory`).
``overlap_allreduce="backward"``: Megatron's overlapped gradient reduction, which starts with a
rank's last backward rather than after it. ``v``: the interleaved schedule's chunks per rank
(default the registry's). ``margin``: a row fits when its worst rank's peak is at most
(1 − margin) × the cap.

A schedule that refuses (M) (DualPipeV needs M >= 2S, Chimera an even S, ...) gets a row with
``error`` set and ``fits`` false.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from rpd.model.hardware import Hardware
from rpd.model.kernels import optimizer_bytes
from rpd.model.layers import Model
from rpd.model.memory import held, precision_bytes, rank_memory
from rpd.model.overlap import Overlap, dp_seconds
from rpd.model.stages import host_link, partition, stage_costs, stages
from rpd.model.topology import place
from rpd.schedules.machinery import memory as sched_memory
from rpd.schedules.machinery.ir import BWD, BWD_I, FWD
from rpd.schedules.machinery.jitter import Stochastic
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_int, check_real, required

Maker = Callable[..., Timeline]  # (name, S, N, M, costs, values, chunks) -> Timeline


@dataclasses.dataclass(frozen=True)
class Row:
    """One (schedule, M). Per-rank quantities are lists over ranks."""

    schedule: str
    S: int
    M: int
    D: int = 1
    TP: int = 1
    SP: bool = False
    v: int | None = None
    zero: int = 0
    recompute: str = "none"
    offload: bool = False
    CP: int = 1
    synchronous: bool | None = None
    step_time_s: float | None = None
    bubble_total: float | None = None
    bubble_ideal: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    peak_bytes: list | None = None
    peak_activation_bytes: list | None = None
    static_bytes: list | None = None
    fits: bool = False
    p2p_bytes_per_step: list | None = None
    allreduce_bytes_per_step: list | None = None
    max_delay: int | None = None
    weight_versions: int | None = None
    tick_s: float | None = None
    dp_allreduce_s: float = 0.0
    memory: dict | None = None  # RankMemory.breakdown()
    replicas: tuple | None = None  # 1F1B-RR: workers of each stage (PipeDream's partitioner)
    site_bytes_per_step: float = 0.0  # bytes each site sends over its site link per step (hardware.sites)
    error: str | None = None


def max_delay(tl: Timeline) -> int:
    """Most updates of a block between the weights a microbatch's forward read and the update
    its gradient joins: 0 for the synchronous schedules and LocalSGD (within a replica), 1 for
    2BW (W_{k+1} = W_k − γ∇f(W_{k−1})), m − (updates landed before F(m, g)) for PipeDream and
    PipeMare, whose every B updates its block."""
    if tl.synchronous or tl.averaged:
        return 0
    if tl.versions == 2 and not tl.stash:  # double-buffered weights (2BW)
        return 1
    b = np.sort(tl.b_time, axis=0)
    landed = np.stack([np.searchsorted(b[:, g], tl.f_time[:, g], side="left") for g in range(tl.n_stages)], 1)
    return int((np.arange(tl.N)[:, None] - landed).max())


def p2p_bytes(tl: Timeline, out: np.ndarray) -> np.ndarray:
    """float [S]: bytes each rank sends: out[g] after F(m, g) when F(m, g+1) runs elsewhere, and
    the same back after the backward of (m, g+1) when (m, g)'s runs elsewhere."""
    t = tl.table
    f = t.kind == FWD
    rank_f = np.full((tl.n_stages, tl.N), -1)
    rank_f[t.stage[f], t.mb[f]] = t.rank[f]
    sent = np.zeros(tl.S)
    g, m, r = t.stage[f], t.mb[f], t.rank[f]
    cross = (g < tl.n_stages - 1) & (rank_f[np.minimum(g + 1, tl.n_stages - 1), m] != r)
    np.add.at(sent, r[cross], out[g[cross]])
    b = np.isin(t.kind, (BWD, BWD_I))
    g, m, r = t.stage[b], t.mb[b], t.rank[b]
    cross = (g > 0) & (rank_f[np.maximum(g - 1, 0), m] != r)
    np.add.at(sent, r[cross], out[np.maximum(g - 1, 0)[cross]])
    return sent / tl.pieces  # a piece of a microbatch sends 1/pieces of its values


def replicas(tl: Timeline) -> int:
    """Copies of each stage whose gradients / weights are averaged: Chimera and GEMS 2 (two
    replicas in opposite directions), LocalSGD R."""
    return tl.copies


def _allreduce_bytes(tl: Timeline, st, p: np.ndarray, hw: Hardware, grad_bytes: int, M: int) -> np.ndarray:
    sent = np.zeros(tl.S)
    on = held(tl)
    for holder, owner, values in st.tied:  # the tied matrix's gradient, summed between its two ranks
        a, b = on[:, holder], on[:, owner]
        two = a ^ b
        sent[two] += hw.ring_bytes(values * grad_bytes, 2)
    D = replicas(tl)
    if D > 1:
        per = p.sum(axis=1) * grad_bytes
        rounds = M / (required("R", tl.R) * required("H", tl.H)) if tl.averaged else 1.0
        sent += rounds * hw.ring_bytes(1.0, D) * per
    return sent


def staged(
    model: Model,
    hw: Hardware,
    unit: Timeline,
    how: str = "even",
    tick_s: float | None = None,
    grad_bytes: int = 4,
    p2p_intra: bool = False,
):
    """The model cut into ``unit``'s global stages (S, or S·v chunks): (stages, their cost model,
    seconds per tick, the largest stage's parameter count), for timing ``unit``'s schedule."""
    st = stages(model, partition(model, unit.n_stages, how, hw), hw)
    costs, tick = stage_costs(st, hw, tick_s, replicas=replicas(unit), grad_bytes=grad_bytes, p2p_intra=p2p_intra)
    return st, costs, tick, int(st.params.max())


def plan_one(
    model: Model,
    hw: Hardware,
    name: str,
    make: Maker,
    S: int,
    M: int,
    *,
    optimizer_states: int = 2,
    precision: str = "bf16_mixed",
    memory_cap: float | None = None,
    how: str = "even",
    tick_s: float | None = None,
    grad_bytes: int | None = None,
    D: int = 1,
    overlap_allreduce: bool | str = False,
    TP: int = 1,
    SP: bool = False,
    v: int | None = None,
    zero: int = 0,
    recompute: str = "none",
    margin: float = 0.0,
    offload: bool = False,
    CP: int = 1,
    overlap: Overlap | None = None,
    stochastic: Stochastic | None = None,
) -> Row:
    """The :class:`Row` of schedule ``name`` at S ranks, M microbatches per step and pipeline,
    D pipelines; ``model`` is per TP × CP rank (built with ``TP``, ``SP``, ``CP``,
    ``recompute``). ``overlap`` (:class:`~rpd.model.overlap.Overlap`) names Megatron's overlaps
    and takes the place of ``overlap_allreduce`` (its ``tp_comm`` is the model's, ``Parallel``).
    ``stochastic`` (:class:`~rpd.schedules.machinery.jitter.Stochastic`): per-op jitter and
    persistent stragglers laid over the stage costs (docs/plan.md#stochastic-time); the step is
    then one seeded draw of the second step."""
    label: dict[str, Any] = dict(
        schedule=name, S=S, M=M, D=D, TP=TP, SP=SP, v=v, zero=zero, recompute=recompute, offload=offload, CP=CP
    )
    param_gather = None
    if overlap is not None:
        overlap_allreduce, param_gather = ("backward" if overlap.grad_reduce else False), overlap.param_gather
    try:
        unit = make(name, S, M, M, None, 0, v)
        where = place(hw, TP, D, S, CP)
    except (ValueError, TypeError) as exc:
        return Row(**label, error=f"{type(exc).__name__}: {exc}")
    label["synchronous"] = bool(unit.synchronous)
    label["v"] = int(unit.v)  # chunks per rank the schedule ran with (the override, or its default)
    if D * CP > 1 and not unit.synchronous:
        return Row(**label, error=f"ValueError: {'D' if D > 1 else 'CP'} > 1 needs a flush (a synchronous schedule)")
    gb = 4 if grad_bytes is None else grad_bytes
    st, costs, tick, values = staged(model, hw, unit, how, tick_s, gb, where.p2p_intra)
    if stochastic is not None:
        costs = dataclasses.replace(costs, **stochastic.fields())
    if overlap is not None and not overlap.p2p and S > 1:  # blocking sends hold the sender (rpd.model.overlap)
        G = st.G
        costs = dataclasses.replace(
            costs,
            F=tuple(f + (costs.p2p if g < G - 1 else 0) for g, f in enumerate(costs.F)),
            I=tuple(i + (costs.p2p if g > 0 else 0) for g, i in enumerate(costs.I)),
            B=None,
        )
    if offload:  # activations to host memory and back over each rank's host link
        costs = dataclasses.replace(costs, host=host_link(st, hw, tick))
    one, two = make(name, S, M, M, costs, values, v), make(name, S, 2 * M, M, costs, values, v)
    busy = float(two.busy().sum() - one.busy().sum())
    DC = D * CP  # gradients reduced, and ZeRO's shards spread, over the DP x CP ranks (Megatron)
    mem = rank_memory(two, st, optimizer_states, precision, grad_bytes, zero, DC)
    gather = mem.weights if zero else None
    dp_s = 0.0
    if DC > 1:
        dp_s = dp_seconds(
            one,
            mem.grads,
            hw,
            DC,
            tick,
            overlap_allreduce,
            where.dp_per_node,
            gather,
            param_gather,
            st.params,
            where.dp_site_rings,
        )
    opt_s = 0.0  # the optimizer step after the flush, every rank at HBM speed (rpd.model.kernels)
    if hw.gemm_efficiency is not None:
        values = float(mem.weights.max()) / precision_bytes(precision)[0] / (DC if zero else 1)  # its shard
        moved = values * optimizer_bytes(precision_bytes(precision), gb, optimizer_states)
        opt_s = moved / required("hardware.hbm_bandwidth", hw.hbm_bandwidth)
    step = two.T - one.T + (dp_s + opt_s) / tick  # ticks, the all-reduce's and the update's shares fractional
    site = 0.0
    if where.p2p_site_share:  # one pipeline over the sites: its cuts between sites on the site links
        per = S // hw.sites  # stages per site; the cut after stage k·per − 1 (k = 1 .. sites − 1)
        cuts = [st.out[k * per * (st.G // S) - 1] for k in range(1, hw.sites)]
        # each way, from every TP x CP rank of the cut: M activations on, M gradients back
        site = where.p2p_site_share * M * float(max(cuts))
        link = hw.site_seconds(site, 0) + (2 * hw.site_latency if unit.synchronous else 0.0)
        step = max(step, link / tick)
    step_s = step * tick
    cap = float(hw.memory_bytes if memory_cap is None else memory_cap) * (1.0 - margin)
    p = _rank_values(two, st)
    dp_bytes = mem.grads if gather is None else (mem.grads + gather) / 2  # RS + AG: half a ring each
    ar = _allreduce_bytes(two, st, p, hw, gb, M) + np.array([hw.ring_bytes(b, DC) for b in dp_bytes])
    if where.dp_site_rings:  # each of a pipeline's TP·S ranks' rings crosses each site link once
        site = TP * float(sum(hw.ring_bytes(b, DC) for b in dp_bytes))
    return Row(
        **label,
        step_time_s=step_s,
        bubble_total=1 - busy / (step * S),
        bubble_ideal=(step * S - busy) / busy,
        tokens_per_s=D * M * model.tokens_per_microbatch / step_s,
        # a profile without flops_fwd has no FLOPs to count: MFU unknown (n/a), not 0
        mfu=M * model.model_flops / (step_s * S * hw.peak_flops) if model.model_flops > 0 else None,
        peak_bytes=mem.peak.tolist(),
        peak_activation_bytes=mem.activations.tolist(),
        static_bytes=mem.static.tolist(),
        fits=bool(mem.peak.max() <= cap),
        p2p_bytes_per_step=p2p_bytes(one, st.out.astype(float)).tolist(),
        allreduce_bytes_per_step=ar.tolist(),
        max_delay=max_delay(two),
        weight_versions=int(sched_memory.weight_versions(two).max()),
        tick_s=tick,
        dp_allreduce_s=dp_s,
        memory=mem.breakdown(),
        site_bytes_per_step=site,
    )


def _rank_values(tl: Timeline, st) -> np.ndarray:
    on = held(tl)
    return on * st.params[None, :].astype(float)


def plan(model: Model, hw: Hardware, names: Iterable[str], make: Maker, S: int, Ms, **kw) -> list[Row]:
    """Rows of every schedule in ``names`` and every M of ``Ms`` (an int or a list), sorted: those
    that fit by tokens/s (fastest first), then those that do not, then the refused."""
    S = check_int("pipeline.S", S)
    check_int("pipeline.D", kw.get("D", 1))
    Ms = [Ms] if isinstance(Ms, int) else list(Ms)
    Ms = [check_int(f"pipeline.M[{i}]", m) for i, m in enumerate(Ms)]
    if kw.get("memory_cap") is not None:
        check_real("memory_cap", kw["memory_cap"])
    rows = [plan_one(model, hw, n, make, S, M, **kw) for M in Ms for n in names]
    return sorted(rows, key=lambda r: (r.error is not None, not r.fits, -(r.tokens_per_s or 0.0)))


def to_json(model: Model, hw: Hardware, rows: list[Row], settings: dict | None = None) -> dict:
    """The plan as JSON: ``{"model": {"params", "layers": [...]}, "hardware", "settings", "rows"}``."""
    return {
        "model": model.to_json(),
        "hardware": dataclasses.asdict(hw),
        "settings": dict(settings or {}),
        "rows": [dataclasses.asdict(r) for r in rows],
    }


def _gb(x) -> str:
    return f"{x / 2**30:.1f}"


def format_table(rows: list[Row]) -> str:
    """A fixed-width text table of the rows (bytes in GiB, the worst rank)."""
    head = (
        "schedule",
        "D",
        "M",
        "step ms",
        "DP ms",
        "f_total",
        "r_ideal",
        "tokens/s",
        "MFU",
        "peak GiB",
        "act GiB",
        "fits",
        "p2p MiB",
        "AR MiB",
        "delay",
        "versions",
    )
    lines: list[tuple[str, ...]] = []
    for r in rows:
        if r.error is not None:
            lines.append((r.schedule, str(r.D), str(r.M), "refused: " + r.error.split(": ", 1)[-1]))
            continue
        # a row without an error has every number
        peak, act = required("peak_bytes", r.peak_bytes), required("peak_activation_bytes", r.peak_activation_bytes)
        p2p, ar = (
            required("p2p_bytes_per_step", r.p2p_bytes_per_step),
            required("allreduce_bytes_per_step", r.allreduce_bytes_per_step),
        )
        lines.append(
            (
                r.schedule,
                str(r.D),
                str(r.M),
                f"{required('step_time_s', r.step_time_s) * 1e3:.1f}",
                f"{r.dp_allreduce_s * 1e3:.1f}",
                f"{r.bubble_total:.3f}",
                f"{r.bubble_ideal:.3f}",
                f"{r.tokens_per_s:,.0f}",
                "n/a" if r.mfu is None else f"{r.mfu:.3f}",
                _gb(max(peak)),
                _gb(max(act)),
                "yes" if r.fits else "no",
                f"{max(p2p) / 2**20:.0f}",
                f"{max(ar) / 2**20:.0f}",
                str(r.max_delay),
                str(r.weight_versions),
            )
        )
    widths = [
        max([len(head[i]), *(len(x[i]) for x in lines if len(x) == len(head) or i < 3)]) for i in range(len(head))
    ]
    fmt = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    out = [fmt(head), fmt(tuple("-" * w for w in widths))]
    for x in lines:
        out.append(
            fmt(x)
            if len(x) == len(head)
            else f"{x[0].ljust(widths[0])}  {x[1].rjust(widths[1])}  {x[2].rjust(widths[2])}  {x[3]}"
        )
    return "\n".join(out)
