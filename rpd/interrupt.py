"""Ctrl-C for the command-line entry points: a clean message and exit status 130, no crash.

Ctrl-C raises ``KeyboardInterrupt`` in the main thread. During an XLA compile (or while worker
threads of ``rpd.concurrency`` still run compiled programs) the interpreter's normal shutdown
after that exception can crash: XLA's threads are still working while Python tears down the
modules they call into. Measured on this repository (issue 13): a LocalSGD train cell
interrupted 12 s and 20 s in ended in a segmentation fault (exit 139) after the traceback.

:func:`run_main` therefore catches ``KeyboardInterrupt`` at the outermost frame, after every
``finally`` of the program has run (run locks released, progress bars closed), prints one line,
flushes the standard streams and the logging handlers, and ends the process with
``os._exit(130)`` without the interpreter's teardown. Nothing half-written can be read
afterwards: the store writes a run's files atomically and its completion marker last, and a run
interrupted before its marker is incomplete, so a rerun computes it (``rpd.store``). A second
Ctrl-C while exiting changes nothing.

SIGTERM keeps its default action (the process ends at once, exit status 143 / -15): handling it
in Python would wait for the running XLA call to return, which a batch system's grace period
may not allow; the store is just as safe.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Callable, TypeVar

T = TypeVar("T")

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a process ended by Ctrl-C
MESSAGE = ("interrupted (Ctrl-C): runs that had not finished were not stored; "
           "rerunning the same command computes them and reuses the stored ones")


def run_main(main: Callable[[], T]) -> T:
    """``main()``; on ``KeyboardInterrupt``, print :data:`MESSAGE` and exit with status 130."""
    try:
        return main()
    except KeyboardInterrupt:
        exit_interrupted()


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
