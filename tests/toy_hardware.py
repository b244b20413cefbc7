"""The toy device of the model tests: 1 TFLOP/s at full efficiency (a 1 GFLOP op takes 1 ms),
free p2p, a 1 GB/s all-reduce with a given latency."""

from rpd.model import hardware


def toy_hardware(allreduce_latency: float = 0.0) -> hardware.Hardware:
    return hardware.Hardware(
        "toy",
        peak_flops=1e12,
        memory_bytes=2**34,
        p2p_bandwidth=1e15,
        allreduce_bandwidth=1e9,
        efficiency=1.0,
        p2p_latency=0.0,
        allreduce_latency=allreduce_latency,
    )
