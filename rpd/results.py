"""What every method returns: curves on a named axis, per-update traces, and run status."""

from __future__ import annotations

import dataclasses

import numpy as np


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
        """bool [G]: the curve left the finite numbers somewhere."""
        return ~np.all(np.isfinite(self.curve), axis=1)

    @property
    def final(self) -> np.ndarray:
        return self.curve[:, -1]

    def at(self, g: int) -> np.ndarray:
        return self.curve[g]


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
