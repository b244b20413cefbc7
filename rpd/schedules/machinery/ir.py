"""The schedule representation: an op order per rank (the IR of torch's ``pipeline_order``).

An *order* is a list with one int32 array ``[n_ops, 4]`` per rank; row ``(kind, stage, mb,
fused)`` is one op, rows in the order the rank executes them:

* ``kind``: :data:`FWD` (F), :data:`BWD` (B, full backward), :data:`BWD_I` (I, backward with
  respect to the input; torch's BACKWARD_INPUT) or :data:`BWD_W` (W, backward with respect to
  the weights);
* ``stage``: the global stage (model chunk) index g in [0, n_stages); which rank holds it is the
  schedule's placement (docs/schedules.md#dependencies-and-placement: single, looped g mod S, V, or Chimera's two
  directions);
* ``mb``: the microbatch;
* ``fused``: 1 when the op is overlapped with the previous op of the same rank (torch's
  ``OVERLAP_F_B``): the pair starts together, once both are ready, and takes the cost model's
  ``FB`` time.

No ``None`` padding: idles are what the timer finds, as in torch's ``_simulate_comms_compute``.
Dependencies (docs/schedules.md#dependencies-and-placement), for a schedule with ``n_stages`` global stages:
F(g, j) needs F(g-1, j); B/I(g, j) needs B/I(g+1, j), or F(g, j) at the last stage, and always
its own F(g, j); W(g, j) needs I(g, j).
"""

from __future__ import annotations

import enum

import numpy as np


class Op(enum.IntEnum):
    """An op's kind; arrays hold the ints, printing says the letter (torch's ``F``, ``B``, ``I``,
    ``W``; an overlapped F and B pair is ``FB``, a flag on the later op, not a kind)."""

    IDLE = 0
    F = 1  # forward
    B = 2  # full backward
    I = 3  # noqa: E741  backward with respect to the input (torch's BACKWARD_INPUT)
    W = 4  # backward with respect to the weights (torch's BACKWARD_WEIGHT)

    def __str__(self) -> str:
        return "." if self is Op.IDLE else self.name


IDLE, FWD, BWD, BWD_I, BWD_W = Op.IDLE, Op.F, Op.B, Op.I, Op.W
KIND_CHAR = {k: str(k) for k in (FWD, BWD, BWD_I, BWD_W)}
CHAR_KIND = {c: k for k, c in KIND_CHAR.items()}


class Col(enum.IntEnum):
    """The named columns of an order's rows: ``a[:, Col.MB]``."""

    KIND = 0
    STAGE = 1
    MB = 2
    FUSED = 3


Order = list  # list[np.ndarray]: one int32 [n_ops, 4] (kind, stage, mb, fused) per rank


def action(kind: int, stage: int, mb: int, fused: int = 0) -> str:
    """torch's text of one action: stage, kind, microbatch (``2F0``; ``2FB0`` when overlapped)."""
    return f"{stage}{Op(int(kind))}{'B' if fused and Op(int(kind)) is Op.F else ''}{mb}"


def describe(kind: int, stage: int, mb: int) -> str:
    """An op as an error names it: ``stage 2, microbatch 5, W``."""
    return f"stage {stage}, microbatch {mb}, {Op(int(kind))}"


def grid(order: Order, rank: int, at: int | None = None, width: int = 12) -> str:
    """Rank ``rank``'s row of the order as torch prints it, with ``>>`` before op ``at``."""
    a = order[rank]
    lo = 0 if at is None else max(0, at - width // 2)
    cells = [("  >>" if i == at else "  ") + action(*a[i]) for i in range(lo, min(len(a), lo + width))]
    return f"rank {rank}:" + ("  ..." if lo else "") + "".join(cells) + ("  ..." if lo + width < len(a) else "")


def ops(rows) -> np.ndarray:
    """int32 [n, 4] from (kind, stage, mb) or (kind, stage, mb, fused) tuples."""
    a = np.zeros((len(rows), 4), np.int32)
    width = {len(r) for r in rows}
    if len(width) == 1:  # one conversion for the whole table (a schedule's rows share a width)
        (n,) = width
        a[:, :n] = np.array(rows, np.int32).reshape(len(rows), n)
        return a
    for i, r in enumerate(rows):
        a[i, : len(r)] = r
    return a


def shift_mb(order: Order, offset: int) -> Order:
    """The same order on microbatches ``offset + mb`` (the next flush)."""
    out = []
    for a in order:
        b = a.copy()
        b[:, Col.MB] += offset
        out.append(b)
    return out


def concat(orders: list[Order]) -> Order:
    """Rank-wise concatenation: flush after flush on every rank."""
    return [np.concatenate(per_rank) for per_rank in zip(*orders, strict=True)]


def check_complete(order: Order, n_stages: int, N: int, split: bool | None = None) -> None:
    """Raise ValueError unless every (stage, microbatch) has exactly one F and either one B or
    one I and one W, each on one rank, the fused flags pair an op with a predecessor, and a
    stage's ops of one microbatch all run on one rank."""
    rows = np.concatenate([a for a in order if len(a)]) if any(len(a) for a in order) else np.zeros((0, 4), np.int32)
    rank = np.concatenate([np.full(len(a), r) for r, a in enumerate(order)]) if rows.size else np.zeros(0, int)
    kind, g, m = rows[:, Col.KIND], rows[:, Col.STAGE], rows[:, Col.MB]
    if rows.size and (g.min() < 0 or g.max() >= n_stages or m.min() < 0 or m.max() >= N):
        raise ValueError("order names a stage or microbatch out of range")
    for k in (FWD, BWD, BWD_I, BWD_W):
        sel = kind == k
        count = np.zeros((n_stages, N), np.int64)
        np.add.at(count, (g[sel], m[sel]), 1)
        want = {FWD: 1, BWD: None, BWD_I: None, BWD_W: None}[k]
        if want is not None and not np.all(count == 1):
            bad = np.argwhere(count != 1)[0]
            raise ValueError(f"order must hold F(stage {bad[0]}, mb {bad[1]}) exactly once")
        if k == BWD:
            nb = count
        elif k == BWD_I:
            ni = count
        elif k == BWD_W:
            nw = count
    if not (np.all(ni == nw) and np.all(nb + ni == 1)):
        raise ValueError("every (stage, microbatch) needs one B, or one I and one W")
    if split is True and nb.any() and not (ni.any()):
        raise ValueError("a split-backward schedule must use I and W")
    where = np.full((n_stages, N), -1)
    where[g[kind == FWD], m[kind == FWD]] = rank[kind == FWD]
    if not np.all(where[g, m] == rank):
        raise ValueError("the ops of one (stage, microbatch) must run on one rank")
    for a in order:
        if len(a) and a[0, 3]:
            raise ValueError("the first op of a rank cannot be fused with a predecessor")
