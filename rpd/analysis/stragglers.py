"""Stragglers in a measured trace: the replay, the ideal, the slowdown S and its attribution to
stages, dp ranks and op types (docs/replay.md#definitions).

Definitions (Lin et al., OSDI '25, Eq. 1-4; ``ByteDance-Seed/StragglerAnalysis``
``analyzer/wia.py``, ``analyzer/analysis_util.py``):

* replay T_replay(k): step k's program (:mod:`rpd.model.megatron_step`) with every op at its
  measured duration, launch delays removed (every op starts when what it waits for ends). A
  collective's or p2p op's measured time is its *transfer*, end - max over its rendezvous of
  start (the wait for a late peer is the replay's to find, not the op's);
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

import numpy as np
import pandas as pd

from rpd.model.job_layout import JobLayout
from rpd.model.megatron_step import Step, build_step
from rpd.schedules.family.orders import interleaved_order, one_f_one_b_order
from rpd.schedules.machinery.ir import Order
from rpd.schedules.machinery.measured import evaluation_order, replay

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
    # the program's count of each p2p type per worker; the trace may hold extra no-op sends at a
    # step's start and recvs at its end (the artifact's "type 1 no-ops"): drop them
    halves = pd.DataFrame({"dp_rank": step.half_dp, "stage": step.half_stage, "optype": step.half_optype})
    need = halves.groupby(["dp_rank", "stage", "optype"]).size().rename("n_prog")
    t = t.join(need, on=["dp_rank", "stage", "optype"])
    t["n_trace"] = t.groupby(["step", "dp_rank", "stage", "optype"])["seq_id"].transform("size")
    send = t["optype"].isin(SENDS)
    t["seq"] = np.where(send, t["seq"] - (t["n_trace"] - t["n_prog"]).clip(lower=0), t["seq"])
    t = t[t["n_prog"].notna() & (t["seq"] >= 0) & (t["seq"] < t["n_prog"].fillna(0))]
    steps = np.sort(df["step"].unique())
    wide = t.set_index(["dp_rank", "stage", "optype", "seq", "step"])[["start_ts", "end_ts", "duration"]]
    if wide.index.duplicated().any():
        dp, s, op, seq, k = wide.index[wide.index.duplicated()][0]
        raise ValueError(f"trace: step {k}, dp_rank {dp}, stage {s} has two '{op}' ops numbered {seq}")
    wide = wide.unstack("step")
    key = pd.MultiIndex.from_arrays([step.half_dp, step.half_stage, step.half_optype, step.half_seq])
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
    transfer = np.maximum(end - latest[np.maximum(pair, 0)], 0.0)
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


def step_times(d: Durations, keep: np.ndarray, order=None) -> np.ndarray:
    """Step times [n_sims, K]: replay ``n_sims`` what-ifs at once, what-if i keeping the measured
    value of the halves where ``keep[i]`` [h] is True and the ideal elsewhere."""
    n_sims, K = len(keep), d.measured.shape[1]
    val = np.where(keep[:, :, None], d.measured[None], d.ideal[None, :, None])  # [sims, h, K]
    first = np.r_[0, np.nonzero(np.diff(d.step.half_slot))[0] + 1]
    slot = np.maximum.reduceat(val, first, axis=1)  # [sims, n, K]
    dur = slot.transpose(1, 0, 2).reshape(d.step.program.n, n_sims * K)
    _, end = replay(d.step.program, dur, order=order)
    return end[d.step.optimizer].max(axis=0).reshape(n_sims, K)


def attribute(df: pd.DataFrame, layout: JobLayout) -> tuple[Attribution, Durations]:
    """Replay, ideal, S and S per stage, dp rank and op type for the trace ``df``."""
    order, M = job_order(layout, df)
    p2p = "megatron" if int(df["mc"].max()) == 0 else "async"
    step = build_step(layout, order, M, present_ops(df, layout.pp), p2p=p2p)
    d = durations(df, step, M)
    groups = pd.Series(step.half_optype).map(lambda o: PP_GROUP.get(o, o)).to_numpy()
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
    T = step_times(d, np.array(masks), order=evaluation_order(step.program))
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
