"""Chimera's op order (bidirectional pipelines, SC'21; docs/schedules.md#chimera), one flush of M microbatches.

Anchor: ``Shigangli/Chimera chimera_pipeline_rank.py`` (@6b78ac7d),
``AutoGeneratePipelineRank(D, 2, N).get_schedule()`` with its ``MyPipeLine``: D workers, D
stages, two pipelines. The *down* pipeline runs stage g on worker g, the *up* one on worker
D-1-g; both start at slot 0. The anchor works in unit slots (F = B = one slot): a pipeline
injects a microbatch every 2 slots, which walks forward one stage per slot, turns around at
the last stage (its B there runs the slot after its F), and walks back one stage per slot.

Microbatches are handed out in *units* of D/2 (the last unit takes what is left). Unit k gets
microbatches ``k*D/2 .. k*D/2 + D/2 - 1`` (fewer for the last), runs in the down pipeline when
k is even and in the up pipeline when k is odd, and starts at slot ``t0 = 2D * (k // 2)``, the
slot after the previous unit of its direction returned its first microbatch. So microbatch
j = k*D/2 + x runs stage g

    F at slot t0 + 2x + g,    B at slot t0 + 2x + 2D - 1 - g,

on worker g (down) or D-1-g (up). Every worker runs its ops in slot order; no two ops of a
worker share a slot. The anchor's gradient-sync ``s`` slots (all-reduce between the two
replicas of a stage) are not compute ops and are left out; a flush's all-reduce is the gap
:func:`rpd.schedules.family.chimera` puts after it.

Verified: this is the anchor's per-worker order, op for op (kind, stage, microbatch), for
D = 4 and every N <= 16, for D in {6, 8, 10} and every N <= 2D, and for D = 2, N <= 2: the
anchor was run offline with its pipelines numbered into units in the order it creates them
(its ``MyPipeLine(..., up_or_down=True)``, kept in its ``up_pipline_list`` but printed
``@down@``, is the down pipeline here). The tests hold the anchor's D = 4, N = 4 listing (docs/schedules.md#chimera).
The anchor's own microbatch labels repeat from the third unit on (its ``micro_batch_id`` is
built from ``pipeline_id // 2``); the ids above are this module's, and name the first two
units as the anchor does (down 0..D/2-1, up D/2..D-1).

**Unverified (generalised)**: outside that range the anchor's output is broken, and the unit
rule above (each direction's next unit starts 2D slots after its previous one, as the anchor
does for D = 4 at any N) is this module's extension, not the anchor's output. There, for
D = 2 the anchor never starts a second unit (a one-microbatch pipeline ends before it can
spawn one) and drops every microbatch after the first two; for D >= 6 and N > 2D it starts a
new unit at *every* return of a microbatch while others are in flight, so units collide on a
worker in the same slot.

**N > D: direct concatenation, forward doubling, backward halving** (paper §3.5;
:func:`chimera_concat_order`, the one place the rule lives). The order above is the paper's
*direct concatenation*. The other two are a **reconstruction**: neither the paper's §3.5 text nor
its Figure 6 was reachable here, and the anchor implements neither. What was read is a reader's
note of §3.5 (``UnbearableFate/PaperReadingNote``, ``DL&NN/pipelines.md`` @09e5656c): forward
doubling "removes the intermediate bubbles, but it leads to two times activation memory
consumption", and both "have more space to overlap p2p communication (in the forward passes)
than the classic 1F1B schedule". The reading implemented is the one with those three
properties: the anchor's timetable is built at twice the granularity the ops run at, and each
slot runs its two halves back to back.

* ``forward_doubling``: the timetable of ceil(M/2) double microbatches; slot (g, v) runs
  microbatches 2v and 2v + 1 one after the other (forward slots carry two microbatches, so a
  unit holds D per direction and the activations double).
* ``backward_halving``: the timetable of the M microbatches; slot (g, j) runs the two halves of
  microbatch j one after the other (each backward is two half-microbatch ops; activations as
  direct). It is forward doubling on 2M half-size microbatches, which is how
  :func:`rpd.schedules.family.chimera` times it.

Measured (tests, docs/schedules.md): at B = 2F forward doubling's bubble equals direct
concatenation's at F = B, e.g. D = 4, M = 8: 11.1 % against direct's 20.0 %.
"""

