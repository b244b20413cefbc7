"""The results store: one directory per run, written atomically, complete only when marked.

A run directory holds

    config.json   the resolved config (JSON, sorted keys)
    curves.npz    every metric as an array (keys may contain '/': "loss/f_minus_fstar")
    summary.json  scalars (chosen γ, final values, timings, ...)
    status.json   {"status": "ok" | "diverged" | "failed", "error", "config_hash", "sha256"}

Every file is written to a temporary file in the same directory, fsync'ed and moved into place
with ``os.replace``; ``status.json`` is written last and carries the SHA-256 of the other three
files. A run is *complete* iff its status file exists and the checksums match, so a crash or a
kill at any point leaves either the previous complete run or nothing a figure could read
(saving first removes an old marker). Sweeps key run directories by a stable hash of the
resolved config and skip complete runs whose status is ok or diverged (failed runs are rerun).

Two processes on one key: writers hold :func:`run_lock` (an ``fcntl.flock`` on ``.lock`` in
the run directory) around check-compute-save, so the second waits, then finds the run complete
and reuses it; a run is never written twice at once. Readers take no lock (a read-only store
can be read): :func:`load_run` reads each file once, checks those bytes against the marker and
parses the same bytes, so it returns one writer's complete run or raises
``IncompleteRunError``, never a mix (while another process rewrites a stored run it waits up
to ``REWRITE_WAIT_S`` for the new one). Files are created with mode ``0o666 & ~umask``.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import numbers
import os
import secrets
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, NamedTuple, Sequence

import numpy as np

try:  # POSIX; on Windows there is no flock and run_lock only serialises threads (writes stay
    import fcntl  # atomic and checksummed, so a reader still never sees a mixed run)
except ImportError:  # pragma: no cover
    fcntl = None

from rpd.validation import check_choice

STATUSES = ("ok", "diverged", "failed")
FILES = ("config.json", "summary.json", "curves.npz")
MARKER = "status.json"


class IncompleteRunError(RuntimeError):
    """The directory has no valid completion marker (interrupted, in progress, or corrupted)."""


class Run(NamedTuple):
    path: Path
    config: dict
    curves: dict[str, np.ndarray]
    summary: dict
    status: str  # "ok", "diverged" or "failed"
    error: str | None


def to_jsonable(obj: Any, where: str = "config") -> Any:
    """Plain JSON types from mappings, sequences (OmegaConf containers too), NumPy scalars and
    arrays; non-finite floats become strings ("nan", "inf") so the files stay strict JSON."""
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v, f"{where}.{k}") for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist(), where)
    if obj is None or isinstance(obj, (str, bool, np.bool_)):
        return bool(obj) if isinstance(obj, np.bool_) else obj
    if isinstance(obj, Sequence) and not isinstance(obj, bytes):  # list, tuple, ListConfig
        return [to_jsonable(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        f = float(obj)
        return f if math.isfinite(f) else str(f)
    raise TypeError(f"{where}: cannot store a value of type {type(obj).__name__} as JSON")


def _dumps(obj: Any) -> bytes:
    return json.dumps(to_jsonable(obj), sort_keys=True, indent=1, allow_nan=False).encode()


def config_hash(config: Mapping) -> str:
    """A stable 16-hex-digit key of a resolved config (order of keys does not matter)."""
    canon = json.dumps(to_jsonable(config), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def run_dir(root: str | os.PathLike, config: Mapping) -> Path:
    """Where a sweep stores the run of ``config``: ``root/<config_hash>``."""
    return Path(root) / config_hash(config)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # not every platform can open a directory
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_temp(path: Path) -> tuple[int, Path]:
    """A new temporary file beside ``path``, created mode 0o666 so the kernel applies the
    umask (``tempfile.mkstemp`` would make it 0600, and ``os.replace`` keeps that mode)."""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                           0o666), tmp
        except FileExistsError:  # pragma: no cover - 48 random bits
            continue


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a part.
    The file gets mode ``0o666 & ~umask``, like one made with ``open(path, "wb")``."""
    path = Path(path)
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


LOCK = ".lock"  # in a run directory: what run_lock flocks
_locks_guard = threading.Lock()
_locks: dict[str, list] = {}  # resolved run dir -> [threading.RLock, depth, fd]


