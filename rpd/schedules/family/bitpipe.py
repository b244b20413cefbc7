"""BitPipe (Wu et al., arXiv 2410.19367; docs/schedules.md#bitpipe): two V-shaped interleaved
pipelines in opposite directions on S ranks, 2 replicas x 2 chunks per rank.

Read for meaning from ``wuhouming/BitPipe: megatron/core/pipeline_parallel/bitpipe_schedule.py``
(``forward_backward_pipelining_with_BitPipe``, @6fb0e22f) and written anew. The model is cut into
2S stages (chunks). The *down* replica runs them in ZB-V's V (stage g on rank g for g < S, on
rank 2S-1-g after); the *up* replica in the mirrored V (stage g on rank S-1-g for g < S, on rank
g-S after). Rank r holds the source's four model chunks: 0 = down stage r, 1 = up stage S-1-r,
2 = down stage 2S-1-r, 3 = up stage S+r. A flush of M microbatches (S even, M a multiple of S)
sends microbatches 0..M/2-1 down and M/2..M-1 up.

The source numbers the 2M chunk forwards of a flush by *virtual* ids v = 0..2M-1: v runs chunk
``(v mod S) // (S/2)``, plus 2 in the second half (v >= M), and the k-th id of a chunk is its
k-th microbatch. Rank r, with h = r // (S/2) (which half) and n0 = S/2 - r (first half) or
r - S/2 + 1, lists its forwards per round of S/2 ids of each chunk: n0 of chunk h, then pairs
(chunk 1-h, chunk h), pairs (chunk 1-h, chunk 3-h), pairs (chunk 2+h, chunk 3-h), n0 of chunk 2+h
(:func:`forward_ids`); its backwards the same with chunks 2+h, 3-h, 1-h, h in those roles
(:func:`backward_ids`). It then runs, with w = 3S/2 + min(r, S-1-r) warm-up forwards and
u = 2S - w:

1. the first w forwards;
2. per round but the last (M/S - 1 of them): u pairs (F, B), w - u + 1 B's, u - 1 pairs (F, B),
   w - u + 1 F's;
3. u pairs (F, B), then the remaining B's.

Between its last backwards each rank all-reduces chunks 2 and 3 with their copies ("eager"
gradient synchronisation, overlapped with the remaining backwards: not timed here) and, after
its last backward, chunks 0 and 1: the flush's gap, ``costs.allreduce_ticks(values)``.
Synchronous: the two replicas' gradients are all-reduced before the step. Full backwards (no
I/W split).
"""

from __future__ import annotations

from rpd.schedules.family.flushes import allreduce_gap, flush_entry, flushes, whole_flushes
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.entry import Look, Source
from rpd.schedules.machinery.ir import BWD, FWD, Order, ops
from rpd.schedules.machinery.timeline import Timeline
from rpd.validation import check_int

KIND = "bitpipe"


def check(S: int, M: int) -> None:
    """The source's requirements, as ValueErrors naming S and M."""
    if S % 2:
        raise ValueError(f"bitpipe needs an even number of ranks S (two halves), got S={S}")
    if M % S:
        raise ValueError(f"bitpipe needs M a multiple of S (whole rounds), got M={M}, S={S}")


def chunk_of(S: int, M: int, v: int) -> int:
    """The model chunk (0..3) of virtual forward id v."""
    return (v % S) // (S // 2) + (2 if v >= M else 0)


def _ids_by_chunk(S: int, M: int) -> list[list[int]]:
    by: list[list[int]] = [[], [], [], []]
    for v in range(2 * M):
        by[chunk_of(S, M, v)].append(v)
    return by


