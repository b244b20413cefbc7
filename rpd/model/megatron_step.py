"""One Megatron-LM training step as a replay program (docs/replay.md#the-dependency-model): every
(dp rank, stage) worker's compute in a schedule's order (rpd's orders,
:mod:`rpd.schedules.family.orders`), the pipeline's p2p transfers, the data-parallel collectives
and the optimizer, placed as Megatron places them, for
:func:`rpd.schedules.machinery.measured.replay`.

Each slot stands for one or more trace ops (*halves*: a fused ``send_forward_recv_backward`` is
one slot of two halves), keyed as the trace keys them: (dp rank, stage, op type, seq), where
compute ops use seq = chunk * M + microbatch and the others their count on the worker.

Placement (Lin et al.'s dependency model, ``analyzer/dependency_model.py``, read for meaning;
Megatron's ``forward_backward_pipelining_without_interleaving``):

* p2p ``"megatron"``: blocking rendezvous on the compute stream. Before a compute op, its recv
  (forward recv when the chunk is not the model's first, backward recv when not its last);
  after it, its send; a send fused with the next op's recv when the two ops differ in
  direction (F then B: ``send_forward_recv_backward``; B then F: ``send_backward_recv_forward``).
  The k-th forward send of stage s pairs with the k-th forward recv of stage s + 1 (mod pp).
* p2p ``"async"``: no p2p slots; F(g, j) starts after F(g-1, j) ends plus the forward latency of
  stage g-1, B or I(g, j) after B or I(g+1, j) plus the backward latency of stage g+1
  (non-blocking sends, the zero-bubble runtimes' assumption); W(g, j) after I(g, j).
* Data parallel: ``params-all-gather`` before the first forward of its chunk,
  ``grads-reduce-scatter`` after the backward, both collectives across dp ranks; when the trace
  has ``separate-grads-all-reduce`` (Megatron's overlapped gradient reduce), the reduce-scatter
  of a chunk runs on the worker's second stream after the chunk's last backward.
* The tail: ``gc`` → ``layernorm-grads-all-reduce`` → ``embedding-grads-all-reduce`` (stage 0
  with the last stage) → [``grads-reduce-scatter``] → [``separate-grads-all-reduce``] →
  ``optimizer-clip-main-grad`` (a collective over every stage and dp rank) → ``optimizer``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.model.job_layout import JobLayout
from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, FWD, Col, Order
from rpd.schedules.machinery.measured import Program

F_OP, B_OP = "forward-compute", "backward-compute"
AG, RS, SEP = "params-all-gather", "grads-reduce-scatter", "separate-grads-all-reduce"
TAIL = ("gc", "layernorm-grads-all-reduce", "embedding-grads-all-reduce")
CLIP, OPT = "optimizer-clip-main-grad", "optimizer"


@dataclasses.dataclass(frozen=True)
class Step:
    """A step's program and its halves: ``half_slot`` [h] (the slot a half belongs to, halves
    sorted by slot), ``half_dp``, ``half_stage``, ``half_optype``, ``half_seq`` (the trace key),
    ``half_scale`` (the share of the trace op's duration: 1, or a split backward's part),
    ``half_pair`` (the rendezvous a half's measured transfer is read in, -1: none); ``slot_dp``,
    ``slot_stage`` [n] and ``optimizer`` (the slots whose end ends the step)."""

    program: Program
    half_slot: np.ndarray
    half_dp: np.ndarray
    half_stage: np.ndarray
    half_optype: np.ndarray
    half_seq: np.ndarray
    half_scale: np.ndarray
    half_pair: np.ndarray
    slot_dp: np.ndarray
    slot_stage: np.ndarray
    optimizer: np.ndarray


class _Builder:
    def __init__(self) -> None:
        self.stream: list[int] = []
        self.dp: list[int] = []
        self.stage: list[int] = []
        self.halves: list[tuple[int, int, int, str, int, float, object]] = []
        self.deps: list[tuple[int, int, int]] = []

    def slot(self, stream: int, d: int, s: int, halves) -> int:
        x = len(self.stream)
        self.stream.append(stream)
        self.dp.append(d)
        self.stage.append(s)
        for optype, seq, scale, pair in halves:
            self.halves.append((x, d, s, optype, seq, scale, pair))
        return x

    def build(self) -> Step:
        n = len(self.stream)
        parent = list(range(n))

        def find(a: int) -> int:
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        owner: dict[object, int] = {}
        for x, *_, pair in self.halves:
            if pair is None:
                continue
            if pair in owner:
                parent[find(x)] = find(owner[pair])
            else:
                owner[pair] = x
        in_group = {x for x, *_, pair in self.halves if pair is not None}
        group = np.array([find(x) if x in in_group else -1 for x in range(n)], np.int64)
        pair_id = {p: i for i, p in enumerate(owner)}
        h = self.halves
        deps = np.array(self.deps, np.int64).reshape(-1, 3)
        program = Program(np.array(self.stream, np.int64), group, deps[:, 0], deps[:, 1], deps[:, 2])
        optimizer = np.array(sorted({x for x, *_rest in h if _rest[2] == OPT}), np.int64)
        return Step(
            program,
            np.array([r[0] for r in h], np.int64),
            np.array([r[1] for r in h], np.int64),
            np.array([r[2] for r in h], np.int64),
            np.array([r[3] for r in h], dtype=object),
            np.array([r[4] for r in h], np.int64),
            np.array([r[5] for r in h], np.float64),
            np.array([-1 if r[6] is None else pair_id[r[6]] for r in h], np.int64),
            np.array(self.dp, np.int64),
            np.array(self.stage, np.int64),
            optimizer,
        )


def build_step(
    layout: JobLayout,
    order: Order,
    M: int,
    present: dict[int, set[str]],
    p2p: str = "megatron",
    dp_sync: bool = True,
) -> Step:
    """The program of one step of ``layout`` running ``order`` (one rank's rows per stage;
    global stage g on rank g mod pp, chunk g // pp) over ``M`` microbatches; ``present[s]``:
    the op types stage s's trace has (the tail and DP ops placed only where present); ``p2p``:
    ``"megatron"`` or ``"async"`` (module docstring); ``dp_sync=False`` drops the dp
    collectives (LocalSGD's local steps: each dp rank's pipeline alone)."""
    pp, n_dp = layout.pp, layout.dp
    G = max(int(a[:, Col.STAGE].max()) for a in order if len(a)) + 1
    overlap = any(SEP in present[s] for s in range(pp))
    b = _Builder()
    P = n_dp * pp
    for d in range(n_dp):
        last_b: dict[tuple[int, int], int] = {}
        compute: dict[tuple[int, int, int, int], int] = {}  # (kind, g, mb) -> slot, for async edges
        tails: dict[int, list[int]] = {}
        for s in range(pp):
            w = d * pp + s
            seqs: dict[str, int] = {}

            def nxt(optype: str, _seqs=seqs) -> int:
                k = _seqs.get(optype, 0)
                _seqs[optype] = k + 1
                return k

            rows = order[s]
            chunks = sorted({int(g) // pp for g in rows[:, Col.STAGE]})
            ag_slot: dict[int, int] = {}
            if dp_sync and AG in present[s]:
                for c in chunks:
                    stream = P + w if overlap else w
                    ag_slot[c] = b.slot(stream, d, s, [(AG, c, 1.0, ("ag", s, c))])
            seen_f: set[int] = set()

            def recv(kind: int, g: int, _s=s, _d=d):
                if kind == FWD and g > 0:
                    k = nxt("forward-recv")
                    return ("forward-recv", k, 1.0, ("f", _d, (_s - 1) % pp, k))
                if kind in (BWD, BWD_I) and g < G - 1:
                    k = nxt("backward-recv")
                    return ("backward-recv", k, 1.0, ("b", _d, (_s + 1) % pp, k))
                return None

            def send(kind: int, g: int, _s=s, _d=d):
                if kind == FWD and g < G - 1:
                    k = nxt("forward-send")
                    return ("forward-send", k, 1.0, ("f", _d, _s, k))
                if kind in (BWD, BWD_I) and g > 0:
                    k = nxt("backward-send")
                    return ("backward-send", k, 1.0, ("b", _d, _s, k))
                return None

            pending_recv = None  # a recv already fused into the previous slot
            for i, (kind, g, mb, _f) in enumerate(rows.tolist()):
                c = g // pp
                if p2p == "megatron" and pending_recv is None:
                    r = recv(kind, g)
                    if r is not None:
                        b.slot(w, d, s, [r])
                pending_recv = None
                optype, scale = (F_OP, 1.0) if kind == FWD else (B_OP, 0.5 if kind in (BWD_I, BWD_W) else 1.0)
                x = b.slot(w, d, s, [(optype, c * M + mb, scale, None)])
                compute[(kind, g, mb, d)] = x
                if kind == FWD and c not in seen_f and c in ag_slot:
                    seen_f.add(c)
                    if overlap:
                        b.deps.append((ag_slot[c], x, -1))
                if kind in (BWD, BWD_W):
                    last_b[(s, c)] = x
                if p2p != "megatron" or kind == BWD_W:
                    continue
                sent = send(kind, g)
                nxt_row = rows[i + 1].tolist() if i + 1 < len(rows) else None
                # Megatron fuses a send with the next op's recv when the direction turns
                if nxt_row is not None and (nxt_row[0] == FWD) != (kind == FWD):
                    pending_recv = recv(nxt_row[0], nxt_row[1])
                halves = [h for h in (sent, pending_recv) if h is not None]
                if halves:
                    b.slot(w, d, s, halves)
            tails[s] = _tail(b, w, P, d, s, pp, present[s], chunks, last_b, overlap, dp_sync)
        if p2p == "async":
            _async_edges(b, compute, d, G, pp)
    return b.build()


def _tail(b, w, P, d, s, pp, present, chunks, last_b, overlap, dp_sync) -> list[int]:
    out = []
    for optype in TAIL:
        if optype not in present or (optype == TAIL[2] and s not in (0, pp - 1)):
            continue
        pair = ("emb", d) if optype == TAIL[2] else None
        out.append(b.slot(w, d, s, [(optype, 0, 1.0, pair)]))
    last_rs = None
    if dp_sync and RS in present:
        for c in reversed(chunks) if overlap else chunks:
            x = b.slot(P + w if overlap else w, d, s, [(RS, c, 1.0, ("rs", s, c))])
            if overlap:
                b.deps.append((last_b[(s, c)], x, -1))
            last_rs = x
    if dp_sync and overlap and SEP in present:
        x = b.slot(w, d, s, [(SEP, 0, 1.0, ("sep", s))])
        if last_rs is not None:
            b.deps.append((last_rs, x, -1))
    if CLIP in present:
        out.append(b.slot(w, d, s, [(CLIP, 0, 1.0, ("clip",) if dp_sync else ("clip", d))]))
    out.append(b.slot(w, d, s, [(OPT, 0, 1.0, None)]))
    return out


def _async_edges(b: _Builder, compute: dict, d: int, G: int, pp: int) -> None:
    """Latency row 2 * pp * 0 + s: forward out of stage s; pp + s: backward out of stage s."""
    for (kind, g, mb, dd), x in compute.items():
        if dd != d:
            continue
        if kind == FWD and g > 0:
            b.deps.append((compute[(FWD, g - 1, mb, d)], x, (g - 1) % pp))
        elif kind in (BWD, BWD_I):
            nk = BWD if (BWD, g + 1, mb, d) in compute else BWD_I
            if g < G - 1:
                b.deps.append((compute[(nk, g + 1, mb, d)], x, pp + (g + 1) % pp))
            b.deps.append((compute[(FWD, g, mb, d)], x, -1))
        elif kind == BWD_W:
            b.deps.append((compute[(BWD_I, g, mb, d)], x, -1))
