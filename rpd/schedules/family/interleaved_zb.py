"""Interleaved zero bubble (torch ``ScheduleInterleavedZeroBubble``; docs/schedules.md#looped-bfs-and-interleaved-zero-bubble).

Read for meaning from ``pytorch/pytorch: torch/distributed/pipelining/schedules.py``
(``ScheduleInterleavedZeroBubble._calculate_single_rank_operations`` and ``_get_1f1b_rank_ops``
with ``enable_zero_bubble=True``) and written anew. Rank r holds the v chunks ``c*S + r``
(looped placement). torch splits M microbatches into ``rounds = max(1, M // S)`` rounds of
``mpr = M / rounds`` (M must be a multiple of ``rounds``). Step k of the rank's forward stream
runs chunk ``(k // mpr) mod v``; its k-th backward (I, the input half) runs chunk
``v - 1 - (k // mpr) mod v``; each chunk counts its own microbatches in turn. Per flush:

1. warm-up: ``w = min((v - 1)·mpr + (S - 1 - r), v·M)`` forwards (one hop fewer per rank than
   interleaved 1F1B's ``2(S - 1 - r)``);
2. steady state: for k = 0..vM - w - 1: F(step w + k), I(backward k);
3. cool-down: the remaining I's;
   after I number k (steady state or cool-down), once k >= r, the W of the oldest I still
   without one (W is delayed by r backwards on rank r, as ZB-H1);
4. the W's still pending, oldest first.

torch's ``_add_bubbles_to_actions`` only inserts ``None`` slots (the IR drops them; the timer
finds the idles). Synchronous, one flush per minibatch.
"""

from __future__ import annotations

import dataclasses
from collections import deque

from rpd.schedules.family.flushes import check, flush_entry, flushes
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import TORCH, Look, Source
from rpd.schedules.machinery.ir import BWD_I, BWD_W, FWD, Order, ops
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_int

KIND = "interleaved_zb"


def rounds(S: int, M: int) -> tuple[int, int]:
    """(rounds, microbatches per round) of torch's flexible interleaving; ValueError naming M
    unless M is a multiple of the rounds."""
    n = max(1, M // S)
    if M % n:
        raise ValueError(
            f"interleaved_zb: M must be a multiple of max(1, M // S) = {n} (torch's rounds), got M={M}, S={S}"
        )
    return n, M // n


def warmup(S: int, M: int, v: int, r: int) -> int:
    """Warm-up forwards of rank r: min((v - 1)·mpr + S - 1 - r, v·M)."""
    return min((v - 1) * rounds(S, M)[1] + S - 1 - r, v * M)


def interleaved_zb_order(S: int, M: int, v: int) -> Order:
    """One flush of the order above (module doc)."""
    mpr = rounds(S, M)[1]
    n = v * M
    out = []
    for r in range(S):
        w = warmup(S, M, v, r)
        nf: dict[int, int] = {}
        ni: dict[int, int] = {}
        pending: deque[tuple[int, int]] = deque()
        rows: list[tuple[int, int, int]] = []

        def forward(k: int) -> None:
            g = ((k // mpr) % v) * S + r
            rows.append((FWD, g, nf.setdefault(g, 0)))
            nf[g] += 1

        def backward(k: int) -> None:
            g = (v - 1 - (k // mpr) % v) * S + r
            j = ni.setdefault(g, 0)
            ni[g] += 1
            rows.append((BWD_I, g, j))
            pending.append((g, j))
            if k >= r:
                rows.append((BWD_W, *pending.popleft()))

        for k in range(w):
            forward(k)
        for k in range(n - w):
            forward(w + k)
            backward(k)
        for k in range(n - w, n):
            backward(k)
        rows += [(BWD_W, g, j) for g, j in pending]
        out.append(ops(rows))
    return out


@dataclasses.dataclass(frozen=True)
class Params:
    """Interleaved zero bubble's own parameters."""

    v: int = 2  # model chunks per rank (costs per chunk)


def interleaved_zb(S: int, N: int, M: int, v: int = 2, costs: CostModel | None = None) -> Timeline:
    """Interleaved zero bubble on S ranks with v chunks each (S·v global stages; costs per
    chunk), N microbatches in flushes of M; split backward (I, W)."""
    v = check_int("v", v)
    S, N, M = check(S, N, M, per_mb=3, stages_per_rank=v)
    return flushes(KIND, interleaved_zb_order(S, M, v), S, N, M, costs, n_stages=S * v, v=v, split=True)


ENTRY = flush_entry(
    "interleaved_zb",
    interleaved_zb,
    params_type=Params,
    split_backward=True,
    chunks_per_rank="v",
    doc="interleaved zero bubble: interleaved 1F1B, split backward, W delayed r backwards",
    look=Look("interleaved ZB (v=2)", "#FB9A99", "^", short="interleaved ZB"),
    source=Source("Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024", TORCH),
)
