"""The stored curves behind a sweep table's rows (:func:`rpd.io.sweeps.load_sweep`, which reads
no curves): a row's run as a :class:`~rpd.results.Result` (:func:`load_result`), and each row's
first simulated time at a target value (:func:`time_to_target`)."""

from __future__ import annotations

import math

import numpy as np

from rpd.io import store
from rpd.results import Result


def load_result(row) -> Result:
    """The stored run of one table row (a ``load_sweep`` row, its ``result`` path, or a run
    directory) as a :class:`~rpd.results.Result`: the curve is the seeds' mean [G, P] on the
    run's time axis (``sim_time`` when it has one, else ``block_update``), every per-update trace
    as stored, γ, and the run's config and summary in ``meta``. Final iterates are not stored
    (``x_final`` is empty)."""
    where = getattr(row, "result", None) or (row.get("result") if isinstance(row, dict) else row)
    if where is None or (isinstance(where, float) and math.isnan(where)):
        raise ValueError("this row has no stored run (its job failed before storing one)")
    run = store.load_run(where)
    c, s = run.curves, run.summary
    if s.get("metric") not in c:
        raise ValueError(f"{run.path} holds no curves (status {run.status}: {run.error})")
    axis_name = "sim_time" if "axis/sim_time" in c else "block_update"
    curve = np.asarray(c[s["metric"]], np.float64).mean(axis=0)
    gammas = np.asarray(c["gammas"], np.float64)
    traces = {k.split("/", 1)[1]: np.asarray(v) for k, v in c.items() if k.startswith("trace/")}
    return Result(
        method=str(s.get("method")),
        gammas=gammas,
        axis=np.asarray(c[f"axis/{axis_name}"]),
        axis_name=axis_name,
        curve=curve,
        traces=traces,
        x_final=np.zeros((len(gammas), 0)),
        meta={"config": run.config, "summary": s, "status": run.status, "path": str(run.path)},
    )


def time_to_target(df, target: float | str | None = None):
    """``df`` (a :func:`rpd.io.sweeps.load_sweep` table) with two columns added: ``target`` and
    ``time_to_target``, the first simulated time at which a row's selected γ's curve is at or
    below the target, read up to the row's T (NaN if not reached, or if the row has no selected γ
    or no simulated-time axis). ``target=None``: the lowest value any row's selected curve has at
    half the smallest T of the table (E10's rule), so every row is asked the same question;
    ``"auto"`` is the same (the name ``rpd.io.sweeps ls --target auto`` and docs/running.md use)."""
    if isinstance(target, str):
        if target != "auto":
            raise ValueError(f"target: {target!r} is neither a number nor 'auto'")
        target = None
    curves = {}
    for k, row in df.iterrows():
        if row.get("status") != "ok" or not isinstance(row.get("result"), str):
            continue
        res = load_result(row)
        i = res.meta["summary"].get("tuning/index")
        if res.axis_name != "sim_time" or i is None or i < 0:
            continue
        T = float(res.axis[-1]) if _isna(row.get("T")) else float(row["T"])
        curves[k] = (np.asarray(res.axis, np.float64), res.curve[i], T)
    if target is None and curves:
        half = min(T for *_, T in curves.values()) / 2
        target = float(np.nanmin([c[np.searchsorted(a, half, side="right") - 1] for a, c, _ in curves.values()]))
    out = df.copy()
    out["target"] = math.nan if target is None else float(target)
    times = []
    for k in df.index:
        if k not in curves:
            times.append(math.nan)
            continue
        a, c, T = curves[k]
        hit = np.nonzero((c <= target) & (a <= T))[0]
        times.append(float(a[hit[0]]) if hit.size else math.nan)
    out["time_to_target"] = times
    return out


def _isna(x) -> bool:
    """None, NaN or pandas' NA (an Int64 column's missing value)."""
    return x is None or str(x) in ("<NA>", "nan", "NaN")