def _rounds(S: int, M: int, r: int, roles: tuple[int, int, int, int]) -> list[int]:
    """Rank r's ids, round after round, for chunk roles (a, b, c, d): n0 of a; (b, a) pairs;
    (b, c) pairs; (d, c) pairs; n0 of d."""
    by = _ids_by_chunk(S, M)
    half = S // 2
    n0 = half - r if r < half else r - half + 1
    a, b, c, d = roles
    out = []
    for j in range(M // S):
        base = j * half
        out += [by[a][base + i] for i in range(n0)]
        for i in range(half - n0):
            out += [by[b][base + i], by[a][base + i + n0]]
        for i in range(n0):
            out += [by[b][base + i + half - n0], by[c][base + i]]
        for i in range(half - n0):
            out += [by[d][base + i], by[c][base + i + n0]]
        out += [by[d][base + i + half - n0] for i in range(n0)]
    return out


def forward_ids(S: int, M: int, r: int) -> list[int]:
    h = r // (S // 2)
    return _rounds(S, M, r, (h, 1 - h, 3 - h, 2 + h))


def backward_ids(S: int, M: int, r: int) -> list[int]:
    h = r // (S // 2)
    return _rounds(S, M, r, (2 + h, 3 - h, 1 - h, h))


def _op(S: int, M: int, r: int, kind: int, v: int, position: dict[int, int]) -> tuple[int, int, int]:
    """(kind, global stage, microbatch) of virtual id v on rank r (``position``: v's index among
    its chunk's ids, which is its microbatch in its replica)."""
    c = chunk_of(S, M, v)
    stage = (r, S - 1 - r, 2 * S - 1 - r, S + r)[c]
    return kind, stage, position[v] + (M // 2 if c % 2 else 0)


def bitpipe_order(S: int, M: int) -> Order:
    """One flush of M microbatches on S ranks (module doc)."""
    S, M = check_int("S", S, minimum=2), check_int("M", M)
    check(S, M)
    position = {v: k for ids in _ids_by_chunk(S, M) for k, v in enumerate(ids)}
    out = []
    for r in range(S):
        f, b = forward_ids(S, M, r), backward_ids(S, M, r)
        w = 3 * S // 2 + min(r, S - 1 - r)
        u = 2 * S - w
        seq: list[tuple[str, int]] = [("F", k) for k in range(w)]
        nf, nb = w, 0
        for _ in range(M // S - 1):
            for _ in range(u):
                seq += [("F", nf), ("B", nb)]
                nf, nb = nf + 1, nb + 1
            seq += [("B", nb + i) for i in range(w - u + 1)]
            nb += w - u + 1
            for _ in range(u - 1):
                seq += [("F", nf), ("B", nb)]
                nf, nb = nf + 1, nb + 1
            seq += [("F", nf + i) for i in range(w - u + 1)]
            nf += w - u + 1
        for _ in range(u):
            seq += [("F", nf), ("B", nb)]
            nf, nb = nf + 1, nb + 1
        seq += [("B", k) for k in range(nb, 2 * M)]
        rows = [_op(S, M, r, FWD if t == "F" else BWD, (f if t == "F" else b)[k], position) for t, k in seq]
        out.append(ops(rows))
    return out


def bitpipe(S: int, N: int, M: int, costs: CostModel | None = None, values: int = 0) -> Timeline:
    """BitPipe on S ranks (2S chunk stages per replica; costs per chunk), N microbatches in flushes
    of M; each flush ends with the all-reduce of the replicas' first chunks,
    ``costs.allreduce_ticks(values)`` ticks (``values`` per stage)."""
    S, N, M = check_int("S", S, minimum=2), check_int("N", N), check_int("M", M)
    gap = allreduce_gap(costs, values)
    whole_flushes(N, M)
    return flushes(KIND, bitpipe_order(S, M), S, N, M, costs, gap=gap, n_stages=2 * S, v=2)


ENTRY = flush_entry(
    "bitpipe",
    bitpipe,
    allreduce=True,
    chunks_per_rank=2,
    semantics="replicated",
    doc="BitPipe: two V-shaped interleaved replicas in opposite directions, replicas' gradients all-reduced",
    look=Look("BitPipe", "#CAB2D6", "X"),
    source=Source(
        "Wu et al., BitPipe: bidirectional interleaved pipeline parallelism, arXiv 2410.19367",
        "wuhouming/BitPipe: megatron/core/pipeline_parallel/bitpipe_schedule.py",
    ),
)
