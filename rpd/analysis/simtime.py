"""Simulated time (SPEC §6): one time axis for every method, and the fixed-time protocols.

Default cost model: every F and B costs one time step, communication and averaging are free,
a result made at step t is usable at step t+1. Under an :class:`rpd.schedules.costs.CostModel` the axis is
in ticks and every function here works unchanged (an update lands at the end of its op's last
tick). A method's curve on the time axis is f of its
evaluated model after every time step (``Result.axis_name == "sim_time"``).

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

from typing import Callable

import numpy as np

from rpd.results import Result
from rpd.schedules import Timeline
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


def cut_to(result: Result, T: int, cut: str = "end") -> Result:
    """The result's time curve restricted to the first T time steps: axis ≤ T (``cut="end"``)
    or axis < T, i.e. ``curve[:T]`` on a per-step curve (``"authors"``; see the module doc)."""
    if result.axis_name != "sim_time":
        raise ValueError(f"cut_to needs a sim_time curve, got {result.axis_name!r}")
    keep = result.axis <= last_time(T, cut)
    return Result(
        result.method,
        result.gammas,
        result.axis[keep],
        result.axis_name,
        result.curve[:, keep],
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
    i = int(np.searchsorted(result.axis, last_time(T, cut), side="right")) - 1
    return result.curve[:, i]


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
