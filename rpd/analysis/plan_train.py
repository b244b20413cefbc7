"""Time to a target loss for the plan's rows (docs/plan.md#time-to-a-target-loss-objective-rpdanalysisplan_train): each
schedule's speed and its staleness on one axis, simulated wall-clock seconds.

For every row of a plan (:func:`rpd.model.plan.plan`) that timed, the schedule is rebuilt for
``N`` microbatches under the same stage costs (:func:`rpd.model.plan.staged`: the model cut into
the schedule's global stages on the hardware) and trained through its own semantics
(:func:`rpd.train.methods.train`) on an objective with one block per global stage (the MLP
chain or the char LM cut into the same stages; ``make_objective(n_blocks)``), over a γ grid, with
``optimizer`` (:mod:`rpd.train.optimizers`; None: plain SGD).

Protocol (docs/science.md#simulated-time (i), in seconds), per objective (rows are grouped by their block count: a
schedule with two chunks per rank trains a model of 2S blocks, not comparable with S blocks):
T = the shortest wall-clock time any row of the group needs for its N microbatches; every row is
read on one grid of ``points`` instants up to T (seconds / the row's own tick length), γ chosen
by ``rule`` at T. The target is ``target`` if given, else the lowest loss any row of the group
reaches at T/2 (E10's rule). Time to target = the first instant of the grid at which
the row's selected curve is at or below the target (resolution T/points), None if it is not
reached by T. A diverged γ is recorded, never selected; a row whose every γ diverged gets no time.

What this measures: the objective is rpd's own small model standing in for the planned model
(its loss, not GPT's), trained on the planned model's timeline; the seconds are the planned
model's. It answers "does schedule A's extra speed survive its staleness", not "what loss does
GPT reach".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from rpd.analysis import tuning
from rpd.model.hardware import Hardware
from rpd.model.layers import Model
from rpd.model.plan import Maker, Row, staged
from rpd.objectives.base import Objective
from rpd.schedules.machinery.jitter import Stochastic
from rpd.train import methods
from rpd.validation import check_choice, check_gammas, check_int, check_real


def _timeline(model: Model, hw: Hardware, row: Row, make: Maker, N: int, how: str, tick_s, grad_bytes: int, stochastic):
    unit = make(row.schedule, row.S, row.M, row.M, None, 0)
    _, costs, tick, values = staged(model, hw, unit, how, tick_s, grad_bytes)
    if stochastic is not None:  # the plan's jitter and stragglers (docs/plan.md#stochastic-time)
        costs = dataclasses.replace(costs, **stochastic.fields())
    return make(row.schedule, row.S, N, row.M, costs, values), tick


def time_to_target(
    rows: Sequence[Row],
    model: Model,
    hw: Hardware,
    make: Maker,
    make_objective: Callable[[int], Objective],
    N: int,
    gammas,
    *,
    how: str = "even",
    tick_s: float | None = None,
    grad_bytes: int = 4,
    target: float | None = None,
    rule: str = "best_final",
    points: int = 32,
    seed: int = 0,
    optimizer=None,
    stochastic: Stochastic | None = None,
) -> dict:
    """``{"rule", "N", "points", "groups": [{"blocks", "T_s", "target", "rows": [{"schedule", "M",
    "gamma", "gamma_on_grid_edge", "loss_at_T", "time_to_target_s", "n_diverged"}]}], "errors":
    [{"schedule", "M", "error"}]}`` for every row of ``rows`` without an error and with D = 1 (see
    the module docstring). Rows are compared within a group of one objective: a schedule with v
    chunks per rank (interleaved, ZB-V, DualPipeV, WPipe) trains an objective of S·v blocks, a
    different model from the S-block one, so each block count is its own group with its own T and
    target. ``stochastic``: the plan's jitter and persistent stragglers, laid over each row's costs."""
    N = check_int("train.N", N)
    points = check_int("train.points", points)
    grid = np.asarray(check_gammas(gammas), np.float64)
    check_choice("train.rule", rule, set(tuning.RULES))
    if target is not None:
        check_real("train.target", target, allow_zero=True)
    groups: dict[int, list] = {}
    errors = []
    for r in rows:
        if r.error is not None or r.D != 1:
            continue
        try:
            tl, tick = _timeline(model, hw, r, make, N, how, tick_s, grad_bytes, stochastic)
        except ValueError as exc:  # N is not a multiple of this schedule's step, ...
            errors.append({"schedule": r.schedule, "M": r.M, "error": str(exc)})
            continue
        groups.setdefault(tl.n_stages, []).append((r, tl, tick))
    if not groups:
        raise ValueError("train: no schedule of the plan could be built for train.N microbatches")
    out = [
        _group(blocks, members, make_objective(blocks), grid, target, rule, points, seed, optimizer)
        for blocks, members in sorted(groups.items())
    ]
    return {"rule": rule, "N": N, "points": points, "groups": out, "errors": errors}


def _group(blocks, members, obj, grid, target, rule, points, seed, optimizer) -> dict:
    """One objective's rows read at one T (the group's shortest run), against one target."""
    T = min(tl.T * tick for _, tl, tick in members)
    instants = np.linspace(T / points, T, points)
    out = []
    for r, tl, tick in members:
        # the last tick at or before each instant (ticks of this row's own length), each once
        ticks = np.clip(np.floor(instants / tick + 1e-9).astype(np.int64), 1, tl.T)
        at, which = np.unique(ticks, return_inverse=True)
        res = methods.train(obj, tl, grid, seed=seed, at=at, optimizer=optimizer)
        curve = np.asarray(res.curve)[:, 1:][:, which]  # [G, points]: the start dropped, one value per instant
        i = tuning.select_gamma(curve, grid, rule=rule, start=np.asarray(res.curve)[:, 0]).index
        out.append(
            {
                "schedule": r.schedule,
                "M": r.M,
                "gamma": None if i is None else float(grid[i]),
                "gamma_on_grid_edge": i is not None and i in (int(np.argmin(grid)), int(np.argmax(grid))),
                "loss_at_T": None if i is None else float(curve[i, -1]),
                "n_diverged": int(np.asarray(res.diverged).sum()),
                "_curve": None if i is None else curve[i],
            }
        )
    if target is None:
        half = [float(e["_curve"][points // 2 - 1]) for e in out if e["_curve"] is not None]
        target = float(np.nanmin(half)) if half else float("nan")
    for e in out:
        c = e.pop("_curve")
        hit = np.nonzero(c <= target)[0] if c is not None else np.zeros(0, int)
        e["time_to_target_s"] = float(instants[hit[0]]) if hit.size else None
    return {"blocks": int(blocks), "T_s": float(T), "target": float(target), "rows": out}


def format_times(result: dict) -> str:
    """Per group, the rows sorted by time to target (reached first), then by loss at T."""
    lines = []
    for grp in result["groups"]:
        rows = sorted(
            grp["rows"],
            key=lambda e: (
                e["time_to_target_s"] is None,
                e["time_to_target_s"] or 0.0,
                e["loss_at_T"] if e["loss_at_T"] is not None else np.inf,
            ),
        )
        lines += [
            f"{grp['blocks']} objective blocks: time to loss {grp['target']:.4g} (T = {grp['T_s'] * 1e3:.2f} ms of "
            f"simulated time, the shortest run of N = {result['N']} microbatches; γ by {result['rule']} at T)",
            f"{'schedule':<14} {'M':>3} {'gamma':>9} {'loss at T':>10} {'to target ms':>12}",
        ]
        for e in rows:
            g = "diverged" if e["gamma"] is None else f"{e['gamma']:.3g}" + ("*" if e["gamma_on_grid_edge"] else "")
            loss = "-" if e["loss_at_T"] is None else f"{e['loss_at_T']:.4g}"
            t = "not reached" if e["time_to_target_s"] is None else f"{e['time_to_target_s'] * 1e3:.2f}"
            lines.append(f"{e['schedule']:<14} {e['M']:>3} {g:>9} {loss:>10} {t:>12}")
    lines += [f"{e['schedule']:<14} {e['M']:>3}  n/a: {e['error']}" for e in result["errors"]]
    if any(e["gamma_on_grid_edge"] for grp in result["groups"] for e in grp["rows"]):
        lines.append("* γ on the grid's edge: widen train.gamma_lo / train.gamma_hi")
    return "\n".join(lines)
