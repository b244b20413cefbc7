"""What every method returns (curves on a named axis, per-update traces, run status) and how
it prints: one summary line per Result, step sizes as 2⁻ᵏ (the one γ-label helper, text only,
so figures, tables, legends and terminals show it alike). The notebook views and the file
format are free functions in :mod:`rpd.io.result_io`."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

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

    def __repr__(self) -> str:
        return summary_line(self)


@dataclasses.dataclass(frozen=True, eq=False)
class StudyOutput:
    """What a study produces: arrays for the figure, a JSON-able summary, and table rows (the
    numbers behind the figure's message, printed next to the paper's claim)."""

    arrays: dict[str, np.ndarray]
    summary: dict[str, Any]
    table: list[dict[str, Any]]


def best_final(curves_GxP: np.ndarray) -> float | None:
    """Diagnostic only (never the selection): the lowest final value over non-diverged γ
    (``rpd.results.diverged``)."""
    ok = ~diverged(curves_GxP)
    return float(curves_GxP[ok, -1].min()) if ok.any() else None


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


def summary_line(r: Result) -> str:
    """``Result(pd: 9 γ in 2⁻⁶..2², 87 points on sim_time 0..86, D=32, 3/9 diverged, best final
    1.2e-03 at γ = 2⁻²)``: what a notebook cell should show instead of every array. ``D`` is said
    only where the final iterates were kept (a run read back from the store has none)."""
    G, P = r.curve.shape
    div = r.diverged
    gammas = (
        f"{G} γ"
        if G == 0
        else (
            f"{G} γ in {gamma_label(r.gammas.min())}..{gamma_label(r.gammas.max())}"
            if G > 1
            else f"γ = {gamma_label(r.gammas[0])}"
        )
    )
    axis = f"{P} points on {r.axis_name}" + (f" {r.axis[0]}..{r.axis[-1]}" if P else "")
    D = r.x_final.shape[-1] if r.x_final.ndim else 0  # 0 columns: the iterates were not kept (a stored run)
    parts = [gammas, axis, *([f"D={D}"] if D else []), f"{int(div.sum())}/{G} diverged"]
    if G and not div.all():
        g = int(np.argmin(np.where(div, np.inf, r.final)))
        parts.append(f"best final {r.final[g]:.3g} at γ = {gamma_label(r.gammas[g])}")
    return f"Result({r.method}: {', '.join(parts)})"


_SUPERSCRIPT = str.maketrans("0123456789-+", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺")


def pow2_label(k) -> str:
    """2 to the integer power ``k`` in unicode superscripts: -4 -> "2⁻⁴", 0 -> "2⁰", 3 -> "2³";
    None (no γ picked) -> "none"."""
    return "none" if k is None else "2" + str(int(k)).translate(_SUPERSCRIPT)


def gamma_label(gamma) -> str:
    """A step size as it is printed: a power of two as "2⁻⁴" (:func:`pow2_label`), any other
    positive value as a plain number ("0.3"), None as "none", a non-positive or non-finite value
    as str(value). Text only (no mathtext), so PNG, PDF, legends and terminals show it alike."""
    if gamma is None:
        return "none"
    g = float(gamma)
    if math.isfinite(g) and g > 0:
        k = math.log2(g)
        if abs(k - round(k)) < 1e-9:
            return pow2_label(round(k))
        return f"{g:.3g}"
    return str(g)


def gamma_grid_label(exps) -> str:
    """The power-of-two grid 2^lo..2^hi as "{2⁻⁸, …, 2⁰}"."""
    lo, hi = exps
    return "{" + f"{pow2_label(lo)}, …, {pow2_label(hi)}" + "}"


# ---------------------------------------------------------------- curves at events

EVENTS = "events"  # meta["time_axis"] of a sim_time curve recorded at its update events only


def value_at(axis, curve, t) -> np.ndarray:
    """The value of a curve at time(s) ``t``: the point of the last event at or before t.

    ``axis`` [P] (increasing; the first point, 0, is the start) and ``curve`` [..., P] are a
    step function of time with one step per event: nothing changes between two updates, so a
    curve recorded at its events gives at any t the value a per-tick curve had there. Returns
    ``curve[..., i(t)]`` (t a scalar or an array); a t before the first point raises."""
    axis = np.asarray(axis)
    t = np.asarray(t)
    i = np.searchsorted(axis, t, side="right") - 1
    if np.any(i < 0):
        raise ValueError(f"t must be >= the curve's first time {axis[0]}, got {t.min()}")
    return np.asarray(curve)[..., i]


def grid_points(T: int, tick: int = 1, stride: int = 1) -> np.ndarray:
    """int64 [0, s, 2s, .., T] in units of ``tick`` (s = stride * tick), and T always last: the
    times a per-tick curve with that stride was recorded at, at the resolution ``tick``."""
    step = int(stride) * int(tick)
    pts = np.arange(step, int(T) + 1, step, dtype=np.int64)
    if pts.size == 0 or pts[-1] != int(T):
        pts = np.append(pts, int(T))
    return np.concatenate([[0], pts]).astype(np.int64)


def unit_name(unit: str | None = "tick") -> str:
    """A time in ``unit`` (``costs.unit``: tick, ns, us, ms, s) as printed after its number:
    "ms", and "ticks" for the paper's time step (None: a run that recorded no unit)."""
    return "ticks" if unit in (None, "tick") else unit


def time_unit(tl) -> str:
    """The unit of a timeline's ticks: its cost model's ``unit`` ("tick" when it has none), as
    a result trained on it records in ``meta["time_unit"]`` (its axis, ``T``)."""
    return getattr(getattr(tl, "costs", None), "unit", None) or "tick"


def time_label(unit: str | None = "tick") -> str:
    """The axis label of simulated time whose ticks are ``unit`` (``costs.unit``: tick, ns, us,
    ms, s): "simulated time (ms)", and "simulated time (ticks)" for the paper's time step."""
    return f"simulated time ({unit_name(unit)})"


def axis_label(result: Result) -> str:
    """The x label of a result's curve: :func:`time_label` of its ``time_unit`` (its meta's, or
    its stored summary's) on the sim_time axis, else "block update"."""
    if result.axis_name != "sim_time":
        return result.axis_name.replace("_", " ")
    meta = result.meta or {}
    return time_label(meta.get("time_unit") or (meta.get("summary") or {}).get("time_unit"))
