"""Sites, DiLoCo's outer exchange and Streaming DiLoCo's overlap (rpd.model.hardware,
rpd.model.topology, rpd.model.outer_exchange) on numbers worked by hand."""

import dataclasses

import pytest

from rpd.model import outer_exchange as ox
from rpd.model.topology import place
from tests.toy_hardware import toy_hardware


def two_sites(bits: float = 8e9, latency: float = 0.0):
    """The toy device (1 GB/s all-reduce, no latency) on 2 sites joined by ``bits`` bits/s."""
    return dataclasses.replace(toy_hardware(), sites=2, site_bandwidth=bits, site_latency=latency)


def test_site_bandwidth_is_bits_and_small_values_are_refused():
    assert two_sites(8e9).site_bytes_per_s == 1e9  # 8 Gbit/s = 1 GB/s
    with pytest.raises(ValueError, match="hardware.site_bandwidth is in bits/s"):
        two_sites(100.0)  # "100" meant as Gbit/s: refused, not taken as 100 bit/s
    with pytest.raises(ValueError, match="hardware.site_bandwidth"):
        dataclasses.replace(toy_hardware(), sites=2)  # two sites and no link


def test_dp_ring_spanning_two_sites():
    # 1 GB of gradients, a ring of D = 4 ranks over 2 sites at 0.8 Gbit/s = 0.1 GB/s, one ring:
    # each rank sends 2·3/4 · 1 GB = 1.5 GB; in-site at 1 GB/s: 1.5 s; the site hop: 15 s
    hw = two_sites(0.8e9)
    assert hw.allreduce_seconds(1e9, 4, 1, site_rings=1) == pytest.approx(15.0)
    # 3 rings sharing the link, 1 ms a hop: 6 ring steps of 1 ms + 3 · 1.5 GB / 0.1 GB/s = 45.006 s
    hw = two_sites(0.8e9, latency=1e-3)
    assert hw.allreduce_seconds(1e9, 4, 1, site_rings=3) == pytest.approx(45.006)
    # a link faster than the ports: the in-site ring (1.5 s) is the slower hop
    assert two_sites(800e9).allreduce_seconds(1e9, 4, 1, site_rings=1) == pytest.approx(1.5)
    # reduce-scatter: half the bytes, D - 1 = 3 hops of latency: 3 ms + 0.75 GB / 0.1 GB/s
    assert hw.half_seconds(1e9, 4, 1, site_rings=1) == pytest.approx(7.503)


def test_placement_over_sites():
    hw = two_sites()
    p = place(hw, TP=1, DP=4, S=3)  # D a multiple of the sites: whole pipelines per site
    assert (p.dp_site_rings, p.p2p_site_share) == (3, 0)  # 1 TP rank x 3 stages, each its own ring
    p = place(hw, TP=1, DP=1, S=4)  # one pipeline over both sites: a boundary on the link
    assert (p.dp_site_rings, p.p2p_site_share) == (0, 1)
    with pytest.raises(ValueError, match="pipeline.D=3 with hardware.sites=2"):
        place(hw, TP=1, DP=3, S=2)
    assert place(toy_hardware(), DP=3).dp_site_rings == 0  # one site: nothing crosses


def test_diloco_exchange_bytes_and_time():
    # N = 1e9 values in fp32 (4 GB), M = 2 replicas, one per site, link 100 Gbit/s = 12.5 GB/s:
    # each site sends 2·1/2 · 4 GB = 4 GB -> 0.32 s; in-site, 8 ranks each reduce 0.5 GB: 2·1/2 ·
    # 0.5 GB at 1 GB/s = 0.5 s, the slower
    e = ox.exchange(two_sites(100e9), 1e9, M=2, ranks=8, value_bytes=4)
    assert e.site_bytes == pytest.approx(4e9)
    assert e.seconds == pytest.approx(0.5)
    # at 10 Gbit/s (1.25 GB/s) the site link is slower: 4 GB / 1.25 GB/s = 3.2 s
    e = ox.exchange(two_sites(10e9), 1e9, M=2, ranks=8, value_bytes=4)
    assert e.seconds == pytest.approx(3.2)
    # amortised over H = 30 steps of 1 s: 1 + 3.2/30 s a step, 4 GB / 30 over the link a step
    s = ox.outer_step(two_sites(10e9), 1.0, 1e9, M=2, ranks=8, H=30, value_bytes=4)
    assert s.step_s == pytest.approx(1 + 3.2 / 30)
    assert s.site_bytes_per_step == pytest.approx(4e9 / 30)
    # bf16: half the bytes
    assert ox.exchange(two_sites(10e9), 1e9, 2, 8, 2).site_bytes == pytest.approx(2e9)
    # M = 4 over 2 sites: each site link carries 2·3/4 · 4 GB = 6 GB
    assert ox.exchange(two_sites(10e9), 1e9, 4, 8, 4).site_bytes == pytest.approx(6e9)
    assert ox.exchange(two_sites(10e9), 1e9, 1, 8, 4) == ox.Exchange(0.0, 0.0)


def test_streaming_fragment_hidden_or_exposed():
    # P = 4 fragments of 1e9 / 4 values in fp32 over 2 sites at 10 Gbit/s: 1 GB each way, 0.8 s
    hw = two_sites(10e9)
    e = ox.exchange(hw, 1e9 / 4, 2, 8, 4).seconds
    assert e == pytest.approx(0.8)
    # inner step 0.5 s, τ = 2: 1 s of compute covers the 0.8 s: hidden
    s = ox.outer_step(hw, 0.5, 1e9, M=2, ranks=8, H=40, P=4, tau=2)
    assert (s.exposed_s, s.step_s) == (0.0, 0.5)
    # τ = 1: 0.5 s covers 0.8 s: 0.3 s exposed per fragment, 4 per 40 steps: 0.03 s a step
    s = ox.outer_step(hw, 0.5, 1e9, M=2, ranks=8, H=40, P=4, tau=1)
    assert s.exposed_s == pytest.approx(0.03)
    # the link saturated: H = 4 steps of 0.5 s carry 4 x 0.8 s of exchange: 1.2 s over 4 steps
    assert ox.exposed_seconds(0.8, P=4, H=4, tau=2, step_s=0.5) == pytest.approx(0.3)
    # P = 1, τ = 0 is DiLoCo: e / H
    assert ox.exposed_seconds(3.2, 1, 30, 0, 1.0) == pytest.approx(3.2 / 30)
    with pytest.raises(ValueError, match="diloco.P=4 must divide diloco.H=30"):
        ox.exposed_seconds(1.0, 4, 30, 1, 1.0)


def test_replica_hardware():
    hw = two_sites()
    assert ox.replica_hardware(hw, 2).sites == 1  # one replica per site: its DP stays inside
    assert ox.replica_hardware(hw, 1) is hw  # one replica over both sites
    with pytest.raises(ValueError, match="diloco.M=3 with hardware.sites=2"):
        ox.replica_hardware(hw, 3)
