"""Timelines replayed op by op with weight stashing: the reference route for PD and LocalSGD.

This is deliberately the literal algorithm of docs/science.md#schedules -- walk the timeline; every F(m, s)
stashes block s of microbatch m's replica; every B(m, a) takes the gradient at m's stashed
weights and applies block a to the replica; at the end of a LocalSGD round's last time step the
replicas are replaced by their mean -- in a plain host loop. It checks the compiled methods
(``rpd.train.methods.pipedream``, ``rpd.train.methods.local_sgd``) and is the "naive" side of
``benchmarks/``; it is slow by design.
"""

from __future__ import annotations

import jax
import numpy as np

from rpd.objectives.base import Objective
from rpd.schedules import BWD, FWD, Timeline


def replay(obj: Objective, tl: Timeline, gamma: float) -> np.ndarray:
    """f(x̄) - f* after every time step (tick), shape [T + 1] (entry 0: the start); x̄ is the
    replica mean (the model itself for PD). Works on timelines timed under any cost model."""
    grad = jax.jit(obj.value_and_grad)
    loss = jax.jit(obj.loss)
    R = tl.R or 1
    blocks = [slice(o, o + n) for o, n in zip(obj.layout.offsets, obj.layout.sizes)]
    x = np.tile(np.asarray(obj.x0, dtype=np.float64), (R, 1))  # [R, D]
    stash: dict[int, np.ndarray] = {}  # microbatch -> its stashed full vector
    sync = {int(t) for t in tl.sync_time}
    # Events per tick: F's read at their first tick, B's land at the end of their last tick
    # (with unit costs both are the op's time step), in stage order within a tick.
    events: dict[int, list[tuple[int, int, int]]] = {}
    for op, times in ((FWD, tl.f_time), (BWD, tl.b_time)):
        for m, s in np.ndindex(times.shape):
            events.setdefault(int(times[m, s]), []).append((s, op, m))
    curve = [float(loss(obj.data, x.mean(0))) - obj.f_star]
    for t in range(tl.T):
        for s, kind, m in sorted(events.get(t, ())):
            if kind == FWD:
                stash.setdefault(m, np.zeros(obj.D))[blocks[s]] = x[m % R, blocks[s]]
            else:
                _, g = grad(obj.data, stash[m], m % obj.n_batches)
                x[m % R, blocks[s]] -= gamma * np.asarray(g)[blocks[s]]
                if s == 0:
                    del stash[m]
        if t in sync:
            x[:] = x.mean(0)
        curve.append(float(loss(obj.data, x.mean(0))) - obj.f_star)
    return np.array(curve)


def replay_pipemare(obj: Objective, tl: Timeline, gamma: float, every: int = 1) -> np.ndarray:
    """PipeMare op by op, stage by stage, one weight version (docs/schedules.md#pipemare): F(m, s) computes
    a_{s+1} = stage_s(x_s, a_s) with the current x_s and keeps a_s; B(m, s) takes the VJP of
    stage s at (the current x_s, the kept a_s) of the cotangent B(m, s+1) passed down (the
    loss's gradient at a_S for s = S-1) and applies the weight part to x_s. ``every`` = k > 1 is
    AMPNet (fairscale's event loop, ``min_update_interval``): the weight parts are summed per
    stage and every k-th backward of a stage applies x_s -= γ·(sum), a trailing partial group
    never. Returns the final x [D]; the reference for ``rpd.train.methods.train`` on a PipeMare
    (or AMPNet) timeline."""
    chain = obj.chain
    if chain is None:
        raise ValueError(f"objective {obj.name!r} does not expose its stage chain")
    S = obj.S
    blocks = [slice(o, o + n) for o, n in zip(obj.layout.offsets, obj.layout.sizes)]
    stage = [jax.jit(lambda xs, a, s=s: chain.stage(obj.data, s, xs, a)) for s in range(S)]
    vjp = [
        jax.jit(lambda xs, a, d, s=s: jax.vjp(lambda p, b: chain.stage(obj.data, s, p, b), xs, a)[1](d))
        for s in range(S)
    ]
    head = jax.jit(jax.grad(lambda out, target: chain.head(obj.data, out, target)))
    penalty = jax.jit(jax.grad(chain.penalty)) if chain.penalty is not None else None
    x = np.asarray(obj.x0, dtype=np.float64).copy()
    acc = [np.zeros(b.stop - b.start) for b in blocks]  # per stage: the weight parts not yet applied
    count = [0] * S
    acts: dict[tuple[int, int], object] = {}  # (m, s) -> a_s of microbatch m
    targets: dict[int, object] = {}  # m -> microbatch m's target
    delta: dict[int, object] = {}  # m -> the cotangent stage s - 1 receives
    events = sorted(
        [(int(tl.f_time[m, s]), s, FWD, m) for m, s in np.ndindex(tl.f_time.shape)]
        + [(int(tl.b_time[m, s]), s, BWD, m) for m, s in np.ndindex(tl.b_time.shape)]
    )
    for _, s, kind, m in events:
        if kind == FWD:
            if s == 0:
                acts[m, 0], targets[m] = chain.inputs(obj.data, m % obj.n_batches)
            acts[m, s + 1] = stage[s](x[blocks[s]], acts[m, s])
        else:
            d = head(acts.pop((m, S)), targets[m]) if s == S - 1 else delta.pop(m)
            g, delta[m] = vjp[s](x[blocks[s]], acts.pop((m, s)), d)
            acc[s] += np.asarray(g) + (np.asarray(penalty(x[blocks[s]])) if penalty is not None else 0.0)
            count[s] += 1
            if count[s] % every == 0:
                x[blocks[s]] -= gamma * acc[s]
                acc[s][:] = 0.0
    return x