@contextmanager
def run_lock(path: str | os.PathLike, *, wait_message: str | None = None):
    """Hold the write lock of run directory ``path`` (created if missing): one writer per key
    across processes (``fcntl.flock`` on ``path/.lock``, released by the OS if the holder dies)
    and across threads. Re-entrant in the thread that holds it. A writer checks
    :func:`should_skip` *inside* the lock, so the second of two writers of one key waits, then
    reuses the first one's run. ``wait_message`` is logged when the lock is held elsewhere."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    key = str(path.resolve())
    with _locks_guard:
        entry = _locks.setdefault(key, [threading.RLock(), 0, None])
    rlock = entry[0]
    rlock.acquire()
    try:
        if entry[1] == 0:
            entry[2] = _flock(path / LOCK, wait_message or f"waiting for another process writing {path}")
        entry[1] += 1
        try:
            yield path
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                fd, entry[2] = entry[2], None
                if fd is not None:
                    os.close(fd)  # releases the flock
    finally:
        rlock.release()


def _flock(lock_path: Path, wait_message: str) -> int | None:
    """An fd holding an exclusive flock on ``lock_path``, or None where no lock can be had: a
    store this user cannot write (a reader's skip check then runs unlocked; any write would fail
    anyway) or a filesystem without flock (a warning; writes stay atomic and checksummed)."""
    import logging

    if fcntl is None:  # pragma: no cover - Windows: threads only (see the import)
        return None
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        try:
            fd = os.open(lock_path, os.O_RDONLY)  # flock needs no write access
        except OSError:
            return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logging.getLogger(__name__).info(wait_message)
            fcntl.flock(fd, fcntl.LOCK_EX)  # Ctrl-C interrupts the wait (PEP 475)
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, OSError) and not isinstance(exc, BlockingIOError):  # ENOLCK, ...
            logging.getLogger(__name__).warning(
                "no file lock on %s (%s): two processes writing this run at once are not "
                "serialised", lock_path, exc)
            return None
        raise
    return fd


def _npz_bytes(curves: Mapping[str, Any]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **{str(k): np.asarray(v) for k, v in curves.items()})
    return buf.getvalue()


def save_run(path: str | os.PathLike, config: Mapping, curves: Mapping[str, Any] | None = None,
             summary: Mapping | None = None, status: str = "ok", error: str | None = None) -> Path:
    """Write a run directory; the completion marker goes last. Returns the directory."""
    check_choice("status", status, STATUSES)
    path = Path(path)
    blobs = {"config.json": _dumps(config), "summary.json": _dumps(summary or {}),
             "curves.npz": _npz_bytes(curves or {})}
    marker = {"status": status, "error": error, "config_hash": config_hash(config),
              "sha256": {n: hashlib.sha256(b).hexdigest() for n, b in blobs.items()}}
    with run_lock(path):  # one writer at a time (re-entrant for a caller that holds it)
        (path / MARKER).unlink(missing_ok=True)  # a rewrite is incomplete until its marker lands
        _fsync_dir(path)
        for name, data in blobs.items():
            atomic_write(path / name, data)
        atomic_write(path / MARKER, _dumps(marker))
    return path


def save_failure(path: str | os.PathLike, config: Mapping, exc: BaseException) -> Path:
    """Record a run that raised: status "failed" with the error text, no curves."""
    return save_run(path, config, status="failed", error=f"{type(exc).__name__}: {exc}")


def _read_complete(path: Path, tries: int = 3) -> tuple[dict, dict[str, bytes]] | None:
    """The marker and the bytes of every file, read once each and checked against the marker's
    checksums (so they come from one write), or None for an incomplete run. A mismatch is read
    again (``tries`` times): a writer may have replaced a file between our reads."""
    for attempt in range(tries):
        try:
            marker = json.loads((path / MARKER).read_bytes())
            blobs = {name: (path / name).read_bytes() for name in FILES}
            if marker.get("status") not in STATUSES:
                return None
            if all(hashlib.sha256(b).hexdigest() == marker["sha256"][n] for n, b in blobs.items()):
                return marker, blobs
        except FileNotFoundError:
            if not (path / MARKER).exists():
                return None  # not written, or being rewritten
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
    return None


REWRITE_WAIT_S = 2.0  # load_run: how long to wait for another process's write to finish


def _rewrite_in_progress(path: Path) -> bool:
    """Another process holds the write lock of ``path``, which has stored files (a rewrite, not
    a first computation: those take longer than a reader should wait). Opens read-only, so a
    reader without write permission can ask."""
    if fcntl is None or not (path / "config.json").exists():
        return False
    with _locks_guard:
        entry = _locks.get(str(path.resolve()))
    if entry is not None and entry[1] > 0:
        return False  # this process writes it: waiting would not help
    try:
        fd = os.open(path / LOCK, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases a shared lock taken above


def _read_marker(path: Path) -> dict | None:
    complete = _read_complete(path)
    return None if complete is None else complete[0]


def is_complete(path: str | os.PathLike) -> bool:
    """True iff the run directory has a valid marker and its files match their checksums."""
    return _read_marker(Path(path)) is not None


def load_run(path: str | os.PathLike) -> Run:
    """Read a complete run; raises ``IncompleteRunError`` otherwise."""
    path = Path(path)
    complete = _read_complete(path)
    deadline = time.monotonic() + REWRITE_WAIT_S
    while complete is None and time.monotonic() < deadline and _rewrite_in_progress(path):
        time.sleep(0.02)  # another process is rewriting a stored run (force, a wandb id): wait
        complete = _read_complete(path)
    if complete is None:
        raise IncompleteRunError(f"{path} holds no complete run (interrupted, still running, or "
                                 f"corrupted: {MARKER} missing or checksums do not match)")
    marker, blobs = complete  # parse the bytes that were checked: never a mix of two writes
    with np.load(io.BytesIO(blobs["curves.npz"]), allow_pickle=False) as npz:
        curves = {k: npz[k] for k in npz.files}
    return Run(path, json.loads(blobs["config.json"]), curves, json.loads(blobs["summary.json"]),
               marker["status"], marker["error"])


def should_skip(path: str | os.PathLike, config: Mapping) -> bool:
    """For sweeps: the run at ``path`` is complete, ok or diverged, and has this exact config."""
    marker = _read_marker(Path(path))
    return (marker is not None and marker["status"] != "failed"
            and marker["config_hash"] == config_hash(config))


def pending(root: str | os.PathLike, configs) -> list[dict]:
    """The configs of a sweep that still have to run (not skipped under ``run_dir(root, c)``)."""
    return [c for c in configs if not should_skip(run_dir(root, c), c)]


def iter_runs(root: str | os.PathLike) -> Iterator[Run]:
    """Every complete run below ``root`` (any depth); incomplete directories are ignored."""
    for marker in sorted(Path(root).rglob(MARKER)):
        if is_complete(marker.parent):
            yield load_run(marker.parent)


# ------------------------------------------------------------------ sweeps as tables

JOB_LINK = "result.json"  # in a hydra job's output directory: which stored run the job produced
SWEEP_COLUMNS = ("job", "overrides", "method", "schedule", "objective", "S", "H", "delta", "N", "T",
                 "gamma", "final_selected", "final_best", "metric", "status", "skipped", "error",
                 "result", "wandb_id")


def link_job(job_dir: str | os.PathLike, result: str | os.PathLike | None, *, status: str,
             skipped: bool = False, error: str | None = None, wandb_id: str | None = None) -> Path:
    """Write ``<job_dir>/result.json`` naming the run directory a hydra job produced (or its
    error when it stored none), and a symlink ``<job_dir>/result`` to that directory where the
    filesystem allows one. :func:`load_sweep` reads these links."""
    job_dir = Path(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    target = None if result is None else Path(result).resolve()
    link = {"result": None if target is None else str(target), "status": status,
            "skipped": bool(skipped), "error": error, "wandb_id": wandb_id}
    atomic_write(job_dir / JOB_LINK, _dumps(link))
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
    complete = _read_complete(path)
    if complete is None:
        row.update(status="incomplete", result=str(path))
        return row
    marker, blobs = complete
    config = json.loads(blobs["config.json"])
    summary = json.loads(blobs["summary.json"])
    method = config.get("method") if isinstance(config.get("method"), dict) else {}
    sched = config.get("schedule") if isinstance(config.get("schedule"), dict) else {}
    objective = config.get("objective") if isinstance(config.get("objective"), dict) else {}
    final = [_float(v) for v in summary.get("final", [])]
    diverged = list(summary.get("diverged", [False] * len(final)))
    kept = [f for f, d in zip(final, diverged) if not d and math.isfinite(f)]
    row.update(method=method.get("name", config.get("study")), schedule=sched.get("name"),
               objective=objective.get("name"), S=sched.get("S"), H=sched.get("H"),
               delta=method.get("delta"), N=sched.get("N"), T=sched.get("T"),
               gamma=summary.get("tuning/gamma"), final_selected=_float(summary.get("final/selected")),
               final_best=min(kept) if kept else math.nan, metric=summary.get("metric"),
               status=marker["status"], error=marker.get("error"), result=str(path),
               wandb_id=summary.get("wandb_id"))
    return row


def _job_rows(root: Path) -> list[dict]:
    """One row per hydra job directory below ``root`` (a directory with ``.hydra/``): the run
    its ``result.json`` links, or status "no result" when the job stored none."""
    rows = []
    jobs = sorted({p.parent.parent for p in root.rglob(".hydra/overrides.yaml")}
                  | {p.parent for p in root.rglob(JOB_LINK) if (p.parent / ".hydra").is_dir()})
    for job in jobs:
        row: dict[str, Any] = {"job": int(job.name) if job.name.isdigit() else None,
                               "overrides": _job_overrides(job)}
        link_path = job / JOB_LINK
        if link_path.exists():
            link = json.loads(link_path.read_bytes())
            result = None if link.get("result") is None else Path(link["result"])
            row.update(_row_of_run(result))
            row["skipped"] = bool(link.get("skipped"))
            if row.get("status") is None or (result is not None and not result.exists()):
                row.update(status=link.get("status") if result is None else "missing",
                           error=link.get("error"), result=None if result is None else str(result))
            if link.get("wandb_id") and not row.get("wandb_id"):
                row["wandb_id"] = link["wandb_id"]
        else:
            row.update(status="no result", error="the job linked no stored run (still running, "
                       "or it stopped before storing one: see its log)")
        rows.append(row)
    return rows


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
        rows = [{"job": None, "overrides": "", "skipped": False, **_row_of_run(m.parent)}
                for m in sorted(root.rglob(MARKER))]
    df = pd.DataFrame(rows, columns=list(SWEEP_COLUMNS))
    for col in ("job", "S", "H", "delta", "N", "T"):  # integers, with <NA> where a run has none
        df[col] = df[col].astype("Int64")
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
    ``skipped`` (already stored), ``failed`` (failed or no stored result), and ``total``."""
    failed = ~df["status"].isin(["ok", "diverged"])
    skipped = df["skipped"].fillna(False).astype(bool) & ~failed
    return {"total": int(len(df)), "done": int((~failed & ~skipped).sum()),
            "skipped": int(skipped.sum()), "failed": int(failed.sum())}


