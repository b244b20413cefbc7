"""wandb artifacts are staged in the run's directory (``<dir>/wandb/``), not in the user's
~/.local/share/wandb or ~/.cache/wandb; a directory the user set is kept."""

import os

import pytest

from rpd.io import tracking


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_DIR", raising=False)
    for var in tracking.ARTIFACT_ENV:
        monkeypatch.delenv(var, raising=False)
    yield home
    tracking.shutdown()


def _files(root):
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs] if root.exists() else []


def test_an_artifact_is_staged_below_the_run_directory(tmp_path, home):
    data = tmp_path / "numbers.json"
    data.write_text('{"x": 1}')
    run = tmp_path / "job"
    log = tracking.WandbLogger(project="p", experiment="E", method="pd", S=2, dir=run)
    log.log_artifact("numbers", "curves", [data])
    log.finish()
    assert {os.environ[v] for v in tracking.ARTIFACT_ENV} == {
        str(run.resolve() / "wandb" / s) for s in ("data", "cache", "artifacts")
    }
    staged = [f for f in _files(run / "wandb") if "offline-run" not in f]
    assert staged, "nothing staged under the run's directory"
    assert not [f for f in _files(home) if "artifact" in f]  # nothing in ~/.local/share/wandb, ~/.cache/wandb


def test_a_directory_the_user_set_is_kept(tmp_path, home, monkeypatch):
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "mine"))
    first = tracking.stage_in(tmp_path / "a")
    second = tracking.stage_in(tmp_path / "b")  # a later run moves what this module set
    assert first["WANDB_CACHE_DIR"] == second["WANDB_CACHE_DIR"] == str(tmp_path / "mine")
    assert second["WANDB_DATA_DIR"] == str((tmp_path / "b").resolve() / "wandb" / "data")
