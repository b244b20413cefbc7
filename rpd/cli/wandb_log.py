"""wandb runs of stored results: a train run or a figure is logged from what ``rpd.io.store`` holds,
so a result that is already stored is logged without recomputing it.

- :func:`log_train_run` (``experiments.train logger=wandb``, fresh or skipped run): the run is
  named from its swept values (``e3_nesterov/localsgd/S16/H5/N600``, :func:`run_name`), every
  swept variable is a tag and a ``meta.*`` config key (:func:`sweep_meta`; the dashboard groups
  by them), the config holds the resolved config, the results hash (the store key), the run's
  directory and the package versions / git commit (``rpd.io.provenance``); it logs the curves
  against ``sim_time`` and ``block_update``, the summary scalars, the per-γ stability report as
  a table (``tuning/gammas``), a plot of the curves as an image (``curves``) and the stored files
  as an artifact (``curves-<hash>``, type "curves"). The wandb id goes into the stored summary
  (``wandb_id``, read by ``rpd.io.sweeps.load_sweep``).
- :func:`log_figure` (``experiments.figure logger=wandb``): the figure as an image, its table,
  its summary numbers and an artifact with the PNG / PDF / numbers JSON and the stored arrays.

Offline runs go under the hydra job's output directory (``<job dir>/wandb/offline-run-*``, the
entry point's :class:`rpd.cli.job.Job`) unless ``logger.dir`` (or, outside hydra, ``$WANDB_DIR``)
says otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from rpd.cli import config as C
from rpd.cli import specs
from rpd.cli.job import NONE, Job
from rpd.io import store, tracking
from rpd.io.provenance import provenance
from rpd.results import time_label

log = logging.getLogger(__name__)

# The schedule each method runs when none is chosen: left out of run names.
DEFAULT_SCHEDULE = {"pd": "pipedream", "rpd": "pipedream", "sgd": "pipedream", "localsgd": "local_sgd"}
META_KEYS = ("experiment", "objective", "method", "schedule", "costs", "S", "H", "R", "delta", "M", "N", "T")


def output_dir(configured: str | None, job_dir: Path | None = None) -> str | None:
    """Where wandb writes ``wandb/``: ``logger.dir`` if set, else the hydra job's output
    directory ``job_dir``, else None (wandb's own default: ``$WANDB_DIR`` or the current directory)."""
    if configured:
        return configured
    return None if job_dir is None else str(job_dir)


def sweep_meta(experiment: str, key: Mapping, costs: str | None = None) -> dict:
    """The variables a sweep can vary, from a train run's key (``rpd.cli.train.run_config``):
    experiment, objective, method, schedule, costs (hydra's choice ``costs``, when known), S, H,
    R, δ, M, N, T (None where the run does not read one)."""
    m, s, o = key["method"], key["schedule"], key["objective"]
    return {
        "experiment": experiment,
        "objective": o.get("name"),
        "method": m.get("name"),
        "schedule": s.get("name"),
        "costs": costs,
        "S": s.get("S"),
        "H": s.get("H"),
        "R": s.get("R"),
        "delta": m.get("delta"),
        "M": s.get("M"),
        "N": s.get("N"),
        "T": s.get("T"),
    }


def _fmt(v) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return str(v).replace("/", "-").replace(" ", "")


def run_name(meta: Mapping) -> str:
    """A readable run name from :func:`sweep_meta`, e.g. ``e3_nesterov/pd/S16/N600``,
    ``e3_nesterov/localsgd/S16/H5/N600``, ``default/pipeline/gpipe/S8/M8/N400``, ``.../rpd/S8/delta60/N400``."""
    parts = [meta["experiment"], meta["method"]]
    if meta.get("schedule") and meta["schedule"] != DEFAULT_SCHEDULE.get(meta["method"]):
        parts.append(meta["schedule"])
    if meta.get("costs") not in (None, "unit"):
        parts.append(meta["costs"])
    parts.append(f"S{_fmt(meta['S'])}")
    if meta.get("H") is not None:
        parts.append(f"H{_fmt(meta['H'])}")
    if meta.get("R") is not None and meta["R"] != meta["S"]:
        parts.append(f"R{_fmt(meta['R'])}")
    for k in ("delta", "M", "N", "T"):
        if meta.get(k) is not None:
            parts.append(f"{k}{_fmt(meta[k])}")
    return "/".join(_fmt(p) for p in parts)


def sweep_tags(meta: Mapping) -> list[str]:
    """One tag per set swept variable: method, schedule, objective, costs, "S16", "H5",
    "delta60", "N600" ... (no '=': wandb's tag filters mis-parse it)."""
    tags = [meta[k] for k in ("method", "schedule", "objective", "costs") if meta.get(k)]
    tags += [f"{k}{_fmt(meta[k])}" for k in ("S", "H", "R", "delta", "M", "N", "T") if meta.get(k) is not None]
    return [str(t) for t in dict.fromkeys(tags)]


def _provenance() -> dict:

    try:
        return provenance()
    except Exception as exc:  # provenance is information, never a reason to stop
        return {"error": f"{type(exc).__name__}: {exc}"}


def _logger(
    lg,
    *,
    experiment: str,
    name: str,
    meta: Mapping,
    tags,
    config: Mapping,
    method: str | None,
    S: int | None,
    job_type: str,
    job: Job,
):
    """The wandb logger of the logger settings ``lg`` (``logger.*``) for one run."""
    return tracking.WandbLogger(
        project=lg.project,
        experiment=experiment,
        method=method,
        S=S,
        config=config,
        mode=lg.mode,
        entity=lg.entity,
        dir=output_dir(lg.dir, job.output_dir),
        name=name,
        tags=(*tags, *lg.tags),
        meta=meta,
        init_timeout=lg.init_timeout,
        job_type=job_type,
    )


def record_wandb_id(path: Path, wandb_id: str, project: str, mode: str | None) -> None:
    """Write a wandb run id (and its project and mode) into the stored run's summary, under the
    run's write lock where the store has one; the run's files and key are otherwise unchanged."""

    lock = getattr(store, "run_lock", None)
    with lock(path) if lock is not None else contextlib.nullcontext():
        run = store.load_run(path)
        summary = {**run.summary, "wandb_id": wandb_id, "wandb_project": project, "wandb_mode": mode}
        store.save_run(path, run.config, run.curves, summary, status=run.status, error=run.error)


def _scalars(summary: Mapping, prefix: str = "") -> dict:
    """The scalar leaves of a (nested) summary, keys joined with '/'; wandb_* keys left out."""
    out: dict[str, Any] = {}
    for k, v in summary.items():
        key = f"{prefix}{k}"
        if str(k).startswith("wandb_"):
            continue
        if isinstance(v, Mapping):
            out.update(_scalars(v, key + "/"))
        elif isinstance(v, str):
            if len(v) < 200:
                out[key] = v
        elif v is not None and np.ndim(v) == 0:
            out[key] = v
    return out


def gamma_rows(summary: Mapping) -> list[dict]:
    """The per-γ stability report of a train run: γ, log2 γ, final value, tail mean, stable,
    diverged, selected."""
    n = len(summary.get("gammas", []))

    def col(name):
        v = summary.get(name)
        return list(v) if isinstance(v, (list, tuple)) and len(v) == n else [None] * n

    final, tail, stable, div, k = (col(c) for c in ("final", "tail_mean", "stable", "diverged", "gamma_log2_grid"))
    chosen = summary.get("tuning/index")
    return [
        {
            "gamma": float(g),
            "gamma_log2": k[i],
            "final": _num(final[i]),
            "tail_mean": _num(tail[i]),
            "stable": stable[i],
            "diverged": div[i],
            "selected": i == chosen,
        }
        for i, g in enumerate(summary.get("gammas", []))
    ]


def _num(x):
    """A finite float, or None (a table cell of one type: wandb refuses "nan" beside numbers)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def curves_figure(curves: Mapping, summary: Mapping):
    """f − f* (or the LM's held-out loss) against simulated time for every γ that did not
    diverge, the selected one in black (a matplotlib figure, for ``wandb.Image``)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    metric = summary["metric"]
    mean = np.asarray(curves[metric], float).mean(axis=0)
    axis = "axis/sim_time" if "axis/sim_time" in curves else "axis/block_update"
    x = np.asarray(curves[axis])
    rows = gamma_rows(summary)
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, r in enumerate(rows):
        if r["diverged"]:
            continue
        label = f"2^{r['gamma_log2']}" if r["gamma_log2"] is not None else f"{r['gamma']:g}"
        kw = dict(color="black", lw=2.2, zorder=3) if r["selected"] else dict(lw=1, alpha=0.8)
        ax.plot(x, mean[i], label=label + (" (selected)" if r["selected"] else ""), **kw)
    if np.all(mean[np.isfinite(mean)] > 0):
        ax.set_yscale("log")
    ax.set_xlabel(time_label(summary.get("time_unit")) if axis == "axis/sim_time" else "block update")
    ax.set_ylabel(metric)
    ax.set_title(f"{summary.get('method')} S={summary.get('S')}")
    ax.legend(fontsize=7, ncol=2, title="γ")
    fig.tight_layout()
    return fig


def log_train_run(ts: specs.TrainSpec, path: str | Path, job: Job = NONE) -> str | None:
    """Log the stored train run at ``path`` (complete, ok or diverged) of the resolved job ``ts``
    (its logger settings, experiment and config) to wandb and write its wandb id into the stored
    summary; returns the id (None when wandb could not log). ``job``: the hydra job it ran in
    (its output directory, its ``costs`` choice)."""

    path = Path(path)
    run = store.load_run(path)
    key, summary, curves = run.config, run.summary, run.curves
    meta = sweep_meta(ts.experiment, key, job.choices.get("costs"))
    config = {
        **ts.config,
        **key,
        "results": {"hash": path.name, "path": str(path.resolve()), "status": run.status},
        "provenance": _provenance(),
    }
    logger = _logger(
        ts.logger,
        experiment=ts.experiment,
        name=run_name(meta),
        meta=meta,
        tags=sweep_tags(meta),
        config=config,
        method=meta["method"],
        S=meta["S"],
        job_type="train",
        job=job,
    )
    try:
        metric = summary["metric"]
        mean = np.asarray(curves[metric], float).mean(axis=0)
        metrics = {
            f"{metric}/gamma_2^{k}" if k is not None else f"{metric}/gamma_{g:g}": mean[i]
            for i, (g, k) in enumerate(zip(summary["gammas"], summary["gamma_log2_grid"]))
        }
        if summary.get("tuning/index") is not None:  # the dashboard's curve: the chosen gamma
            metrics[metric] = mean[summary["tuning/index"]]
        logger.log_metrics(metrics, sim_time=curves.get("axis/sim_time"), block_update=curves["axis/block_update"])
        logger.log_table("tuning/gammas", gamma_rows(summary))
        import matplotlib.pyplot as plt

        fig = curves_figure(curves, summary)
        try:
            logger.log_image("curves", fig)
        finally:
            plt.close(fig)
        logger.log_artifact(
            f"curves-{path.name}",
            "curves",
            [path / f for f in store.FILES],
            metadata={"results": str(path.resolve()), **meta},
        )
        logger.log_summary(
            {
                **_scalars({k: v for k, v in summary.items() if np.ndim(v) == 0}),
                "results/hash": path.name,
                "status": run.status,
            }
        )
        rid, mode = logger.id, logger.mode
    finally:
        logger.finish()
    if rid is not None:
        record_wandb_id(path, rid, logger.project, mode)
        log.info("wandb run %s (%s) logged from %s", rid, run_name(meta), path)
    return rid


def log_figure(cfg, out, job: Job = NONE) -> str | None:
    """Log a drawn figure (an ``rpd.cli.manifest.FigureOutcome``): the PNG as an image, its
    table, its summary numbers, and an artifact with the PNG / PDF / numbers JSON and the stored
    arrays; the wandb id goes into the stored output's summary. Returns the id. ``job``: the
    hydra job it ran in (wandb writes under its output directory)."""

    path = Path(out.run_path)
    overrides = C.study_fields(cfg.study)
    name = "/".join([out.name, out.size, *(f"{k}{_fmt(v)}" for k, v in sorted(overrides.items()))])
    meta = {
        "experiment": out.name,
        "kind": "figure",
        "size": out.size,
        **{f"study/{k}": v for k, v in overrides.items()},
    }
    config = {
        "study": out.config,
        "size": out.size,
        "overrides": overrides,
        "results": {"hash": path.name, "path": str(path.resolve())},
        "provenance": _provenance(),
    }
    logger = _logger(
        cfg.logger,
        experiment=out.name,
        name=name,
        meta=meta,
        tags=("figure", out.name, out.size),
        config=config,
        method=None,
        S=None,
        job_type="figure",
        job=job,
    )
    try:
        logger.log_image("figure", out.png)
        logger.log_table("table", out.table)
        logger.log_summary({**_scalars(out.summary), "runtime_s": out.runtime_s, "results/hash": path.name})
        files = [out.png, out.numbers, out.png.with_suffix(".pdf"), path / "curves.npz"]
        logger.log_artifact(
            f"figure-{out.name}-{path.name}",
            "figure",
            [f for f in files if Path(f).exists()],
            metadata={"results": str(path.resolve()), "size": out.size},
        )
        rid, mode = logger.id, logger.mode
    finally:
        logger.finish()
    if rid is not None:
        record_wandb_id(path, rid, logger.project, mode)
    return rid
