"""D data-parallel pipelines and partition=pipedream in the plan (docs/plan.md#data-parallelism), values by hand."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hydra_helpers import compose
from toy_hardware import toy_hardware

from rpd import registry
from rpd.cli import plan as entry
from rpd.model.layers import Layer, Model
from rpd.model.plan import plan

# 1 TFLOP/s, p2p free, all-reduce 1 GB/s + 10 µs
HW = toy_hardware(allreduce_latency=1e-5)
# two one-layer stages: F = I = W = 1 ms each; stage 0 holds 1,000 values, stage 1 1,000,000
TOY = Model(
    "toy",
    (
        Layer("a", params=1000, flops_fwd=1e9, flops_i=1e9, flops_w=1e9, out_bytes=8),
        Layer("b", params=1_000_000, flops_fwd=1e9, flops_i=1e9, flops_w=1e9),
    ),
    100,
)


def _row(D, overlap=False, name="1f1b"):
    return plan(TOY, HW, [name], registry.timeline, 2, 2, D=D, overlap_allreduce=overlap, how="layers")[0]


def test_two_pipelines_double_the_tokens_and_add_the_ring_all_reduce_after_the_flush():
    one, two = _row(1), _row(2)
    # 1F1B, S = 2, M = 2, B = I + W = 2 ms: rank 0 F F . . B B ends at 9 ms (rank 1: F B F B ends at 7 ms)
    assert one.step_time_s == pytest.approx(9e-3) and one.dp_allreduce_s == 0.0
    # rank 1's fp32 gradients: 4e6 bytes; ring over D = 2 sends 2·(2−1)/2 · 4e6 = 4e6 bytes at 1 GB/s
    # = 4 ms, + 10 µs latency; everyone waits for the flush, so the step grows by the slower rank's
    ar = 1e-5 + 4e6 / 1e9
    assert two.dp_allreduce_s == pytest.approx(ar)
    assert two.step_time_s == pytest.approx(9e-3 + ar)
    assert two.tokens_per_s * two.step_time_s == pytest.approx(2 * 2 * 100)  # D·M·tokens per step
    assert one.tokens_per_s * one.step_time_s == pytest.approx(2 * 100)
    assert two.allreduce_bytes_per_step == pytest.approx([4000.0, 4e6])
    assert two.D == 2 and two.peak_bytes == one.peak_bytes  # DP does not shard
    # the all-reduce is idle time of the step: busy is 2·2·(1 + 2) ms on 2 ranks
    assert two.bubble_total == pytest.approx(1 - 12e-3 / (2 * two.step_time_s))
    assert two.mfu == pytest.approx(2 * TOY.model_flops / (two.step_time_s * 2 * HW.peak_flops))


def test_overlapping_the_drain_hides_the_part_before_the_flush():
    # rank 1 is done with its backwards at 7 ms and all-reduces until 11.01 ms; rank 0 (4,000 B) at
    # 9 ms + 14 µs: the step is 11.01 ms
    ov = _row(2, overlap=True)
    assert ov.dp_allreduce_s == pytest.approx(7e-3 + 1e-5 + 4e-3 - 9e-3)
    assert ov.step_time_s == pytest.approx(11.01e-3)
    assert ov.tokens_per_s > _row(2).tokens_per_s


def test_schedules_without_a_flush_are_refused_for_d_above_one():
    assert _row(2, name="pipedream").error == "ValueError: D > 1 needs a flush (a synchronous schedule)"
    assert _row(1, name="pipedream").error is None


def test_the_command_reports_d_the_all_reduce_and_the_partitioner(tmp_path, capsys):
    out = tmp_path / "plan.json"
    entry.run(
        compose(
            [
                "model=gpt2_small",
                "pipeline.S=2",
                "pipeline.M=4",
                "pipeline.D=2",
                "schedules=[1f1b]",
                "pipeline.partition=pipedream",
                f"out={out}",
            ],
            "plan",
        )
    )
    text = capsys.readouterr().out
    assert "D=2" in text and "DP ms" in text and "PipeDream's partitioner on 4 workers" in text
    data = json.loads(out.read_text())
    row = data["rows"][0]
    assert data["settings"]["D"] == 2 and data["settings"]["partition"] == "pipedream" and row["D"] == 2
    assert row["dp_allreduce_s"] > 0 and row["tokens_per_s"] * row["step_time_s"] == pytest.approx(2 * 4 * 1024)
    assert data["partitioner"]["workers"] <= 4
    with pytest.raises(ValueError, match=r"pipeline\.D"):
        entry.run(compose(["pipeline.D=0", "out=null"], "plan"))


def test_two_pipelines_on_two_sites_pay_the_site_link():
    # the same two pipelines, one per site, sites joined by 0.8 Gbit/s = 0.1 GB/s: each rank's ring
    # crosses the link, the 2 rings (TP·S = 2) at once; rank 1's ring sends 4e6 bytes, rank 0's
    # 4,000: the link carries 4.004e6 bytes a step; rank 1's all-reduce: 2 x 4e6 / 1e8 = 80 ms
    hw = dataclasses.replace(HW, sites=2, site_bandwidth=0.8e9)
    two = plan(TOY, hw, ["1f1b"], registry.timeline, 2, 2, D=2, how="layers")[0]
    assert two.site_bytes_per_step == pytest.approx(4e6 + 4000)
    assert two.dp_allreduce_s == pytest.approx(2 * 4e6 / 1e8)
    assert two.step_time_s == pytest.approx(9e-3 + 0.08)
    assert _row(2).site_bytes_per_step == 0.0  # one site: nothing crosses


def test_one_pipeline_over_two_sites_is_bound_by_its_cut():
    # stage 0 sends 10 kB per microbatch forward (stage 1 as much back); the link 8 Mbit/s = 1 MB/s:
    # M = 2 microbatches carry 20 kB each way a step, 20 ms > the 9 ms flush: the step is 20 ms, +
    # 2 x 1 ms of latency for 1F1B's flush (its critical path crosses the cut both ways)
    wide = Model("wide", (dataclasses.replace(TOY.layers[0], out_bytes=10_000), TOY.layers[1]), 100)
    hw = dataclasses.replace(HW, sites=2, site_bandwidth=8e6, site_latency=1e-3)
    row = plan(wide, hw, ["1f1b"], registry.timeline, 2, 2, D=1, how="layers")[0]
    assert row.site_bytes_per_step == pytest.approx(2e4)
    assert row.step_time_s == pytest.approx(0.02 + 0.002)
    assert row.tokens_per_s == pytest.approx(2 * 100 / 0.022)


def test_chunk_lookups_by_hand_on_gpipe():
    """The overlap model's per-(rank, stage) lookups on GPipe at S = M = 2, F = B = 1 tick, by
    hand: rank 0 runs F0 [0, 1), F1 [1, 2), B0 [4, 5), B1 [5, 6); rank 1 F0 [1, 2), F1 [2, 3),
    B0 [3, 4), B1 [4, 5) (B0 on rank 0 waits for rank 1's B0)."""
    from rpd.model import overlap
    from rpd.schedules.machinery.costs import CostModel
    from rpd.schedules.machinery.ir import BWD, FWD

    tl = registry.timeline("gpipe", 2, 2, 2, CostModel(F=1, B=1))
    assert overlap._chunk_times(tl, (BWD,), first=False, use_end=False) == {(0, 0): 5.0, (1, 1): 4.0}
    assert overlap._chunk_times(tl, (FWD,), first=True, use_end=False) == {(0, 0): 0.0, (1, 1): 1.0}
    assert overlap._chunk_times(tl, (FWD,), first=True, use_end=True) == {(0, 0): 1.0, (1, 1): 2.0}
    assert overlap._chunks(tl, None) == {0: [(0, 1.0)], 1: [(1, 1.0)]}
    # interleaved, v = 2 chunks per rank (looped placement: rank r holds stages r and r + S),
    # each chunk's share of the rank's values: by count, then by the stages' values 1, 2, 3, 4
    il = registry.timeline("interleaved", 2, 4, 4, CostModel(F=1, B=1))
    assert overlap._chunks(il, None) == {0: [(0, 0.5), (2, 0.5)], 1: [(1, 0.5), (3, 0.5)]}
    shares = overlap._chunks(il, np.array([1.0, 2.0, 3.0, 4.0]))
    assert shares == {0: [(0, 1 / 4), (2, 3 / 4)], 1: [(1, 2 / 6), (3, 4 / 6)]}
    assert set(overlap._chunk_times(il, (BWD,), first=False, use_end=False)) == {(0, 0), (0, 2), (1, 1), (1, 3)}
