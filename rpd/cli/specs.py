"""The library objects a config stands for, resolved from the entry points' typed configs
(:mod:`rpd.cli.config`) with errors naming the dotted field: the schedule, its costs and the
method's options through ``rpd.registry`` (:func:`run_spec`), the cost model (:func:`cost_model`),
the optimizer nodes (:func:`optimizer_of`, :func:`outer_optimizer_of`), the objective's block
count (:func:`objective_blocks`), a user's objective factory (:func:`user_factory`), and a
config node as a plain dict (:func:`to_container`); and :class:`TrainSpec`, one training job
resolved from its config, the only thing the job's steps read (``rpd.cli.train.run`` builds it). The value checks that run before any of this are
:mod:`rpd.cli.checks`."""

from __future__ import annotations

import dataclasses
import pkgutil
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from rpd import objectives, registry
from rpd.analysis import simtime
from rpd.cli import schedule_config
from rpd.cli.config import LoggerConfig, ObjectiveConfig, _value, node_to
from rpd.io import trace, trace_jitter
from rpd.schedules.machinery.costs import CostModel, HostLink
from rpd.schedules.machinery.jitter import Jitter, Slow, Stochastic
from rpd.validation import check_choice, check_int, check_real


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    """One training job, resolved once from its config by ``rpd.cli.train.run`` and passed to
    every step below it (the store, the training, the γ selection, the table row, wandb): the
    config stops there. Plain, checked values; each field says where it came from."""

    run: registry.RunSpec  # method, schedule (its parameters and costs) and options (run_spec)
    objective: ObjectiveConfig  # objective.*, typed: its entry builds it (rpd.cli.objectives)
    user_objective: objectives.Objective | None  # objective._target_'s, built: it keys the run
    gammas: tuple[float, ...]  # method.gammas, or 2^method.gamma_lo .. 2^method.gamma_hi
    seeds: tuple[int, ...]  # method.seeds
    selector: str  # method.selector (rpd.analysis.tuning)
    tail_frac: float  # method.tail_frac
    compare_T: int | None  # protocol (i): the simulated time every curve is cut at ...
    cut: str  # ... by schedule.cut (end | authors)
    T_rule: str | None  # how a sweep chose compare_T
    compare: str  # equal_time | equal_n
    costs_label: str  # costs.*, as a table shows them (rpd.cli.train.costs_label)
    results_root: Path
    force: bool
    reuse_other_code: bool  # a run stored by other code is reused (its key's code is "any")
    experiment: str  # experiment_name (wandb's group)
    logger: LoggerConfig  # logger.*, typed (rpd.cli.wandb_log)
    config: dict  # the whole config as plain values: the store key is cut from it; wandb's run config

    @property
    def entry(self) -> objectives.ObjectiveEntry:
        """The objective's entry (its metric, γ thresholds, store key): a user's by the name of
        the objective it built (a plain entry for a name rpd does not know)."""
        return objectives.entry_of(self.user_objective.name if self.user_objective else self.objective.name)

    @property
    def blocks(self) -> int:
        """The objective's block count (:func:`objective_blocks`)."""
        return objective_blocks(self.run)


def cost_model(c) -> CostModel:
    """The ``rpd.schedules.machinery.costs.CostModel`` of a costs config node (checked, naming ``costs.<field>``)."""
    alpha = check_real("costs.allreduce_alpha", c.allreduce_alpha, allow_zero=True)
    beta = check_real("costs.allreduce_beta", c.allreduce_beta, allow_zero=True)
    if c.allreduce_values is not None:
        check_int("costs.allreduce_values", c.allreduce_values, 0)
    p = check_real("costs.straggler_p", c.straggler_p, allow_zero=True)
    if p > 1:
        raise ValueError(f"costs.straggler_p must be <= 1, got {p}")
    ticks = check_int("costs.straggler_ticks", c.straggler_ticks, 0)
    host = None
    if getattr(c, "host_d2h", None) is not None:  # activation offload over each rank's host link
        d2h = check_int("costs.host_d2h", c.host_d2h)
        h2d = d2h if c.host_h2d is None else check_int("costs.host_h2d", c.host_h2d)
        latency = check_int("costs.host_latency", c.host_latency, 0)
        host = HostLink(d2h, h2d, latency, check_int("costs.host_min_gap", c.host_min_gap, 2))
    elif getattr(c, "host_h2d", None) is not None:
        raise ValueError("costs.host_h2d needs costs.host_d2h (offload is on when host_d2h is set)")
    jitter = stochastic(c)
    return CostModel(
        jitter=jitter[0],
        slow=jitter[1],
        F=c.F,
        B=c.B,
        I=c.I,
        W=c.W,
        FB=c.FB,
        p2p=c.p2p,
        allreduce=(alpha, beta),
        straggler=(p, ticks) if p > 0 and ticks > 0 else None,
        seed=c.seed,
        unit=getattr(c, "unit", "tick"),
        host=host,
    )


def stochastic(c) -> tuple[Jitter | None, Slow | None]:
    """The jitter and persistent stragglers of a costs node (checked, naming ``costs.<field>``);
    None for each that is off (every CV 0; no slow rank or a factor of 1)."""
    cvs = {k: getattr(c, f"jitter_cv_{k}", 0.0) for k in ("F", "B", "IW", "p2p", "allreduce")}
    jitter = Jitter(**cvs)  # checks each CV >= 0
    ranks = tuple(getattr(c, "slow_ranks", None) or ())
    slow = Slow(ranks, getattr(c, "slow_factor", 1.0))  # checks the ranks and the factor
    return (None if jitter.is_zero else jitter), (slow if ranks and slow.factor != 1 else None)


