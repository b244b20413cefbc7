"""DualPipeV (docs/schedules.md#dualpipev): its constructor (its order: :mod:`rpd.schedules.family.v_shape`) and
its entry."""

from __future__ import annotations

from rpd.schedules.family.flushes import check, flush_entry, flushes
from rpd.schedules.family.v_shape import dualpipe_v_order
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, Source
from rpd.schedules.machinery.timeline import Timeline


def dualpipe_v(S: int, N: int, M: int, costs: CostModel | None = None) -> Timeline:
    """DualPipeV (torch ``ScheduleDualPipeV``, docs/schedules.md#dualpipev): V placement, overlapped F&B
    pairs (cost ``costs.FB``) and a partly split backward. Needs M >= 2S."""

    S, N, M = check(S, N, M, per_mb=3, stages_per_rank=2)
    return flushes("dualpipe_v", dualpipe_v_order(S, M), S, N, M, costs, split=True, n_stages=2 * S, v=2)


ENTRY = flush_entry(
    "dualpipe_v",
    dualpipe_v,
    split_backward=True,
    chunks_per_rank=2,
    defaults={"M": lambda S: 2 * S},
    doc="DualPipeV",
    look=Look("DualPipeV", "C6", ">"),
    source=Source("DeepSeek-AI, DeepSeek-V3 technical report, 2024", "deepseek-ai/DualPipe: dualpipe/dualpipev.py"),
)
