import json
import os

import numpy as np
import pytest
from omegaconf import OmegaConf

from rpd.io import atomic, store

CFG = {"method": {"name": "pd"}, "schedule": {"S": 8, "N": 400}, "gammas": [0.25, 0.5]}


def _curves():
    return {"loss/f_minus_fstar": np.array([[1.0, 0.5], [np.nan, np.inf]]), "sim_time": np.arange(2, dtype=np.int32)}


def test_roundtrip(tmp_path):
    path = store.save_run(
        tmp_path / "run", CFG, _curves(), {"gamma": np.float64(0.25), "final": float("nan")}, status="diverged"
    )
    assert store.is_complete(path)
    run = store.load_run(path)
    assert run.config == CFG and run.status == "diverged" and run.error is None
    assert run.summary == {"gamma": 0.25, "final": "nan"}  # strict JSON
    np.testing.assert_array_equal(run.curves["loss/f_minus_fstar"], _curves()["loss/f_minus_fstar"])
    assert run.curves["sim_time"].dtype == np.int32
    assert not [p for p in path.iterdir() if p.name.endswith(".tmp")]


def test_failure_records_the_error(tmp_path):
    path = store.save_failure(tmp_path / "run", CFG, FloatingPointError("step 3 blew up"))
    run = store.load_run(path)
    assert run.status == "failed" and run.error == "FloatingPointError: step 3 blew up"
    assert run.curves == {} and not store.should_skip(path, CFG)  # failed runs are rerun


def test_atomic_write_keeps_old_content_when_replace_fails(tmp_path, monkeypatch):
    target = tmp_path / "f.json"
    atomic.atomic_write(target, b"old")

    def boom(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(atomic.os, "replace", boom)
    with pytest.raises(OSError, match="disk gone"):
        atomic.atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]  # temp file removed


@pytest.mark.parametrize("existing", [False, True])
def test_crash_before_marker_leaves_no_complete_run(tmp_path, monkeypatch, existing):
    path = tmp_path / "run"
    if existing:  # a rerun over a complete old result must not leave old marker + new files
        store.save_run(path, CFG, _curves(), {"gamma": 0.5})
    real_replace = os.replace

    def crash_on_marker(src, dst):
        if os.path.basename(dst) == store.MARKER:
            raise KeyboardInterrupt  # a kill between the data files and the marker
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", crash_on_marker)
    with pytest.raises(KeyboardInterrupt):
        store.save_run(path, {**CFG, "seed": 1}, _curves(), {"gamma": 0.25})
    monkeypatch.undo()
    assert (path / "curves.npz").exists() and not store.is_complete(path)
    with pytest.raises(store.IncompleteRunError, match="no complete run"):
        store.load_run(path)
    assert list(store.iter_runs(tmp_path)) == []


def test_files_changed_after_marker_are_detected(tmp_path):
    path = store.save_run(tmp_path / "run", CFG, _curves())
    (path / "curves.npz").write_bytes(b"truncated")
    assert not store.is_complete(path)


def test_config_hash_is_stable_and_order_free():
    a = {"x": 1, "y": {"b": 2.5, "a": [1, 2]}}
    b = {"y": {"a": (np.int64(1), 2), "b": np.float64(2.5)}, "x": 1}
    assert store.config_hash(a) == store.config_hash(b)
    assert store.config_hash(a) != store.config_hash({**a, "x": 2})
    assert store.config_hash(OmegaConf.create(a)) == store.config_hash(a)  # hydra's cfg as is
    assert len(store.config_hash(a)) == 16 and int(store.config_hash(a), 16) >= 0
    with pytest.raises(TypeError, match=r"config\.f"):
        store.config_hash({"f": object()})


