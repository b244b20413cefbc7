"""rpd.io.trace: the checks of a trace's columns, op types and steps, and the measured ops
keyed by (step, dp rank, stage, chunk, microbatch, op type)."""

from pathlib import Path

import pandas as pd
import pytest

from rpd.io import trace
from rpd.model.job_layout import JobLayout

ST = Path(__file__).parent.parent / "data" / "trace_st"


def _rows(dp=1, pp=1):
    rows = []
    for d in range(dp):
        for s in range(pp):
            for k, op in enumerate(["forward-compute", "backward-compute", "optimizer"]):
                rows.append(
                    dict(
                        dp_rank=d,
                        stage=s,
                        rank=d * pp + s,
                        step=0,
                        optype=op,
                        start_ts=float(k),
                        duration=1.0,
                        seq_id=0,
                        mc=0,
                        gmc=s,
                        mb_id=0,
                    )
                )
    return pd.DataFrame(rows)


def test_read_st_layout_and_ops():
    layout = trace.read_meta(ST / "meta-ST.yaml")
    assert (layout.dp, layout.pp, layout.tp, layout.dsp, layout.vpp, layout.world) == (2, 4, 1, 1, 1, 8)
    ops = trace.measured_ops(trace.read_trace(ST / "trace-ST.parquet", layout))
    # the artifact's readme: 32 steps; 1F1B with 4 microbatches: 4 F and 4 B per worker and step
    assert ops["step"].nunique() == 32
    per = ops[ops.optype == "forward-compute"].groupby(["step", "dp_rank", "stage"]).size()
    assert len(per) == 32 * 8 and (per == 4).all()
    assert list(ops.columns[:6]) == trace.KEY


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda df: df.drop(columns=["seq_id"]), "trace: missing column 'seq_id'"),
        (lambda df: df.assign(optype=df.optype.replace("optimizer", "all-to-all")), "unknown op type 'all-to-all'"),
        (lambda df: df[~((df.dp_rank == 1) & (df.stage == 0))], "step 0 is empty on dp_rank 1, stage 0 (no ops)"),
    ],
)
def test_refusals_name_the_field(edit, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        trace.check_trace(edit(_rows(dp=2, pp=2)), JobLayout(dp=2, pp=2))
    assert "\n" not in str(info.value)


def test_meta_world_size_checked():
    with pytest.raises(ValueError, match="meta.world_size must be"):
        JobLayout(dp=2, pp=4, world=16)
