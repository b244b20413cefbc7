"""Sweeps as tables: which stored run each hydra job produced (``link_job``), one row per job
of a multirun directory or per run of a results store (``load_sweep`` -> pandas DataFrame),
filters and counts, and the ``python -m rpd.io.sweeps ls`` command line. The store itself (atomic,
locked, checksummed runs) is :mod:`rpd.io.store`; these are re-exported there. The curves behind
a table's rows (``load_result``, ``time_to_target``) are :mod:`rpd.io.sweep_results`."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from rpd.io import store
from rpd.io import sweep_table as table_of
from rpd.io.atomic import atomic_write
from rpd.io.sweep_results import time_to_target
from rpd.io.sweep_table import for_terminal, scalar, summary_column, swept_columns

JOB_LINK = "result.json"  # in a hydra job's output directory: which stored run the job produced
JOBS = "jobs.json"  # in a sweep directory: every job's overrides, written when the sweep starts
SWEEP_COLUMNS = tuple(  # a sweep table's columns, in order
    (
        "job overrides method schedule costs objective n D batch_size options optimizer correction S M H "
        "delta N T time_unit T_rule gamma gamma_flag rule final_selected final_best n_diverged "
        "updates_by_T microbatches_total bubble_total bubble_ideal peak_activations weights_peak metric "
        "status skipped code git_commit error result wandb_id"
    ).split()
)


def link_job(
    job_dir: str | os.PathLike,
    result: str | os.PathLike | None,
    *,
    status: str,
    skipped: bool = False,
    error: str | None = None,
    wandb_id: str | None = None,
) -> Path:
    """Write ``<job_dir>/result.json`` naming the run directory a hydra job produced (or its
    error when it stored none), and a symlink ``<job_dir>/result`` to that directory where the
    filesystem allows one. :func:`load_sweep` reads these links."""
    job_dir = Path(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    target = None if result is None else Path(result).resolve()
    link = {
        "result": None if target is None else str(target),
        "status": status,
        "skipped": bool(skipped),
        "error": error,
        "wandb_id": wandb_id,
    }
    atomic_write(job_dir / JOB_LINK, store._dumps(link))
    if target is not None:
        sym = job_dir / "result"
        try:
            if sym.is_symlink() or sym.exists():
                sym.unlink()
            sym.symlink_to(target, target_is_directory=True)
        except OSError:  # the JSON link is the one load_sweep reads
            pass
    return job_dir / JOB_LINK


def _float(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _job_overrides(job_dir: Path) -> str:
    path = job_dir / ".hydra" / "overrides.yaml"
    if not path.exists():
        return ""
    import yaml  # hydra's dependency; the job directory is hydra's

    items = yaml.safe_load(path.read_text()) or []
    return " ".join(str(i) for i in items)


def _row_of_run(path: Path | None) -> dict:
    """The columns a stored run gives: its config, summary and status (no curves read)."""
    row: dict[str, Any] = {}
    if path is None:
        return row
    complete = store._read_complete(path)
    if complete is None:
        row.update(status=store.entry_status(path), result=str(path))
        return row
    marker, blobs = complete
    config = json.loads(blobs["config.json"])
    summary = json.loads(blobs["summary.json"])
    method = table_of.section(config, "method")
    sched = table_of.section(config, "schedule")
    objective = table_of.section(config, "objective")
    opt = table_of.section(method, "optimizer")
    final = [_float(v) for v in summary.get("final", [])]
    diverged = list(summary.get("diverged", [False] * len(final)))
    kept = [f for f, d in zip(final, diverged) if not d and math.isfinite(f)]
    row.update(
        method=method.get("name", config.get("study")),
        schedule=summary.get("schedule", sched.get("name")),
        costs=summary.get("costs"),
        objective=objective.get("name"),
        **table_of.objective_columns(config, summary),
        optimizer=opt.get("name", "sgd") if method else None,  # null in a key: plain SGD
        correction=opt.get("correction"),
        S=sched.get("S"),
        M=sched.get("M"),
        H=sched.get("H"),
        delta=method.get("delta"),
        N=summary.get("N", sched.get("N")),
        T=summary.get("T", sched.get("T")),
        time_unit=summary.get("time_unit"),
        T_rule=summary.get("T_rule"),
        gamma=summary.get("tuning/gamma"),
        gamma_flag=summary.get("tuning/flag"),
        rule=summary.get("tuning/rule"),
        n_diverged=summary.get("n_diverged"),
        updates_by_T=summary.get("updates"),
        microbatches_total=summary.get("N"),
        bubble_total=summary.get("bubble/f_total"),
        bubble_ideal=summary.get("bubble/r_ideal"),
        peak_activations=summary.get("activations/peak"),
        weights_peak=summary.get("weights/peak"),
        code=config.get("code"),
        git_commit=summary.get("git_commit"),
        final_selected=_float(summary.get("final/selected")),
        final_best=min(kept) if kept else math.nan,
        metric=summary.get("metric"),
        status=marker["status"],
        error=marker.get("error"),
        result=str(path),
        wandb_id=summary.get("wandb_id"),
    )
    return row


def write_jobs(sweep_dir: str | os.PathLike, jobs: Sequence[Sequence[str]]) -> Path:
    """Write ``<sweep_dir>/jobs.json``: the override list of every job of a sweep, in job order
    (``experiments.sweep.SweepSummary`` at the start of a multirun), so that a sweep stopped
    early still lists the jobs that never ran (:func:`load_sweep`: status "not finished")."""
    path = Path(sweep_dir) / JOBS
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps([list(map(str, j)) for j in jobs]).encode())
    return path


def _not_finished(root: Path, rows: list[dict]) -> list[dict]:
    """Rows for the jobs of ``<root>/jobs.json`` that have no job directory (never started)."""
    path = root / JOBS
    if not path.exists():
        return []
    seen = {r["job"] for r in rows}
    return [
        {"job": i, "overrides": " ".join(job), "status": "not finished", "error": "the sweep stopped before this job"}
        for i, job in enumerate(json.loads(path.read_bytes()))
        if i not in seen
    ]


def _job_rows(root: Path) -> list[dict]:
    """One row per hydra job directory below ``root`` (a directory with ``.hydra/``): the run
    its ``result.json`` links, or status "no result" when the job stored none."""
    rows = []
    jobs = sorted(
        {p.parent.parent for p in root.rglob(".hydra/overrides.yaml")}
        | {p.parent for p in root.rglob(JOB_LINK) if (p.parent / ".hydra").is_dir()}
    )
    for job in jobs:
        row: dict[str, Any] = {"job": int(job.name) if job.name.isdigit() else None, "overrides": _job_overrides(job)}
        link_path = job / JOB_LINK
        if link_path.exists():
            link = json.loads(link_path.read_bytes())
            result = None if link.get("result") is None else Path(link["result"])
            row.update(_row_of_run(result))
            row["skipped"] = bool(link.get("skipped"))
            if row.get("status") is None or (result is not None and not result.exists()):
                row.update(
                    status=link.get("status") if result is None else "missing",
                    error=link.get("error"),
                    result=None if result is None else str(result),
                )
            if link.get("wandb_id") and not row.get("wandb_id"):
                row["wandb_id"] = link["wandb_id"]
        else:
            row.update(
                status="no result",
                error="the job linked no stored run (still running, or it stopped before storing one: see its log)",
            )
        rows.append(row)
    return sorted(rows + _not_finished(root, rows), key=lambda r: (r["job"] is None, r["job"] or 0))


def load_sweep(path: str | os.PathLike, **filters):
    """A sweep as a ``pandas.DataFrame``, one row per job: ``job``, ``overrides`` (the job's
    command-line overrides), ``method``, ``schedule``, ``objective``, ``S``, ``H``, ``delta``,
    ``N``, ``T``, ``gamma`` (the selected γ), ``final_selected`` (its final value),
    ``final_best`` (the best final value over the γ that did not diverge), ``metric``,
    ``status`` (ok / diverged / failed, "no result" for a job that linked none), ``skipped``
    (an identical run was already stored), ``error``, ``result`` (the run directory) and
    ``wandb_id`` (when the run was logged).

    ``path`` is a hydra sweep (or run) directory, whose job directories link their runs
    (``result.json``, written by ``experiments.train``), or a results-store directory
    (``results/train``), whose runs are listed without overrides. ``filters`` keep the rows
    whose column equals the value (or is in it, for a list/tuple/set):
    ``load_sweep("multirun/...", method="localsgd", H=[2, 5])``."""
    import pandas as pd

    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"no sweep at {root}")
    rows = _job_rows(root)
    if not rows:  # a results store: every run below it
        rows = [
            {"job": None, "overrides": "", "skipped": False, **_row_of_run(entry)} for entry in store.iter_entries(root)
        ]
    df = pd.DataFrame(rows, columns=list(SWEEP_COLUMNS))
    for col in (
        "job",
        "n",
        "D",
        "batch_size",
        "S",
        "M",
        "H",
        "delta",
        "N",
        "T",
        "n_diverged",
    ):  # integers, <NA> where a run has none
        df[col] = df[col].astype("Int64")
    for i, (key, values) in enumerate(swept_columns(df["overrides"]).items()):
        df.insert(2 + i, key, values)
    df["skipped"] = df["skipped"].fillna(False).astype(bool)
    return filter_sweep(df, **filters)


def filter_sweep(df, **filters):
    """The rows of a :func:`load_sweep` table whose column equals the value, or is one of the
    values of a list/tuple/set (None matches a missing value)."""
    for key, value in filters.items():
        if key not in df.columns:
            raise ValueError(f"load_sweep: unknown filter {key!r}; columns are {', '.join(df.columns)}")
        values = list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]
        given = [v for v in values if v is not None]
        keep = df[key].isin(given).fillna(False).astype(bool)
        if len(given) < len(values):
            keep |= df[key].isna()
        df = df[keep]
    return df.reset_index(drop=True)


def sweep_counts(df) -> dict[str, int]:
    """Jobs of a :func:`load_sweep` table by outcome: ``done`` (computed now, ok or diverged),
    ``skipped`` (already stored), ``failed`` (failed or no stored result), ``not_finished``
    (a job the sweep never started: it stopped early), and ``total``."""
    waiting = df["status"].eq("not finished")
    failed = ~df["status"].isin(["ok", "diverged"]) & ~waiting
    skipped = df["skipped"].fillna(False).astype(bool) & ~failed & ~waiting
    return {
        "total": int(len(df)),
        "done": int((~failed & ~skipped & ~waiting).sum()),
        "skipped": int(skipped.sum()),
        "failed": int(failed.sum()),
        "not_finished": int(waiting.sum()),
    }


def swept(overrides) -> list[str]:
    """The overrides of each job (strings as in :func:`load_sweep`) without those every job
    shares: what the sweep varies."""
    split = [str(o or "").split() for o in overrides]
    common = set.intersection(*(set(s) for s in split)) if len(split) > 1 else set()
    return [" ".join(t for t in s if t not in common) for s in split]


def _parse_value(text: str):
    if "," in text:
        return [_parse_value(t) for t in text.split(",")]
    return scalar(text)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rpd.io.sweeps ls <path> [column=value ...]``: print a sweep as a table."""
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m rpd.io.sweeps",
        description="List a sweep (hydra multirun directory) or a results store as a table (rpd.io.sweeps.load_sweep).",
    )
    sub = ap.add_subparsers(dest="command", required=True)
    ls = sub.add_parser(
        "ls",
        help="one row per job: overrides, method, S, H, delta, N, gamma, "
        "final values, status, result directory, wandb id",
    )
    ls.add_argument("path", help="a hydra sweep directory (multirun/...) or a results directory")
    ls.add_argument(
        "filters", nargs="*", metavar="column=value", help="keep rows whose column equals the value (a,b: one of them)"
    )
    ls.add_argument(
        "--columns", default=None, help="comma-separated columns to print (default: all that are not empty)"
    )
    ls.add_argument("--csv", action="store_true", help="print CSV instead of an aligned table")
    ls.add_argument(
        "--target",
        default=None,
        metavar="auto|VALUE",
        help="add time_to_target: the first simulated time each row's selected curve reaches VALUE "
        "(auto: the lowest value any row has at half the smallest T)",
    )
    args = ap.parse_args(argv)
    filters = {}
    for f in args.filters:
        key, sep, value = f.partition("=")
        if not sep:
            ap.error(f"filter {f!r} is not column=value")
        filters[key] = _parse_value(value)
    try:
        df = load_sweep(args.path)
        if not args.csv and len(df):  # the table shows what the sweep varies; the CSV all
            df = df.assign(overrides=swept(df["overrides"]))
        df = filter_sweep(df, **filters)
        if args.target is not None:
            df = time_to_target(df, args.target if args.target == "auto" else float(args.target))
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    counts, note = sweep_counts(df), table_of.unequal_time(df) if len(df) else None
    if args.columns:
        cols, known = args.columns.split(","), list(df.columns)
        for c in cols:  # any key of the runs' summary.json
            if c not in known:
                df[c] = summary_column(df, c) if len(df) else []
        unknown = [c for c in cols if c not in known and df[c].isna().all()]
        if unknown and len(df):
            print(
                f"error: unknown column(s) {unknown}: neither a column ({', '.join(known)}) "
                "nor a key of the runs' summary.json",
                file=sys.stderr,
            )
            return 2
        df = df[cols]
    else:
        df = df.dropna(axis=1, how="all")
    if args.csv:
        print(df.to_csv(index=False), end="")
    else:
        if not len(df):
            print("no rows match the filters" if filters else "no runs yet")
            return 0
        if not args.columns:  # every override a sweep varies has a column: the list repeats them
            df = df.drop(columns="overrides")
        table, above = for_terminal(df, collapse=not args.columns)
        print("\n".join([*above, table_of.as_text(table)]))
        if table.attrs["full_text"]:
            print(f"(abbreviated: {', '.join(table.attrs['full_text'])}; --csv prints them in full)")
        if note:
            print(note)
        c = counts
        left = f", {c['not_finished']} not finished" if c["not_finished"] else ""
        print(f"{c['total']} jobs: {c['done']} done, {c['skipped']} skipped, {c['failed']} failed{left}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
