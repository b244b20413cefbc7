"""Megatron's combined 1F1B (docs/schedules.md#combined-1f1b): interleaved 1F1B whose steady-state F
and B pairs run as one fused op, to hide the expert all-to-all of one microbatch behind the
compute of the other.

Read for meaning from ``NVIDIA/Megatron-LM: megatron/core/pipeline_parallel/combined_1f1b.py``
(``combined_1f1b_schedule_for_interleaved_pipelining``, ``combined_forward_backward_step``) and
``megatron/core/pipeline_parallel/schedules.py`` (``get_pp_rank_microbatches`` with
``overlap_moe_expert_parallel_comm``, ``get_schedule_table``), and written anew. The order is
Megatron's interleaved one (:func:`rpd.schedules.family.orders.interleaved_order`: rank r holds chunks
``c*S + r``, the schedule table of microbatch groups of ``group``) with **one more warm-up
forward**, ``w = min(2(S - 1 - r) + (v - 1)·group + 1, v·M)``, "so that the forward and backward
computations are independent in all 1F1B steps"; each steady-state step (the F of virtual
microbatch k + w and the B of virtual microbatch k) is one fused pair that starts once both are
ready and costs ``costs.FB`` (default F + B: no gain; a calibrated F&B below F + B models the
hidden all-to-all). Megatron runs it with virtual pipelining only: v >= 2. Synchronous, one
flush per minibatch; the extra warm-up forward holds one more chunk activation than
interleaved 1F1B on every rank whose warm-up is not capped.
"""

from __future__ import annotations

import dataclasses

from rpd.schedules.family.flushes import check, flush_entry, flushes
from rpd.schedules.family.orders import check_interleaved, megatron_table
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, Source
from rpd.schedules.machinery.ir import BWD, FWD, Order, ops
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_int

KIND = "combined_1f1b"


def warmup(S: int, M: int, v: int, group: int, r: int) -> int:
    """Warm-up forwards of rank r: interleaved 1F1B's plus one, capped at v·M."""
    return min(2 * (S - 1 - r) + (v - 1) * group + 1, v * M)


def combined_1f1b_order(S: int, M: int, v: int, group: int) -> Order:
    """One flush (module doc): warm-up forwards, fused (F, B) pairs (the B row has ``fused = 1``),
    then the remaining backwards; backwards walk the table with chunk v - 1 - c."""
    table = megatron_table(M, v, group)
    n = v * M
    out = []
    for r in range(S):
        w = warmup(S, M, v, group, r)
        fwd = [(FWD, c * S + r, j, 0) for j, c in table]
        bwd = [(BWD, (v - 1 - c) * S + r, j, 0) for j, c in table]
        rows = fwd[:w]
        for k in range(n - w):
            rows += [fwd[k + w], bwd[k][:3] + (1,)]
        rows += bwd[n - w :]
        out.append(ops(rows))
    return out


@dataclasses.dataclass(frozen=True)
class Params:
    """Combined 1F1B's own parameters."""

    v: int = 2  # model chunks per rank (>= 2; costs per chunk)
    group: int | None = None  # Megatron's microbatch group; None: S

    def resolve(self, S: int) -> Params:
        return dataclasses.replace(self, group=S if self.group is None else self.group)


def combined_1f1b(
    S: int, N: int, M: int, v: int = 2, costs: CostModel | None = None, group: int | None = None
) -> Timeline:
    """Combined 1F1B on S ranks with v >= 2 chunks each (costs per chunk; the fused pair costs
    ``costs.FB``), N microbatches in flushes of M, Megatron's microbatch group ``group``
    (default S; S <= group <= M and M mod group in {0} or >= S)."""
    v = check_int("v", v)
    if v < 2:
        raise ValueError(f"combined_1f1b runs with virtual pipelining only (Megatron): v must be >= 2, got v={v}")
    S, N, M = check(S, N, M, stages_per_rank=v)
    group = S if group is None else check_int("group", group)
    check_interleaved(S, M, v, group)
    return flushes(KIND, combined_1f1b_order(S, M, v, group), S, N, M, costs, n_stages=S * v, v=v)


ENTRY = flush_entry(
    "combined_1f1b",
    combined_1f1b,
    params_type=Params,
    chunks_per_rank="v",
    doc="Megatron's combined 1F1B: interleaved with one more warm-up forward, steady F and B fused (costs.FB)",
    look=Look("combined 1F1B (v=2)", "#B2DF8A", "s", short="combined 1F1B"),  # light green: interleaved has C2
    source=Source(
        "NVIDIA, Megatron-Core MoE all-to-all overlap, 2025",
        "NVIDIA/Megatron-LM: megatron/core/pipeline_parallel/combined_1f1b.py",
    ),
)
