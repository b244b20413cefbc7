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
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import numbers
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping, NamedTuple, Sequence

import numpy as np

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


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a part."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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


def _npz_bytes(curves: Mapping[str, Any]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **{str(k): np.asarray(v) for k, v in curves.items()})
    return buf.getvalue()


def save_run(path: str | os.PathLike, config: Mapping, curves: Mapping[str, Any] | None = None,
             summary: Mapping | None = None, status: str = "ok", error: str | None = None) -> Path:
    """Write a run directory; the completion marker goes last. Returns the directory."""
    check_choice("status", status, STATUSES)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).unlink(missing_ok=True)  # a rewrite is incomplete until its marker lands
    _fsync_dir(path)
    blobs = {"config.json": _dumps(config), "summary.json": _dumps(summary or {}),
             "curves.npz": _npz_bytes(curves or {})}
    for name, data in blobs.items():
        atomic_write(path / name, data)
    marker = {"status": status, "error": error, "config_hash": config_hash(config),
              "sha256": {n: hashlib.sha256(b).hexdigest() for n, b in blobs.items()}}
    atomic_write(path / MARKER, _dumps(marker))
    return path


def save_failure(path: str | os.PathLike, config: Mapping, exc: BaseException) -> Path:
    """Record a run that raised: status "failed" with the error text, no curves."""
    return save_run(path, config, status="failed", error=f"{type(exc).__name__}: {exc}")


def _read_marker(path: Path) -> dict | None:
    try:
        marker = json.loads((path / MARKER).read_bytes())
        for name in FILES:
            if hashlib.sha256((path / name).read_bytes()).hexdigest() != marker["sha256"][name]:
                return None
        return marker if marker.get("status") in STATUSES else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def is_complete(path: str | os.PathLike) -> bool:
    """True iff the run directory has a valid marker and its files match their checksums."""
    return _read_marker(Path(path)) is not None


def load_run(path: str | os.PathLike) -> Run:
    """Read a complete run; raises ``IncompleteRunError`` otherwise."""
    path = Path(path)
    marker = _read_marker(path)
    if marker is None:
        raise IncompleteRunError(f"{path} holds no complete run (interrupted, still running, or "
                                 f"corrupted: {MARKER} missing or checksums do not match)")
    with np.load(path / "curves.npz", allow_pickle=False) as npz:
        curves = {k: npz[k] for k in npz.files}
    return Run(path, json.loads((path / "config.json").read_bytes()), curves,
               json.loads((path / "summary.json").read_bytes()), marker["status"], marker["error"])


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
