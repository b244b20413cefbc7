"""PipeDream replayed op by op with weight stashing: the reference route for PD.

This is deliberately the literal algorithm of SPEC §2.1 -- walk the timeline, let every F(m, s)
stash block s, let every B(m, a) take the gradient at m's stashed weights and apply block a --
in a plain host loop. It exists to check the compiled stale core (``rpd.methods.pipedream``)
and as the "naive" side of ``benchmarks/``; it is slow by design.
"""

from __future__ import annotations

import jax
import numpy as np

from rpd.objectives.base import Objective
from rpd.schedules import BWD, FWD, Timeline


def pipedream_replay(obj: Objective, tl: Timeline, gamma: float) -> np.ndarray:
    """f(x) - f* after every time step, shape [T + 1] (entry 0: the start)."""
    grad = jax.jit(obj.value_and_grad)
    offs, sizes = obj.layout.offsets, obj.layout.sizes
    x = np.array(obj.x0, dtype=np.float64)
    stash: dict[int, np.ndarray] = {}  # microbatch -> its stashed full vector
    loss = jax.jit(obj.loss)
    curve = [float(loss(obj.data, x)) - obj.f_star]
    for t in range(tl.T):
        ops = [(s, int(tl.mb[t, s])) for s in range(tl.S) if tl.op[t, s] == FWD]
        for s, m in ops:
            blk = slice(offs[s], offs[s] + sizes[s])
            stash.setdefault(m, np.zeros_like(x))[blk] = x[blk]
        for s in range(tl.S):
            if tl.op[t, s] != BWD:
                continue
            m = int(tl.mb[t, s])
            _, g = grad(obj.data, stash[m], m % obj.n_batches)
            blk = slice(offs[s], offs[s] + sizes[s])
            x[blk] -= gamma * np.asarray(g)[blk]
            if s == 0:
                del stash[m]
        curve.append(float(loss(obj.data, x)) - obj.f_star)
    return np.array(curve)
