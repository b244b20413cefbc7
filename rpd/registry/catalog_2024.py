"""The schedules shipped since 2024: one :class:`~rpd.registry.entry.ScheduleEntry` each
(docs/schedules.md has each one's order, closed forms and source). Importing :mod:`rpd.registry`
registers them, after the built-in ones of :mod:`rpd.registry.catalog`.
"""

from __future__ import annotations

from rpd.registry.entry import ScheduleEntry, Source, register_schedule
from rpd.schedules.bitpipe import bitpipe
from rpd.schedules.combined_1f1b import CombinedParams, combined_1f1b
from rpd.schedules.dualpipe import dualpipe
from rpd.schedules.interleaved_zb import InterleavedZBParams, interleaved_zb
from rpd.schedules.looped_bfs import LoopedBFSParams, looped_bfs
from rpd.schedules.v_memory import v_half, v_min
from rpd.train import semantics as sem

TORCH = "pytorch/pytorch: torch/distributed/pipelining/schedules.py"
SAIL_V = "sail-sg/zero-bubble-pipeline-parallelism: megatron/core/pipeline_parallel/zerobubble/scheduler/zbv_greedy.py"

for _entry in (
    ScheduleEntry(
        "looped_bfs",
        looped_bfs,
        ("M",),
        params_type=LoopedBFSParams,
        flush=True,
        chunks_per_rank="v",
        doc="looped BFS: every microbatch of chunk c before chunk c + 1, v chunks per rank",
        label="looped BFS (v=2)",
        short="looped BFS",
        colour="#FFD92F",  # gold: brown diamonds are LocalSGD
        marker="d",
        source=Source("Lamy-Poirier, Breadth-first pipeline parallelism, MLSys 2023", TORCH),
    ),
    ScheduleEntry(
        "interleaved_zb",
        interleaved_zb,
        ("M",),
        params_type=InterleavedZBParams,
        flush=True,
        split_backward=True,
        chunks_per_rank="v",
        doc="interleaved zero bubble: interleaved 1F1B, split backward, W delayed r backwards",
        label="interleaved ZB (v=2)",
        short="interleaved ZB",
        colour="#FB9A99",
        marker="^",
        source=Source("Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024", TORCH),
    ),
    ScheduleEntry(
        "dualpipe",
        dualpipe,
        ("M",),
        flush=True,
        allreduce=True,
        split_backward=True,
        semantics=sem.REPLICATED,
        defaults={"M": lambda S: 2 * S},
        doc="DualPipe: two mirrored copies in opposite directions, copies' gradients all-reduced",
        label="DualPipe",
        colour="#6A3D9A",
        marker="P",
        source=Source("DeepSeek-AI, DeepSeek-V3 technical report, 2024", "deepseek-ai/DualPipe: dualpipe/dualpipe.py"),
    ),
    ScheduleEntry(
        "combined_1f1b",
        combined_1f1b,
        ("M",),
        params_type=CombinedParams,
        flush=True,
        chunks_per_rank="v",
        doc="Megatron's combined 1F1B: interleaved with one more warm-up forward, steady F and B fused (costs.FB)",
        label="combined 1F1B (v=2)",
        short="combined 1F1B",
        colour="#33A02C",
        marker="s",
        source=Source(
            "NVIDIA, Megatron-Core MoE all-to-all overlap, 2025",
            "NVIDIA/Megatron-LM: megatron/core/pipeline_parallel/combined_1f1b.py",
        ),
    ),
    ScheduleEntry(
        "v_half",
        v_half,
        ("M",),
        flush=True,
        split_backward=True,
        chunks_per_rank=2,
        doc="V-Half: controllable-memory V schedule, about half of 1F1B's activations",
        label="V-Half",
        colour="#A6CEE3",
        marker="<",
        source=Source("Qi et al., Pipeline Parallelism with Controllable Memory, NeurIPS 2024", SAIL_V),
    ),
    ScheduleEntry(
        "v_min",
        v_min,
        ("M",),
        flush=True,
        split_backward=True,
        chunks_per_rank=2,
        doc="V-Min: controllable-memory V schedule, the least activation memory",
        label="V-Min",
        colour="#1F78B4",
        marker=">",
        source=Source("Qi et al., Pipeline Parallelism with Controllable Memory, NeurIPS 2024", SAIL_V),
    ),
    ScheduleEntry(
        "bitpipe",
        bitpipe,
        ("M",),
        flush=True,
        allreduce=True,
        chunks_per_rank=2,
        semantics=sem.REPLICATED,
        doc="BitPipe: two V-shaped interleaved replicas in opposite directions, replicas' gradients all-reduced",
        label="BitPipe",
        colour="#CAB2D6",
        marker="X",
        source=Source(
            "Wu et al., BitPipe: bidirectional interleaved pipeline parallelism, arXiv 2410.19367",
            "wuhouming/BitPipe: megatron/core/pipeline_parallel/bitpipe_schedule.py",
        ),
    ),
):
    register_schedule(_entry)
