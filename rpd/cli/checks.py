"""Value checks and conversions of the entry points' typed configs (:mod:`rpd.cli.config`
holds the schemas): what a type cannot express (S >= 1, a non-empty γ grid, n >= d for
Nesterov's quadratic, S >= 3 for the LM, ...) checked in :func:`validate` before any objective
is built, with the dotted config path as the argument name (``schedule.S must be >= 1, got 0``);
and ``+`` keys checked against the schemas (:func:`check_keys`, :func:`typed`). The library
objects a config stands for (:func:`~rpd.cli.specs.cost_model`,
:func:`~rpd.cli.specs.run_spec`) are :mod:`rpd.cli.specs`; the memory estimate of what they
resolve, :mod:`rpd.cli.footprint`."""

from __future__ import annotations

import dataclasses
import os
import sys
import typing
from typing import NoReturn

from omegaconf import DictConfig, OmegaConf

from rpd import objectives, registry
from rpd.analysis import tuning
from rpd.cli import objective_config, optimizer_config, schedule_config
from rpd.cli.config import (
    BatchOrder,
    BlockOrder,
    Delays,
    MethodName,
    Selector,
    TrainConfig,
    _value,
)
from rpd.cli.specs import optimizer_of, run_spec, stochastic, user_factory
from rpd.io.tracking import MODES
from rpd.objectives.entry import readers, structured
from rpd.train import optimizers
from rpd.validation import check_choice, check_int, check_real, nearest


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
    """Every value check that does not need data; raises ValueError/TypeError naming the field.
    Returns the run's resolved (method, schedule, options, costs), made once here
    (:func:`~rpd.cli.specs.run_spec`), for the caller to pass down.

    Runs before anything expensive (no objective, timeline or compile yet); the memory estimate
    follows, from what is resolved (``rpd.cli.footprint``)."""
    return _check_values(cfg)


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
    slow = stochastic(cfg.costs)[1] if "costs" in cfg else None
    if slow is not None:
        slow.check(S)  # a slow rank the schedule has (costs.slow_ranks[i] < schedule.S)
    spec = run_spec(cfg)

    name = check_choice("objective.name", _value(o.name), list(objectives.OBJECTIVES))
    check_int("objective.batch_size", o.batch_size)
    if user_factory(o) is not None:  # the user's factory checks its own arguments
        return spec
    entry = objectives.OBJECTIVES[name]
    for basis in ("rotate", "align"):  # a toy named on another's node (objective.name=) reads its own
        if o.get(basis) and basis not in entry.reads:
            raise ValueError(f"objective.{basis} applies to {' and '.join(readers(basis))}, not to {name}")
    if o.get("rotate") and o.get("align"):
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
        cfg = objective_config.on_schema(cfg, schema)  # the objective's keys: the shared ones and its own
        check_keys(cfg, schema)
    base = OmegaConf.structured(schema)
    merged = OmegaConf.merge(base, cfg if not dataclasses.is_dataclass(cfg) else OmegaConf.structured(cfg))
    OmegaConf.set_struct(merged, True)
    return typing.cast(DictConfig, merged)  # a structured dataclass merges into a DictConfig


def refuse(exc: BaseException) -> NoReturn:
    """Bad input: one line on stderr and exit status 2 (``RPD_DEBUG=1``: the traceback too)."""
    if os.environ.get("RPD_DEBUG", "").strip() not in ("", "0"):
        raise exc
    print(f"error: {exc}", file=sys.stderr, flush=True)
    raise SystemExit(2)
