"""Simulated time (docs/science.md#simulated-time): one time axis for every method, and the fixed-time protocols.

Default cost model: every F and B costs one time step, communication and averaging are free,
a result made at step t is usable at step t+1. Under an :class:`rpd.schedules.machinery.costs.CostModel` the axis is
in ticks and every function here works unchanged (an update lands at the end of its op's last
tick). A method's curve on the time axis is f of its
evaluated model at its events (``Result.axis_name == "sim_time"``, ``meta["time_axis"] ==
"events"``): after every tick in which an update lands, and at the end. Nothing changes between
two updates, so the value at any time t is that of the last event at or before t
(:func:`rpd.results.value_at`, the one read every protocol here goes through), and
:func:`on_ticks` gives the curve after every time step, at the clock's :func:`resolution`.

Protocol (i), same N: every method processes the same number of microbatches; curves are cut
to the shortest timeline. Protocol (ii), fixed time T: each method takes the smallest N whose
timeline reaches T; RPD gets K = the number of backward ops in PD's timeline.

Time-cut convention (``cut=``), where a curve is cut at a time T:

- ``"end"``: keep the points at time ≤ T; the last is the model after T time steps.
- ``"authors"``: keep ``curve[:T]`` as the authors' protocol (i) code does, the points at time
  < T; the last is the model after T − 1 steps. The paper's figures (E3, E4, E6) use it; e.g.
  E3's LocalSGD H = 5 reads 22.7 at the point after T = 1230 steps and 22.5 after 1229.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from rpd.results import EVENTS, Result, grid_points, value_at
from rpd.schedules import Timeline
from rpd.train import rounds
from rpd.validation import check_choice, check_int


def smallest_n_reaching(T: int, make_timeline: Callable[[int], Timeline], guess: int = 1) -> Timeline:
    """The timeline of the smallest N >= 1 whose length is >= T (lengths grow with N), so any
    schedule (and cost model) works. The search brackets the answer outward from ``guess`` with
    doubling steps, then bisects: about 2·log2(N) timelines from the default guess of 1, a few
    when the guess is close (a cost ladder's rungs guess from the previous rung)."""
    T = check_int("T", T)
    lo = hi = max(1, check_int("guess", guess, 0))  # a hint: 0 starts at 1
    best, step = make_timeline(hi), 1
    if best.T >= T:  # invariant from here: length(lo) < T (lo = 0: no N yet), length(hi) >= T
        while True:
            lo = max(0, hi - step)
            if lo == 0:
                break
            cand = make_timeline(lo)
            if cand.T < T:
                break
            hi, best, step = lo, cand, 2 * step
    else:
        while True:
            cand = make_timeline(lo + step)
            if cand.T >= T:
                hi, best = lo + step, cand
                break
            lo, step = lo + step, 2 * step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        cand = make_timeline(mid)
        if cand.T >= T:
            hi, best = mid, cand
        else:
            lo = mid
    return best


CUTS = ("end", "authors")


def last_time(T: int, cut: str = "end") -> int:
    """The last time step a curve cut at T keeps: T (``cut="end"``) or T − 1 (``"authors"``)."""
    check_choice("cut", cut, CUTS)
    return int(T) - (cut == "authors")


def resolution(tl: Timeline) -> int:
    """The timeline's clock resolution: the largest integer dividing every op's start and end
    and every sync / flush boundary (1 under unit costs). Scaling every cost by c scales it by c,
    so a curve read every ``resolution`` ticks (:func:`on_ticks`) has the same points whatever
    the unit the costs are written in."""
    return rounds.clock_resolution(tl)


def on_ticks(result: Result, tick: int = 1, stride: int = 1) -> Result:
    """A sim_time curve read every ``stride`` × ``tick`` ticks up to its last point (and there):
    the per-tick curve of the events, through :func:`rpd.results.value_at`. With ``tick`` =
    :func:`resolution` its points do not depend on the cost unit; under unit costs it is the
    curve recorded after every time step, value for value."""
    if result.axis_name != "sim_time":
        raise ValueError(f"on_ticks needs a sim_time curve, got {result.axis_name!r}")
    tick, stride = check_int("tick", tick), check_int("stride", stride)
    axis = grid_points(int(result.axis[-1]), tick, stride)
    meta = dict(result.meta, time_axis="ticks", tick=tick)
    return dataclasses.replace(result, axis=axis, curve=value_at(result.axis, result.curve, axis), meta=meta)


def per_tick(result: Result, tl: Timeline) -> Result:
    """A curve recorded at its events read after every time step of ``tl`` (:func:`on_ticks`
    at its :func:`resolution`); any other curve unchanged. Under unit costs: the per-tick curve."""
    return on_ticks(result, resolution(tl)) if result.meta.get("time_axis") == EVENTS else result


# A run's per-tick reading (:func:`on_clock`) has at most this many points, or 16 per recorded
# event when that is more: its memory follows the events, never the clock's resolution.
CLOCK_POINTS = 1 << 16


def clock_stride(n_ticks: int, n_events: int) -> int:
    """Every how many clock ticks :func:`on_clock` reads a curve of ``n_events`` points spanning
    ``n_ticks`` clock ticks: 1 (every tick) up to max(:data:`CLOCK_POINTS`, 16 × events) ticks."""
    return max(1, -(-int(n_ticks) // max(CLOCK_POINTS, 16 * int(n_events))))


def on_clock(result: Result, tl: Timeline) -> Result:
    """A curve recorded at its events read every clock tick of ``tl`` (:func:`per_tick`), or every
    :func:`clock_stride` ticks where that would be more than :data:`CLOCK_POINTS` points (and 16
    per event): the same points whatever the unit the costs are written in, and never more points
    than the events bound."""
    if result.meta.get("time_axis") != EVENTS:
        return result
    tick = resolution(tl)
    return on_ticks(result, tick, clock_stride(int(result.axis[-1]) // tick, len(result.axis)))


def cut_to(result: Result, T: int, cut: str = "end") -> Result:
    """The result's time curve restricted to the first T time steps: axis ≤ T (``cut="end"``)
    or axis < T, i.e. ``curve[:T]`` on a per-step curve (``"authors"``; see the module doc). A
    curve at events keeps its events before the cut and ends with a point at the cut's last
    time (the value of the last event at or before it)."""
    if result.axis_name != "sim_time":
        raise ValueError(f"cut_to needs a sim_time curve, got {result.axis_name!r}")
    end = last_time(T, cut)
    keep = result.axis <= end
    axis, curve = result.axis[keep], result.curve[:, keep]
    if result.meta.get("time_axis") == EVENTS and axis[-1] != end and result.axis[-1] > end:
        axis = np.append(axis, end)
        curve = np.concatenate([curve, value_at(result.axis, result.curve, [end])], axis=1)
    return Result(
        result.method,
        result.gammas,
        axis,
        result.axis_name,
        curve,
        result.traces,
        result.x_final,
        dict(result.meta, cut_T=T, cut=cut),
    )


def cut_to_shortest(results: list[Result], cut: str = "end") -> list[Result]:
    """Protocol (i): all curves cut to the shortest timeline T (``cut``: see :func:`cut_to`)."""
    T = min(int(r.axis[-1]) for r in results)
    return [cut_to(r, T, cut) for r in results]


def value_at_time(result: Result, T: int, cut: str = "end") -> np.ndarray:
    """f - f* of each gamma's model at the end of a curve cut at T: the last point at or before
    T (``cut="end"``) or before T (``"authors"``)."""
    return value_at(result.axis, result.curve, last_time(T, cut))


def block_updates_in(tl: Timeline) -> int:
    """Number of block updates in a timeline: RPD's K under protocol (ii)."""
    return int(len(tl.update_time))


def time_of_update(tl: Timeline) -> np.ndarray:
    """int [K]: time step of each block update, to place per-update curves on the time axis."""
    return tl.update_time


def block_updates_at(update_time: np.ndarray, sim_time: np.ndarray) -> np.ndarray:
    """int64: block updates completed after ``sim_time`` time steps (ticks), #{k : time[k] < t}:
    a per-tick curve's block-update axis. ``update_time`` need not be sorted."""
    return np.searchsorted(np.sort(np.asarray(update_time)), sim_time, side="left").astype(np.int64)


def sim_time_at(update_time: np.ndarray, block_update: np.ndarray) -> np.ndarray:
    """int64: time steps (ticks) completed when ``block_update`` updates are done, 0 before any:
    a per-update curve's time axis. ``update_time`` is in update order (non-decreasing)."""
    a = np.asarray(block_update, np.int64)
    return np.where(a > 0, np.asarray(update_time)[np.maximum(a - 1, 0)] + 1, 0).astype(np.int64)
