"""What produced a result: package versions, XLA flags, the devices and the git commit.

    provenance() == {"rpd": "0.1.0", "python": "3.11.7", "jax": "0.10.2", "jaxlib": "0.10.2",
                     "numpy": "2.4.6", "platform": "Linux-...-x86_64-with-glibc2.36",
                     "xla_flags": None, "backend": "gpu", "devices": "1 x NVIDIA H100 80GB HBM3",
                     "git_commit": "<40 hex digits>", "git_dirty": False}

Every value is JSON (str, bool or None), so the dict goes into a manifest, a results store
summary or a wandb config as it is.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections import Counter
from importlib import metadata
from pathlib import Path

from rpd.runtime import programs

REPO = Path(__file__).resolve().parents[2]


def code_identity() -> str:
    """16 hex digits naming the code a result was computed with: every module of rpd (path and
    contents) and the jax, jaxlib and numpy versions. Part of every train run's store key, so a
    change to rpd's code recomputes instead of returning an old result."""
    import hashlib

    import jax
    import jaxlib
    import numpy as np

    parts = (programs.source_hash(), jax.__version__, jaxlib.__version__, np.__version__)
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def git_state(cwd: str | os.PathLike = REPO) -> tuple[str | None, bool | None]:
    """(HEAD's hash, whether tracked files differ from it); (None, None) outside a git checkout
    or without git. Untracked files do not make a checkout dirty."""

    def git(*args):
        return subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()

    try:
        return git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None, None


def git_commit(cwd: str | os.PathLike = REPO) -> str | None:
    """HEAD's hash, with "-dirty" when tracked files have changes; None outside git."""
    head, dirty = git_state(cwd)
    return None if head is None else head + ("-dirty" if dirty else "")


def describe_devices() -> tuple[str, str]:
    """(backend, "2 x NVIDIA H100 80GB HBM3"): JAX's default backend and its devices, counted
    by kind."""
    import jax

    kinds = Counter(d.device_kind for d in jax.devices())
    return jax.default_backend(), ", ".join(f"{n} x {kind}" for kind, n in kinds.items())


def provenance(cwd: str | os.PathLike = REPO) -> dict:
    """Versions of rpd, Python, jax, jaxlib and numpy; the OS; ``XLA_FLAGS`` (None when unset);
    JAX's backend and devices; the git commit of ``cwd`` and whether it was dirty."""
    import jax
    import jaxlib
    import numpy as np

    backend, devices = describe_devices()
    commit, dirty = git_state(cwd)
    return {
        "rpd": _version("rpd"),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "numpy": np.__version__,
        "platform": platform.platform(),
        "xla_flags": os.environ.get("XLA_FLAGS"),
        "backend": backend,
        "devices": devices,
        "git_commit": commit,
        "git_dirty": dirty,
    }
