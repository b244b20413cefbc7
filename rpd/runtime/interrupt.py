"""Ctrl-C for the command-line entry points: a clean message and exit status 130, no crash.

Ctrl-C raises ``KeyboardInterrupt`` in the main thread. During an XLA compile (or while worker
threads of ``rpd.runtime.concurrency`` still run compiled programs) the interpreter's normal shutdown
after that exception can crash: XLA's threads are still working while Python tears down the
modules they call into. Measured on this repository: a LocalSGD train cell
interrupted 12 s and 20 s in ended in a segmentation fault (exit 139) after the traceback.

The entry points install the handler as their package is imported (``experiments/__init__``),
so a Ctrl-C while hydra and JAX import, or after the run is stored, ends the process at once
with the same line and status. :func:`run_main` catches ``KeyboardInterrupt`` at the outermost frame, after every
``finally`` of the program has run (run locks released, progress bars closed), prints one line,
flushes the standard streams and the logging handlers, and ends the process with
``os._exit(130)`` without the interpreter's teardown. Nothing half-written can be read
afterwards: the store writes a run's files atomically and its completion marker last, and a run
interrupted before its marker is incomplete, so a rerun computes it (``rpd.io.store``). A second
Ctrl-C while exiting changes nothing.

A Ctrl-C can be swallowed. Python raises ``KeyboardInterrupt`` in whatever Python code the
main thread runs when the signal arrives; if that is a garbage-collection callback (JAX
registers one), a ``__del__`` or a weakref callback, the interpreter prints "Exception ignored
in ..." and carries on, and the run would finish and be stored as complete (an audit saw it in 4 of 8
runs of one audit). So :func:`run_main` installs its own handler, which first *records* the
request and then raises: :func:`check` raises again wherever a swallowed interrupt must not be
ignored (the store calls it before it writes a completion marker), and :func:`run_main` exits
130 if the request was recorded, however ``main`` ended.

SIGTERM keeps its default action (the process ends at once, exit status 143 / -15): handling it
in Python would wait for the running XLA call to return, which a batch system's grace period
may not allow; the store is just as safe.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Callable, TypeVar

T = TypeVar("T")

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a process ended by Ctrl-C
MESSAGE = (
    "interrupted (Ctrl-C): runs that had not finished were not stored; "
    "rerunning the same command computes them and reuses the stored ones"
)


_requested = threading.Event()  # set by the handler; never cleared within a process
_working = threading.Event()  # set while run_main runs main(): a Ctrl-C then unwinds it


def _on_sigint(signum, frame):
    if not _working.is_set():  # before main (imports) or after it (stored): nothing in flight
        exit_interrupted()
    _requested.set()  # first, so a KeyboardInterrupt swallowed below is still known
    raise KeyboardInterrupt


def _unraisable(report, _default=sys.unraisablehook) -> None:
    if isinstance(report.exc_value, KeyboardInterrupt) and _requested.is_set():
        return  # recorded: exits 130 later with one line, not a stack from inside a callback
    _default(report)


def install() -> None:
    """Route Ctrl-C through the recording handler (main thread only; a process that ignores
    SIGINT, as a background job or a figure worker does, keeps ignoring it)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _on_sigint)
        sys.unraisablehook = _unraisable


def requested() -> bool:
    """Whether Ctrl-C reached this process since :func:`install`."""
    return _requested.is_set()


def check() -> None:
    """Raise ``KeyboardInterrupt`` if a Ctrl-C was recorded, even one swallowed on its way
    (callers: the store, before a completion marker)."""
    if _requested.is_set():
        raise KeyboardInterrupt


def run_main(main: Callable[[], T]) -> T:
    """``main()``; on Ctrl-C at any moment, print :data:`MESSAGE` and exit with status 130."""
    install()
    _working.set()
    try:
        result = main()
    except KeyboardInterrupt:
        exit_interrupted()
    except BaseException:
        if _requested.is_set():  # whatever the interrupt turned into on its way up
            exit_interrupted()
        raise
    finally:
        _working.clear()
    if _requested.is_set():  # the KeyboardInterrupt was swallowed (a GC callback, a __del__)
        exit_interrupted()
    return result


def exit_interrupted(message: str = MESSAGE, status: int = EXIT_INTERRUPTED):
    """Print ``message`` to stderr, flush, and end the process now (``os._exit``)."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C changes nothing now
        sys.stderr.write(f"\n{message}\n")
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed or broken stream
                pass
        logging.shutdown()  # flush the log files (hydra's job log)
    finally:
        os._exit(status)
