"""One training job: an (objective, method, schedule) cell with its whole γ grid vmapped.

    python -m experiments.train method=rpd schedule.S=16
    python -m experiments.train -m method=pd,rpd,localsgd schedule.S=2,4,8,16
    python -m experiments.train -m launcher=joblib experiment=e3_nesterov method=localsgd schedule.H=2,5,30

``run(cfg)`` is the whole job (tests call it directly): validate the config, skip if the results
store already holds this exact run, build the objective and the schedule, run the method for
every γ of the grid (one compiled, vmapped scan per seed), select γ (``rpd.tuning``), save
config / curves / summary / status atomically under ``<results_root>/train/<config hash>``
(``rpd.store``), and log the curves against ``sim_time`` and ``block_update``.
A γ that diverges is recorded (``diverged`` flags; status "diverged" only when all did); an
exception is recorded as status "failed" and, in a multirun, does not stop the other jobs.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import hydra
import numpy as np
from omegaconf import DictConfig

from experiments import config as C

log = logging.getLogger(__name__)


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


def run_config(cfg) -> dict:
    """The resolved config that identifies a run (its results-store key and config.json):
    objective, method, schedule, with fields the method does not use set to null, so e.g.
    ``schedule.H`` does not split PD runs. Logger, paths and the experiment name are left out."""
    full = C.to_container(cfg)
    key = {k: full[k] for k in ("objective", "method", "schedule")}
    o, m, s = key["objective"], key["method"], key["schedule"]
    if o["name"] == "nanochat":
        o.update(n=None, d=None, mu=None, condition_number=None, lam=None)
    else:
        for f in ("text_path", "seq_len", "width", "heads", "heldout_frac", "heldout_batches"):
            o[f] = None
        if o["name"] != "nesterov_quadratic":
            o.update(mu=None, condition_number=None)
        if o["name"] != "logistic_regression":
            o["lam"] = None
    name = m["name"]
    if m["gammas"] is None:
        m["gammas"] = C.gammas(cfg.method)
    m.pop("gamma_lo"), m.pop("gamma_hi")
    if name != "rpd":
        m.update(delta=None, delays=None, block_order=None, batch_order=None)
    elif m["delta"] is None:
        from rpd.theory import pd_delta

        m["delta"] = pd_delta(s["S"])
    if name != "localsgd":
        s.update(R=None, H=None)
    elif s["R"] is None:
        s["R"] = s["S"]
    if name == "localsgd" or name == "sgd":
        s["noam"] = None
    elif s["noam"] is None:
        s["noam"] = s["S"]
    if s["T"] is not None:
        s["N"] = None
    return key


def build_objective(o, S: int):
    """The ``rpd.objectives`` objective of an objective config node, with S blocks."""
    from rpd import objectives

    name = _v(o.name)
    if name == "random_quadratic":
        obj = objectives.random_quadratic(o.n, o.d, S, o.batch_size, seed=o.seed)
    elif name == "nesterov_quadratic":
        obj = objectives.nesterov_quadratic(o.n, o.d, S, o.batch_size, mu=o.mu,
                                            condition_number=o.condition_number, seed=o.seed)
    elif name == "logistic_regression":
        obj = objectives.logistic_regression(o.n, o.d, S, o.batch_size, lam=o.lam,
                                             grad_noise=o.grad_noise, seed=o.seed)
    else:
        from rpd.objectives.nanochat import nanochat

        obj = nanochat(S, path=o.text_path, batch_size=o.batch_size, seq_len=o.seq_len,
                       width=o.width, heads=o.heads, seed=o.seed, heldout_frac=o.heldout_frac,
                       heldout_batches=o.heldout_batches)
    if o.grad_noise and obj.grad_noise != o.grad_noise:
        obj = dataclasses.replace(obj, grad_noise=float(o.grad_noise))
    return obj


def _pd_timeline(s, N: int | None = None):
    from rpd import schedules, simtime

    if N is None and s.T is not None:
        return simtime.smallest_n_reaching(s.T, lambda n: schedules.pipedream(s.S, n, s.noam))
    return schedules.pipedream(s.S, s.N if N is None else N, s.noam)


def _localsgd_timeline(s):
    from rpd import schedules, simtime

    R = s.S if s.R is None else s.R
    make = lambda n: schedules.local_sgd(s.S, n, R, s.H)  # noqa: E731
    return simtime.smallest_n_reaching(s.T, make) if s.T is not None else make(s.N)


def _block_updates_at(update_time: np.ndarray, sim_time: np.ndarray) -> np.ndarray:
    """Block updates completed after ``sim_time`` time steps: #{k : time[k] < t}."""
    return np.searchsorted(np.sort(update_time), sim_time, side="left").astype(np.int64)


