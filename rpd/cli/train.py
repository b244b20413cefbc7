"""One training job (``python -m experiments.train``, docs/running.md): an (objective, method,
schedule) cell with its whole γ grid vmapped.

``run(cfg)`` is the whole job (tests call it directly): type and check the config and resolve
it once into a :class:`~rpd.cli.specs.TrainSpec` (the config stops there; every step below reads
that record), skip if the results store already holds this exact run, build the objective, run
the method on its schedule and costs for every γ of the grid (``rpd.registry``: one compiled,
vmapped scan per seed; this module never dispatches on a method or schedule name), select γ
(``rpd.analysis.tuning``), save config / curves / summary / status atomically under
``<results_root>/train/<config hash>`` (``rpd.io.store``), and log the curves against
``sim_time`` and ``block_update``.
A γ that diverges (``rpd.results.diverged``: NaN/inf or a finite blow-up) is recorded and never
selected (``diverged`` flags, ``n_diverged``; status "diverged" only when all did); an
exception is recorded as status "failed" and, in a multirun, does not stop the other jobs.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, NamedTuple, cast

import numpy as np
from omegaconf import OmegaConf

from rpd import registry
from rpd.analysis import simtime, tuning
from rpd.cli import checks, footprint, specs, wandb_log
from rpd.cli import config as C
from rpd.cli import objectives as objective_of
from rpd.cli.job import NONE, Job
from rpd.io import provenance, store, tracking
from rpd.results import EVENTS, unit_name, value_at

log = logging.getLogger(__name__)
# The stored curves' format: 2 records them at the update events (axis/events, events/curve) and
# after every clock tick read off them (axis/sim_time); a run stored before (per tick) is recomputed.
STORE_FORMAT = 2


class TrainOutcome(NamedTuple):
    path: Path  # the run directory in the results store
    status: str  # "ok" | "diverged" | "failed"
    skipped: bool  # an identical complete run was already stored
    summary: dict
    curves: dict
    error: str | None = None


# ------------------------------------------------------------------ config -> library calls


def _v(x):
    return C._value(x)


def run_config(ts: specs.TrainSpec) -> dict:
    """The resolved config that identifies a run (its results-store key and config.json), cut
    from the resolved job ``ts``: objective, method, schedule and costs, with what the run does
    not read set to null and the defaults it resolves filled in (``ts.run``, the run's
    ``rpd.registry.prepare``), so e.g. ``schedule.H`` does not split PD runs. The objective's part
    is its entry's (``rpd.objectives.ObjectiveEntry.store_key``: the fields it reads and its
    identity, e.g. the SHA-256 of the LM's text). A user's objective (``objective._target_``) is
    keyed by its import path, the arguments it is called with and the built objective's own name
    and sizes (``rpd.cli.objectives.identity``). Logger, paths and the experiment name are left out."""
    key = copy.deepcopy({k: ts.config[k] for k in ("objective", "method", "schedule", "costs")})
    o, m, spec = key["objective"], key["method"], ts.run
    o.pop("args", None)
    if ts.user_objective is not None:
        key["objective"] = objective_of.identity(ts.objective, ts.user_objective)
    else:
        key["objective"] = ts.entry.store_key(o)
    if m["gammas"] is None:
        m["gammas"] = list(ts.gammas)
    m.pop("gamma_lo"), m.pop("gamma_hi")
    m.update(dataclasses.asdict(spec.options))
    for field, plain in (
        ("fragments", 1),
        ("overlap", 0),
        ("mixing", 0.0),
    ):  # DiLoCo's: the keys it had before Streaming DiLoCo
        if m.get(field) in (None, plain):
            m.pop(field, None)
    params = dataclasses.asdict(spec.pipeline.params)
    if params["local_steps"] is None:  # one local step (DDP): the key such runs had before the field
        del params["local_steps"]
    own = dict(params.pop("params"))  # the schedule's own parameters, beside the shared fields
    key["schedule"] = dict(name=spec.pipeline.name, **params, **own)
    if ts.compare_T is not None:  # the curves are cut there: another result
        key["compare_T"] = {"T": ts.compare_T, "cut": ts.cut}
    key["code"] = "any" if ts.reuse_other_code else provenance.code_identity()
    key["format"] = STORE_FORMAT  # how curves are stored: runs of another format are recomputed
    return key


def schedule_label(pipeline) -> str:
    """The schedule's name as a table shows it: the registry's, or its variant's where the run
    has the variant's fixed fields ("naive" for PipeDream with one microbatch in flight,
    configs/schedule/naive.yaml; rpd.registry.label_of)."""
    return registry.label_of(pipeline.name, pipeline.params)


def costs_label(c) -> str:
    """The cost model in one cell: its non-default fields ("unit" when none), e.g. "B=2 p2p=1"."""
    default = C.CostsConfig()
    shown = [
        f"{f.name}={getattr(c, f.name)}"
        for f in dataclasses.fields(default)
        if getattr(c, f.name) != getattr(default, f.name)
    ]
    return " ".join(shown) or "unit"


def _stack(arrays: list) -> np.ndarray | None:
    arrays = [np.asarray(a) for a in arrays]
    if all(a.shape == arrays[0].shape for a in arrays):
        return np.stack(arrays)
    return None


def train(ts: specs.TrainSpec) -> tuple[dict, dict, str]:
    """The computation of one job (no I/O): curves, summary and status ("ok" / "diverged"), all
    read off the resolved job ``ts`` (its objective built here unless a user's, built to key it)."""
    t0 = time.perf_counter()
    spec, grid, entry = ts.run, list(ts.gammas), ts.entry
    obj = ts.user_objective or objective_of.build_objective(ts.objective, ts.blocks)
    results, sim_time, block_update, extra = [], None, None, {}
    if ts.compare_T is not None and spec.pipeline.timeline(obj).T < ts.compare_T:
        raise ValueError(
            f"compare_T={ts.compare_T} is beyond this row's timeline "
            f"({spec.pipeline.timeline(obj).T} ticks for schedule.N={spec.pipeline.params.N}): raise schedule.N"
        )
    for seed in ts.seeds:
        out = registry.run(spec, obj, grid, seed)
        results.append(out.result)
        sim_time, block_update, extra = out.sim_time, out.block_update, out.extra
    events = {}
    if sim_time is not None and results[0].meta.get("time_axis") == EVENTS:
        # Recorded at the update events; stored so (axis/events), and read after every clock
        # tick (the timeline's resolution: the same points whatever unit the costs are in) for
        # the curves, the γ rules and the tables, through the one "last event at or before t".
        events = {"axis/events": np.asarray(sim_time, np.int64), "events/curve": np.stack([r.curve for r in results])}
        results = [simtime.on_clock(r, spec.pipeline.timeline(obj)) for r in results]
        block_update = value_at(sim_time, np.asarray(block_update), results[0].axis)
        sim_time = results[0].axis
    if ts.compare_T is not None and sim_time is not None:  # protocol (i): every row cut at one T
        keep = np.asarray(sim_time) <= simtime.last_time(ts.compare_T, ts.cut)
        results = [dataclasses.replace(r, axis=r.axis[keep], curve=r.curve[:, keep]) for r in results]
        sim_time, block_update = np.asarray(sim_time)[keep], np.asarray(block_update)[keep]
    metric = entry.metric.name
    curve = np.stack([r.curve for r in results])  # [n_seeds, G, P]
    curves: dict[str, Any] = {
        metric: curve,
        "gammas": np.asarray(grid),
        "seeds": np.asarray(ts.seeds, np.int64),
        "axis/block_update": np.asarray(block_update, np.int64),
        "diverged": np.stack([r.diverged for r in results]),
    }
    if sim_time is not None:
        curves["axis/sim_time"] = np.asarray(sim_time, np.int64)
    curves.update(events)
    for k in results[0].traces:
        stacked = _stack([r.traces[k] for r in results])
        if stacked is not None:
            curves[f"trace/{k}"] = stacked

    diverged = curves["diverged"].any(axis=0)  # [G]: a γ that diverged on any seed diverged
    mean = curve.mean(axis=0)  # [G, P]
    # The selector sees a diverged γ as NaN, so it cannot pick it even where the seed mean of a
    # blown-up run falls back under the divergence bound.
    sel = tuning.select_gamma(
        np.where(diverged[:, None], np.nan, mean),
        grid,
        rule=ts.selector,
        tail_frac=ts.tail_frac,
        thresholds=tuning.LM if entry.is_lm else tuning.DEFAULT,
    )
    status = "diverged" if diverged.all() else "ok"
    final = mean[:, -1]
    head, dirty = provenance.git_state()
    unit = spec.pipeline.costs.unit if spec.pipeline.costs is not None else "tick"
    assert block_update is not None  # every run reports its block updates (rpd.registry.run)
    summary = {
        "method": spec.method,
        "objective": obj.name,
        "costs": ts.costs_label,
        "S": int(spec.pipeline.params.S),
        "T_rule": ts.T_rule if ts.compare_T is not None else None,
        "updates": int(block_update[-1]),  # block updates by T (N: the microbatches run in all)
        # of T and the curves' axis: the costs' unit (costs.unit: tick, ns, us, ms, s)
        "time_unit": unit if sim_time is not None else "block_update",
        "compare": ts.compare,
        "git_commit": head,
        "git_dirty": dirty,
        "metric": metric,
        "gammas": grid,
        "gamma_log2_grid": [tuning.log2_exponent(g) if _is_pow2(g) else None for g in grid],
        "tuning/gamma": sel.gamma,
        "tuning/rule": sel.rule,
        "tuning/index": sel.index,
        "tuning/flag": gamma_flag(sel.index, grid, sel.reports[sel.index].reasons if sel.index is not None else ()),
        # the stable test's failed criteria for the selected γ ("cv 0.28 > 0.15"; [] when it passed)
        "tuning/reasons": list(sel.reports[sel.index].reasons) if sel.index is not None else [],
        "tuning/gamma_log2": (
            tuning.log2_exponent(sel.gamma) if sel.index is not None and _is_pow2(sel.gamma) else None
        ),
        "final": final,
        "final/selected": float(final[sel.index]) if sel.index is not None else math.nan,
        "diverged": diverged,
        "n_diverged": int(diverged.sum()),
        "tail_mean": [r.tail_mean for r in sel.reports],
        "stable": [r.stable for r in sel.reports],
        "f0": float(curve[0, 0, 0]),
        "L": obj.L,
        "D": int(obj.D),
        "objective/n": (obj.meta or {}).get("n", obj.n_batches * obj.batch_size if obj.batch_size else None),
        "objective/batch_size": obj.batch_size,
        "runtime_s": time.perf_counter() - t0,
        **extra,
        # the simulated time the row is compared at (its timeline's own length is "makespan")
        "makespan": extra.get("T"),
        "schedule": schedule_label(spec.pipeline),
        "T": next(
            (int(x) for x in (ts.compare_T, spec.pipeline.params.T) if x is not None),
            int(sim_time[-1]) if sim_time is not None else None,
        ),
    }
    return curves, summary, status


# The stable test's criteria that a tail rising or oscillating fails; a tail that only falls
# fails cv alone (it has not settled yet), which is no reason to doubt the γ chosen.
UNSTABLE = ("up_frac", "max_up", "tv_ratio", "log_slope")


def unstable(reasons) -> bool:
    """The stable test's failed criteria (``"up_frac 0.6 > 0.45"``, ...) say the tail rises or
    oscillates: one of :data:`UNSTABLE`. ``cv`` alone is a curve still falling, not unstable."""
    return any(str(r).split()[0] in UNSTABLE for r in reasons or ())


def gamma_flag(index: int | None, grid, reasons) -> str | None:
    """Why a selected γ needs a second look, or None: on the lowest or highest edge of a grid
    of several γ (the best may lie beyond it: widen method.gamma_lo / gamma_hi), or unstable
    (its tail rises or oscillates: :func:`unstable` of the selected γ's ``reasons``, the
    selector's report in ``rpd.analysis.tuning``)."""
    if index is None:
        return None
    flags = []
    if len(grid) > 1 and grid[index] == min(grid):
        flags.append("lowest on grid")
    elif len(grid) > 1 and grid[index] == max(grid):
        flags.append("highest on grid")
    if unstable(reasons):
        flags.append("unstable")
    return ", ".join(flags) or None


def flag_level(flag: str | None) -> int:
    """The level of a run's log line: WARNING when its selected γ needs a second look (a flag of
    :func:`gamma_flag`: the user should act), else INFO. One text, one level."""
    return logging.WARNING if flag else logging.INFO


def _at_time(summary: dict) -> str:
    """Where a run's final value is read, as its log line says it: " at T = 40 ticks" (in the
    costs' unit), " after 24 block updates" for a run with no simulated time."""
    if summary.get("T") is not None and summary.get("time_unit") != "block_update":
        return f" at T = {summary['T']} {unit_name(summary.get('time_unit'))}"
    return f" after {summary['updates']} block updates"


def _is_pow2(g: float) -> bool:
    return g > 0 and math.frexp(g)[0] == 0.5


def _track(ts: specs.TrainSpec, out: TrainOutcome, job: Job) -> TrainOutcome:
    """With ``logger=wandb``: log the stored run (fresh or skipped: a stored run is logged
    without recomputing it, ``rpd.cli.wandb_log``) and return it with its summary as stored
    now (holding ``wandb_id``). A wandb failure only warns: the run is already saved."""
    if _v(ts.logger.kind) != "wandb" or out.status == "failed":
        return out

    if out.skipped:
        log.info("logging the stored run %s to wandb (not recomputed)", out.path)
    try:
        if wandb_log.log_train_run(ts, out.path, job) is not None:
            out = out._replace(summary=store.load_run(out.path).summary)
    except Exception as exc:  # tracking never fails a run that is already saved
        warnings.warn(f"logging the run to wandb failed: {exc!r}", RuntimeWarning, stacklevel=2)
    return out


def run(cfg, job: Job = NONE) -> TrainOutcome:
    """The whole job. ``cfg``: a composed DictConfig, a ``TrainConfig`` or a plain dict; ``job``:
    the hydra job it runs in (``experiments.job.current``; wandb logs under its directory).

    The config is typed, checked (one ValueError / TypeError naming the field, before any work)
    and resolved here, once, into a :class:`~rpd.cli.specs.TrainSpec`: the config stops here,
    every step below reads that. A user's objective (``objective._target_``) is built here: its
    name and sizes key the run, and its memory is estimated from them."""
    if isinstance(cfg, dict) and isinstance(cfg.get("objective"), dict) and cfg["objective"].get("_target_"):
        o = cfg["objective"]  # a user's objective from a plain dict: called with the keys given
        if o.get("args") is None:
            cfg = {**cfg, "objective": {**o, "args": sorted(set(o) - {"_target_", "options", "args"})}}
    cfg = checks.typed(cfg, C.TrainConfig)
    spec = checks.validate(cfg)  # the run (method, schedule, options, costs), resolved once
    m = cfg.method
    ts = specs.TrainSpec(
        run=spec,
        objective=cast(C.ObjectiveConfig, OmegaConf.to_object(cfg.objective)),
        user_objective=None,  # a user's objective, built below once the results root is checked
        gammas=tuple(checks.gammas(m)),
        seeds=tuple(int(seed) for seed in m.seeds),
        selector=_v(m.selector),
        tail_frac=float(m.tail_frac),
        compare_T=None if cfg.compare_T is None else int(cfg.compare_T),
        cut=cfg.schedule.cut or "end",
        T_rule=cfg.T_rule,
        compare=_v(cfg.compare),
        costs_label=costs_label(cfg.costs),
        results_root=Path(cfg.results_root),
        force=bool(cfg.force),
        reuse_other_code=bool(cfg.reuse_other_code),
        experiment=cfg.experiment_name,
        logger=cast(C.LoggerConfig, OmegaConf.to_object(cfg.logger)),  # omegaconf's stubs: a union
        config=specs.to_container(cfg),
    )
    # The config stops here: what follows reads the resolved job.
    if not ts.objective._target_:  # rpd's objective: estimated from the config's sizes
        footprint.check(ts)
    if _v(ts.logger.kind) == "wandb":  # a missing optional extra fails before the work
        tracking.require_wandb()
    store.check_root(ts.results_root)  # before a user's factory runs (checked again where used)
    if ts.objective._target_:  # a user's: built here, keyed by and estimated from what it built
        ts = dataclasses.replace(ts, user_objective=objective_of.build_objective(ts.objective, ts.blocks))
        footprint.check(ts)
    return _job(ts, job)


def _job(ts: specs.TrainSpec, job: Job) -> TrainOutcome:
    """The resolved job ``ts``: reused from the store when complete there (a read-only store's
    runs are read), else trained, saved and logged."""
    writable = store.check_root(ts.results_root)
    key = run_config(ts)
    path = store.run_dir(ts.results_root / "train", key)
    if not writable:  # a read-only store: its complete runs are reused (reads only, no lock)
        if ts.force or not store.should_skip(path, key):
            raise ValueError(
                f"results_root={ts.results_root} is read-only and holds no complete run of "
                f"this config{' (force=true)' if ts.force else ''}: give a writable results_root"
            )
        done = store.load_run(path)
        log.info("skip: %s is complete (%s; read-only store, not locked)", path, done.status)
        return _track(ts, TrainOutcome(path, done.status, True, done.summary, done.curves, done.error), job)
    # One writer per key: a second process (an identical sweep, a joblib worker) waits here,
    # then finds the run complete and reuses it. Ctrl-C (KeyboardInterrupt) is no Exception:
    # nothing is stored, the run directory stays incomplete and a rerun computes it.
    with store.run_lock(path, wait_message=f"waiting: another process is computing {path}"):
        if not ts.force and store.should_skip(path, key):
            done = store.load_run(path)
            log.info("skip: %s is complete (%s)", path, done.status)
            return _track(ts, TrainOutcome(path, done.status, True, done.summary, done.curves, done.error), job)
        try:
            curves, summary, status = train(ts)
            store.save_run(path, key, curves, summary, status=status)
        except Exception as exc:  # recorded, never kills a sweep; the caller decides the exit code
            log.error("run failed, recorded in %s:\n%s", path, traceback.format_exc())
            store.save_failure(path, key, exc)
            return TrainOutcome(path, "failed", False, {}, {}, f"{type(exc).__name__}: {exc}")
        saved = store.load_run(path)  # what a rerun (or a figure) reads: JSON types, as a skip
    flag = summary.get("tuning/flag")
    log.log(
        flag_level(flag),
        "%s: %s, gamma=%s (%s)%s, final=%.4g%s -> %s",
        summary["method"],
        status,
        summary["tuning/gamma"],
        summary["tuning/rule"],
        f" [{flag}]" if flag else "",
        summary["final/selected"],
        _at_time(summary),
        path,
    )
    return _track(ts, TrainOutcome(path, saved.status, False, saved.summary, saved.curves), job)
