"""A figure maker for a spawned worker that dies (a segfault, as a native library can) on one
name and reports success on the others (tests/experiments/test_reproduce.py)."""

from __future__ import annotations

import os
import signal

from rpd.cli.manifest import Report


def make(name: str, file=None, **_kw) -> Report:
    if name == "dies":
        os.kill(os.getpid(), signal.SIGSEGV)
    return Report(name, "ok", None, None, 0.0)
