"""A device, its node and its links (docs/plan.md): FLOP/s, memory, p2p and collectives.

Two kinds of preset (:data:`PRESETS`):

* ``a100_80g_flat``, ``h100_80g_flat``: the flat devices of the first plan (named ``a100_80g``
  and ``h100_80g`` before the DGX nodes took those names), kept for every study and config that
  used them (their numbers do not change): one GPU per node (every link is its
  InfiniBand port: HDR 200 Gb/s = 25 GB/s per A100, NDR 400 Gb/s = 50 GB/s per H100) and a
  constant ``efficiency`` 0.5 of the dense bf16 peak for every FLOP.
* ``a100_80g``, ``h100_80g``: the DGX A100 and DGX H100 nodes (8 GPUs on NVLink, 300 / 450 GB/s per direction per
  GPU; 8 InfiniBand ports per node, one per GPU), HBM bandwidth 2.039 / 3.35 TB/s, and compute
  timed by :mod:`rpd.model.compute` (each GEMM at its own achieved FLOP/s, memory-bound work at
  HBM speed). A large GEMM runs at ``gemm_efficiency`` = η × ``matmul_ceiling`` of the peak: the
  ceiling is the device's measured maximum achievable matmul rate (a benchmark, cited below), η
  the share of it the framework's kernels reach; η and ``traffic`` are fitted once, shared by
  both presets (:data:`DGX_FIT`, docs/plan.md#accuracy), so the A100 and the H100 differ only by
  vendor and benchmark figures.

Links: a TP group sits inside one node (its collectives on ``intra_bandwidth``); ranks are
placed as Megatron does, TP fastest, then DP, then PP (:mod:`rpd.model.topology`). A collective
or message that stays in one node uses the intra-node link; one that crosses nodes uses the
inter-node figures, ``p2p_bandwidth`` per GPU for messages and ``allreduce_bandwidth`` per GPU
for collectives, times the group's members per node (each has its own port; NCCL's rings and
trees spread a collective over them), at most ``intra_bandwidth``. ``gpus_per_node`` 1 (the
default) makes every link inter-node: the flat presets.

Host memory (activation offload, ``offload=true``): ``host_bandwidth`` bytes/s each way between a
GPU and its host over its own PCIe link, ``host_latency`` s per transfer; the DGX presets take the
PCIe link's peak (Gen4 x16 32 GB/s for the A100, Gen5 x16 64 GB/s for the H100; what a copy
achieves is lower, so an offloaded step here is a lower bound), None: no host link.
"""

from __future__ import annotations

import dataclasses

from rpd.validation import check_choice, check_int, check_real

GiB = 2**30
SITE_MIN_BITS = 1e6  # a site link below 1 Mbit/s is taken for a value in the wrong unit


