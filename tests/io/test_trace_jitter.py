"""rpd.io.trace_jitter: the pooled within-group CV of a trace's op types, by hand, and a persistent
straggler that leaves it at 0."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from rpd.cli import specs
from rpd.io import trace, trace_jitter
from rpd.model.job_layout import JobLayout

ST = Path(__file__).parent.parent / "data" / "trace_st"


def _trace(durations: dict) -> pd.DataFrame:
    """``durations[(stage, optype, mb)]`` = one duration per step; dp = 1."""
    rows = []
    for (stage, op, mb), ds in durations.items():
        for step, d in enumerate(ds):
            rows.append(
                dict(
                    dp_rank=0,
                    stage=stage,
                    rank=stage,
                    step=step,
                    optype=op,
                    start_ts=0.0,
                    duration=d,
                    seq_id=mb,
                    mc=0,
                    gmc=stage,
                    mb_id=mb if op.endswith("compute") else -1,
                )
            )
    df = pd.DataFrame(rows)
    return trace.check_trace(df, JobLayout(dp=1, pp=1 + max(s for s, _, _ in durations)))


def test_pooled_cv_by_hand():
    """F of microbatch 0 over three steps: 1, 2, 3 (mean 2, relative deviations -1/2, 0, 1/2);
    of microbatch 1: 4, 4, 4. Pooled: sqrt((1/4 + 0 + 1/4) / (2 + 2)) = sqrt(1/8)."""
    df = _trace(
        {
            (0, "forward-compute", 0): [1.0, 2.0, 3.0],
            (0, "forward-compute", 1): [4.0, 4.0, 4.0],
            (0, "backward-compute", 0): [2.0, 2.0, 2.0],
            (0, "forward-send", 0): [0.1, 0.3, 0.2],
        }
    )
    jit, cvs = trace_jitter.jitter_from_trace(df)
    assert cvs["F"] == pytest.approx(np.sqrt(1 / 8), rel=1e-12)
    assert cvs["B"] == 0.0 and cvs["IW"] == 0.0
    assert cvs["p2p"] == pytest.approx(np.sqrt((0.25 + 0.25) / 2), rel=1e-12)  # 0.1, 0.3, 0.2 about 0.2
    assert cvs["allreduce"] is None and jit.allreduce == 0.0
    assert jit.F == cvs["F"]


def test_a_persistent_straggler_is_not_jitter():
    """Stage 1 twice as slow in every step: the CV stays 0 (the groups are per worker)."""
    df = _trace(
        {
            (0, "forward-compute", 0): [1.0] * 4,
            (1, "forward-compute", 0): [2.0] * 4,
            (0, "backward-compute", 0): [2.0] * 4,
            (1, "backward-compute", 0): [4.0] * 4,
        }
    )
    _, cvs = trace_jitter.jitter_from_trace(df)
    assert cvs["F"] == 0.0 and cvs["B"] == 0.0


def test_st_forward_cv_against_grouped_variances():
    """On ST, the pooled CV of forward-compute equals sqrt(sum_g (n_g - 1) var_g / m_g^2 / sum_g (n_g - 1))
    with pandas' per-group sample variance (ddof 1) and mean, grouped by (dp rank, stage, chunk,
    microbatch): the same quantity computed a second way."""
    layout = trace.read_meta(ST / "meta-ST.yaml")
    df = trace.read_trace(ST / "trace-ST.parquet", layout)
    _, cvs = trace_jitter.jitter_from_trace(df)
    f = df[df.optype == "forward-compute"].groupby(["dp_rank", "stage", "mc", "mb_id"])["duration"]
    n, var, mean = f.size(), f.var(ddof=1), f.mean()
    want = np.sqrt(((n - 1) * var / mean**2).sum() / (n - 1).sum())
    assert cvs["F"] == pytest.approx(want, rel=1e-10)
    assert 0 < cvs["F"] < 0.1 and all(v is not None and np.isfinite(v) for v in cvs.values())


def test_the_plan_reads_its_jitter_from_a_trace():
    """``costs.jitter_trace`` / ``jitter_meta`` of experiments.plan: the trace's CVs, nothing else;
    refused in one line naming the field when the meta is missing or both ways are given."""
    node = dict(
        jitter_cv_F=0.0,
        jitter_cv_B=0.0,
        jitter_cv_IW=0.0,
        jitter_cv_p2p=0.0,
        jitter_cv_allreduce=0.0,
        slow_ranks=[],
        slow_factor=1.0,
        seed=3,
        jitter_trace=str(ST / "trace-ST.parquet"),
        jitter_meta=str(ST / "meta-ST.yaml"),
    )
    got = specs.stochastic_time(SimpleNamespace(**node), 4)
    want, _ = trace_jitter.jitter_from_trace(
        trace.read_trace(ST / "trace-ST.parquet", trace.read_meta(ST / "meta-ST.yaml"))
    )
    assert got is not None and got.jitter == want and got.slow is None and got.seed == 3
    with pytest.raises(ValueError, match="costs.jitter_meta"):
        specs.stochastic_time(SimpleNamespace(**{**node, "jitter_meta": None}), 4)
    with pytest.raises(ValueError, match="both set"):
        specs.stochastic_time(SimpleNamespace(**{**node, "jitter_cv_F": 0.1}), 4)
    with pytest.raises(ValueError, match="costs.jitter_trace: trace: cannot read"):
        specs.stochastic_time(SimpleNamespace(**{**node, "jitter_trace": str(ST / "missing.parquet")}), 4)
