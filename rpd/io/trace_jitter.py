"""The per-op-type jitter of a measured trace (docs/science.md#stochastic-time): the coefficient of
variation of each op type's duration from step to step, as the CVs of a
:class:`~rpd.schedules.machinery.jitter.Jitter` for planning with stochastic time.

Jitter is what varies between repetitions of the same work on the same worker; a persistent
straggler (a stage that is slower in every step, Lin et al., OSDI '25) is not jitter and must not
inflate it. So the ops are grouped by the work they do and where: (dp rank, stage, chunk, position,
op type), the position being the microbatch of a compute op and ``seq_id`` (the op's rank among
its type's ops in the step on that worker) of any other, and each group spans the steps. Within a
group g of n_g ops with durations d_gi and mean m_g, the relative deviations r_gi = d_gi / m_g − 1
are pooled over the groups of one op type:

    CV = sqrt( Σ_g Σ_i r_gi² / Σ_g (n_g − 1) ),

the pooled within-group standard deviation of the durations relative to their group's mean (one
degree of freedom per group spent on its mean). Op types map to the jitter's fields: F from
``forward-compute``; B and IW (a split half; Megatron's backward is not split) from
``backward-compute``; p2p from ``forward-send`` and ``backward-send`` (a recv's duration includes
waiting for its sender, which is the schedule's time, not the link's); allreduce from the
data-parallel collectives (``grads-reduce-scatter``, ``params-all-gather``, the ``*-grads-all-reduce``),
whose durations include waiting for the slowest rank: an upper bound on the link's own spread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rpd.io.trace import COMPUTE
from rpd.schedules.machinery.jitter import Jitter

if TYPE_CHECKING:  # pandas is imported where a trace is read, not with rpd.io (tests/test_packaging.py)
    import pandas as pd

SOURCES = {
    "F": ("forward-compute",),
    "B": ("backward-compute",),
    "IW": ("backward-compute",),
    "p2p": ("forward-send", "backward-send"),
    "allreduce": (
        "grads-reduce-scatter",
        "params-all-gather",
        "separate-grads-all-reduce",
        "layernorm-grads-all-reduce",
        "embedding-grads-all-reduce",
    ),
}


def pooled_cv(df: pd.DataFrame, optypes) -> float | None:
    """The pooled within-group CV (module doc) of the ops of ``optypes`` in a checked trace
    (:func:`rpd.io.trace.read_trace`); None where no group has two ops (no step-to-step spread to
    measure). Ops of zero mean duration are left out (no relative spread)."""
    import pandas as pd

    ops = df[df["optype"].isin(list(optypes))]
    if ops.empty:
        return None
    position = np.where(ops["optype"].isin(COMPUTE), ops["mb_id"].to_numpy(), ops["seq_id"].to_numpy())
    keys = [ops["dp_rank"].to_numpy(), ops["stage"].to_numpy(), np.maximum(ops["mc"].to_numpy(), 0), position]
    frame = pd.DataFrame(
        {"k0": keys[0], "k1": keys[1], "k2": keys[2], "k3": keys[3], "op": ops["optype"].to_numpy()}
    ).assign(d=ops["duration"].to_numpy(np.float64))
    grouped = frame.groupby(["k0", "k1", "k2", "k3", "op"])["d"]
    mean = grouped.transform("mean").to_numpy()
    n = grouped.transform("size").to_numpy()
    keep = mean > 0
    dof = float(np.sum((1.0 - 1.0 / n[keep])))  # Σ_g (n_g − 1), spread over the group's members
    if dof <= 0:
        return None
    r = frame["d"].to_numpy()[keep] / mean[keep] - 1.0
    return float(np.sqrt(np.sum(r * r) / dof))


def jitter_from_trace(df: pd.DataFrame) -> tuple[Jitter, dict]:
    """(the :class:`Jitter` of a checked trace's per-op-type CVs, {field: CV or None}); a field
    whose op types the trace lacks (or never repeats) is 0 in the Jitter and None in the dict."""
    cvs = {field: pooled_cv(df, types) for field, types in SOURCES.items()}
    return Jitter(**{k: (0.0 if v is None else v) for k, v in cvs.items()}), cvs