def swept(overrides) -> list[str]:
    """The overrides of each job (strings as in :func:`load_sweep`) without those every job
    shares: what the sweep varies."""
    split = [str(o or "").split() for o in overrides]
    common = set.intersection(*(set(s) for s in split)) if len(split) > 1 else set()
    return [" ".join(t for t in s if t not in common) for s in split]


def _parse_value(text: str):
    if "," in text:
        return [_parse_value(t) for t in text.split(",")]
    if text.lower() in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rpd.store ls <path> [column=value ...]``: print a sweep as a table."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m rpd.store",
                                 description="List a sweep (hydra multirun directory) or a results "
                                             "store as a table (rpd.store.load_sweep).")
    sub = ap.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("ls", help="one row per job: overrides, method, S, H, delta, N, gamma, "
                                   "final values, status, result directory, wandb id")
    ls.add_argument("path", help="a hydra sweep directory (multirun/...) or a results directory")
    ls.add_argument("filters", nargs="*", metavar="column=value",
                    help="keep rows whose column equals the value (a,b: one of them)")
    ls.add_argument("--columns", default=None,
                    help="comma-separated columns to print (default: all that are not empty)")
    ls.add_argument("--csv", action="store_true", help="print CSV instead of an aligned table")
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
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    counts = sweep_counts(df)
    if args.columns:
        cols = args.columns.split(",")
        unknown = [c for c in cols if c not in df.columns]
        if unknown:
            print(f"error: unknown column(s) {unknown}; columns are {', '.join(df.columns)}", file=sys.stderr)
            return 2
        df = df[cols]
    else:
        df = df.dropna(axis=1, how="all")
    if args.csv:
        print(df.to_csv(index=False), end="")
    else:
        print(df.to_string(index=False) if len(df) else "(no jobs)")
        c = counts
        print(f"{c['total']} jobs: {c['done']} done, {c['skipped']} skipped, {c['failed']} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
