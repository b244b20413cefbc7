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
import shutil
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from rpd.io.atomic import atomic_write, fsync_dir
from rpd.runtime import interrupt
from rpd.validation import check_choice

fcntl: ModuleType | None
try:  # POSIX; on Windows there is no flock and run_lock only serialises threads (writes stay
    import fcntl  # atomic and checksummed, so a reader still never sees a mixed run)
except ImportError:  # pragma: no cover
    fcntl = None

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


def check_root(root: str | os.PathLike, field: str = "results_root") -> bool:
    """A results root, checked before any work: an existing directory, or one that can be
    created (it is made and removed again, so nothing is left if the run is refused later).
    Returns whether it can be written (False: read-only, whose complete runs can still
    be read and reused). Raises ValueError naming ``field`` otherwise."""
    root = Path(root)
    existing = root
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{field}={root} cannot be a results store: {existing} is not a directory")
    if existing == root:
        return os.access(root, os.W_OK | os.X_OK)
    made = [p for p in (root, *root.parents) if p != existing and existing in p.parents]
    try:  # created to prove it can be, then removed again: a refusal later leaves nothing behind
        root.mkdir(parents=True, exist_ok=True)
        for p in made:  # deepest first
            p.rmdir()
    except OSError as err:
        raise ValueError(f"{field}={root} does not exist and cannot be created ({err.strerror or err})") from None
    return True


def run_dir(root: str | os.PathLike, config: Mapping) -> Path:
    """Where a sweep stores the run of ``config``: ``root/<config_hash>``."""
    return Path(root) / config_hash(config)


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
                "no file lock on %s (%s): two processes writing this run at once are not serialised", lock_path, exc
            )
            return None
        raise
    return fd


def _npz_bytes(curves: Mapping[str, Any]) -> bytes:
    buf = io.BytesIO()
    # numpy's stub: a ** dict might name allow_pickle (a bool); these keys are curve names
    np.savez(buf, **{str(k): np.asarray(v) for k, v in curves.items()})  # type: ignore[arg-type]
    return buf.getvalue()


def save_run(
    path: str | os.PathLike,
    config: Mapping,
    curves: Mapping[str, Any] | None = None,
    summary: Mapping | None = None,
    status: str = "ok",
    error: str | None = None,
) -> Path:
    """Write a run directory; the completion marker goes last. Returns the directory."""
    check_choice("status", status, STATUSES)
    path = Path(path)
    blobs = {
        "config.json": _dumps(config),
        "summary.json": _dumps(summary or {}),
        "curves.npz": _npz_bytes(curves or {}),
    }
    marker = {
        "status": status,
        "error": error,
        "config_hash": config_hash(config),
        "sha256": {n: hashlib.sha256(b).hexdigest() for n, b in blobs.items()},
    }
    interrupt.check()  # a Ctrl-C swallowed during the run (a GC callback) stores nothing
    with run_lock(path):  # one writer at a time (re-entrant for a caller that holds it)
        _clear_broken(path)
        (path / MARKER).unlink(missing_ok=True)  # a rewrite is incomplete until its marker lands
        fsync_dir(path)
        for name, data in blobs.items():
            atomic_write(path / name, data)
        interrupt.check()
        atomic_write(path / MARKER, _dumps(marker))
    return path


def _clear_broken(path: Path) -> None:
    """Under the run's lock, before a write: remove the temporary files of writers that died
    (no other writer of this directory can be alive while we hold its lock) and any entry that
    is a directory where a file belongs (a corrupt store; a write would fail on it forever)."""
    for tmp in path.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)
    for name in (*FILES, MARKER):
        if (path / name).is_dir() and not (path / name).is_symlink():
            shutil.rmtree(path / name)


def entry_status(path: str | os.PathLike) -> str:
    """What a run directory holds: its status when complete ("ok", "diverged", "failed"),
    "incomplete" when it has no marker (being written, or interrupted), "corrupt" when its
    marker or files cannot be read or do not match (garbage, truncated, a directory in place
    of a file). A rerun recomputes incomplete and corrupt entries."""
    path = Path(path)
    complete = _read_complete(path)
    if complete is not None:
        return complete[0]["status"]
    return "corrupt" if (path / MARKER).exists() or (path / MARKER).is_symlink() else "incomplete"


def iter_entries(root: str | os.PathLike) -> Iterator[Path]:
    """Every run directory below ``root``, complete or not: a directory holding any of a run's
    files, its marker or its lock."""
    names = {*FILES, MARKER, LOCK}
    seen = set()
    for p in sorted(Path(root).rglob("*")):
        if p.name in names and p.parent not in seen:
            seen.add(p.parent)
            yield p.parent


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
        raise IncompleteRunError(
            f"{path} holds no complete run (interrupted, still running, or "
            f"corrupted: {MARKER} missing or checksums do not match)"
        )
    marker, blobs = complete  # parse the bytes that were checked: never a mix of two writes
    with np.load(io.BytesIO(blobs["curves.npz"]), allow_pickle=False) as npz:
        curves = {k: npz[k] for k in npz.files}
    return Run(
        path,
        json.loads(blobs["config.json"]),
        curves,
        json.loads(blobs["summary.json"]),
        marker["status"],
        marker["error"],
    )


def should_skip(path: str | os.PathLike, config: Mapping) -> bool:
    """For sweeps: the run at ``path`` is complete, ok or diverged, and has this exact config."""
    marker = _read_marker(Path(path))
    return marker is not None and marker["status"] != "failed" and marker["config_hash"] == config_hash(config)


def pending(root: str | os.PathLike, configs) -> list[dict]:
    """The configs of a sweep that still have to run (not skipped under ``run_dir(root, c)``)."""
    return [c for c in configs if not should_skip(run_dir(root, c), c)]


def iter_runs(root: str | os.PathLike) -> Iterator[Run]:
    """Every complete run below ``root`` (any depth); incomplete directories are ignored."""
    for marker in sorted(Path(root).rglob(MARKER)):
        if is_complete(marker.parent):
            yield load_run(marker.parent)