def stochastic_time(c, S: int) -> Stochastic | None:
    """The :class:`~rpd.schedules.machinery.jitter.Stochastic` of a costs node for an S-rank
    plan (checked, naming ``costs.<field>``); None when it has neither jitter nor a slow rank.
    ``costs.jitter_trace`` (with ``costs.jitter_meta``): the jitter's CVs read from a measured
    trace (:func:`rpd.io.trace_jitter.jitter_from_trace`) instead of ``costs.jitter_cv_*``."""
    jitter, slow = stochastic(c)
    path = getattr(c, "jitter_trace", None)
    if path is not None:
        if jitter is not None:
            raise ValueError("costs.jitter_trace and costs.jitter_cv_* are both set; give one")
        if getattr(c, "jitter_meta", None) is None:
            raise ValueError("costs.jitter_meta: the trace's meta file (YAML) is needed with costs.jitter_trace")
        try:
            jitter = trace_jitter.jitter_from_trace(trace.read_trace(path, trace.read_meta(c.jitter_meta)))[0]
        except (OSError, ValueError) as exc:  # the trace's own one-line refusal, named by the field
            raise ValueError(f"costs.jitter_trace: {exc}") from None
    if slow is not None:
        slow.check(S)
    if jitter is None and slow is None:
        return None
    return Stochastic(jitter, slow, check_int("costs.seed", c.seed, 0))


def optimizer_of(cfg) -> dict | None:
    """The optimizer node of a config as ``{"name": ..., hyper-parameters...}`` (its set fields;
    ``rpd.train.optimizers.resolve`` checks them), None where the schema has none."""
    node = getattr(cfg, "optimizer", None)
    if node is None:
        return None
    d = {k: v for k, v in to_container(node).items() if v is not None}
    return None if d == {"name": "sgd"} else d  # plain SGD: the core's original path


def outer_optimizer_of(cfg) -> dict | None:
    """LocalSGD's outer optimizer node as ``{"name": ..., "lr": ..., "beta": ...}`` (set fields;
    ``rpd.train.diloco.resolve_outer`` checks them), None where the schema has none."""
    node = getattr(cfg, "outer_optimizer", None)
    return None if node is None else {k: v for k, v in to_container(node).items() if v is not None}


def objective_blocks(spec: registry.RunSpec) -> int:
    """Blocks of the objective a resolved run trains: schedule.S, or 2 * schedule.S for WPipe
    (its two groups split each rank's weights; ``rpd.registry.objective_blocks``)."""
    return registry.objective_blocks(spec.pipeline.name, spec.pipeline.params.S)


def run_spec(cfg) -> registry.RunSpec:
    """The checked, resolved (method, schedule, options, costs) of a config (``rpd.registry``):
    errors name the field (``schedule.M``, ``method.t1``, ``costs.B``). A job resolves it once
    (``rpd.cli.checks.validate`` returns it) and passes it to every step below."""
    return _resolve(cfg)


def _resolve(cfg) -> registry.RunSpec:
    m, s = cfg.method, cfg.schedule
    name = registry.schedule_of(_value(m.name), _value(s.name))
    params = node_to(  # the shared fields as the node holds them
        registry.ScheduleParams,
        s,
        cut=check_choice("schedule.cut", s.cut, simtime.CUTS) if s.cut else None,
        params=schedule_config.own(s, name) if name in registry.SCHEDULES else {},
    )
    options = registry.MethodOptions(
        stride=m.stride,
        delta=m.delta,
        delays=_value(m.delays),
        block_order=_value(m.block_order),
        batch_order=_value(m.batch_order),
        predict=m.predict,
        ema=m.ema,
        t1=m.t1,
        t1_window=m.t1_window,
        t2=m.t2,
        optimizer=optimizer_of(cfg),
        outer_optimizer=outer_optimizer_of(cfg),
        inner_state=_value(getattr(cfg, "inner_state", "keep")),
        fragments=m.fragments,
        overlap=m.overlap,
        mixing=m.mixing,
    )
    return registry.prepare(
        _value(m.name),
        _value(s.name),
        params,
        options,
        cost_model(cfg.costs),
        cfg.costs.allreduce_values,
        method_prefix="method.",
        schedule_prefix="schedule.",
    )


def locate(path: str):
    """The callable at the import path ``path`` (``mymodule.make``, ``pkg.mod.Class.build``, or
    ``pkg.mod:make``), found by the standard library's :func:`pkgutil.resolve_name` (the module
    part imported, the rest looked up as attributes); its ImportError / AttributeError / ValueError
    as they are, a ValueError for a non-callable."""
    obj = pkgutil.resolve_name(path)
    if not callable(obj):
        raise ValueError(f"{path} is a {type(obj).__name__}, not a callable")
    return obj


def user_factory(o):
    """The user's objective factory named by ``objective._target_`` (an import path), or None."""
    target = o.get("_target_") if hasattr(o, "get") else getattr(o, "_target_", None)
    if not target:
        return None
    try:
        fn = locate(target)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"objective._target_={target} cannot be imported ({exc})") from None
    return fn


def to_container(cfg) -> dict:
    """A plain, resolved dict (enums as their names) of a config node."""
    if dataclasses.is_dataclass(cfg):
        cfg = OmegaConf.structured(cfg)
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[return-value]  # omegaconf's stub: a union
    return dict(cfg)
