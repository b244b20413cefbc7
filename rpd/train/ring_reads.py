"""Reads of the stale core's version ring (:mod:`rpd.train.core`): the [D] point whose block r is
a given version of block r, optionally moved along the velocity ring.

The ring ``ring[C, D + P]`` holds version v of block r in row v mod C, columns of block r; P = the
largest block size pads the end so that any block is a fixed-size window. Two reads give the same
values bit for bit: one dynamic slice per block (:func:`gather_slices`) and one gather of the S
block windows (:func:`gather_windows`); :func:`gather` picks by the number of blocks.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from rpd.objectives.base import BlockLayout

# Up to this many blocks a read is one dynamic slice per block; above it, one gather of the S
# windows. Both read the same values bit for bit. Measured (benchmarks/bench_core.py f, RPD on
# E6's logistic regression, 10 γ): the slices run 7–26 % faster per update at S = 4–16, the
# gather at S = 32–128 within 3–9 % of them; XLA compiles about 10 ms per kernel, and the
# slices are S kernels per read, so the gather compiles 1.4–1.7× faster at S = 4–32 and 4× at
# S = 128 (E6 at paper size: 76 → 63 s).
SLICED_READS_UP_TO = 8


def gather(ring: jax.Array, version_S: jax.Array, layout: BlockLayout, vel=None, horizon_S=None) -> jax.Array:
    """The [D] vector whose block r is version version_S[r] of block r, read from the ring;
    given the velocity ring ``vel``, moved along it: w_r - horizon_S[r] * u_r (per block: PD
    with prediction on the MLP chain runs ~15% faster than with h expanded to [D])."""
    read = gather_slices if layout.S <= SLICED_READS_UP_TO else gather_windows
    return read(ring, version_S, layout, vel, horizon_S)


def gather_slices(ring, version_S, layout: BlockLayout, vel=None, horizon_S=None) -> jax.Array:
    """One dynamic slice per block (static offset and size, dynamic row), concatenated:
    contiguous copies, ~2x faster per update than an element-wise gather of D (row, column)
    pairs."""
    rows = version_S % ring.shape[0]

    def block(r, off, size):
        w = jax.lax.dynamic_slice(ring, (rows[r], jnp.int32(off)), (1, size))[0]
        if vel is None:
            return w
        return w - horizon_S[r] * jax.lax.dynamic_slice(vel, (rows[r], jnp.int32(off)), (1, size))[0]

    return jnp.concatenate([block(r, off, size) for r, (off, size) in enumerate(zip(layout.offsets, layout.sizes))])


def gather_windows(ring, version_S, layout: BlockLayout, vel=None, horizon_S=None) -> jax.Array:
    """One gather of the S windows (row version_S[r] mod C, columns offset_r .. offset_r + P;
    the ring's P padding columns keep every window in bounds) into [S, P], then the first
    size_r entries of each row: one kernel whatever S is."""
    S, P = layout.S, max(layout.sizes)
    starts = jnp.stack([version_S % ring.shape[0], jnp.asarray(layout.offsets, jnp.int32)], axis=1)
    dims = jax.lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0, 1))
    windows = lambda a: jax.lax.gather(a, starts, dims, (1, P), mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS)
    w = windows(ring)
    if vel is not None:
        w = w - horizon_S[:, None] * windows(vel)
    if all(size == P for size in layout.sizes):
        return w.reshape(S * P)
    return w.reshape(S * P)[_compact_index(layout.sizes)]


@functools.lru_cache(maxsize=256)
def _compact_index(sizes: tuple[int, ...]) -> np.ndarray:
    """Positions in the flattened [S, P] windows of the D coordinates (block r's first size_r)."""
    P = max(sizes)
    return np.concatenate([r * P + np.arange(size) for r, size in enumerate(sizes)]).astype(np.int32)
