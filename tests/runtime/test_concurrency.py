import threading
import time

import pytest

from rpd.runtime import concurrency


def test_results_in_task_order_first_task_alone_then_overlapping():
    running, alongside = set(), {}
    lock = threading.Lock()

    def task(i):
        def run():
            with lock:
                running.add(i)
            time.sleep(0.2)
            with lock:
                alongside[i] = set(running) - {i}
                running.discard(i)
            return i * i

        return run

    out = list(concurrency.run_concurrently([task(i) for i in range(5)], workers=2))
    assert out == [(i, i * i) for i in range(5)]
    assert alongside[0] == set()  # the first task (the compile) runs alone
    assert any(alongside[i] for i in range(1, 5))  # the rest overlap


def test_first_alone_false_starts_every_task_at_once():
    started = threading.Barrier(3, timeout=5)  # every task waits for the other two

    def task(i):
        def run():
            started.wait()
            return i

        return run

    out = list(concurrency.run_concurrently([task(i) for i in range(3)], workers=3, first_alone=False))
    assert out == [(0, 0), (1, 1), (2, 2)]
    # one worker: one after another, in order, even without first_alone; a single task runs
    assert list(concurrency.run_concurrently([lambda: "a", lambda: "b"], workers=1, first_alone=False)) == [
        (0, "a"),
        (1, "b"),
    ]
    assert list(concurrency.run_concurrently([lambda: "a"], workers=2, first_alone=False)) == [(0, "a")]


def test_errors_propagate_and_workers_are_checked(monkeypatch):
    def boom():
        raise RuntimeError("run failed")

    with pytest.raises(RuntimeError, match="run failed"):
        list(concurrency.run_concurrently([lambda: 1, boom, lambda: 3], workers=2))
    assert list(concurrency.run_concurrently([], workers=2)) == []
    with pytest.raises(ValueError, match="workers"):
        list(concurrency.run_concurrently([lambda: 1], workers=0))
    monkeypatch.setenv("RPD_WORKERS", "3")
    assert concurrency.default_workers() == 3
    monkeypatch.setenv("RPD_WORKERS", "many")
    with pytest.raises(ValueError, match="RPD_WORKERS"):
        concurrency.default_workers()
