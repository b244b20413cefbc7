"""Independent compiled runs side by side on host threads.

XLA executes a CPU scan like ours on one core (its small GEMMs are not split across threads),
so a sweep of independent runs -- RPD for several δ and seeds -- leaves the other cores idle.
Calling the compiled program from several host threads overlaps the runs: JAX releases the
GIL while XLA executes. Measured on the 2-core machine (``benchmarks/bench_core.py e``,
BENCHMARKS.md): E1's five RPD runs take 4.15 s on two threads against 7.85 s one after another.
Results do not depend on the number of workers: every run is deterministic and independent.

The first task runs alone so that the program all tasks share is compiled exactly once; the
rest then go to the thread pool. On a GPU the same code queues the runs on the device.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable, Iterator, Sequence, TypeVar

from rpd.validation import check_int

T = TypeVar("T")


def default_workers() -> int:
    """$RPD_WORKERS if set, else the number of CPU cores this process may use, at most 4."""
    env = os.environ.get("RPD_WORKERS")
    if env:
        if not env.strip().isdigit() or int(env) < 1:
            raise ValueError(f"RPD_WORKERS must be a positive integer, got {env!r}")
        return int(env)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(4, cores or 1))


def _result(fut: Future):
    """``fut.result()``, waiting in short slices: Ctrl-C's signal may be delivered to a worker
    thread, and a main thread blocked in one long wait would notice it only when the task ends."""
    while not wait([fut], timeout=0.1).done:
        pass
    return fut.result()


def run_concurrently(
    tasks: Sequence[Callable[[], T]], *, workers: int | None = None, first_alone: bool = True
) -> Iterator[tuple[int, T]]:
    """Run ``tasks`` (no-argument callables), yielding ``(index, result)`` in order of index.

    The first task runs alone (it compiles what the others reuse), then up to ``workers``
    tasks run at a time; ``first_alone=False`` starts them all at once (tasks that share no
    program). An exception in a task is raised here, at its index."""
    workers = default_workers() if workers is None else check_int("workers", workers)
    if workers == 1 or len(tasks) <= 1:
        for i, task in enumerate(tasks):
            yield i, task()
        return
    start = 1 if first_alone else 0
    if first_alone:
        yield 0, tasks[0]()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rpd-run")
    futures = [pool.submit(task) for task in tasks[start:]]
    interrupted = False
    try:
        for i, fut in enumerate(futures, start=start):
            yield i, _result(fut)
    except KeyboardInterrupt:
        # Ctrl-C: drop the queued tasks and do not wait for the running ones (a run can take
        # minutes); rpd.runtime.interrupt.run_main then ends the process without joining them.
        interrupted = True
        raise
    finally:
        for fut in futures:
            fut.cancel()
        pool.shutdown(wait=not interrupted, cancel_futures=True)