@dataclasses.dataclass(frozen=True)
class Hardware:
    """One device: ``peak_flops`` FLOP/s, ``efficiency`` in (0, 1], ``memory_bytes``; a p2p link of
    ``p2p_bandwidth`` bytes/s and ``p2p_latency`` s; all-reduce bus bandwidth ``allreduce_bandwidth``
    bytes/s per device and latency ``allreduce_latency`` s (ring: 2(D-1)/D of the bytes).
    ``gpus_per_node``, ``intra_bandwidth`` (bytes/s per direction), ``intra_latency``: the node
    (module docstring). ``gemm_efficiency`` None: every FLOP at ``efficiency`` × peak; set: the
    compute model of :mod:`rpd.model.compute` with ``hbm_bandwidth`` bytes/s and ``traffic``."""

    name: str
    peak_flops: float
    memory_bytes: int
    p2p_bandwidth: float
    allreduce_bandwidth: float
    efficiency: float = 0.5
    p2p_latency: float = 5e-6
    allreduce_latency: float = 20e-6
    gpus_per_node: int = 1
    intra_bandwidth: float | None = None
    intra_latency: float = 0.0
    gemm_efficiency: float | None = None
    hbm_bandwidth: float | None = None
    traffic: float = 0.0
    host_bandwidth: float | None = None  # bytes/s each way between a GPU and host memory (offload)
    host_latency: float = 0.0
    attention_efficiency: float | None = None  # a fused attention kernel's FLOP/s over peak (None: the GEMMs')
    matmul_ceiling: float | None = None  # the measured best large-matmul FLOP/s over peak (a benchmark)
    sm_count: int | None = None  # SMs per GPU: GEMMs run in waves of tiles (rpd.model.kernels); None: no waves
    sites: int = 1  # datacenters the workers are split over evenly (module docstring)
    site_bandwidth: float | None = None  # BITS/s each way of each site's link to the others (100e9: 100 Gbit/s)
    site_latency: float = 0.0  # s per message over a site link

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
        check_int("hardware.gpus_per_node", self.gpus_per_node)
        if self.gpus_per_node > 1 and self.intra_bandwidth is None:
            raise ValueError(f"hardware.intra_bandwidth must be set when hardware.gpus_per_node={self.gpus_per_node}")
        if self.intra_bandwidth is not None:
            check_real("hardware.intra_bandwidth", self.intra_bandwidth)
        check_real("hardware.intra_latency", self.intra_latency, allow_zero=True)
        check_real("hardware.traffic", self.traffic, allow_zero=True)
        if self.gemm_efficiency is not None:
            g = check_real("hardware.gemm_efficiency", self.gemm_efficiency)
            if g > 1:
                raise ValueError(f"hardware.gemm_efficiency must be <= 1, got {g}")
            if self.hbm_bandwidth is None:
                raise ValueError("hardware.hbm_bandwidth must be set with hardware.gemm_efficiency")
        if self.hbm_bandwidth is not None:
            check_real("hardware.hbm_bandwidth", self.hbm_bandwidth)
        if self.host_bandwidth is not None:
            check_real("hardware.host_bandwidth", self.host_bandwidth)
        check_real("hardware.host_latency", self.host_latency, allow_zero=True)
        if self.attention_efficiency is not None and not 0 < self.attention_efficiency <= 1:
            raise ValueError(f"hardware.attention_efficiency must be in (0, 1], got {self.attention_efficiency}")
        if self.sm_count is not None:
            check_int("hardware.sm_count", self.sm_count)
        if self.matmul_ceiling is not None and not 0 < self.matmul_ceiling <= 1:
            raise ValueError(f"hardware.matmul_ceiling must be in (0, 1], got {self.matmul_ceiling}")
        check_int("hardware.sites", self.sites)
        if self.sites > 1 and self.site_bandwidth is None:
            raise ValueError(f"hardware.site_bandwidth (bits/s) must be set when hardware.sites={self.sites}")
        if (
            self.site_bandwidth is not None
            and check_real("hardware.site_bandwidth", self.site_bandwidth) < SITE_MIN_BITS
        ):
            raise ValueError(
                f"hardware.site_bandwidth is in bits/s (100e9 = 100 Gbit/s), got {self.site_bandwidth:g}: "
                f"below {SITE_MIN_BITS:g} it is ambiguous (Gbit/s? GB/s?); write it in bits/s"
            )
        check_real("hardware.site_latency", self.site_latency, allow_zero=True)

    @property
    def site_bytes_per_s(self) -> float:
        """A site link's bandwidth in bytes/s: ``site_bandwidth`` / 8."""
        if self.site_bandwidth is None:
            raise ValueError("hardware.site_bandwidth (bits/s) is not set")
        return self.site_bandwidth / 8.0

    def site_seconds(self, moved: float, steps: int, rings: int = 1) -> float:
        """Seconds a collective spends on the site links: ``steps`` ring steps of
        ``site_latency`` each, and ``rings`` × ``moved`` bytes (what one rank of each ring
        sends; every ring crosses each site's link once) at :attr:`site_bytes_per_s`:

            t_site = steps · site_latency + rings · moved / (site_bandwidth / 8).
        """
        if moved <= 0:
            return 0.0
        return steps * self.site_latency + rings * float(moved) / self.site_bytes_per_s

    @property
    def flops(self) -> float:
        """Sustained FLOP/s: peak × efficiency."""
        return self.peak_flops * self.efficiency

    def compute_seconds(self, flops: float) -> float:
        return float(flops) / self.flops

    def p2p_seconds(self, nbytes: float, intra: bool = False) -> float:
        """One message: latency + bytes / bandwidth (nothing to send takes no time); ``intra``:
        inside a node (NVLink), else over the sender's inter-node port."""
        if nbytes <= 0:
            return 0.0
        if intra and self.intra_bandwidth is not None:
            return self.intra_latency + float(nbytes) / self.intra_bandwidth
        return self.p2p_latency + float(nbytes) / self.p2p_bandwidth

    def collective_link(self, per_node: int, n: int) -> tuple[float, float]:
        """(bus bandwidth bytes/s, latency s) of a collective over ``n`` ranks with ``per_node``
        of them in each node: one node -> the intra-node link; across nodes -> ``per_node``
        inter-node ports, at most the intra-node link (module docstring)."""
        per_node, n = check_int("per_node", per_node), check_int("n", n)
        if per_node >= n and self.intra_bandwidth is not None:
            return self.intra_bandwidth, self.intra_latency
        bw = self.allreduce_bandwidth * per_node
        if self.intra_bandwidth is not None:
            bw = min(bw, self.intra_bandwidth)
        return bw, self.allreduce_latency

    @staticmethod
    def ring_bytes(nbytes: float, D: int) -> float:
        """Bytes each device sends in a ring all-reduce of ``nbytes`` over D devices: 2(D-1)/D."""
        D = check_int("D", D)
        return 2.0 * (D - 1) / D * float(nbytes)

    def allreduce_seconds(self, nbytes: float, D: int, per_node: int = 1, site_rings: int = 0) -> float:
        """A ring all-reduce of ``nbytes`` over D ranks, ``per_node`` of them in each node;
        ``site_rings`` > 0: the ring spans the sites, that many rings crossing each site link at
        once (module docstring): the slower of the in-site ring and :meth:`site_seconds`."""
        moved = self.ring_bytes(nbytes, D)
        if moved <= 0:
            return 0.0
        bw, lat = self.collective_link(per_node, D)
        site = self.site_seconds(moved, 2 * (D - 1), site_rings) if site_rings else 0.0
        return max(lat + moved / bw, site)

    def half_seconds(self, nbytes: float, D: int, per_node: int = 1, site_rings: int = 0) -> float:
        """A reduce-scatter or an all-gather of ``nbytes`` (the whole tensor) over D ranks: each
        rank sends (D-1)/D of them, half an all-reduce's bytes (``site_rings``: as
        :meth:`allreduce_seconds`, D − 1 ring steps)."""
        moved = self.ring_bytes(nbytes, D) / 2
        if moved <= 0:
            return 0.0
        bw, lat = self.collective_link(per_node, D)
        site = self.site_seconds(moved, D - 1, site_rings) if site_rings else 0.0
        return max(lat + moved / bw, site)


