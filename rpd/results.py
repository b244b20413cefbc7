"""What every method returns: curves on a named axis, per-update traces, and run status."""

from __future__ import annotations

import dataclasses

import numpy as np

from rpd.io import result_io

# A run has diverged when its curve leaves the finite numbers or rises above DIVERGENCE_FACTOR
# times its starting value (f(x⁰) − f*; for the LM the held-out loss at x⁰, ≈ log(vocabulary)).
# Six decades: on the linear objectives a converging run never rises above its start, a
# non-converging but bounded one (logistic regression at γ = 2⁷, whose loss grows at most
# linearly in ‖x‖) stays within ~10³ of it, and a fixed-γ iteration past its stability limit grows
# geometrically (10¹⁰ to 10²⁴⁴ within 200 microbatches at S = 8) and never comes back. For the LM
# the bound means logits of order 10⁶, so in practice NaN/inf decides there.
DIVERGENCE_FACTOR = 1e6


def diverged(curves, start=None) -> np.ndarray:
    """bool [...]: which curves of ``curves`` [..., P] diverged: a NaN/inf anywhere, or a value
    above ``DIVERGENCE_FACTOR`` × ``start`` [...] (default: each curve's first point, the
    starting value). A start <= 0 gives no scale (f − f* exactly 0 at x⁰), so only NaN/inf counts."""
    c = np.asarray(curves, dtype=np.float64)
    if c.ndim == 0 or c.shape[-1] == 0:
        raise ValueError(f"curves must have a non-empty last axis, got shape {c.shape}")
    s = c[..., 0] if start is None else np.asarray(start, dtype=np.float64)
    s = np.broadcast_to(s, c.shape[:-1])
    with np.errstate(invalid="ignore", over="ignore"):
        blown = (s > 0) & np.any(c > (DIVERGENCE_FACTOR * s)[..., None], axis=-1)
    return ~np.all(np.isfinite(c), axis=-1) | ~np.isfinite(s) | blown


@dataclasses.dataclass(frozen=True, eq=False)
class Result:
    """One method run over a grid of step sizes.

    ``curve[g, i]`` is f - f* (the held-out loss for the LM) of the evaluated model at
    ``axis[i]``; ``axis_name`` is "sim_time" (completed time steps) or "block_update"
    (completed block updates). ``curve[:, 0]`` is the starting point (axis 0).
    ``traces`` hold per-update / per-microbatch arrays [G, ...] (e.g. ``loss_z``, the
    minibatch loss at the point the gradient was taken: for PD's stage S-1 updates that is the
    paper's last-stage forward loss).
    """

    method: str
    gammas: np.ndarray  # float [G]
    axis: np.ndarray  # int [P]
    axis_name: str
    curve: np.ndarray  # float [G, P]
    traces: dict
    x_final: np.ndarray  # float [G, D]
    meta: dict

    @property
    def diverged(self) -> np.ndarray:
        """bool [G]: the curve left the finite numbers or blew up (:func:`diverged`)."""
        return diverged(self.curve)

    @property
    def final(self) -> np.ndarray:
        return self.curve[:, -1]

    def at(self, g: int) -> np.ndarray:
        return self.curve[g]

    # In a notebook (bodies in rpd.io.result_io; pandas, xarray and matplotlib load on first use).

    def __repr__(self) -> str:
        return result_io.summary_line(self)

    def to_xarray(self):
        """xarray.Dataset: ``curve`` (gamma, <axis_name>), ``diverged``, ``final``, ``x_final``
        and the traces as variables; meta in ``attrs``."""
        return result_io.to_xarray(self)

    def to_pandas(self):
        """pandas.DataFrame, tidy: one row per (γ, axis point) with method, gamma, <axis_name>,
        value and diverged."""
        return result_io.to_pandas(self)

    def plot(self, ax=None, **kwargs):
        """f − f* per γ on a log scale, diverged γ dashed and marked; returns the Axes."""
        return result_io.plot(self, ax, **kwargs)

    def save(self, path):
        """Write an .npz that :meth:`load` reads back exactly (atomically); returns the path."""
        return result_io.save(self, path)

    @classmethod
    def load(cls, path) -> Result:
        """The Result that :meth:`save` wrote to ``path``."""
        return result_io.load(path)


def record_rows(event_time: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Snapshot row each event writes: the first recorded point at or after its time.

    The last write to row i is then the state at point i. Events after the last point go to
    the discard row ``len(points)``."""
    return np.searchsorted(points, event_time, side="left").astype(np.int32)


def fill_unwritten(raw_GxP: np.ndarray, written: np.ndarray, f0: float) -> np.ndarray:
    """Rows that no event wrote hold the previous row's state (or the start, f0)."""
    P = raw_GxP.shape[1]
    idx = np.where(written, np.arange(P), -1)
    idx = np.maximum.accumulate(idx)
    out = np.where(idx[None, :] >= 0, raw_GxP[:, np.maximum(idx, 0)], f0)
    return out


def assemble_curve(raw_GxP, rows_written, f0, points):
    """Prepend the starting point (axis 0) and forward-fill rows no update wrote."""
    written = np.zeros(len(points), bool)
    written[rows_written[rows_written < len(points)]] = True
    body = fill_unwritten(np.asarray(raw_GxP), written, f0)
    G = body.shape[0]
    return np.concatenate([np.full((G, 1), f0), body], axis=1), np.concatenate([[0], points + 1])
