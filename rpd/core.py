"""The stale block-SGD core: one compiled scan that executes an update plan.

For k = 0..K-1, with a = block[k]:

    z^k      = (version read[k, r] of block r)_r          (the mixed, stale point)
    g        = grad f(z^k; batch[k])                        (fresh, or reused from slot[k])
    x_a     <- x_a - gamma * (g_a + sigma_g * xi_k)          (only block a moves)

Exact history, bounded memory: the state is a ring ``ring[C, D + P]`` holding, for every block
r, its last C versions (version v of block r lives in row v mod C, columns of block r; P = the
largest block size pads the end so that any block is a fixed-size window), plus the version
counters. C comes from the plan (``plans.ring_size``), so PD keeps at most NOAM + 1 versions of
each block. A read outside the ring is flagged inside the scan and raised on the host after the
run (:class:`RingOverflowError`): never a silent wrong read.

Per update the work is O(block size): the update reads and writes one block window; the full
mixed point z^k is gathered only when a gradient is computed, and the full iterate only when it
is recorded. ``make_run`` builds one jitted function for fixed shapes; step sizes are traced and
vmapped, so a whole gamma grid is one compile and one scan.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rpd.objectives.base import BlockLayout, Objective
from rpd.plans import UpdatePlan


class RingOverflowError(RuntimeError):
    """A read needed a block version that the history ring no longer holds."""


class CoreState(NamedTuple):
    ring: jax.Array  # float [C, D + P]: last C versions of every block (version v of r in row v % C)
    version: jax.Array  # int32 [S]: updates received by each block so far
    grads: jax.Array  # float [n_slots, D + P]: gradients shared by several updates (PD)
    snapshots: jax.Array  # float [n_records + 1, D]: x recorded for evaluation (last row: discard)
    missed: jax.Array  # bool []: some read fell outside the ring


class CoreOptions(NamedTuple):
    """Static choices of a compiled run (changing one recompiles)."""

    ring_size: int
    n_slots: int
    n_records: int
    diag_stride: int = 0  # > 0: every diag_stride iterations record ||x-z||^2 and gradient gaps


def _gather(ring: jax.Array, version_S: jax.Array, layout: BlockLayout) -> jax.Array:
    """The [D] vector whose block r is version version_S[r] of block r, read from the ring.

    One dynamic slice per block (static offset and size, dynamic row): contiguous copies, which
    XLA runs ~2x faster per update than one element-wise gather of D (row, column) pairs."""
    rows = version_S % ring.shape[0]
    return jnp.concatenate([
        jax.lax.dynamic_slice(ring, (rows[r], jnp.int32(off)), (1, size))[0]
        for r, (off, size) in enumerate(zip(layout.offsets, layout.sizes))
    ])


def _run(obj: Objective, opts: CoreOptions, data, plan_arrays, record, gamma, key):
    offsets = jnp.asarray(obj.layout.offsets, jnp.int32)
    sizes = jnp.asarray(obj.layout.sizes, jnp.int32)
    C, D, P = opts.ring_size, obj.D, max(obj.layout.sizes)
    pad = lambda v: jnp.concatenate([v, jnp.zeros((P,), v.dtype)])  # noqa: E731
    state = CoreState(
        ring=jnp.broadcast_to(pad(obj.x0.astype(obj.dtype)), (C, D + P)),
        version=jnp.zeros(obj.S, jnp.int32),
        grads=jnp.zeros((opts.n_slots, D + P), obj.dtype),
        snapshots=jnp.zeros((opts.n_records + 1, D), obj.dtype),
        missed=jnp.zeros((), bool),
    )
    grad_fn = functools.partial(obj.value_and_grad, data)
    nan = jnp.full((), jnp.nan, obj.dtype)

    def step(state: CoreState, inp):
        k, a, b, read, fresh, slot, rec = inp
        lag = state.version - read
        reads_z = fresh | (k % opts.diag_stride == 0) if opts.diag_stride else fresh  # reuse reads nothing
        missed = state.missed | (reads_z & jnp.any((lag < 0) | (lag >= C)))

        def compute(grads):
            loss, g = grad_fn(_gather(state.ring, read, obj.layout), b)
            return grads.at[slot].set(pad(g)), loss

        # A cond even when every update is fresh (RPD): measured, XLA compiles this program
        # faster and runs it no slower than one without the branch, and PD and RPD runs of
        # the same shapes then share one compiled program.
        grads, loss_z = jax.lax.cond(fresh, compute, lambda grads: (grads, nan), state.grads)
        off = offsets[a]
        in_block = jnp.arange(P) < sizes[a]
        g_a = jax.lax.dynamic_slice(grads[slot], (off,), (P,))
        if obj.grad_noise > 0:
            g_a = g_a + obj.grad_noise * jax.random.normal(jax.random.fold_in(key, k), (P,), obj.dtype)
        g_a = jnp.where(in_block, g_a, 0.0)
        x_a = jax.lax.dynamic_slice(state.ring, (state.version[a] % C, off), (1, P))[0]
        row = (state.version[a] + 1) % C
        old = jax.lax.dynamic_slice(state.ring, (row, off), (1, P))[0]
        new_a = jnp.where(in_block, x_a - gamma * g_a, old)
        ring = jax.lax.dynamic_update_slice(state.ring, new_a[None], (row, off))
        version = state.version.at[a].add(1)
        snapshots = jax.lax.cond(
            rec < opts.n_records,
            lambda s: s.at[rec].set(_gather(ring, version, obj.layout)),
            lambda s: s,
            state.snapshots,
        )
        out = {"loss_z": loss_z, "block_grad_norm": jnp.sqrt(jnp.sum(g_a**2))}
        if opts.diag_stride:
            def diag(_):
                x, z = _gather(state.ring, state.version, obj.layout), _gather(state.ring, read, obj.layout)
                gx, gz = obj.full_grad_data(data, x), obj.full_grad_data(data, z)
                return jnp.stack([jnp.sum((x - z) ** 2), jnp.sum((gx - gz) ** 2), jnp.sum(gx**2)])

            out["diag"] = jax.lax.cond(
                k % opts.diag_stride == 0, diag, lambda _: jnp.full((3,), jnp.nan, obj.dtype), None
            )
        return CoreState(ring, version, grads, snapshots, missed), out

    K = plan_arrays[0].shape[0]
    xs = (jnp.arange(K),) + tuple(plan_arrays) + (record,)
    final, per_update = jax.lax.scan(step, state, xs)
    x_final = _gather(final.ring, final.version, obj.layout)
    return final.snapshots[:-1], per_update, x_final, final.missed


@functools.lru_cache(maxsize=64)
def make_run(obj: Objective, opts: CoreOptions):
    """``run(data, plan_arrays, record, gammas [G], seed) -> (curve [G, n_records], f0,
    per_update, x_K [G, D], missed [G])``.

    ``plan_arrays`` = (block, batch, read, fresh, slot) of an :class:`UpdatePlan`, shared by the
    grid; ``record[k]`` = snapshot row that x^{k+1} is written to (n_records: not recorded).
    The curve is f(snapshot) - f* for every row and f0 = f(x^0) - f*. ``seed`` (an int) keys
    the gradient noise, the same key for every step size, so the grid differs only in gamma.
    One compile per (objective, options, shapes); the grid is a vmap."""
    run = jax.vmap(functools.partial(_run, obj, opts), in_axes=(None, None, None, 0, None))

    def run_and_evaluate(data, plan_arrays, record, gammas, seed):
        key = jax.random.split(jax.random.key(seed), 2)[1]
        snapshots, per_update, x_final, missed = run(data, plan_arrays, record, gammas, key)
        # One flat batch of 1 + G * n_records points: XLA then evaluates a quadratic with one
        # GEMM, ~3x faster than a nested vmap over (gamma, record).
        G, R, D = snapshots.shape
        points = jnp.concatenate([obj.x0.astype(obj.dtype)[None], snapshots.reshape(G * R, D)])
        f = jax.vmap(functools.partial(obj.loss, data))(points) - obj.f_star
        return f[1:].reshape(G, R), f[0], per_update, x_final, missed

    return jax.jit(run_and_evaluate)


def last_writes(rows: np.ndarray, n_records: int) -> np.ndarray:
    """Keep only the last write to each snapshot row (earlier ones would be overwritten)."""
    rows = np.asarray(rows, np.int32)
    out = np.full_like(rows, n_records)
    valid = np.nonzero(rows < n_records)[0]
    last = {}
    for k in valid[::-1]:
        last.setdefault(int(rows[k]), k)
    idx = np.fromiter(last.values(), dtype=np.int64, count=len(last))
    out[idx] = rows[idx]
    return out


def execute(obj: Objective, plan: UpdatePlan, record: np.ndarray, n_records: int, gammas, seed: int,
            *, ring_size: int, n_slots: int = 1, diag_stride: int = 0):
    """Run a plan for a grid of step sizes; raise on ring overflow.

    Returns (curve [G, n_records], f0, per_update, x_K [G, D]) as host arrays."""
    opts = CoreOptions(
        ring_size=int(ring_size),
        n_slots=int(n_slots),
        n_records=int(n_records),
        diag_stride=int(diag_stride),
    )
    arrays = tuple(jnp.asarray(a) for a in (plan.block, plan.batch, plan.read, plan.fresh, plan.slot))
    record = jnp.asarray(last_writes(record, n_records))
    gammas = jnp.asarray(gammas, obj.dtype)
    out = make_run(obj, opts)(obj.data, arrays, record, gammas, np.int32(seed))
    curve, f0, per_update, x_final, missed = jax.device_get(out)
    if bool(np.any(missed)):
        raise RingOverflowError(
            f"a read fell outside the history ring (ring_size={ring_size}); size it with "
            "rpd.plans.ring_size(plan, S)"
        )
    return curve, float(f0), per_update, x_final
