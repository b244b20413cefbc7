"""A literal PipeDream replay with optax transforms, shared by the optimizer and correction tests:
op by op in (tick, stage) order, weight stashing, one optimizer state per block."""

import jax
import numpy as np

from rpd.schedules import BWD, FWD


def replay_pd(obj, tl, tx_of, *, grad_hook=None, scale_of=None):
    """PipeDream op by op: F(m, s) stashes block s of x for m; B(m, s) takes m's gradient at its
    stash, optionally corrects it (``grad_hook(g_s, x_s, stash_s)``) and moves block s with
    block s's own transformation ``tx_of(s)`` and state, its update scaled by ``scale_of(s, i)``
    (i = updates block s received before)."""
    blocks = [slice(o, o + n) for o, n in zip(obj.layout.offsets, obj.layout.sizes)]
    grad = jax.jit(obj.value_and_grad)
    txs = [tx_of(s) for s in range(obj.S)]
    x = np.asarray(obj.x0).copy()
    states = [txs[s].init(x[blk]) for s, blk in enumerate(blocks)]
    count, stash = [0] * obj.S, {}
    events = sorted(
        (int(t), s, kind, m)
        for kind, times in ((FWD, tl.f_time), (BWD, tl.b_time))
        for (m, s), t in np.ndenumerate(times)
    )
    for _, s, kind, m in events:
        if kind == FWD:
            stash.setdefault(m, np.zeros(obj.D))[blocks[s]] = x[blocks[s]]
            continue
        _, g = grad(obj.data, stash[m], m % obj.n_batches)
        g = np.asarray(g)[blocks[s]]
        if grad_hook is not None:
            g = grad_hook(g, x[blocks[s]], stash[m][blocks[s]])
        u, states[s] = txs[s].update(g, states[s], x[blocks[s]])
        x[blocks[s]] += np.asarray(u) * (1.0 if scale_of is None else scale_of(s, count[s]))
        count[s] += 1
    return x