def _sim_time_at(update_time: np.ndarray, block_update: np.ndarray) -> np.ndarray:
    """Time steps completed when ``block_update`` updates are done (0 before any)."""
    a = np.asarray(block_update, np.int64)
    return np.where(a > 0, np.asarray(update_time)[np.maximum(a - 1, 0)] + 1, 0).astype(np.int64)


def _delay_stats(d_KxS: np.ndarray) -> dict:
    d = np.asarray(d_KxS, np.float64).ravel()
    return {"delay/mean": float(d.mean()), "delay/p10": float(np.percentile(d, 10)),
            "delay/max": float(d.max())}


def _execute(cfg, obj, seed: int, grid: list[float]):
    """One method call for the whole grid; returns (Result, sim_time [P] | None,
    block_update [P], extra summary)."""
    from rpd import delays, methods, simtime

    m, s = cfg.method, cfg.schedule
    name = _v(m.name)
    if name == "pd":
        tl = _pd_timeline(s)
        res = methods.pipedream(obj, tl, grid, seed=seed, stride=m.stride)
        if s.T is not None:
            res = simtime.cut_to(res, s.T)
        extra = dict(N=tl.N, K=tl.K, T=tl.T, noam=tl.noam, **_delay_stats(delays.delay_table(tl)))
        return res, res.axis, _block_updates_at(tl.update_time, res.axis), extra
    if name == "localsgd":
        tl = _localsgd_timeline(s)
        lm = _v(cfg.objective.name) == "nanochat"
        res = methods.local_sgd(obj, tl, grid, seed=seed, track_time=not lm)
        if s.T is not None and not lm:
            res = simtime.cut_to(res, s.T)
        if m.stride > 1 and not lm:
            keep = (res.axis % m.stride == 0) | (res.axis == res.axis[-1])
            res = dataclasses.replace(res, axis=res.axis[keep], curve=res.curve[:, keep])
        extra = dict(N=tl.N, K=tl.K, T=tl.T, R=tl.R, H=tl.H, **_delay_stats(np.zeros(1)))
        return res, res.axis, _block_updates_at(tl.update_time, res.axis), extra
    if name == "sgd":
        res = methods.sgd(obj, s.N if s.T is None else _pd_timeline(s).N, grid, seed=seed,
                          stride=m.stride)
        return res, None, res.axis, dict(N=int(res.meta["N"]), K=int(res.meta["K"]))
    # rpd: PD's K (and PD's time of update k, to place RPD on the time axis)
    tl = _pd_timeline(s)
    K = simtime.block_updates_in(tl)
    delta = m.delta if m.delta is not None else _pd_delta(s.S)
    d_tab = None
    opts = {}
    for field, pd_value in (("delays", lambda: delays.delay_table(tl)),
                            ("block_order", lambda: tl.update_stage),
                            ("batch_order", lambda: tl.update_mb % obj.n_batches)):
        v = _v(getattr(m, field))
        opts[field] = pd_value() if v == "pd" else v
        if field == "delays" and v == "pd":
            d_tab = opts[field]
    res = methods.rpd(obj, K, grid, delta, seed=seed, stride=m.stride, **opts)
    extra = dict(N=tl.N, K=K, T=tl.T, delta=int(delta))
    if d_tab is not None:
        extra.update(_delay_stats(d_tab))
    return res, _sim_time_at(tl.update_time, res.axis), res.axis, extra


def _pd_delta(S: int) -> int:
    from rpd.theory import pd_delta

    return pd_delta(S)


def _stack(arrays: list) -> np.ndarray | None:
    arrays = [np.asarray(a) for a in arrays]
    if all(a.shape == arrays[0].shape for a in arrays):
        return np.stack(arrays)
    return None


