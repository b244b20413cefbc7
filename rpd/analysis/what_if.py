"""What another schedule would have done with a trace's measured durations
(docs/replay.md#what-if): every flush schedule of rpd's family the layout allows, the
asynchronous stream and LocalSGD, each with the measured durations and with the straggling group
set to ideal.

Rules (each stated where the row is made):

* flush schedules (``gpipe``, ``1f1b``, ``interleaved``, ``zb_h1``, ``zb_h2``): the schedule's
  rpd order (:mod:`rpd.schedules.family.orders`) in :func:`rpd.model.megatron_step.build_step`
  with asynchronous p2p (non-blocking sends: an op waits for its input's producer plus the
  median measured transfer of that stage's sends of its direction), each compute op at the
  trace's measured duration of the same (step, dp rank, stage, microbatch); the DP collectives,
  clip and optimizer as in the replay. Interleaved with v chunks (a trace of one chunk per
  stage): a chunk's op takes 1/v of the stage's op (the stage's layers split evenly; only where
  Megatron's constraints on pp, M and v hold). Zero bubble's split backward: I = W = B / 2 (a
  linear layer's input and weight gradients are one GEMM each, of the forward's FLOPs).
* ``1f1b (replay)``: the job's own schedule as replayed (:mod:`rpd.analysis.stragglers`).
* ``async stream``: 1F1B with no flush (PipeDream-2BW's stream; the DP all-reduce overlapped with
  the next step's compute): in steady state a step takes the busiest worker's compute,
  mean_k max_{d,s} (sum_j F + sum_j B + optimizer), a lower bound (the p2p waits are not in it).
* ``local_sgd (H)``: each dp rank's pipeline alone (the job's schedule, no DP collectives), and
  every H steps a parameter average costing the median measured reduce-scatter plus all-gather
  (the same bytes): sum over blocks of (max_d sum_{k in block} T_d(k) + sync) / K.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from rpd.analysis.stragglers import Attribution, durations, job_order, present_ops
from rpd.model.job_layout import JobLayout
from rpd.model.megatron_step import AG, RS, Step, build_step
from rpd.schedules.family import orders
from rpd.schedules.machinery.ir import Order
from rpd.schedules.machinery.measured import replay


@dataclasses.dataclass(frozen=True)
class WhatIf:
    """One row: ``schedule``, mean ``step_s`` with the measured durations and
    ``step_s_straggler_ideal`` with the straggling group (``straggler``) at its ideal."""

    schedule: str
    step_s: float
    step_s_straggler_ideal: float


def _orders(pp: int, M: int) -> list[tuple[str, Order, int]]:
    out: list[tuple[str, Order, int]] = [
        ("gpipe", orders.gpipe_order(pp, M), 1),
        ("1f1b", orders.one_f_one_b_order(pp, M), 1),
    ]
    try:
        orders.check_interleaved(pp, M, 2, pp)
        out.append(("interleaved (v=2)", orders.interleaved_order(pp, M, 2), 2))
    except ValueError:
        pass
    out += [("zb_h1", orders.zb_h1_order(pp, M), 1), ("zb_h2", orders.zb_h2_order(pp, M), 1)]
    return out


def _simulate(step: Step, measured: np.ndarray, ideal: np.ndarray, keep: np.ndarray, latency=None) -> np.ndarray:
    """Slot ends [n, 2K] for the measured values (the first K) and with ``keep`` False halves at
    ideal (the next K)."""
    K = measured.shape[1]
    val = np.concatenate([measured, np.where(keep[:, None], measured, ideal[:, None])], axis=1)
    first = np.r_[0, np.nonzero(np.diff(step.half_slot))[0] + 1]
    dur = np.maximum.reduceat(val, first, axis=0)
    lat = None if latency is None else np.broadcast_to(latency[:, None], (len(latency), 2 * K))
    return replay(step.program, dur, latency=lat)[1]


def straggler_mask(attr: Attribution, step: Step) -> tuple[str, np.ndarray]:
    """The group with the largest attributed slowdown (stage, dp rank or op type) and the mask
    [h] of the halves outside it (kept measured)."""
    best = max(
        [("stage", k, v) for k, v in attr.by_stage.items()]
        + [("dp_rank", k, v) for k, v in attr.by_dp_rank.items()]
        + [("optype", k, v) for k, v in attr.by_optype.items()],
        key=lambda r: r[2],
    )
    kind, key, _ = best
    if kind == "stage":
        inside = step.half_stage == key
    elif kind == "dp_rank":
        inside = step.half_dp == key
    else:
        pp = {"forward-pp-comm": "forward-", "backward-pp-comm": "backward-"}
        if key in pp:
            inside = np.array([o.startswith(pp[key]) and not o.endswith("compute") for o in step.half_optype])
        else:
            inside = step.half_optype == key
    return f"{kind} {key}", ~inside


def _latency(step: Step, measured: np.ndarray, pp: int) -> np.ndarray:
    lat = np.zeros(2 * pp)
    for i, op in enumerate(("forward-send", "backward-send")):
        for s in range(pp):
            sel = (step.half_optype == op) & (step.half_stage == s)
            if sel.any():
                lat[i * pp + s] = float(np.median(measured[sel]))
    return lat


def what_if(df: pd.DataFrame, layout: JobLayout, attr: Attribution, H: int = 8) -> tuple[str, list[WhatIf]]:
    """The what-if rows for the trace ``df`` (rules in the module docstring) and the name of the
    straggling group set to ideal in the second column."""
    job, M = job_order(layout, df)
    present = present_ops(df, layout.pp)
    own = build_step(layout, job, M, present, p2p="megatron" if int(df["mc"].max()) == 0 else "async")
    base = durations(df, own, M)
    name, keep = straggler_mask(attr, own)
    K = len(base.steps)
    lat = _latency(own, base.measured, layout.pp)
    rows = [WhatIf("1f1b (replay)" if int(df["mc"].max()) == 0 else "interleaved (replay)", attr.replay_s, 0.0)]
    end = _simulate(own, base.measured, base.ideal, keep)
    rows[0] = dataclasses.replace(rows[0], step_s_straggler_ideal=float(end[own.optimizer, K:].max(axis=0).mean()))
    if int(df["mc"].max()) == 0:
        for sched, order, v in _orders(layout.pp, M):
            step = build_step(layout, order, M, present, p2p="async")
            # a chunk's op is 1/v of the stage's op; a chunk's DP collective 1/v of the stage's
            is_compute = np.isin(step.half_optype, ("forward-compute", "backward-compute"))
            is_dp = np.isin(step.half_optype, (AG, RS))
            step = dataclasses.replace(
                step,
                half_seq=np.where(is_compute, step.half_seq % M, np.where(is_dp, 0, step.half_seq)),
                half_scale=np.where(is_compute | is_dp, step.half_scale / v, step.half_scale),
            )
            d = durations(df, step, M)
            _, k2 = straggler_mask(attr, step)
            end = _simulate(step, d.measured, d.ideal, k2, latency=lat)
            T = end[step.optimizer].max(axis=0)
            rows.append(WhatIf(sched, float(T[:K].mean()), float(T[K:].mean())))
    rows.append(_async_stream(own, base.measured, base.ideal, keep))
    rows.append(_local_sgd(df, layout, job, M, present, attr, H))
    return name, rows


def _async_stream(step: Step, measured: np.ndarray, ideal: np.ndarray, keep: np.ndarray) -> WhatIf:
    busy = np.isin(step.half_optype, ("forward-compute", "backward-compute", "optimizer"))
    worker = step.half_dp * (step.half_stage.max() + 1) + step.half_stage
    out = []
    for val in (measured, np.where(keep[:, None], measured, ideal[:, None])):
        per = np.zeros((worker.max() + 1, val.shape[1]))
        np.add.at(per, worker[busy], val[busy])
        out.append(float(per.max(axis=0).mean()))
    return WhatIf("async stream (1F1B, no flush)", out[0], out[1])


def _local_sgd(df, layout, job, M, present, attr: Attribution, H: int) -> WhatIf:
    step = build_step(layout, job, M, present, p2p="megatron" if int(df["mc"].max()) == 0 else "async", dp_sync=False)
    d = durations(df, step, M)
    _, keep = straggler_mask(attr, step)
    K = len(d.steps)
    end = _simulate(step, d.measured, d.ideal, keep)
    own = build_step(layout, job, M, present)
    full = durations(df, own, M)
    sync = 0.0
    for s in range(layout.pp):
        sel = (own.half_stage == s) & np.isin(own.half_optype, (AG, RS))
        per_op = [
            np.median(full.measured[sel & (own.half_optype == op)])
            for op in (AG, RS)
            if (sel & (own.half_optype == op)).any()
        ]
        sync = max(sync, float(sum(per_op)))
    out = []
    for part in (slice(0, K), slice(K, 2 * K)):
        T = np.stack(
            [end[step.optimizer[step.slot_dp[step.optimizer] == r]][:, part].max(axis=0) for r in range(layout.dp)]
        )
        total = sum(T[:, lo : lo + H].sum(axis=1).max() + sync for lo in range(0, K, H))
        out.append(float(total / K))
    return WhatIf(f"local_sgd (H={H})", out[0], out[1])
