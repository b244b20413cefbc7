"""Training semantics of the schedules that step each stage every k backwards: AMPNet and WPipe
(docs/schedules.md#ampnet, #wpipe; orders and sources in :mod:`rpd.schedules.family.frontier`).

Both apply, on stage g, one update per k of its backwards (AMPNet: k = min_update_interval;
WPipe: k = M, one period), landing at the end of the k-th backward; the gradient of update u
of stage g is a sum (AMPNet, as torch's ``.grad`` accumulates between fairscale's
``optimizer.step()`` calls) or a mean (WPipe, as 2BW) over its k microbatches, each taken at
the weights that microbatch actually saw (:func:`rpd.schedules.family.frontier.step_versions`):

- **AMPNet** (no stashing): F(m, r) reads version vF[m, r] of block r, the backward through
  stage q >= g runs at version vB[m, q] on the forward-time activations, the two-point
  gradient of PipeMare; a trailing partial group is never applied.
- **WPipe** (stashing, two buffers on group 1): the whole gradient of microbatch m at the
  versions its forwards read, vF[m, ·]. With M >= 2S - 2 this is exactly "group 1 at W_{q-1},
  group 2 at W_q" for period q (the tests replay that rule by hand).

In the plan an update of k microbatches is k consecutive *pieces*, one per microbatch, each
fresh, applying its microbatch's gradient (scaled 1 or 1/k) to block g, all landing at the
update's tick. A block's plan version after u whole updates is u·k, so every read is a
multiple of k: no read ever sees a half-applied update, and between ticks the weights are
always whole versions.
"""

from __future__ import annotations

import numpy as np

from rpd.schedules import Timeline
from rpd.schedules.family.frontier import WPipeTimeline, step_landings, step_versions
from rpd.train.plans import UpdatePlan, versions_before
from rpd.validation import required


def _pieces(tl: Timeline, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mb [K], block [K], time [K]) of every piece in plan order: by landing tick, then block,
    then microbatch; microbatches of a stage's trailing partial group are left out."""
    land = step_landings(tl, k)
    G = tl.n_stages
    b_order = np.argsort(tl.b_time, axis=0, kind="stable")  # [N, G]: microbatches by backward
    mb_g, block_g, time_g = [], [], []
    for g in range(G):
        whole = len(land[g]) * k
        mb_g.append(b_order[:whole, g])
        block_g.append(np.full(whole, g))
        time_g.append(np.repeat(land[g], k))
    mb, block, time = (np.concatenate(a) for a in (mb_g, block_g, time_g))
    o = np.lexsort((mb, block, time))
    return mb[o].astype(np.int64), block[o].astype(np.int32), time[o].astype(np.int64)


def _step_plan(tl: Timeline, k: int, n_batches: int, vF: np.ndarray, **extra) -> UpdatePlan:
    """The plan of every piece (:func:`_pieces`): microbatch m's gradient on its block, read at
    the version its forward saw (``k * vF[m]`` block updates), landing at its step's tick."""
    m, a, t = _pieces(tl, k)
    return UpdatePlan(
        block=a,
        batch=(m % n_batches).astype(np.int32),
        read=(k * vF[m]).astype(np.int32),
        fresh=np.ones(len(m), bool),
        slot=np.zeros(len(m), np.int32),
        time=t,
        **{name: f(m, a) for name, f in extra.items()},
    )


def ampnet_plan(tl: Timeline, S_obj: int, n_batches: int) -> UpdatePlan:
    """AMPNet's plan (module doc): piece (m, g) of stage g's update computes microbatch m's
    two-point gradient (forward at vF[m], backward through stages q >= g at vB[m, q]) and adds it
    to block g, unscaled (fairscale sums k gradients per step)."""
    if tl.synchronous or tl.M is None or tl.n_stages != tl.S:
        raise ValueError(
            f"AMPNet's plan reads one asynchronous stream stepping every M backwards, got kind={tl.kind!r}"
        )
    if S_obj != tl.n_stages:
        raise ValueError(f"the objective has S={S_obj} blocks; AMPNet's timeline has {tl.n_stages} stages")
    k = int(tl.M)
    vF, vB = step_versions(tl, k)

    def read_bwd(m, a):  # blocks at or after a: the version B saw; before a: the current one
        later = np.arange(S_obj)[None, :] >= a[:, None]
        return np.where(later, k * vB[m], versions_before(a, S_obj)[:-1]).astype(np.int32)

    return _step_plan(tl, k, n_batches, vF, read_bwd=read_bwd)


def wpipe_plan(tl: Timeline, S_obj: int, n_batches: int) -> UpdatePlan:
    """WPipe's plan (module doc): piece (m, g) adds (1/M)·∇_g f_m at the versions F(m, ·) read
    (stashed for the backward) to block g; one block per global stage (2S)."""
    if not isinstance(tl, WPipeTimeline):
        raise ValueError(f"WPipe's plan reads WPipe's two groups, got kind={tl.kind!r}")
    if S_obj != tl.n_stages:
        raise ValueError(
            f"WPipe's groups split each rank's weights: the objective needs one block per "
            f"stage ({tl.n_stages} = 2S), got S={S_obj}"
        )
    k = int(required("M", tl.M))
    vF, _ = step_versions(tl, k)
    return _step_plan(tl, k, n_batches, vF, scale=lambda m, a: np.full(len(m), 1.0 / k))
