"""A measured training trace in: Lin et al.'s per-op parquet traces and their meta files
(docs/replay.md#the-trace-format).

Format (``ByteDance-Seed/StragglerAnalysis``, ``readme.md`` and ``analyzer/metatypes.py``): one
row per op of one GPU, with ``dp_rank``, ``stage`` (pipeline rank), ``rank`` (global),
``step``, ``optype``, ``start_ts`` and ``duration`` (seconds), ``seq_id`` (the ops of one type
in a step on a worker, numbered by start), ``mc`` (model chunk within the stage), ``gmc``
(global chunk) and ``mb_id`` (microbatch, compute ops). The meta file (YAML) holds the layout:
``dp_size``, ``pp_size``, ``tp_size``, ``dsp_size``, ``vpp_size``, ``world_size``.

:func:`read_trace` checks the columns, the op types and that every step has ops on every
worker, each failure a one-line ValueError naming the column, the op type or the step, before
any analysis; :func:`measured_ops` keys each op by (step, dp rank, stage, chunk, microbatch,
op type) with its measured duration.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import yaml

from rpd.model.job_layout import JobLayout

COLUMNS = ("dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "gmc", "mb_id")

# The op types of ``analyzer/metatypes.py`` (OpType), in the order a step runs them.
COMPUTE = ("forward-compute", "backward-compute")
P2P = ("forward-send", "forward-recv", "backward-send", "backward-recv")
DP_COMM = ("params-all-gather", "grads-reduce-scatter", "separate-grads-all-reduce")
TAIL = (
    "gc",
    "layernorm-grads-all-reduce",
    "embedding-grads-all-reduce",
    "optimizer-clip-main-grad",
    "optimizer",
)
OPTYPES = COMPUTE + P2P + DP_COMM + TAIL

KEY = ["step", "dp_rank", "stage", "chunk", "microbatch", "optype"]


def read_meta(path: str | os.PathLike) -> JobLayout:
    """The job's layout from its meta YAML (``dp_size``, ``pp_size``, ``tp_size``, ``dsp_size``,
    ``vpp_size``, ``world_size``; sizes absent from the file are 1)."""
    with open(path) as f:
        meta = yaml.safe_load(f)
    if not isinstance(meta, dict):
        raise ValueError(f"meta: {path} is not a YAML mapping")
    for field in ("dp_size", "pp_size"):
        if field not in meta:
            raise ValueError(f"meta: missing field '{field}' in {path}")
    return JobLayout(
        dp=meta["dp_size"],
        pp=meta["pp_size"],
        tp=meta.get("tp_size", 1),
        dsp=meta.get("dsp_size", 1),
        vpp=meta.get("vpp_size", 1),
        world=meta.get("world_size"),
        name=str(meta.get("trial_name", "")),
    )


def check_trace(df: pd.DataFrame, layout: JobLayout) -> pd.DataFrame:
    """``df`` checked and typed: every column of :data:`COLUMNS` present, every op type known,
    ranks inside the layout, and every step with ops on every (dp rank, stage) worker. Raises a
    one-line ValueError naming the column, the op type or the step."""
    for col in COLUMNS:
        if col not in df.columns:
            raise ValueError(f"trace: missing column '{col}'")
    if len(df) == 0:
        raise ValueError("trace: no rows")
    df = df.loc[:, list(COLUMNS)].copy()
    df["optype"] = df["optype"].astype(str)
    unknown = sorted(set(df["optype"].unique()) - set(OPTYPES))
    if unknown:
        raise ValueError(f"trace: unknown op type '{unknown[0]}' (known: {', '.join(OPTYPES)})")
    for col in ("dp_rank", "stage", "step", "seq_id", "mc", "gmc", "mb_id"):
        df[col] = df[col].astype(np.int64)
    for col in ("start_ts", "duration"):
        df[col] = df[col].astype(np.float64)
        if not np.isfinite(df[col].to_numpy()).all():
            raise ValueError(f"trace: column '{col}' has a value that is not a finite number")
    if (df["duration"] < 0).any():
        raise ValueError("trace: column 'duration' has a negative value")
    for col, size in (("dp_rank", layout.dp), ("stage", layout.pp)):
        bad = df[(df[col] < 0) | (df[col] >= size)]
        if len(bad):
            raise ValueError(f"trace: column '{col}' has {int(bad[col].iloc[0])}, outside the meta's 0..{size - 1}")
    present = df.groupby(["step", "dp_rank", "stage"]).size()
    compute = df[df["optype"].isin(COMPUTE)].groupby(["step", "dp_rank", "stage"]).size()
    for step in sorted(df["step"].unique()):
        for d in range(layout.dp):
            for s in range(layout.pp):
                if compute.get((step, d, s), 0) == 0:
                    what = "no ops" if present.get((step, d, s), 0) == 0 else "no compute ops"
                    raise ValueError(f"trace: step {step} is empty on dp_rank {d}, stage {s} ({what})")
    return df


def read_trace(path: str | os.PathLike, layout: JobLayout) -> pd.DataFrame:
    """The trace at ``path`` (parquet), checked by :func:`check_trace`; times in seconds, one
    row per op, ``end_ts = start_ts + duration`` added."""
    try:
        df = pd.read_parquet(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise ValueError(f"trace: cannot read {path} as parquet ({str(exc).splitlines()[0]})") from exc
    df = check_trace(df, layout)
    df["end_ts"] = df["start_ts"] + df["duration"]
    return df


def measured_ops(df: pd.DataFrame) -> pd.DataFrame:
    """One row per op keyed by (step, dp_rank, stage, chunk, microbatch, optype), with its
    measured ``duration`` (seconds) and ``seq_id``. ``chunk`` is the trace's ``mc``
    (0 where it is -1, the ops of no chunk); ``microbatch`` is ``mb_id`` for compute ops and -1
    for the others (a p2p op's microbatch is the schedule's to say: docs/replay.md)."""
    out = pd.DataFrame(
        {
            "step": df["step"].to_numpy(),
            "dp_rank": df["dp_rank"].to_numpy(),
            "stage": df["stage"].to_numpy(),
            "chunk": np.maximum(df["mc"].to_numpy(), 0),
            "microbatch": np.where(df["optype"].isin(COMPUTE), df["mb_id"].to_numpy(), -1),
            "optype": df["optype"].to_numpy(),
            "seq_id": df["seq_id"].to_numpy(),
            "duration": df["duration"].to_numpy(),
        }
    )
    return out.sort_values(KEY + ["seq_id"], kind="stable").reset_index(drop=True)