# The measured ceiling of each DGX GPU: the Maximum Achievable Matmul FLOPS (BF16, no sparsity,
# the best of a search over shapes) over the dense peak -- A100 SXM 267.9 of 312 TFLOP/s, H100 SXM
# 792.1 of 989 (S. Bekman, ml-engineering, compute/accelerator/README.md, "Maximum Achievable
# Matmul FLOPS comparison table"; mamf-finder.py). A benchmark of the chip, not a fit to any run.
MATMUL_CEILING = {"a100_80g": round(267.9 / 312, 4), "h100_80g": round(792.1 / 989, 4)}

# (η, traffic) shared by every DGX preset: the share of the matmul ceiling a framework's GEMMs
# reach, and the multiplier on the bytes of memory-bound work; fitted once on every published
# run of the development set (rpd.studies.plan_accuracy.fit; docs/plan.md#accuracy)
DGX_FIT = (0.7625, 1.0)


def dgx_gemm_efficiency(name: str, eta: float) -> float:
    """The large-GEMM fraction of peak of DGX preset ``name`` at software share ``eta``."""
    return round(eta * MATMUL_CEILING[name], 4)


PRESETS: dict[str, Hardware] = {
    "a100_80g_flat": Hardware(
        "a100_80g_flat", peak_flops=312e12, memory_bytes=80 * GiB, p2p_bandwidth=25e9, allreduce_bandwidth=25e9
    ),
    "h100_80g_flat": Hardware(
        "h100_80g_flat", peak_flops=989e12, memory_bytes=80 * GiB, p2p_bandwidth=50e9, allreduce_bandwidth=50e9
    ),
    # DGX A100 (NVIDIA DGX A100 data sheet; A100 80GB data sheet): 8 A100 80GB SXM, NVLink 3 at
    # 600 GB/s per GPU both directions, 8 x 200 Gb/s HDR InfiniBand compute ports, HBM2e 2,039 GB/s
    "a100_80g": Hardware(
        "a100_80g",
        peak_flops=312e12,
        memory_bytes=80 * GiB,
        p2p_bandwidth=25e9,
        allreduce_bandwidth=25e9,
        gpus_per_node=8,
        intra_bandwidth=300e9,
        intra_latency=5e-6,
        hbm_bandwidth=2.039e12,
        host_bandwidth=32e9,  # PCIe Gen4 x16 per GPU, each way (the link's peak)
        host_latency=10e-6,
        gemm_efficiency=dgx_gemm_efficiency("a100_80g", DGX_FIT[0]),
        matmul_ceiling=MATMUL_CEILING["a100_80g"],
        traffic=DGX_FIT[1],
        # FlashAttention-2 on A100, causal, head dim 128, forward and backward: about 170 of 312
        # TFLOP/s (Dao 2023, "FlashAttention-2", Fig. 4), the causal half of the FLOPs counted
        attention_efficiency=0.55,
    ),
    # DGX H100 (NVIDIA DGX H100 data sheet; H100 SXM data sheet): 8 H100 80GB SXM, NVLink 4 at
    # 900 GB/s per GPU both directions, 8 x 400 Gb/s NDR InfiniBand compute ports, HBM3 3.35 TB/s
    "h100_80g": Hardware(
        "h100_80g",
        peak_flops=989e12,
        memory_bytes=80 * GiB,
        p2p_bandwidth=50e9,
        allreduce_bandwidth=50e9,
        gpus_per_node=8,
        intra_bandwidth=450e9,
        intra_latency=5e-6,
        hbm_bandwidth=3.35e12,
        host_bandwidth=64e9,  # PCIe Gen5 x16 per GPU, each way (the link's peak)
        host_latency=10e-6,
        gemm_efficiency=dgx_gemm_efficiency("h100_80g", DGX_FIT[0]),
        matmul_ceiling=MATMUL_CEILING["h100_80g"],
        traffic=DGX_FIT[1],
        # cuDNN's fused attention (Transformer Engine's) on H100, causal, head dim 128, BF16,
        # forward and backward at 2k-8k tokens: about 450 of 989 TFLOP/s (Shah et al. 2024,
        # "FlashAttention-3", Figs. 5-6), the causal half of the FLOPs counted
        attention_efficiency=0.45,
    ),
}


def preset(name: str) -> Hardware:
    check_choice("hardware", name, PRESETS)
    return PRESETS[name]
