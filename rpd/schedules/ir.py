"""The schedule representation: an op order per rank (the IR of torch's ``pipeline_order``).

An *order* is a list with one int32 array ``[n_ops, 4]`` per rank; row ``(kind, stage, mb,
fused)`` is one op, rows in the order the rank executes them:

* ``kind``: :data:`FWD` (F), :data:`BWD` (B, full backward), :data:`BWD_I` (I, backward with
  respect to the input; torch's BACKWARD_INPUT) or :data:`BWD_W` (W, backward with respect to
  the weights);
* ``stage``: the global stage (model chunk) index g in [0, n_stages); which rank holds it is the
  schedule's placement (ZOO.md §2.1: single, looped g mod S, V, or Chimera's two directions);
* ``mb``: the microbatch;
* ``fused``: 1 when the op is overlapped with the previous op of the same rank (torch's
  ``OVERLAP_F_B``): the pair starts together, once both are ready, and takes the cost model's
  ``FB`` time.

No ``None`` padding: idles are what the timer finds, as in torch's ``_simulate_comms_compute``.
Dependencies (ZOO.md §2.1), for a schedule with ``n_stages`` global stages:
F(g, j) needs F(g-1, j); B/I(g, j) needs B/I(g+1, j), or F(g, j) at the last stage, and always
its own F(g, j); W(g, j) needs I(g, j).
"""

from __future__ import annotations

import numpy as np

IDLE, FWD, BWD, BWD_I, BWD_W = 0, 1, 2, 3, 4
KIND_CHAR = {FWD: "F", BWD: "B", BWD_I: "I", BWD_W: "W"}
CHAR_KIND = {c: k for k, c in KIND_CHAR.items()}
Order = list  # list[np.ndarray]: one int32 [n_ops, 4] (kind, stage, mb, fused) per rank


def ops(rows) -> np.ndarray:
    """int32 [n, 4] from (kind, stage, mb) or (kind, stage, mb, fused) tuples."""
    a = np.zeros((len(rows), 4), np.int32)
    for i, r in enumerate(rows):
        a[i, : len(r)] = r
    return a


def shift_mb(order: Order, offset: int) -> Order:
    """The same order on microbatches ``offset + mb`` (the next flush)."""
    out = []
    for a in order:
        b = a.copy()
        b[:, 2] += offset
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
    kind, g, m = rows[:, 0], rows[:, 1], rows[:, 2]
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
