"""A chain's activations as fixed-width rows: the slots of a stage-wise two-point run of the
core (``rpd.train.core``, PipeMare's plans), which keep each microbatch's activations and backward
cotangents between its stages' updates."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from rpd.objectives import chain
from rpd.objectives.base import Objective


def _rows(leaves, width: int, dtype) -> jax.Array:
    """Leaves flattened into one [width] row, zero-padded at the end."""
    flat = [jnp.ravel(leaf).astype(dtype) for leaf in leaves]
    return jnp.concatenate(flat + [jnp.zeros(width - sum(v.size for v in flat), dtype)])


def _unrows(row: jax.Array, like) -> list[jax.Array]:
    """The leaves shaped like ``like`` (ShapeDtypeStructs) that :func:`_rows` put in ``row``."""
    ends = np.cumsum([0] + [leaf.size for leaf in like])
    return [row[lo:hi].reshape(leaf.shape).astype(leaf.dtype) for lo, hi, leaf in zip(ends, ends[1:], like)]


class ChainRows:
    """A chain's activations as fixed-width rows, for a stage-wise two-point run.

    Stage s's activations have their own shapes (the LM's a_0 are token ids, a_S logits), so
    a microbatch's are kept as rows of two arrays, which a dynamic stage index can address:
    float row s < S holds a_s's floating leaves, flattened and zero-padded to ``width``, until
    stage s runs backward and overwrites it with δ_s; float row S holds δ_S; int row s holds
    a_s's integer leaves (token ids, a batch index), which carry no cotangent."""

    def __init__(self, obj: Objective, data):
        self.obj = obj
        x0 = jax.ShapeDtypeStruct(np.shape(obj.x0), obj.dtype)
        _, self.acts, delta = jax.eval_shape(functools.partial(chain.forward, obj), data, x0, jnp.int32(0))
        self.floats = [chain.floating(a) for a in self.acts] + [delta]  # row s: a_s's, then δ_s
        self.ints = [chain.integer(a) for a in self.acts]
        self.width = max(sum(leaf.size for leaf in row) for row in self.floats)
        self.int_width = max(sum(leaf.size for leaf in row) for row in self.ints)
        self.dtype = jnp.result_type(*(leaf.dtype for row in self.floats for leaf in row))
        self.int_dtype = jnp.result_type(*(leaf.dtype for row in self.ints for leaf in row), jnp.int32)

    def empty(self, n_slots: int) -> tuple[jax.Array, jax.Array]:
        """Zeroed slot buffers: float [n_slots, S+1, width], int [n_slots, S, int_width]."""
        S = self.obj.S
        return (
            jnp.zeros((n_slots, S + 1, self.width), self.dtype),
            jnp.zeros((n_slots, S, self.int_width), self.int_dtype),
        )

    def forward(self, data, x_fwd: jax.Array, b) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(loss, float rows [S+1, width], int rows [S, int_width]) of the forward at x_fwd."""
        loss, acts, delta = chain.forward(self.obj, data, x_fwd, b)
        floats = [_rows(chain.floating(a), self.width, self.dtype) for a in acts]
        ints = [_rows(chain.integer(a), self.int_width, self.int_dtype) for a in acts]
        return loss, jnp.stack(floats + [_rows(delta, self.width, self.dtype)]), jnp.stack(ints)

    def backward(self, data, s: int, x_s: jax.Array, float_rows: jax.Array, int_row: jax.Array):
        """Stage s's backward at weights x_s from float rows s, s+1 (a_s, δ_{s+1}) and int row s:
        (g_s, δ_s as a float row)."""
        a_s = chain.merge(self.acts[s], _unrows(float_rows[0], self.floats[s]), _unrows(int_row, self.ints[s]))
        g, delta = chain.stage_vjp(self.obj, data, s, x_s, a_s, _unrows(float_rows[1], self.floats[s + 1]))
        return g, _rows(delta, self.width, self.dtype)
