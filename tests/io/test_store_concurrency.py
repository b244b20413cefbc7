"""The results store with two writers of one key, readers that cannot write, and the umask:
real processes race on one run directory."""

import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rpd.io import atomic, store, sweeps

ROOT = Path(__file__).resolve().parents[2]
CFG = {"method": {"name": "pd"}, "schedule": {"S": 4}}


def _python(code: str, *args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# A writer as experiments.train / experiments.figure do it: lock, check, compute, save.
WRITER = """
    import sys, time
    from pathlib import Path
    import numpy as np
    from rpd.io import store
    path, go, who = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    cfg = {"method": {"name": "pd"}, "schedule": {"S": 4}}
    while not go.exists():
        time.sleep(0.005)
    with store.run_lock(path):
        if store.should_skip(path, cfg):
            print("skip", store.load_run(path).summary["writer"])
            sys.exit(0)
        time.sleep(0.5)  # the computation
        store.save_run(path, cfg, {"x": np.full(1000, float(who))}, {"writer": who})
        print("wrote", store.load_run(path).summary["writer"])
"""


def test_two_processes_on_one_key_compute_once_and_the_second_reuses(tmp_path):
    path, go = tmp_path / "store" / store.config_hash(CFG), tmp_path / "go"
    procs = [_python(WRITER, path, go, who) for who in (1, 2)]
    time.sleep(0.3)
    go.touch()  # both start together
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        outs.append(out.split())
    assert sorted(o[0] for o in outs) == ["skip", "wrote"]  # one computes, the other waits, reuses
    winner = next(o[1] for o in outs if o[0] == "wrote")
    assert all(o[1] == winner for o in outs)
    run = store.load_run(path)
    assert run.summary == {"writer": winner} and (run.curves["x"] == float(winner)).all()
    assert not [p for p in path.iterdir() if p.name.endswith(".tmp")]


# Two writers that rewrite one key over and over (as with force=true), a reader alongside.
REWRITER = """
    import sys, time
    from pathlib import Path
    import numpy as np
    from rpd.io import store
    path, who, go = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    cfg = {"method": {"name": "pd"}, "schedule": {"S": 4}}
    Path(f"{go}.ready{who}").touch()
    while not go.exists():
        time.sleep(0.005)
    i, until = 0, time.time() + 2.0
    while time.time() < until:
        store.save_run(path, cfg, {"who": np.full(2000, who), "i": np.array(i)},
                       {"who": who, "i": i})
        i += 1
    print(i)
"""


@pytest.mark.slow
def test_reads_during_two_rewriting_processes_never_mix_writes(tmp_path):
    path, go = tmp_path / "run", tmp_path / "go"
    store.save_run(path, CFG, {"who": np.full(2000, 0), "i": np.array(0)}, {"who": 0, "i": 0})
    procs = [_python(REWRITER, path, who, go) for who in (1, 2)]
    t0 = time.time()
    while not all(Path(f"{go}.ready{who}").exists() for who in (1, 2)):
        assert time.time() - t0 < 60 and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.touch()
    reads, incomplete, seen = 0, 0, set()
    while any(p.poll() is None for p in procs):
        try:
            run = store.load_run(path)
        except store.IncompleteRunError:
            incomplete += 1
            continue
        reads += 1
        who, i = run.summary["who"], run.summary["i"]  # summary and curves of one write
        assert (run.curves["who"] == who).all() and int(run.curves["i"]) == i
        seen.add(who)
    writes = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        writes.append(int(out))
    assert reads > 0 and min(writes) > 0, (reads, incomplete, writes)
    assert seen & {1, 2}, seen  # the reader saw the rewrites, not only the first run
    assert store.is_complete(path)


def test_run_lock_serialises_threads_and_is_reentrant(tmp_path):
    path, inside, overlap = tmp_path / "run", [], []

    def writer(k):
        with store.run_lock(path):
            inside.append(k)
            overlap.append(len(inside))
            time.sleep(0.05)
            store.save_run(path, CFG, {"k": np.array(k)}, {"k": k})  # takes the lock again
            inside.remove(k)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert overlap == [1, 1, 1, 1]
    run = store.load_run(path)
    assert int(run.curves["k"]) == run.summary["k"]


def test_reading_never_writes(tmp_path, monkeypatch):
    """A reader without write permission reads complete results: no lock, no file created."""
    path = store.save_run(tmp_path / "run", CFG, {"x": np.arange(3)}, {"a": 1})
    real_open = os.open

    def read_only_open(file, flags, *args, **kwargs):
        assert not flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT), f"reader opened {file} to write"
        return real_open(file, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_open)
    before = sorted(p.name for p in path.iterdir())
    assert store.load_run(path).summary == {"a": 1}
    assert store.is_complete(path) and store.should_skip(path, CFG)
    assert len(list(store.iter_runs(tmp_path))) == 1
    assert sorted(p.name for p in path.iterdir()) == before


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_files_respect_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        path = store.save_run(tmp_path / "run", CFG, {"x": np.arange(3)}, {"a": 1})
        atomic.atomic_write(tmp_path / "figure.json", b"{}")
        sweeps.link_job(tmp_path / "job", path, status="ok")
    finally:
        os.umask(old)
    files = [path / n for n in (*store.FILES, store.MARKER, store.LOCK)]
    files += [tmp_path / "figure.json", tmp_path / "job" / sweeps.JOB_LINK]
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~umask, f
    assert stat.S_IMODE(path.stat().st_mode) == 0o777 & ~umask


def test_a_user_who_cannot_write_the_store_still_reuses_its_runs(tmp_path, monkeypatch):
    """experiments.train / figure check for a stored run inside run_lock: on a store this user
    cannot write (no lock file can be created) the check runs unlocked and reuses the run."""
    path = store.save_run(tmp_path / "run", CFG, {"x": np.arange(3)}, {"a": 1})
    (path / store.LOCK).unlink()
    real_open = os.open

    def no_create(file, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_create)
    with store.run_lock(path):
        assert store.should_skip(path, CFG)
        assert store.load_run(path).summary == {"a": 1}
