"""Atomic file writes: readers see the old file or the new one, never a part (a temporary file
beside the target, fsync'ed, moved into place with ``os.replace``, the directory fsync'ed). The
store's files (:mod:`rpd.io.store`), Result files, figures' numbers and manifests are written so.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Flush ``path``'s entries (a file created or replaced in it) to disk, where the platform
    can open a directory."""
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
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
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
    fsync_dir(path.parent)