from __future__ import annotations

import numpy as np

from rpd.schedules.machinery.ir import BWD, FWD, Col, Order, ops
from rpd.validation import check_choice, check_int

CONCAT = ("direct", "forward_doubling", "backward_halving")  # how a flush of M > D is built (§3.5)


def _check(D: int, M: int) -> tuple[int, int]:
    D, M = check_int("D", D, minimum=2), check_int("M", M)
    if D % 2:
        raise ValueError(
            f"chimera needs an even number of workers D (units of D/2 microbatches per direction), got D={D}"
        )
    return D, M


def chimera_down(D: int, M: int) -> np.ndarray:
    """bool [M]: whether microbatch j runs in the down pipeline (stage g on worker g); unit
    k = j // (D/2) of microbatches runs down when k is even, up when k is odd."""
    D, M = _check(D, M)
    return (np.arange(M) // (D // 2)) % 2 == 0


def chimera_rank_of(D: int, M: int) -> np.ndarray:
    """int [D, M]: the worker that runs stage g of microbatch j (g down, D-1-g up)."""
    down = chimera_down(D, M)
    g = np.arange(D)[:, None]
    return np.where(down[None, :], g, D - 1 - g)


def chimera_slots(D: int, M: int) -> tuple[np.ndarray, np.ndarray]:
    """int [D, M] slots of F(g, j) and of B(g, j) in the anchor's unit-slot timetable."""
    D, M = _check(D, M)
    half = D // 2
    j = np.arange(M)
    k, x = j // half, j % half
    t0 = 2 * D * (k // 2) + 2 * x
    g = np.arange(D)[:, None]
    return t0[None, :] + g, t0[None, :] + 2 * D - 1 - g


def chimera_order(D: int, M: int) -> Order:
    """Chimera with D workers (= D stages) and M microbatches: worker w runs, in slot order,
    F and B of stage w for the down microbatches and of stage D-1-w for the up microbatches
    (slots and the microbatch-to-direction rule in the module docstring). For D = 4, M = 4,
    worker 0 runs F0 F1 (stage 0), F2 B2 F3 B3 (stage 3), B0 B1 (stage 0)."""
    D, M = _check(D, M)
    rank = chimera_rank_of(D, M)
    f_slot, b_slot = chimera_slots(D, M)
    g, j = np.meshgrid(np.arange(D), np.arange(M), indexing="ij")
    out = []
    for w in range(D):
        mine = rank == w
        slot = np.concatenate([f_slot[mine], b_slot[mine]])
        rows = np.concatenate(
            [
                np.stack([np.full(mine.sum(), FWD), g[mine], j[mine]], axis=1),
                np.stack([np.full(mine.sum(), BWD), g[mine], j[mine]], axis=1),
            ]
        )
        if len(np.unique(slot)) != len(slot):
            raise AssertionError(f"chimera_order: two ops of worker {w} share a slot")
        out.append(ops(rows[np.argsort(slot, kind="stable")].tolist()))
    return out


def chimera_concat_order(D: int, M: int, concat: str = "direct") -> Order:
    """Chimera's order for one flush of M microbatches built by ``concat`` (module docstring):
    ``direct`` is :func:`chimera_order`; ``forward_doubling`` is :func:`chimera_order` of
    ceil(M/2) double microbatches with every op on v run as its microbatches 2v, 2v + 1 back to
    back. ``backward_halving`` is forward doubling on 2M half microbatches (op on piece p =
    half p % 2 of microbatch p // 2), so this returns that order on 2M pieces."""
    D, M = _check(D, M)
    concat = check_choice("concat", concat, CONCAT)
    if concat == "direct":
        return chimera_order(D, M)
    if concat == "backward_halving":
        return chimera_concat_order(D, 2 * M, "forward_doubling")
    out = []
    for a in chimera_order(D, -(-M // 2)):
        rows = np.repeat(a, 2, axis=0)
        rows[:, Col.MB] = 2 * rows[:, Col.MB] + np.tile([0, 1], len(a))
        out.append(rows[rows[:, Col.MB] < M])
    return out
