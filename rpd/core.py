"""The stale block-SGD core: one compiled scan that executes an update plan.

For k = 0..K-1, with a = block[k]:

    z^k      = (version read[k, r] of block r)_r          (the mixed, stale point)
    g        = grad f(z^k; batch[k])                        (fresh, or reused from slot[k])
    x_a     <- x_a - gamma * (g_a + sigma_g * xi_k)          (only block a moves)

Exact history, bounded memory: the only state is a ring ``ring[C, D]`` holding, for every
block r, its last C versions (version v of block r lives in row v mod C, columns of block r),
plus the version counters. C comes from the plan (``plans.ring_size``), so PD keeps at most
NOAM + 1 versions of each block. A read outside the ring is flagged inside the scan and raised
on the host after the run (:class:`RingOverflowError`): never a silent wrong read.

``make_run`` builds one jitted function for fixed shapes; step sizes and keys are traced and
vmapped, so a whole gamma grid (and seeds) is one compile and one scan.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rpd.objectives.base import Objective
from rpd.plans import UpdatePlan


class RingOverflowError(RuntimeError):
    """A read needed a block version that the history ring no longer holds."""


class CoreState(NamedTuple):
    ring: jax.Array  # float [C, D]: last C versions of every block (version v of r in row v % C)
    version: jax.Array  # int32 [S]: updates received by each block so far
    grads: jax.Array  # float [n_slots, D]: gradients shared by several updates (PD stashes)
    snapshots: jax.Array  # float [n_records + 1, D]: x recorded for evaluation (last row: discard)
    missed: jax.Array  # bool []: some read fell outside the ring


class CoreOptions(NamedTuple):
    """Static choices of a compiled run (changing one recompiles)."""

    ring_size: int
    n_slots: int
    n_records: int
    always_fresh: bool  # every iteration computes its own gradient (RPD, plain SGD)
    diag_stride: int = 0  # > 0: every diag_stride iterations record ||x-z||^2, grad gaps


def _gather(ring: jax.Array, version_S: jax.Array, seg: jax.Array) -> jax.Array:
    """The vector whose block r is version version_S[r] of block r, read from the ring."""
    C, D = ring.shape
    return ring[(version_S % C)[seg], jnp.arange(D)]


def _run(obj: Objective, opts: CoreOptions, data, plan_arrays, record, gamma, key):
    seg = jnp.asarray(obj.layout.segment_ids)
    C, D = opts.ring_size, obj.D
    x0 = obj.x0.astype(obj.dtype)
    state = CoreState(
        ring=jnp.broadcast_to(x0, (C, D)),
        version=jnp.zeros(obj.S, jnp.int32),
        grads=jnp.zeros((opts.n_slots, D), obj.dtype),
        snapshots=jnp.zeros((opts.n_records + 1, D), obj.dtype),
        missed=jnp.zeros((), bool),
    )
    sigma = obj.grad_noise
    grad_fn = functools.partial(obj.value_and_grad, data)

    def step(state: CoreState, inp):
        k, a, b, read, fresh, slot, rec = inp
        z = _gather(state.ring, read, seg)
        lag = state.version - read
        missed = state.missed | jnp.any((lag < 0) | (lag >= C))
        if opts.always_fresh:
            loss_z, g = grad_fn(z, b)
            grads = state.grads
        else:
            def compute(grads):
                loss, g = grad_fn(z, b)
                return grads.at[slot].set(g), loss

            grads, loss_z = jax.lax.cond(
                fresh, compute, lambda grads: (grads, jnp.full((), jnp.nan, obj.dtype)), state.grads
            )
            g = grads[slot]
        mask = seg == a
        if sigma > 0:
            g = g + sigma * jax.random.normal(jax.random.fold_in(key, k), (D,), obj.dtype)
        x = _gather(state.ring, state.version, seg)
        x_new = jnp.where(mask, x - gamma * g, x)
        row = (state.version[a] + 1) % C
        ring = state.ring.at[row].set(jnp.where(mask, x_new, state.ring[row]))
        out = {"loss_z": loss_z, "block_grad_norm": jnp.sqrt(jnp.sum(jnp.where(mask, g, 0.0) ** 2))}
        if opts.diag_stride:
            def diag(_):
                gx, gz = obj.full_grad_data(data, x), obj.full_grad_data(data, z)
                return jnp.stack([jnp.sum((x - z) ** 2), jnp.sum((gx - gz) ** 2), jnp.sum(gx**2)])

            out["diag"] = jax.lax.cond(
                k % opts.diag_stride == 0, diag, lambda _: jnp.full((3,), jnp.nan, obj.dtype), None
            )
        new = CoreState(
            ring=ring,
            version=state.version.at[a].add(1),
            grads=grads,
            snapshots=state.snapshots.at[rec].set(x_new),
            missed=missed,
        )
        return new, out

    K = plan_arrays[0].shape[0]
    xs = (jnp.arange(K),) + tuple(plan_arrays) + (record,)
    final, per_update = jax.lax.scan(step, state, xs)
    curve = jax.vmap(lambda x: obj.loss(data, x))(final.snapshots[:-1]) - obj.f_star
    x_final = _gather(final.ring, final.version, seg)
    return curve, per_update, x_final, final.missed


@functools.lru_cache(maxsize=64)
def make_run(obj: Objective, opts: CoreOptions):
    """``run(plan_arrays, record, gammas [G], keys [G]) -> (curve [G, n_records], per_update, x_K, missed)``.

    ``plan_arrays`` = (block, batch, read, fresh, slot) of an :class:`UpdatePlan`, shared by the
    grid; ``record[k]`` = row of the snapshot buffer that x^{k+1} is written to (n_records to
    discard). The curve is f(snapshot) - f* for every row. One compile per (objective, options,
    shapes); the grid is a vmap."""
    run = functools.partial(_run, obj, opts)
    return jax.jit(jax.vmap(run, in_axes=(None, None, None, 0, 0)))


def execute(obj: Objective, plan: UpdatePlan, record: np.ndarray, n_records: int, gammas, keys,
            *, ring_size: int, n_slots: int = 1, diag_stride: int = 0):
    """Run a plan for a grid of step sizes (one key per step size); raise on ring overflow."""
    opts = CoreOptions(
        ring_size=int(ring_size),
        n_slots=int(n_slots),
        n_records=int(n_records),
        always_fresh=bool(np.all(plan.fresh)),
        diag_stride=int(diag_stride),
    )
    arrays = tuple(jnp.asarray(a) for a in (plan.block, plan.batch, plan.read, plan.fresh, plan.slot))
    gammas = jnp.asarray(gammas, obj.dtype)
    curve, per_update, x_final, missed = make_run(obj, opts)(obj.data, arrays, jnp.asarray(record, jnp.int32), gammas, keys)
    if bool(np.any(missed)):
        raise RingOverflowError(
            f"a read fell outside the history ring (ring_size={ring_size}); size it with "
            "rpd.plans.ring_size(plan, S)"
        )
    return curve, per_update, x_final
