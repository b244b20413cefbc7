"""A device and its links (SPEC §12): FLOP/s with an efficiency, memory, p2p and all-reduce.

Presets from NVIDIA's data sheets (dense bf16 tensor-core peaks, 80 GiB HBM) with inter-node
links, where pipeline stages usually sit: one HDR InfiniBand port (200 Gb/s = 25 GB/s) per A100,
one NDR port (400 Gb/s = 50 GB/s) per H100, a few microseconds of latency. ``efficiency`` is the
share of the peak the layers' matmuls reach (model FLOP utilisation of a perfect pipeline).
"""

from __future__ import annotations

import dataclasses

from rpd.validation import check_choice, check_int, check_real

GiB = 2**30


@dataclasses.dataclass(frozen=True)
class Hardware:
    """One device: ``peak_flops`` FLOP/s, ``efficiency`` in (0, 1], ``memory_bytes``; a p2p link of
    ``p2p_bandwidth`` bytes/s and ``p2p_latency`` s; all-reduce bus bandwidth ``allreduce_bandwidth``
    bytes/s per device and latency ``allreduce_latency`` s (ring: 2(D-1)/D of the bytes)."""

    name: str
    peak_flops: float
    memory_bytes: int
    p2p_bandwidth: float
    allreduce_bandwidth: float
    efficiency: float = 0.5
    p2p_latency: float = 5e-6
    allreduce_latency: float = 20e-6

    def __post_init__(self):
        check_real("hardware.peak_flops", self.peak_flops)
        check_int("hardware.memory_bytes", self.memory_bytes)
        check_real("hardware.p2p_bandwidth", self.p2p_bandwidth)
        check_real("hardware.allreduce_bandwidth", self.allreduce_bandwidth)
        eff = check_real("hardware.efficiency", self.efficiency)
        if eff > 1:
            raise ValueError(f"hardware.efficiency must be <= 1, got {eff}")
        check_real("hardware.p2p_latency", self.p2p_latency, allow_zero=True)
        check_real("hardware.allreduce_latency", self.allreduce_latency, allow_zero=True)

    @property
    def flops(self) -> float:
        """Sustained FLOP/s: peak × efficiency."""
        return self.peak_flops * self.efficiency

    def compute_seconds(self, flops: float) -> float:
        return float(flops) / self.flops

    def p2p_seconds(self, nbytes: float) -> float:
        """One message: latency + bytes / bandwidth (nothing to send takes no time)."""
        return 0.0 if nbytes <= 0 else self.p2p_latency + float(nbytes) / self.p2p_bandwidth

    @staticmethod
    def ring_bytes(nbytes: float, D: int) -> float:
        """Bytes each device sends in a ring all-reduce of ``nbytes`` over D devices: 2(D-1)/D."""
        D = check_int("D", D)
        return 2.0 * (D - 1) / D * float(nbytes)

    def allreduce_seconds(self, nbytes: float, D: int) -> float:
        moved = self.ring_bytes(nbytes, D)
        return 0.0 if moved <= 0 else self.allreduce_latency + moved / self.allreduce_bandwidth


PRESETS: dict[str, Hardware] = {
    "a100_80g": Hardware(
        "a100_80g", peak_flops=312e12, memory_bytes=80 * GiB, p2p_bandwidth=25e9, allreduce_bandwidth=25e9
    ),
    "h100_80g": Hardware(
        "h100_80g", peak_flops=989e12, memory_bytes=80 * GiB, p2p_bandwidth=50e9, allreduce_bandwidth=50e9
    ),
}


def preset(name: str) -> Hardware:
    check_choice("hardware", name, PRESETS)
    return PRESETS[name]
