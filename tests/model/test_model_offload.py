"""Activation offload in the plan (docs/plan.md#activation-offload): the host link in ticks from the
hardware, the bytes that leave the device, and the step that grows only where the link cannot keep up."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hydra_helpers import compose
from toy_hardware import toy_hardware

from rpd import registry
from rpd.cli import plan as entry
from rpd.model import memory
from rpd.model.layers import Layer, Model
from rpd.model.plan import plan_one
from rpd.model.stages import host_link, partition, stage_costs, stages
from rpd.schedules.machinery import memory as sched_memory

MB = 10**6
# eight layers, F = I = W = 1 ms, 1 MB of activations per microbatch each
TOY = Model(
    "toy",
    tuple(Layer(f"l{i}", params=1000, flops_fwd=1e9, flops_i=1e9, flops_w=1e9, act_bytes=MB) for i in range(8)),
    100,
)


def _hw(bandwidth, latency=0.0):
    return dataclasses.replace(toy_hardware(), host_bandwidth=bandwidth, host_latency=latency)


def test_host_link_is_the_largest_stage_s_activation_over_the_link_in_ticks():
    hw = _hw(1e9, latency=4e-5)  # two layers a stage: 2 MB at 1 GB/s, 2 ms; the tick is 2 ms / 100
    st = stages(TOY, partition(TOY, 4, "layers", hw), hw)
    _, tick = stage_costs(st, hw)
    link = host_link(st, hw, tick)
    assert tick == pytest.approx(2e-5)
    assert (link.d2h, link.h2d, link.latency, link.min_gap) == (100, 100, 2, 2)
    with pytest.raises(ValueError, match="hardware.host_bandwidth"):
        host_link(st, toy_hardware(), tick)


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "interleaved"])
def test_a_fast_link_lowers_the_peak_at_no_cost_and_a_slow_one_costs_time(name):
    S, M = 4, 8
    base = plan_one(TOY, _hw(1e9), name, registry.timeline, S, M, how="layers")
    fast = plan_one(TOY, _hw(1e15), name, registry.timeline, S, M, how="layers", offload=True)
    slow = plan_one(TOY, _hw(1e8), name, registry.timeline, S, M, how="layers", offload=True)
    assert fast.step_time_s == base.step_time_s
    assert max(fast.peak_activation_bytes) < max(base.peak_activation_bytes)
    assert max(fast.memory["offloaded"]) > 0 and max(base.memory["offloaded"]) == 0
    assert slow.step_time_s > base.step_time_s  # 20 ms a transfer (or 10 per chunk) against 1-2 ms ops
    assert max(slow.peak_activation_bytes) <= max(base.peak_activation_bytes)


def test_bytes_on_the_device_are_the_schedule_layer_s_count_times_the_stage_s_bytes():
    """rpd.model.memory (bytes, weighted per stage) and rpd.schedules.machinery.memory (microbatches) count
    the same offloaded timeline two ways; with equal stages they agree."""
    hw = _hw(2e9)
    st = stages(TOY, partition(TOY, 4, "layers", hw), hw)
    costs, tick = stage_costs(st, hw)
    costs = dataclasses.replace(costs, host=host_link(st, hw, tick))
    for name in ("gpipe", "1f1b"):
        tl = registry.timeline(name, 4, 16, 8, costs)
        assert tl.transfers is not None and len(tl.transfers.kind) > 0
        on_device = memory.activation_peak(tl, st.act, np.zeros(4))
        assert on_device.max() < 4 * 2 * MB  # rank 0 of 1F1B holds S = 4 without offload
        np.testing.assert_allclose(on_device, sched_memory.peak_activations(tl, until="B") * 2 * MB)
        assert memory.host_peak(tl, st.act).max() > 0


def test_offload_without_a_host_link_is_refused_before_any_work(tmp_path):
    cfg = compose(["hardware=a100_80g_flat", "offload=true", f"out={tmp_path / 'p.json'}"], "plan")
    with pytest.raises(ValueError, match="offload needs hardware.host_bandwidth"):
        entry.run(cfg)
    assert not (tmp_path / "p.json").exists()
