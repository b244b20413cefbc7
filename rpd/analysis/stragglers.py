"""Stragglers in a measured trace: the replay, the ideal, the slowdown S and its attribution to
stages, dp ranks and op types (docs/replay.md#definitions).

Definitions (Lin et al., OSDI '25, Eq. 1-4; ``ByteDance-Seed/StragglerAnalysis``
``analyzer/wia.py``, ``analyzer/analysis_util.py``):

* replay T_replay(k): step k's program (:mod:`rpd.model.megatron_step`) with every op at its
  measured duration, launch delays removed (every op starts when what it waits for ends). A
  collective's or p2p op's measured time is its *transfer*, end - max over its rendezvous of
  start (over every peer of a batched p2p call: the wait for a late peer is the replay's to
  find, not the op's);
* ideal T_ideal(k): every op at the typical duration of its op type over every step, dp rank and
  stage: the mean duration for compute ops (forward, backward, gc, optimizer), the median
  transfer (median duration for a non-collective) for communication ops;
* S = mean_k T_replay(k) / mean_k T_ideal(k);
* S_G for a group G (a stage, a dp rank, an op type with the four p2p types as forward- and
  backward-pp-comm): mean_k T_G(k) / mean_k T_ideal(k), where T_G keeps G's measured durations
  and the rest ideal.

The input is the trace table of :func:`rpd.io.trace.read_trace` (columns ``step``,
``dp_rank``, ``stage``, ``optype``, ``seq_id``, ``mc``, ``mb_id``, ``start_ts``, ``end_ts``,
``duration``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from rpd.model.job_layout import JobLayout
from rpd.model.megatron_step import Step, build_step
from rpd.schedules.family.orders import interleaved_order, one_f_one_b_order
from rpd.schedules.machinery.ir import Order
from rpd.schedules.machinery.measured import evaluation_order, replay

if TYPE_CHECKING:  # pandas comes with the trace (rpd.io.trace), not with rpd.analysis
    import pandas as pd

MEAN_TYPES = ("forward-compute", "backward-compute", "gc", "optimizer")
PP_GROUP = {
    "forward-send": "forward-pp-comm",
    "forward-recv": "forward-pp-comm",
    "backward-send": "backward-pp-comm",
    "backward-recv": "backward-pp-comm",
}
SENDS = ("forward-send", "backward-send")


@dataclasses.dataclass(frozen=True)
class Durations:
    """Per half of a step's program: ``measured`` [h, K] (K steps; transfer or duration) and
    ``ideal`` [h] (seconds), ``steps`` [K], ``measured_step`` [K] (the trace's max end - min
    start per step)."""

    step: Step
    measured: np.ndarray
    ideal: np.ndarray
    steps: np.ndarray
    measured_step: np.ndarray
    latency: np.ndarray | None = None  # [2 pp] p2p latencies of a non-blocking program (p2p_latency)


@dataclasses.dataclass(frozen=True)
class Attribution:
    """Mean step times (s) and slowdowns: ``replay_s``, ``ideal_s``, ``measured_s``;
    ``slowdown`` = replay / ideal; ``by_stage``, ``by_dp_rank``, ``by_optype`` {group: S_G},
    sorted by S_G, largest first; ``by_worker`` [pp, dp]: S_w of each (stage, dp rank) worker
    (the paper's Eq. 4, its heatmap); per-step ``replay_steps``, ``ideal_steps``,
    ``measured_steps`` [K]."""

    measured_s: float
    replay_s: float
    ideal_s: float
    slowdown: float
    by_stage: dict[int, float]
    by_dp_rank: dict[int, float]
    by_optype: dict[str, float]
    by_worker: np.ndarray
    steps: np.ndarray
    measured_steps: np.ndarray
    replay_steps: np.ndarray
    ideal_steps: np.ndarray


def job_order(layout: JobLayout, df: pd.DataFrame) -> tuple[Order, int]:
    """The job's own schedule and its microbatches M: Megatron's 1F1B, or its interleaved
    1F1B with v = the trace's chunks per stage (``mc``), group = pp."""
    v = int(df["mc"].max()) + 1
    f = df[(df["optype"] == "forward-compute") & (df["step"] == df["step"].min())]
    M = int(len(f) // (layout.dp * layout.pp * v))
    if v > 1:
        return interleaved_order(layout.pp, M, v), M
    return one_f_one_b_order(layout.pp, M), M


def present_ops(df: pd.DataFrame, pp: int) -> dict[int, set[str]]:
    """The op types each stage's ops hold in the trace."""
    return {s: set(df.loc[df["stage"] == s, "optype"].unique()) for s in range(pp)}


def durations(df: pd.DataFrame, step: Step, M: int) -> Durations:
    """Measured and ideal values of every half of ``step`` from the trace ``df`` (module
    docstring's rules). Raises a one-line ValueError naming an op the program needs and the
    trace lacks."""
    t = df[["step", "dp_rank", "stage", "optype", "seq_id", "mc", "mb_id", "start_ts", "end_ts", "duration"]].copy()
    compute = t["optype"].isin(("forward-compute", "backward-compute"))
    t["seq"] = np.where(compute, t["mc"] * M + t["mb_id"], t["seq_id"])
    # a p2p op serves the j-th compute op of its direction on its worker (the artifact's
    # matching): the k-th op of its type in start order, less the extra records the profiler
    # left that were never launched (the artifact's "type 1 no-ops": sends ending before a step's
    # first compute, recvs starting after its last; dropped by count), and shifted by one where
    # the first forward recv is missing (the artifact's rule)
    p2p = t["optype"].isin(tuple(PP_GROUP))
    direction = np.where(t["optype"].str.startswith("forward"), "forward-compute", "backward-compute")
    n_comp = t[compute].groupby(["step", "dp_rank", "stage", "optype"]).size()
    counts = n_comp.to_dict()
    t["n_comp"] = [counts.get(k, np.nan) for k in zip(t["step"], t["dp_rank"], t["stage"], direction, strict=True)]
    t = t.sort_values(["step", "dp_rank", "stage", "optype", "start_ts", "seq_id"], kind="stable")
    p2p = t["optype"].isin(tuple(PP_GROUP))
    key = ["step", "dp_rank", "stage", "optype"]
    rank = t.groupby(key).cumcount()
    n_trace = t.groupby(key)["seq_id"].transform("size")
    extra = (n_trace - t["n_comp"]).clip(lower=0)
    send = t["optype"].isin(SENDS)
    shift = (~send & (n_trace == t["n_comp"] - 1)).astype(int)
    j = np.where(send, rank - extra, rank + shift)
    # a trace that records only the transfers that happen (no "type 2 no-ops" for the model's
    # first and last chunk): its k-th op serves the k-th compute op the program sends or recvs for
    needed: dict[tuple, list[int]] = {}
    for hd, hs, ho, hq in zip(step.half_dp, step.half_stage, step.half_optype, step.half_seq, strict=True):
        if ho in PP_GROUP:
            needed.setdefault((int(hd), int(hs), str(ho)), []).append(int(hq))
    wkey = list(zip(t["dp_rank"].tolist(), t["stage"].tolist(), t["optype"].tolist(), strict=True))
    n_need = np.array([len(needed.get(k, ())) for k in wkey])
    only = p2p.to_numpy() & (n_trace.to_numpy() == n_need) & (n_need < t["n_comp"].fillna(0).to_numpy())
    ranks = rank.to_numpy()
    j = np.where(only, [needed[k][r] if o else -1 for k, r, o in zip(wkey, ranks, only, strict=True)], j)
    t["seq"] = np.where(p2p, j, t["seq"])
    t = t[~p2p | ((t["seq"] >= 0) & (t["seq"] < t["n_comp"].fillna(0)))]
    steps = np.sort(df["step"].unique())
    wide = t.set_index(["dp_rank", "stage", "optype", "seq", "step"])[["start_ts", "end_ts", "duration"]]
    if wide.index.duplicated().any():
        dp, s, op, seq, k = wide.index[wide.index.duplicated()][0]
        raise ValueError(f"trace: step {k}, dp_rank {dp}, stage {s} has two '{op}' ops numbered {seq}")
    wide = wide.unstack("step")
    key = type(wide.index).from_arrays([step.half_dp, step.half_stage, step.half_optype, step.half_seq])
    wide = wide.reindex(key)
    start = wide["start_ts"].reindex(columns=steps).to_numpy()
    end = wide["end_ts"].reindex(columns=steps).to_numpy()
    dur = wide["duration"].reindex(columns=steps).to_numpy()
    missing = np.isnan(dur)
    if missing.any():
        h, k = np.argwhere(missing)[0]
        raise ValueError(
            f"trace: step {steps[k]} lacks '{step.half_optype[h]}' number {step.half_seq[h]} on "
            f"dp_rank {step.half_dp[h]}, stage {step.half_stage[h]} (the {len(steps)}-step schedule needs it)"
        )
    pair = step.half_pair
    latest = np.full((max(int(pair.max()) + 1, 1), len(steps)), -np.inf)
    np.maximum.at(latest, pair[pair >= 0], start[pair >= 0])
    # a batched p2p call ends after the latest start among the peers of all its sends and recvs:
    # its halves' transfer is measured from there
    sync = pair >= 0
    slot_latest = np.full((step.program.n, len(steps)), -np.inf)
    np.maximum.at(slot_latest, step.half_slot[sync], latest[pair[sync]])
    transfer = np.maximum(end - slot_latest[step.half_slot], 0.0)
    measured = np.where((pair >= 0)[:, None], transfer, dur)
    ideal = np.empty(len(pair))
    for op in np.unique(step.half_optype):
        sel = step.half_optype == op
        if op in MEAN_TYPES:  # the mean over every op of the type in the trace
            ideal[sel] = df.loc[df["optype"] == op, "duration"].mean()
        else:
            ideal[sel] = np.median(measured[sel])
    measured = measured * step.half_scale[:, None]
    ideal = ideal * step.half_scale
    g = df.groupby("step")
    measured_step = (g["end_ts"].max() - g["start_ts"].min()).reindex(steps).to_numpy()
    return Durations(step, measured, ideal, steps, measured_step)


def p2p_latency(step: Step, measured: np.ndarray, pp: int) -> np.ndarray:
    """Latency rows of a non-blocking program (``build_step(p2p="async")``): row s the median
    measured transfer of stage s's forward sends, row pp + s of its backward sends (0 where it
    has none), read off ``step``'s halves, which must hold the p2p ops."""
    lat = np.zeros(2 * pp)
    for i, op in enumerate(SENDS):
        for s in range(pp):
            sel = (step.half_optype == op) & (step.half_stage == s)
            if sel.any():
                lat[i * pp + s] = float(np.median(measured[sel]))
    return lat


def step_times(d: Durations, keep: np.ndarray, order=None) -> np.ndarray:
    """Step times [n_sims, K]: replay ``n_sims`` what-ifs at once, what-if i keeping the measured
    value of the halves where ``keep[i]`` [h] is True and the ideal elsewhere."""
    n_sims, K = len(keep), d.measured.shape[1]
    val = np.where(keep[:, :, None], d.measured[None], d.ideal[None, :, None])  # [sims, h, K]
    first = np.r_[0, np.nonzero(np.diff(d.step.half_slot))[0] + 1]
    slot = np.maximum.reduceat(val, first, axis=1)  # [sims, n, K]
    dur = slot.transpose(1, 0, 2).reshape(d.step.program.n, n_sims * K)
    lat = None if d.latency is None else np.broadcast_to(d.latency[:, None], (len(d.latency), n_sims * K))
    _, end = replay(d.step.program, dur, latency=lat, order=order)
    return end[d.step.optimizer].max(axis=0).reshape(n_sims, K)


def job_step(df: pd.DataFrame, layout: JobLayout, dp_sync: bool = True) -> tuple[Durations, list]:
    """The job's own step with the trace's durations and its evaluation order: Megatron's
    blocking p2p; if that program deadlocks (an interleaved exchange Megatron orders otherwise),
    non-blocking p2p at the median measured transfers (:func:`p2p_latency`). ``dp_sync=False``:
    without the dp collectives (LocalSGD's local steps)."""
    order, M = job_order(layout, df)
    present = present_ops(df, layout.pp)
    step = build_step(layout, order, M, present, p2p="megatron", dp_sync=dp_sync)
    d = durations(df, step, M)
    try:
        return d, evaluation_order(step.program)
    except ValueError:
        lat = p2p_latency(step, d.measured, layout.pp)
        step = build_step(layout, order, M, present, p2p="async", dp_sync=dp_sync)
        d = dataclasses.replace(durations(df, step, M), latency=lat)
        return d, evaluation_order(step.program)


def attribute(df: pd.DataFrame, layout: JobLayout) -> tuple[Attribution, Durations]:
    """Replay, ideal, S and S per stage, dp rank and op type for the trace ``df``."""
    d, order = job_step(df, layout)
    step = d.step
    groups = np.array([PP_GROUP.get(o, o) for o in step.half_optype], dtype=object)
    names: list[tuple[str, object]] = [("replay", None), ("ideal", None)]
    masks = [np.ones(len(groups), bool), np.zeros(len(groups), bool)]
    for s in range(layout.pp):
        names.append(("stage", s))
        masks.append(step.half_stage == s)
    for r in range(layout.dp):
        names.append(("dp_rank", r))
        masks.append(step.half_dp == r)
    for op in dict.fromkeys(groups.tolist()):
        names.append(("optype", op))
        masks.append(groups == op)
    for s in range(layout.pp):
        for r in range(layout.dp):
            names.append(("worker", (s, r)))
            masks.append((step.half_stage == s) & (step.half_dp == r))
    T = step_times(d, np.array(masks), order=order)
    mean = T.mean(axis=1)
    ideal = mean[1]
    by: dict[str, dict] = {"stage": {}, "dp_rank": {}, "optype": {}, "worker": {}}
    for (kind, g), m in zip(names[2:], mean[2:], strict=True):
        by[kind][g] = float(m / ideal)

    def ranked(x: dict) -> dict:
        return dict(sorted(x.items(), key=lambda kv: -kv[1]))

    result = Attribution(
        measured_s=float(d.measured_step.mean()),
        replay_s=float(mean[0]),
        ideal_s=float(ideal),
        slowdown=float(mean[0] / ideal),
        by_stage=ranked(by["stage"]),
        by_dp_rank=ranked(by["dp_rank"]),
        by_optype=ranked(by["optype"]),
        by_worker=np.array([[by["worker"][(s, r)] for r in range(layout.dp)] for s in range(layout.pp)]),
        steps=d.steps,
        measured_steps=d.measured_step,
        replay_steps=T[0],
        ideal_steps=T[1],
    )
    return result, d