def test_sweep_skips_complete_runs_on_rerun(tmp_path):
    configs = [{**CFG, "schedule": {"S": S, "N": 400}} for S in (2, 4, 8)]
    ran = []

    def sweep(fail_S=None):
        for cfg in store.pending(tmp_path, configs):
            ran.append(cfg["schedule"]["S"])
            path = store.run_dir(tmp_path, cfg)
            if cfg["schedule"]["S"] == fail_S:
                store.save_failure(path, cfg, RuntimeError("boom"))
            else:
                store.save_run(path, cfg, _curves(), {"S": cfg["schedule"]["S"]})

    sweep(fail_S=4)
    assert ran == [2, 4, 8]
    sweep()  # only the failed run is redone
    assert ran == [2, 4, 8, 4]
    sweep()
    assert ran == [2, 4, 8, 4]
    assert sorted(r.summary["S"] for r in store.iter_runs(tmp_path)) == [2, 4, 8]
    other = store.run_dir(tmp_path, configs[0])
    assert not store.should_skip(other, configs[1])  # a marker for another config never counts
    marker = json.loads((other / store.MARKER).read_text())
    assert marker["config_hash"] == other.name


def test_check_root_names_the_field_and_creates_a_missing_root(tmp_path):
    """Issue 34, item 2: the results root is checked before any work, naming the field."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(
        ValueError, match=r"^results_root=.*/file/sub cannot be a results store: .*/file is not a directory$"
    ):
        store.check_root(tmp_path / "file" / "sub")
    with pytest.raises(ValueError, match=r"^out=/proc/rpd_missing does not exist and cannot be created"):
        store.check_root("/proc/rpd_missing", field="out")
    assert store.check_root(tmp_path / "new" / "root") is True and not (tmp_path / "new").exists()  # nothing left


def test_broken_entries_are_listed_corrupt_and_rewritten(tmp_path):
    """Issue 34, item 5: a dead writer's temp file is removed by the next write; an entry whose
    files became garbage or a directory is "corrupt", never complete, and a rewrite repairs it."""
    root = tmp_path / "train"
    good = store.save_run(root / "good", {"a": 1}, {"x": [1.0]}, {"s": 1})
    garbage = store.save_run(root / "garbage", {"a": 2}, {"x": [1.0]})
    (garbage / store.MARKER).write_bytes(b"\x00not json")
    dir_in_place = store.save_run(root / "dir", {"a": 3}, {"x": [1.0]})
    (dir_in_place / "curves.npz").unlink()
    (dir_in_place / "curves.npz").mkdir()
    half = root / "half"
    half.mkdir()
    (half / "config.json").write_text("{}")  # a writer killed before its marker
    orphan = good / ".curves.npz.0123456789ab.tmp"
    orphan.write_bytes(b"x" * 1000)
    statuses = {p.name: store.entry_status(p) for p in store.iter_entries(root)}
    assert statuses == {"good": "ok", "garbage": "corrupt", "dir": "corrupt", "half": "incomplete"}
    assert [r.path.name for r in store.iter_runs(root)] == ["good"]
    for path, key in ((garbage, {"a": 2}), (dir_in_place, {"a": 3}), (good, {"a": 1})):
        store.save_run(path, key, {"x": [2.0]})
        assert store.entry_status(path) == "ok" and store.load_run(path).curves["x"].tolist() == [2.0]
    assert not orphan.exists() and not list(root.rglob("*.tmp"))


def test_ls_lists_every_entry_and_an_empty_root_has_no_runs_yet(tmp_path, capsys):
    from rpd.io import sweeps

    (tmp_path / "empty").mkdir()
    assert sweeps.main(["ls", str(tmp_path / "empty")]) == 0
    assert capsys.readouterr().out.strip() == "no runs yet"
    store.save_run(tmp_path / "s" / "a", {"a": 1}, {"x": [1.0]})
    (tmp_path / "s" / "b").mkdir()
    (tmp_path / "s" / "b" / store.MARKER).write_text("garbage")
    df = sweeps.load_sweep(tmp_path / "s")
    assert sorted(df["status"]) == ["corrupt", "ok"]
