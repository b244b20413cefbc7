"""The memory estimate of a resolved job (``rpd.runtime.budget``): its big allocations as
``budget.Term`` s, each naming the config fields that set it with the user's values, checked
against the available memory before any objective, timeline or compile (a refusal names the
fields of the largest term). A training job is estimated from its
:class:`~rpd.cli.specs.TrainSpec` (:func:`check`), the chart and a sweep's rows from a checked
config and its resolved run (:func:`check_config`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import jax

from rpd import objectives, registry
from rpd.analysis.simtime import CLOCK_POINTS
from rpd.cli import checks, specs
from rpd.cli.config import _value
from rpd.objectives.entries import linear_memory
from rpd.objectives.entry import Memory
from rpd.runtime import budget
from rpd.validation import required

OP_TABLE_BYTES = 96  # one op of a timeline: its rank, stage, microbatch, kind, start and end, and the timer's state
VALUE_BYTES = 16  # a recorded value (float64) and its time (int64)


def check(ts: specs.TrainSpec) -> None:
    """The memory estimate of the resolved job ``ts``; raises ``budget.TooLargeError`` naming
    the fields of its largest term."""
    budget.check(job_terms(ts))


def job_terms(ts: specs.TrainSpec) -> list[budget.Term]:
    """The terms of the resolved job ``ts`` (a user's objective by what it built, ``ts.user_objective``)."""
    return terms(ts.run, ts.objective, ts.gammas, ts.config, ts.user_objective)


def check_config(cfg, run: registry.RunSpec) -> None:
    """The memory estimate of a checked config ``cfg`` and its resolved run ``run`` (the chart,
    a sweep's rows: rpd's objectives)."""
    budget.check(config_terms(cfg, run))


def config_terms(cfg, run: registry.RunSpec) -> list[budget.Term]:
    """The terms of a checked config ``cfg`` whose run ``run`` is resolved (rpd's objectives)."""
    return terms(run, cfg.objective, checks.gammas(cfg.method), specs.to_container(cfg))


def terms(run: registry.RunSpec, o, gammas: Sequence[float], config: Mapping, built=None) -> list[budget.Term]:
    """The big allocations of the resolved run ``run`` with objective node ``o``, the γ grid
    ``gammas`` and the config as plain values ``config`` (its method's seeds and grid fields,
    its costs, the values the terms show): the objective's data, the schedule's op table, the
    curves at the update events and their per-tick reading (bounded by the events, not by the
    costs' resolution: docs/science.md#simulated-time-at-events), the method's state for the
    whole γ grid (PD's history ring and NOAM gradient slots, RPD's δ + 1 versions, LocalSGD's R
    replicas and padded rounds) and the LM's activations. A user's objective (``_target_``) is
    sized by what it built, ``built`` (its x's length D and its data arrays' bytes), not by the
    config's n and d, which it may not read. The objective's own part (D, its data) is its
    entry's (``rpd.objectives.ObjectiveEntry.memory``)."""
    p = run.pipeline.params
    G, S = len(gammas), int(p.S)
    user = bool(getattr(o, "_target_", None))
    entry = objectives.OBJECTIVES[_value(o.name)]  # checked: a registered name
    if user and built is not None:  # the arrays it holds
        nbytes = sum(int(getattr(x, "nbytes", 0)) for x in jax.tree_util.tree_leaves(built.data))
        size = Memory(int(built.D), ("objective._target_",), 8, (budget.Term("data", ("objective._target_",), nbytes),))
    else:
        size = (entry.memory or linear_memory)(o, S if entry.is_lm else specs.objective_blocks(run))
    D, width, item, lm = size.D, size.by, size.item, entry.is_lm and not user
    c, method = config["costs"], config["method"]
    given = [x for f in ("F", "B", "I", "W", "FB") if c[f] is not None for x in _flat(c[f])]
    tick = max(given + [1]) + int(c["p2p"]) + int(c["straggler_ticks"])
    # Every op boundary is a sum of costs, so their gcd divides the clock's resolution.
    gcd = math.gcd(*given, int(c["p2p"]), int(c["straggler_ticks"])) or 1
    noam, v, R, H = p.get("noam") or S, int(p.get("v") or 1), p.get("R"), p.get("H")  # the schedule's own
    replicas = run.pipeline.entry.semantics.runner == "replicas"
    by: tuple[str, ...]
    if p.T is not None:
        T, by = int(p.T), ("schedule.T", "schedule.S")
        ops = T * S * v  # at most one op per rank and unit tick
    else:
        N = int(required("schedule.N", p.N))
        if replicas:
            T = 2 * N + -(-N // (required("schedule.R", R) * required("schedule.H", H))) * (2 * S - 2)
        elif noam < S:
            T = 2 * N * -(-S // noam) + 2 * S
        else:  # one warm-up and drain per flush (one in all for the asynchronous streams)
            flushes = -(-N // required("schedule.M", p.M)) if registry.SCHEDULES[run.pipeline.name].flush else 1
            T = (2 * N + flushes * 2 * S) * v
        by = ("schedule.N", "schedule.S") + (("schedule.noam",) if noam < S else ())
        ops = 3 * N * S * v  # F, and B or its halves I and W, per microbatch and stage
    # Curves are recorded at the update events (at most one per op, plus syncs), whatever the
    # resolution of the clock; the per-tick reading of the stored run (rpd.analysis.simtime.on_clock)
    # has at most one point per clock tick, the clock's ticks being multiples of the costs' gcd.
    runs = G * max(1, len(method["seeds"]))
    events = ops + 2
    ticks = T * tick // gcd
    points = min(ticks, max(CLOCK_POINTS, 16 * events))
    costs_by = tuple(
        f"costs.{f}"
        for f in ("F", "B", "I", "W", "FB", "p2p", "straggler_ticks")
        if c[f] is not None and max(_flat(c[f])) > (0 if f in ("p2p", "straggler_ticks") else 1)
    )
    grid = ("method.gammas",) if method["gammas"] is not None else ("method.gamma_lo", "method.gamma_hi")
    out = [
        budget.Term("schedule op table", by, ops * OP_TABLE_BYTES),
        budget.Term("curves and traces at the update events", by + grid, runs * events * VALUE_BYTES),
        budget.Term("curves read per clock tick", by + costs_by + grid, runs * points * VALUE_BYTES),
    ]
    if lm:
        # Per gradient, per token and stage: ~32 width-sized values and the attention scores
        # (XLA's temporaries for E5's paper-size LocalSGD, 80 gradients at once: 5668 MiB, i.e.
        # 71 MiB per gradient against 68 MiB here). LocalSGD computes R of them per γ at once.
        acts = (R if replicas else 1) * G * o.batch_size * o.seq_len * (32 * o.width + o.heads * o.seq_len) * S * item
        out.append(
            budget.Term(
                "LM activations",
                ("objective.batch_size", "objective.seq_len", "objective.width")
                + (("schedule.R",) if replicas else ()),
                acts,
            )
        )
    out += size.data
    if run.method == "rpd":
        out.append(
            budget.Term(
                "RPD history ring",
                ("method.delta",) + width,
                G * (required("method.delta", run.options.delta) + 1) * D * item,
            )
        )
    elif replicas:
        out.append(budget.Term("LocalSGD replicas", ("schedule.R",) + width, G * R * D * item))
        rounds = -(-int(p.N or T) // (R * H)) * R * H
        out.append(budget.Term("LocalSGD rounds", ("schedule.R", "schedule.H"), rounds * 8 * 4))
    elif run.method != "sgd":
        out.append(
            budget.Term("history ring and gradient slots", ("schedule.noam",) + width, G * (2 * noam + 2) * D * item)
        )
    return [t._replace(values=tuple(_shown(config, G, f) for f in t.fields)) for t in out]


def _shown(config: Mapping, G: int, field: str) -> str:
    """``field=<the user's value>`` (``12 γ`` for an explicit grid)."""
    if field == "method.gammas":
        return f"{G} γ"
    value: object = config
    for key in field.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    return f"{field}={value}"


def _flat(v) -> list[int]:
    return [int(x) for x in (v if isinstance(v, (list, tuple)) or hasattr(v, "__len__") else [v])]
