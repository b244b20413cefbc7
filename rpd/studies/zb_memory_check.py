"""The plan's peak bytes per GPU against the zero-bubble paper's measured runs, a development
comparison (docs/plan.md#the-zero-bubble-papers-runs-which-bytes-they-held).

Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024, arXiv 2401.10241): Table 3 gives the
four models (layers, heads, hidden size, sequence 1024, p GPUs = pipeline stages, microbatch
size) and Table 4 each schedule's "Memory (GB)", the same at every microbatch count of a model.
What the runs held, read from the paper's code (``sail-sg/zero-bubble-pipeline-parallelism``, tag
``zero-bubble-v0.1.0``, ``examples/pretrain_zero_bubble.sh`` and ``megatron/``):

* fp16 mixed precision with Adam, no distributed optimizer, TP 1, D 1 (#GPU = p), no sequence
  parallelism, no flash attention, no recomputation: per parameter 2 B weights, 4 B fp32
  master, 8 B Adam, and 2 B gradients (fp32 accumulation is on only under ``--bf16``);
  activations s·b·h(34 + 5as/h) per layer (the paper's Table 1), as the plan counts them;
* ``--allow-padding-num-layers``: the layer count is padded up to a multiple of p and the
  padding taken from the last and the first stage (``megatron/model/transformer.py``,
  ``get_offset``; the paper, §5.1: "both the initial and final pipeline stages possess one
  fewer transformer layer"), so with L = p·k − 2 layers the end stages hold k − 1 and the rest
  k: the plan's ``padded`` partition (:func:`paper_bounds`). Its ``even`` one gives them k;
* tied input and output embeddings (Megatron's default), learned positions; the vocabulary is
  the sample dataset's SentencePiece model, not stated: 32,000 rows is the size whose total
  parameter count rounds to every name of Table 3 (1.5B, 6.2B, 14.6B, 28.3B; GPT-2's 50,304
  would give 1.5B, 6.3B, 14.7B, 28.4B), so it is taken from the names, not from the memory.

ZB-1p and ZB-2p are searched schedules whose activation memory is capped at p·M_B and 2p·M_B;
the plan's nearest are ZB-H1 (``zb_h1``, the 1F1B peak) and ZB-H2 (``zb_h2``, sail-sg's
k = 2p). The paper's 1F1B-I (one layer per chunk) has no counterpart here with uneven stages and
is left out. The peak of a run is the largest over its ranks (Megatron prints
``torch.cuda.max_memory_allocated`` per rank; the paper does not say which rank it reports).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.model.hardware import preset as hardware_preset
from rpd.model.layers import gpt_model
from rpd.model.memory import RankMemory, rank_memory
from rpd.model.shapes import GPTConfig
from rpd.model.stages import partition, stage_costs, stages
from rpd.registry.schedules import timeline
from rpd.validation import check_choice


@dataclasses.dataclass(frozen=True)
class Run:
    """One model of the paper's Table 3 and its Table 4 "Memory (GB)" per schedule."""

    name: str
    n_layer: int
    n_head: int
    d_model: int
    p: int
    micro_batch: int
    M: int  # the smallest microbatch count of Table 4 (the memory column is the same at each)
    gb: dict[str, float]  # paper schedule -> GB


RUNS = (
    Run("1.5B", 22, 24, 2304, 8, 6, 24, {"1F1B": 30, "ZB-1p": 32, "ZB-2p": 59, "1F1B-I": 40}),
    Run("6.2B", 30, 32, 4096, 8, 3, 24, {"1F1B": 39, "ZB-1p": 42, "ZB-2p": 70, "1F1B-I": 48}),
    Run("14.6B", 46, 40, 5120, 16, 1, 48, {"1F1B": 32, "ZB-1p": 33, "ZB-2p": 51, "1F1B-I": 39}),
    Run("28.3B", 62, 48, 6144, 32, 1, 96, {"1F1B": 43, "ZB-1p": 44, "ZB-2p": 74, "1F1B-I": 58}),
)
VOCAB = 32_000  # from the models' names (module docstring)
SEQ = 1024
SCHEDULES = {"1F1B": "1f1b", "ZB-1p": "zb_h1", "ZB-2p": "zb_h2"}  # paper name -> the plan's nearest
PARTITIONS = ("paper", "even")
HARDWARE = "a100_80g_flat"  # the runs' A100 80GB; bytes do not depend on it


def model_of(run: Run):
    """The run's model as the plan builds it (fp16 bytes as bf16: 2 B a value)."""
    cfg = GPTConfig(run.n_layer, run.d_model, run.n_head, SEQ, VOCAB, micro_batch=run.micro_batch)
    return gpt_model(cfg, name=f"zb_{run.name}")


def paper_bounds(run: Run) -> tuple[tuple[int, int], ...]:
    """Layer ranges of the run's model (embedding, blocks, head) on p stages as the paper's code
    cuts them: the plan's ``padded`` partition (:func:`rpd.model.stages.partition`)."""
    return partition(model_of(run), run.p, "padded")


def plan_memory(run: Run, schedule: str, how: str = "paper") -> RankMemory:
    """Bytes per rank of the paper's run ``run`` under ``schedule`` (a key of
    :data:`SCHEDULES`), its layers cut as the paper's code does (``paper``) or by the plan's
    default (``even``): fp16 mixed precision, Adam, 2-byte gradients, no ZeRO."""
    check_choice("partition", how, PARTITIONS)
    name = SCHEDULES[check_choice("schedule", schedule, tuple(SCHEDULES))]
    model, hw = model_of(run), hardware_preset(HARDWARE)
    bounds = partition(model, run.p, "padded" if how == "paper" else "even", hw)
    st = stages(model, bounds, hw)
    costs, _ = stage_costs(st, hw)
    tl = timeline(name, run.p, run.M, run.M, costs)
    return rank_memory(tl, st, optimizer_states=2, precision="bf16_mixed", grad_bytes=2)


def table(
    how: str = "paper", runs: tuple[Run, ...] = RUNS, schedules: tuple[str, ...] = tuple(SCHEDULES)
) -> list[dict]:
    """One row per (run, schedule): the paper's GB, the plan's peak (max over ranks) in GB
    (10⁹ B) and GiB (2³⁰ B; the paper does not say which), the rank that peaks, its static and
    activation (with buffers) bytes, and plan / paper in each unit."""
    rows = []
    for run in runs:
        for schedule in schedules:
            mem = plan_memory(run, schedule, how)
            peak = mem.peak
            r = int(np.argmax(peak))
            rows.append(
                {
                    "model": run.name,
                    "p": run.p,
                    "schedule": schedule,
                    "plan_schedule": SCHEDULES[schedule],
                    "partition": how,
                    "paper_gb": run.gb[schedule],
                    "plan_gb": float(peak[r]) / 1e9,
                    "plan_gib": float(peak[r]) / 2**30,
                    "peak_rank": r,
                    "static_gb": float(mem.static[r]) / 1e9,
                    "activations_gb": float(mem.activations[r] + mem.buffers[r]) / 1e9,
                    "ratio_gb": float(peak[r]) / 1e9 / run.gb[schedule],
                    "ratio_gib": float(peak[r]) / 2**30 / run.gb[schedule],
                }
            )
    return rows
