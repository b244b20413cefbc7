"""What produced a result: package versions, XLA flags, the devices and the git commit.

    provenance() == {"rpd": "0.1.0", "python": "3.11.7", "jax": "0.10.2", "jaxlib": "0.10.2",
                     "numpy": "2.4.6", "platform": "Linux-...-x86_64-with-glibc2.36",
                     "xla_flags": None, "backend": "gpu", "devices": "1 x NVIDIA H100 80GB HBM3",
                     "cpu": "Intel(R) Xeon(R) Processor @ 2.80GHz; fma avx avx2 avx512f ...; 2 cores",
                     "git_commit": "<40 hex digits>", "git_dirty": False}

``cpu`` is there because float32 results on XLA's CPU backend depend on the host: its kernels are
chosen at run time from the processor's vector extensions and the threads it may use, and the
same commit gave E10's float32 LM losses 0.4 % apart on two hosts
(docs/results.md#e10-every-schedule-trained-loss-against-time-and-memory).

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


# the vector extensions XLA's CPU kernels choose among, as /proc/cpuinfo names them
_SIMD = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile")


def describe_cpu(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> str:
    """ "<model>; <vector extensions>; <n> cores": the host processor, the extensions of
    :data:`_SIMD` it has, and the cores this process may run on (``platform.processor()`` and no
    extensions where ``cpuinfo`` cannot be read, as off Linux)."""
    model, flags = platform.processor() or platform.machine(), list[str]()
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            model = value.strip()
        elif key.strip() in ("flags", "Features") and not flags:
            have = set(value.split())
            flags = [f for f in _SIMD if f in have]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model}; {' '.join(flags) or 'no extensions listed'}; {cores} cores"


def provenance(cwd: str | os.PathLike = REPO) -> dict:
    """Versions of rpd, Python, jax, jaxlib and numpy; the OS; ``XLA_FLAGS`` (None when unset);
    JAX's backend and devices; the host CPU (:func:`describe_cpu`); the git commit of ``cwd`` and
    whether it was dirty."""
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
        "cpu": describe_cpu(),
        "git_commit": commit,
        "git_dirty": dirty,
    }
