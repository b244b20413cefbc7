import json
import os
import subprocess
import tomllib
from pathlib import Path

import jax
import jaxlib
import numpy as np

from rpd.cli import manifest as M
from rpd.io import provenance as P


def _git(cwd, *args):
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True
    )


def test_provenance_names_versions_flags_devices_and_commit(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    p = P.provenance()
    assert (p["jax"], p["jaxlib"], p["numpy"]) == (jax.__version__, jaxlib.__version__, np.__version__)
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert p["python"].count(".") == 2 and p["rpd"] == pyproject["project"]["version"]
    assert p["xla_flags"] == "--xla_cpu_enable_fast_math=false"
    assert p["backend"] == jax.default_backend()
    assert p["devices"] == f"{jax.device_count()} x {jax.devices()[0].device_kind}"
    assert len(p["git_commit"]) == 40 and isinstance(p["git_dirty"], bool)
    assert json.loads(json.dumps(p)) == p  # goes into a manifest or a wandb config as it is


def test_the_cpu_is_named_with_its_vector_extensions_and_cores(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nmodel name\t: Some CPU @ 2.80GHz\nflags\t\t: fpu sse4_2 avx avx2 fma avx512f x\n\n"
        "processor\t: 1\nmodel name\t: Some CPU @ 2.80GHz\nflags\t\t: fpu sse4_2 avx avx2 fma avx512f x\n"
    )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert P.describe_cpu(info) == f"Some CPU @ 2.80GHz; sse4_2 avx avx2 fma avx512f; {cores} cores"
    model, ext, n = P.describe_cpu(tmp_path / "absent").split("; ")
    assert ext == "no extensions listed" and n == f"{cores} cores"
    assert P.provenance()["cpu"] == P.describe_cpu()


def test_xla_flags_unset_is_none(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert P.provenance()["xla_flags"] is None


def test_git_state_dirty_only_for_tracked_changes(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("one")
    _git(tmp_path, "add", "a.txt")
    _git(tmp_path, "commit", "-q", "-m", "first")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.strip()
    (tmp_path / "untracked.txt").write_text("new")
    assert P.git_state(tmp_path) == (head, False) and P.git_commit(tmp_path) == head
    (tmp_path / "a.txt").write_text("two")
    assert P.git_state(tmp_path) == (head, True) and P.git_commit(tmp_path) == f"{head}-dirty"


def test_git_state_outside_a_checkout(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert P.git_state(tmp_path) == (None, None) and P.git_commit(tmp_path) is None
    monkeypatch.setenv("PATH", str(tmp_path))  # no git at all
    assert P.git_state(os.getcwd()) == (None, None)


def test_manifest_records_each_runs_provenance(tmp_path):
    first, second = {"jax": "0.1", "git_commit": "a" * 40}, {"jax": "0.2", "git_commit": "b" * 40}
    M.write_manifest(tmp_path, [M.Report("e1", "missing", None, "none yet", 0.1)], "quick", "a" * 40, first)
    M.write_manifest(tmp_path, [M.Report("e3", "missing", None, "none yet", 0.2)], "quick", "b" * 40, second)
    manifest = json.loads((tmp_path / "MANIFEST.json").read_text())
    assert manifest["provenance"] == second
    # a figure kept from an earlier run keeps the provenance of the run that made it
    assert manifest["figures"]["e1"]["provenance"] == first
    assert manifest["figures"]["e3"]["provenance"] == second


def test_manifest_defaults_to_this_process(tmp_path):
    M.write_manifest(tmp_path, [], "quick", None)
    manifest = json.loads((tmp_path / "MANIFEST.json").read_text())
    assert manifest["provenance"]["jax"] == jax.__version__
    assert manifest["provenance"]["devices"] == P.describe_devices()[1]
