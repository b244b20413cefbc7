"""Value checks and conversions of the entry points' typed configs (:mod:`rpd.cli.config`
holds the schemas): what a type cannot express (S >= 1, a non-empty γ grid, n >= d for
Nesterov's quadratic, S >= 3 for the LM, ...) checked in :func:`validate` before any objective
is built, with the dotted config path as the argument name (``schedule.S must be >= 1, got 0``);
the memory estimate's terms; and ``+`` keys checked against the schemas (:func:`check_keys`,
:func:`typed`). The library
objects a config stands for (:func:`~rpd.cli.specs.cost_model`,
:func:`~rpd.cli.specs.run_spec`) are :mod:`rpd.cli.specs`."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import typing

import jax
from omegaconf import DictConfig, OmegaConf

from rpd import objectives, registry
from rpd.analysis import tuning
from rpd.analysis.simtime import CLOCK_POINTS
from rpd.cli import optimizer_config, schedule_config
from rpd.cli.config import (
    BatchOrder,
    BlockOrder,
    Delays,
    MethodName,
    Selector,
    TrainConfig,
    _value,
)
from rpd.cli.objectives import user_factory
from rpd.cli.specs import objective_blocks, optimizer_of, run_spec
from rpd.io.tracking import MODES
from rpd.objectives.entries import linear_memory
from rpd.objectives.entry import Memory, readers, structured
from rpd.runtime import budget
from rpd.train import optimizers
from rpd.validation import check_choice, check_int, check_real, nearest, required


def _grid_exponents(m) -> None:
    lo = tuning.check_exponent("method.gamma_lo", m.gamma_lo)
    hi = tuning.check_exponent("method.gamma_hi", m.gamma_hi)
    if hi < lo:
        raise ValueError(
            f"method.gamma_hi must be >= method.gamma_lo (the gamma grid "
            f"2^gamma_lo..2^gamma_hi is empty), got gamma_lo={lo}, gamma_hi={hi}"
        )


def gammas(m) -> list[float]:
    """The step-size grid of a method config (checked): explicit ``gammas`` or 2^lo..2^hi."""
    if m.gammas is not None:
        if len(m.gammas) == 0:
            raise ValueError("method.gammas must not be empty (or null for the 2^lo..2^hi grid)")
        return [check_real(f"method.gammas[{i}]", float(g)) for i, g in enumerate(m.gammas)]
    _grid_exponents(m)
    return [float(g) for g in tuning.pow2_grid(int(m.gamma_lo), int(m.gamma_hi))]


def validate(cfg) -> registry.RunSpec:
    """Every value check that does not need data, then the memory estimate
    (:func:`memory_terms`, ``rpd.runtime.budget``); raises ValueError/TypeError naming the field.
    Returns the run's resolved (method, schedule, options, costs), made once here
    (:func:`~rpd.cli.specs.run_spec`), for the caller to pass down.

    Runs before anything expensive (no objective, timeline or compile yet). A user's objective
    (``_target_``) is estimated once it is built, from its own sizes (:func:`check_memory`)."""
    spec = _check_values(cfg)
    if user_factory(cfg.objective) is None:
        check_memory(cfg, spec=spec)
    return spec


def check_memory(cfg, objective=None, spec: registry.RunSpec | None = None) -> None:
    """The memory estimate of a checked config (``objective``: a user's, built; ``spec``: its
    resolved run, resolved here when None)."""
    budget.check(memory_terms(cfg, objective, spec))


OP_TABLE_BYTES = 96  # one op of a timeline: its rank, stage, microbatch, kind, start and end, and the timer's state
VALUE_BYTES = 16  # a recorded value (float64) and its time (int64)


def memory_terms(cfg, objective=None, spec: registry.RunSpec | None = None) -> list[budget.Term]:
    """The big allocations of a checked config as ``rpd.runtime.budget.Term`` s, each with the
    user's values of the fields that set it: the objective's data, the schedule's op table, the
    curves at the update events and their per-tick reading (bounded by the events, not by the
    costs' resolution: docs/science.md#simulated-time-at-events), the method's state for the
    whole γ grid (PD's history ring and NOAM gradient slots, RPD's δ + 1 versions, LocalSGD's R
    replicas and padded rounds) and the LM's activations. A user's objective (``_target_``) is
    sized by what it built, ``objective`` (its x's length D and its data arrays' bytes), not by
    the config's n and d, which it may not read. The objective's own part (D, its data) is its
    entry's (``rpd.objectives.ObjectiveEntry.memory``)."""
    o, s = cfg.objective, cfg.schedule
    spec = spec or run_spec(cfg)
    p = spec.pipeline.params
    G, S = len(gammas(cfg.method)), int(s.S)
    user = user_factory(o) is not None
    entry = objectives.OBJECTIVES[_value(o.name)]  # checked: a registered name
    if user and objective is not None:  # the arrays it holds
        nbytes = sum(int(getattr(x, "nbytes", 0)) for x in jax.tree_util.tree_leaves(objective.data))
        size = Memory(
            int(objective.D), ("objective._target_",), 8, (budget.Term("data", ("objective._target_",), nbytes),)
        )
    else:
        size = (entry.memory or linear_memory)(o, S if entry.is_lm else objective_blocks(spec))
    D, width, item, lm = size.D, size.by, size.item, entry.is_lm and not user
    c = cfg.costs
    given = [x for f in ("F", "B", "I", "W", "FB") if getattr(c, f) is not None for x in _flat(getattr(c, f))]
    tick = max(given + [1]) + int(c.p2p) + int(c.straggler_ticks)
    # Every op boundary is a sum of costs, so their gcd divides the clock's resolution.
    gcd = math.gcd(*given, int(c.p2p), int(c.straggler_ticks)) or 1
    noam, v, R, H = p.get("noam") or S, int(p.get("v") or 1), p.get("R"), p.get("H")  # the schedule's own
    by: tuple[str, ...]
    if p.T is not None:
        T, by = int(p.T), ("schedule.T", "schedule.S")
        ops = T * S * v  # at most one op per rank and unit tick
    else:
        N = int(required("schedule.N", p.N))
        if spec.pipeline.entry.semantics.runner == "replicas":
            T = 2 * N + -(-N // (required("schedule.R", R) * required("schedule.H", H))) * (2 * S - 2)
        elif noam < S:
            T = 2 * N * -(-S // noam) + 2 * S
        else:  # one warm-up and drain per flush (one in all for the asynchronous streams)
            flushes = -(-N // required("schedule.M", p.M)) if registry.SCHEDULES[spec.pipeline.name].flush else 1
            T = (2 * N + flushes * 2 * S) * v
        by = ("schedule.N", "schedule.S") + (("schedule.noam",) if noam < S else ())
        ops = 3 * N * S * v  # F, and B or its halves I and W, per microbatch and stage
    # Curves are recorded at the update events (at most one per op, plus syncs), whatever the
    # resolution of the clock; the per-tick reading of the stored run (rpd.analysis.simtime.on_clock)
    # has at most one point per clock tick, the clock's ticks being multiples of the costs' gcd.
    runs = G * max(1, len(cfg.method.seeds))
    events = ops + 2
    ticks = T * tick // gcd
    points = min(ticks, max(CLOCK_POINTS, 16 * events))
    costs_by = tuple(
        f"costs.{f}"
        for f in ("F", "B", "I", "W", "FB", "p2p", "straggler_ticks")
        if getattr(c, f) is not None and max(_flat(getattr(c, f))) > (0 if f in ("p2p", "straggler_ticks") else 1)
    )
    grid = ("method.gammas",) if cfg.method.gammas is not None else ("method.gamma_lo", "method.gamma_hi")
    terms = [
        budget.Term("schedule op table", by, ops * OP_TABLE_BYTES),
        budget.Term("curves and traces at the update events", by + grid, runs * events * VALUE_BYTES),
        budget.Term("curves read per clock tick", by + costs_by + grid, runs * points * VALUE_BYTES),
    ]
    if lm:
        # Per gradient, per token and stage: ~32 width-sized values and the attention scores
        # (XLA's temporaries for E5's paper-size LocalSGD, 80 gradients at once: 5668 MiB, i.e.
        # 71 MiB per gradient against 68 MiB here). LocalSGD computes R of them per γ at once.
        local = spec.pipeline.entry.semantics.runner == "replicas"
        acts = (R if local else 1) * G * o.batch_size * o.seq_len * (32 * o.width + o.heads * o.seq_len) * S * item
        terms.append(
            budget.Term(
                "LM activations",
                ("objective.batch_size", "objective.seq_len", "objective.width") + (("schedule.R",) if local else ()),
                acts,
            )
        )
    terms += size.data
    if spec.method == "rpd":
        terms.append(
            budget.Term(
                "RPD history ring",
                ("method.delta",) + width,
                G * (required("method.delta", spec.options.delta) + 1) * D * item,
            )
        )
    elif spec.pipeline.entry.semantics.runner == "replicas":
        terms.append(budget.Term("LocalSGD replicas", ("schedule.R",) + width, G * R * D * item))
        rounds = -(-int(p.N or T) // (R * H)) * R * H
        terms.append(budget.Term("LocalSGD rounds", ("schedule.R", "schedule.H"), rounds * 8 * 4))
    elif spec.method != "sgd":
        terms.append(
            budget.Term("history ring and gradient slots", ("schedule.noam",) + width, G * (2 * noam + 2) * D * item)
        )
    return [t._replace(values=tuple(_shown(cfg, f) for f in t.fields)) for t in terms]


def _shown(cfg, field: str) -> str:
    value = OmegaConf.select(cfg, field) if isinstance(cfg, DictConfig) else None
    if field == "method.gammas":
        return f"{len(gammas(cfg.method))} γ"
    return f"{field}={_value(value)}"


def _flat(v) -> list[int]:
    return [int(x) for x in (v if isinstance(v, (list, tuple)) or hasattr(v, "__len__") else [v])]


def _check_values(cfg) -> registry.RunSpec:
    o, m, s = cfg.objective, cfg.method, cfg.schedule
    S = check_int("schedule.S", s.S)
    if s.T is None:
        check_int("schedule.N", s.N)
    else:
        check_int("schedule.T", s.T)
    if s.M is not None:  # the schedule's own parameters: checked by its entry (run_spec, below)
        check_int("schedule.M", s.M)

    check_choice("method.name", _value(m.name), [x.value for x in MethodName])
    gammas(m)
    if not len(m.seeds):
        raise ValueError("method.seeds must list at least one seed")
    for i, seed in enumerate(m.seeds):
        check_int(f"method.seeds[{i}]", seed, 0)
    if m.delta is not None:
        check_int("method.delta", m.delta, 0)
    check_choice("method.delays", _value(m.delays), [x.value for x in Delays])
    check_choice("method.block_order", _value(m.block_order), [x.value for x in BlockOrder])
    check_choice("method.batch_order", _value(m.batch_order), [x.value for x in BatchOrder])
    check_choice("method.selector", _value(m.selector), [x.value for x in Selector])
    if check_real("method.tail_frac", m.tail_frac) > 1:
        raise ValueError(f"method.tail_frac must be <= 1, got {m.tail_frac}")
    check_int("method.stride", m.stride)
    opt = optimizer_of(cfg)
    if opt is not None and optimizers.entry(opt["name"]).matrices and _value(cfg.objective.name) not in structured():
        raise ValueError(
            f"optimizer={opt['name']} needs weight matrices in their shapes; objective "
            f"{_value(cfg.objective.name)} is one flat vector (use {' or '.join(structured())})"
        )
    if cfg.logger.mode is not None:  # fail before the job, not when logging after it
        check_choice("logger.mode", cfg.logger.mode, MODES)
    check_real("logger.init_timeout", cfg.logger.init_timeout)
    if getattr(cfg, "compare_T", None) is not None:
        check_int("compare_T", cfg.compare_T)
    # the schedule, its costs and the method's options, through rpd.registry (which refuses DiLoCo's
    # options for a method without replicas)
    spec = run_spec(cfg)

    name = check_choice("objective.name", _value(o.name), list(objectives.OBJECTIVES))
    check_int("objective.batch_size", o.batch_size)
    if user_factory(o) is not None:  # the user's factory checks its own arguments
        return spec
    entry = objectives.OBJECTIVES[name]
    for basis in ("rotate", "align"):
        if o[basis] and basis not in entry.reads:
            raise ValueError(f"objective.{basis} applies to {' and '.join(readers(basis))}, not to {name}")
    if o.rotate and o.align:
        raise ValueError("objective.rotate and objective.align exclude each other (a random or the axis basis)")
    if entry.check is not None:  # its own checks (rpd.objectives.ObjectiveEntry.check)
        entry.check(o, S)
    return spec


def check_keys(cfg, schema=TrainConfig, prefix: str = "") -> None:
    """Every key of ``cfg`` (a dict or a DictConfig) is a field of ``schema``, recursively through
    the nested config groups; raises ValueError naming the key and listing the valid ones.

    The schemas are the closed set: hydra's ``+key=value`` adds keys that the typed merge does not
    reject, so a misspelt ``+method.gama_hi=3`` would silently change nothing but the run hash.
    ``Dict`` fields (``study.overrides``) are open here; the study checks their keys."""
    if isinstance(cfg, DictConfig):  # a node promoted to a subclass (the study's own schema)
        node_type = OmegaConf.get_type(cfg)
        if dataclasses.is_dataclass(node_type) and issubclass(node_type, schema):
            schema = node_type
    hints = typing.get_type_hints(schema)
    fields = [f.name for f in dataclasses.fields(schema)]
    for key in cfg:
        if key not in fields:
            where = f"in {prefix[:-1]}" if prefix else "at the top level"
            near = nearest(str(key), fields)
            hint = f"nearest: {', '.join(prefix + k for k in near)}; " if near else ""
            raise ValueError(
                f"unknown config key {prefix}{key}: {hint}valid keys {where} are {', '.join(sorted(fields))}"
            )
        if dataclasses.is_dataclass(hints[key]) and cfg[key] is not None:
            check_keys(cfg[key], hints[key], f"{prefix}{key}.")


def typed(cfg, schema=TrainConfig) -> DictConfig:
    """``cfg`` (a dict, a dataclass or a DictConfig) merged onto ``schema``: typed and locked,
    every key checked against the schema (:func:`check_keys`)."""
    if not dataclasses.is_dataclass(cfg):
        cfg = optimizer_config.on_schema(cfg)  # the optimizer's keys are its factory's
        cfg = schedule_config.on_schema(cfg)  # the schedule's keys: the shared ones and its own
        check_keys(cfg, schema)
    base = OmegaConf.structured(schema)
    merged = OmegaConf.merge(base, cfg if not dataclasses.is_dataclass(cfg) else OmegaConf.structured(cfg))
    OmegaConf.set_struct(merged, True)
    return typing.cast(DictConfig, merged)  # a structured dataclass merges into a DictConfig


def refuse(exc: BaseException) -> None:
    """Bad input: one line on stderr and exit status 2 (``RPD_DEBUG=1``: the traceback too)."""
    if os.environ.get("RPD_DEBUG", "").strip() not in ("", "0"):
        raise exc
    print(f"error: {exc}", file=sys.stderr, flush=True)
    raise SystemExit(2)