def train(cfg) -> tuple[dict, dict, str]:
    """The computation of one job (no I/O): curves, summary and status ("ok" / "diverged")."""
    from rpd import tuning

    t0 = time.perf_counter()
    grid = C.gammas(cfg.method)
    obj = build_objective(cfg.objective, cfg.schedule.S)
    lm = obj.name == "nanochat"
    results, sim_time, block_update, extra = [], None, None, {}
    for seed in cfg.method.seeds:
        res, sim_time, block_update, extra = _execute(cfg, obj, int(seed), grid)
        results.append(res)
    metric = "loss/heldout" if lm else "loss/f_minus_fstar"
    curve = np.stack([r.curve for r in results])  # [n_seeds, G, P]
    curves: dict[str, Any] = {metric: curve, "gammas": np.asarray(grid),
                              "seeds": np.asarray(list(cfg.method.seeds), np.int64),
                              "axis/block_update": np.asarray(block_update, np.int64),
                              "diverged": np.stack([r.diverged for r in results])}
    if sim_time is not None:
        curves["axis/sim_time"] = np.asarray(sim_time, np.int64)
    for k in results[0].traces:
        stacked = _stack([r.traces[k] for r in results])
        if stacked is not None:
            curves[f"trace/{k}"] = stacked

    mean = curve.mean(axis=0)  # [G, P]; NaN if any seed diverged
    sel = tuning.select_gamma(mean, grid, rule=_v(cfg.method.selector), tail_frac=cfg.method.tail_frac,
                              thresholds=tuning.LM if lm else tuning.DEFAULT)
    diverged = ~np.all(np.isfinite(mean), axis=1)
    status = "diverged" if diverged.all() else "ok"
    final = mean[:, -1]
    summary = {
        "method": _v(cfg.method.name), "objective": obj.name, "S": int(cfg.schedule.S),
        "metric": metric, "gammas": grid,
        "gamma_log2_grid": [tuning.log2_exponent(g) if _is_pow2(g) else None for g in grid],
        "tuning/gamma": sel.gamma, "tuning/rule": sel.rule, "tuning/index": sel.index,
        "tuning/gamma_log2": (tuning.log2_exponent(sel.gamma)
                              if sel.index is not None and _is_pow2(sel.gamma) else None),
        "final": final, "final/selected": float(final[sel.index]) if sel.index is not None else math.nan,
        "diverged": diverged, "n_diverged": int(diverged.sum()),
        "tail_mean": [r.tail_mean for r in sel.reports],
        "stable": [r.stable for r in sel.reports],
        "f0": float(curve[0, 0, 0]), "L": obj.L, "D": int(obj.D),
        "runtime_s": time.perf_counter() - t0, **extra,
    }
    return curves, summary, status


def _is_pow2(g: float) -> bool:
    return g > 0 and math.frexp(g)[0] == 0.5


def _log(cfg, key: dict, curves: dict, summary: dict) -> None:
    from rpd import tracking

    lg = cfg.logger
    kind = _v(lg.kind)
    kwargs = {} if kind == "none" else dict(
        project=lg.project, experiment=cfg.experiment_name, method=_v(cfg.method.name),
        S=int(cfg.schedule.S), config=C.to_container(cfg), mode=lg.mode, entity=lg.entity,
        dir=lg.dir, tags=tuple(lg.tags))
    logger = tracking.make_logger(kind, **kwargs)
    try:
        logger.log_config(key)
        metric = summary["metric"]
        mean = curves[metric].mean(axis=0)
        metrics = {f"{metric}/gamma_2^{k}" if k is not None else f"{metric}/gamma_{g:g}": mean[i]
                   for i, (g, k) in enumerate(zip(summary["gammas"], summary["gamma_log2_grid"]))}
        if summary["tuning/index"] is not None:  # the dashboard's curve: the chosen gamma
            metrics[metric] = mean[summary["tuning/index"]]
        logger.log_metrics(metrics, sim_time=curves.get("axis/sim_time"),
                           block_update=curves["axis/block_update"])
        logger.log_summary({k: v for k, v in summary.items() if np.ndim(v) == 0 and v is not None})
    finally:
        logger.finish()


def run(cfg) -> TrainOutcome:
    """The whole job. ``cfg``: a composed DictConfig, a ``TrainConfig`` or a plain dict."""
    from rpd import store

    cfg = C.typed(cfg, C.TrainConfig)
    C.validate(cfg)
    key = run_config(cfg)
    path = store.run_dir(Path(cfg.results_root) / "train", key)
    if not cfg.force and store.should_skip(path, key):
        done = store.load_run(path)
        log.info("skip: %s is complete (%s)", path, done.status)
        return TrainOutcome(path, done.status, True, done.summary, done.curves, done.error)
    try:
        curves, summary, status = train(cfg)
        store.save_run(path, key, curves, summary, status=status)
    except Exception as exc:  # recorded, never kills a sweep; the caller decides the exit code
        log.error("run failed, recorded in %s:\n%s", path, traceback.format_exc())
        store.save_failure(path, key, exc)
        return TrainOutcome(path, "failed", False, {}, {}, f"{type(exc).__name__}: {exc}")
    log.info("%s: %s, gamma=%s (%s), final=%.4g -> %s", summary["method"], status,
             summary["tuning/gamma"], summary["tuning/rule"], summary["final/selected"], path)
    try:
        _log(cfg, key, curves, summary)
    except Exception as exc:  # tracking never fails a run that is already saved
        warnings.warn(f"logging the curves failed: {exc!r}", RuntimeWarning, stacklevel=2)
    saved = store.load_run(path)  # what a rerun (or a figure) reads: JSON types, same as a skip
    return TrainOutcome(path, saved.status, False, saved.summary, saved.curves)


def _is_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


@hydra.main(version_base="1.3", config_path="../configs", config_name="train")
def main(cfg: DictConfig) -> None:
    """Compose (hydra), run, and exit non-zero on failure unless in a multirun (which goes on
    with the other jobs; the failure is in the results store)."""
    out = run(cfg)
    if out.status == "failed" and not _is_multirun():
        raise SystemExit(f"run failed ({out.error}); recorded in {out.path}")


if __name__ == "__main__":
    main()
