"""A user's objective (``objective._target_``) is stored under its own name and sizes, and the
worked example of docs/api.md ("Writing your own objective") runs as written."""

import json
import os
import re
import shlex
import subprocess
import sys

import jax
import numpy as np
import pytest
from hydra_helpers import ROOT, resolved

from rpd.cli import footprint, specs, train
from rpd.cli import objectives as objective_of
from rpd.io import sweeps

DOC = (ROOT / "docs" / "api.md").read_text()


def _section_blocks(lang: str) -> list[str]:
    section = DOC.split("## Writing your own objective", 1)[1]
    return re.findall(rf"```{lang}\n(.*?)```", section, re.S)


def _write_module(tmp_path):
    (module,) = _section_blocks("python")
    (tmp_path / "pseudo_huber.py").write_text(module)
    return tmp_path


def test_given_args_are_the_objective_keys_of_the_overrides():
    assert objective_of.given_args(
        ["objective._target_=m.make", "objective.n=40", "+objective.delta=2", "schedule.S=4", "objective.options.x=1"]
    ) == ["delta", "n"]


@pytest.mark.slow
def test_docs_example_runs_from_the_command_line_under_its_own_name_and_sizes(tmp_path):
    """The docs' module and command, run as a user would (hydra's command line): the factory's
    own defaults n = 400, d = 64, batch size 10 (not random_quadratic's 2000, 512, 100) reach the
    key, config.json, summary.json and the sweep table."""
    _write_module(tmp_path)
    (command,) = [line for b in _section_blocks("bash") for line in b.splitlines() if "experiments.train" in line]
    args = shlex.split(command)[3:]  # after "python -m experiments.train"
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}", RPD_JAX_CACHE="0")
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.train", *args, f"results_root={tmp_path / 'results'}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = [p for p in (tmp_path / "results" / "train").iterdir() if p.is_dir()]
    config = json.loads((run / "config.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    assert config["objective"]["_target_"] == "pseudo_huber.make"
    assert (config["objective"]["name"], config["objective"]["n"], config["objective"]["D"]) == (
        "pseudo_huber",
        400,
        64,
    )
    assert config["objective"]["batch_size"] == 10 and config["objective"]["args"] == {}
    assert (summary["objective"], summary["D"], summary["objective/n"], summary["objective/batch_size"]) == (
        "pseudo_huber",
        64,
        400,
        10,
    )
    df = sweeps.load_sweep(tmp_path / "results" / "train")
    assert list(df["objective"]) == ["pseudo_huber"]
    # the curve is the docs' pseudo-Huber loss: its start is f(0) on the factory's own data
    sys.path.insert(0, str(tmp_path))
    try:
        import pseudo_huber

        obj = pseudo_huber.make(S=4)
        np.testing.assert_allclose(summary["f0"], float(obj.full_loss(obj.x0)), rtol=1e-12)  # jit vs eager
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.slow
def test_keys_given_reach_the_factory_and_split_the_key(tmp_path):
    """From Python with a plain dict: the objective keys given are the factory's arguments (n
    and batch_size here, d keeps its default) and the key holds them."""
    _write_module(tmp_path)
    sys.path.insert(0, str(tmp_path))
    try:
        base = {
            "schedule": {"S": 2, "N": 8},
            "method": {"gamma_lo": -3, "gamma_hi": -3},
            "results_root": str(tmp_path / "results"),
        }
        out = train.run({**base, "objective": {"_target_": "pseudo_huber.make", "n": 40, "batch_size": 5}})
        key = json.loads((out.path / "config.json").read_text())["objective"]
        assert key["args"] == {"n": 40, "batch_size": 5} and (key["n"], key["D"], key["batch_size"]) == (40, 64, 5)
        assert out.summary["objective"] == "pseudo_huber" and out.summary["objective/n"] == 40
        other = train.run({**base, "objective": {"_target_": "pseudo_huber.make", "n": 80, "batch_size": 5}})
        assert other.path != out.path and other.summary["objective/n"] == 80
        assert not np.array_equal(other.curves["loss/f_minus_fstar"], out.curves["loss/f_minus_fstar"])
    finally:
        sys.path.remove(str(tmp_path))


def test_a_required_argument_comes_from_the_config(tmp_path):
    """A factory parameter without a default is always given (the config's value); one with a
    default only when the key is given."""
    (tmp_path / "needs_n.py").write_text(
        "from rpd import objectives\n"
        "calls = []\n"
        "def make(S, n, d=12, batch_size=4, seed=3):\n"
        "    calls.append(dict(S=S, n=n, d=d, batch_size=batch_size, seed=seed))\n"
        "    return objectives.random_quadratic(n, d, S, batch_size, seed=seed)\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import needs_n

        o = train.checks.typed({"objective": {"_target_": "needs_n.make", "n": 200, "args": ["batch_size"]}}).objective
        assert objective_of.user_args(o) == {"n": 200, "batch_size": 100}  # n required; batch_size listed
        objective_of.build_objective(o, 2)
        assert needs_n.calls == [dict(S=2, n=200, d=12, batch_size=100, seed=3)]
    finally:
        sys.path.remove(str(tmp_path))


def test_a_bad_results_root_is_refused_before_the_users_factory_runs(tmp_path):
    """The results root is checked before any work, a user's objective factory included: a root
    that cannot be a directory is refused naming results_root, and the factory is never called."""
    (tmp_path / "counted.py").write_text(
        "from rpd import objectives\n"
        "calls = []\n"
        "def make(S, n=40, d=12, batch_size=4, seed=3):\n"
        "    calls.append(S)\n"
        "    return objectives.random_quadratic(n, d, S, batch_size, seed=seed)\n"
    )
    (tmp_path / "a_file").write_text("not a directory")
    sys.path.insert(0, str(tmp_path))
    try:
        import counted

        cfg = {
            "schedule": {"S": 2, "N": 8},
            "objective": {"_target_": "counted.make", "args": []},
            "results_root": str(tmp_path / "a_file" / "results"),
        }
        with pytest.raises(ValueError, match="^results_root=.*cannot be a results store"):
            train.run(cfg)
        assert counted.calls == []
    finally:
        sys.path.remove(str(tmp_path))


def test_the_memory_estimate_reads_the_users_objective_not_the_configs_sizes(tmp_path):
    """objective.d (512 by default) is not what a user's factory builds: the estimate reads the
    built objective's D and data bytes (d = 12 here), named by objective._target_."""
    (tmp_path / "small_d.py").write_text(
        "from rpd import objectives\n"
        "def make(S, n=40, d=12, batch_size=4, seed=0):\n"
        "    return objectives.random_quadratic(n, d, S, batch_size, seed=seed)\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        ts = resolved(
            {
                "objective": {"_target_": "small_d.make", "args": []},
                "schedule": {"S": 2, "N": 8},
                "results_root": str(tmp_path / "results"),
            }
        )
        obj = ts.user_objective
        terms = {t.what: t for t in footprint.job_terms(ts)}
        data = sum(int(x.nbytes) for x in jax.tree_util.tree_leaves(obj.data))
        assert obj.D == 12 and terms["data"].nbytes == data and terms["data"].fields == ("objective._target_",)
        ring = terms["history ring and gradient slots"]
        assert ring.nbytes == len(ts.gammas) * (2 * 2 + 2) * 12 * 8  # noam = S = 2, D = 12, float64
        assert ts.objective.d != 12
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.parametrize(
    "target, why",
    [
        ("rpd.objectives.linear.nope", "module 'rpd.objectives.linear' has no attribute 'nope'"),
        ("rpd.objectives.linear.np", "rpd.objectives.linear.np is a module, not a callable"),
        (".relative", "invalid format: '.relative'"),
    ],
)
def test_a_user_factory_that_cannot_be_found_is_refused_in_one_line(target, why):
    """``objective._target_`` is resolved by the standard library's import-path lookup; what it
    cannot find, or finds but cannot call, is one line naming the field and the reason."""
    assert specs.user_factory({"_target_": "rpd.objectives.linear.random_quadratic"}).__name__ == ("random_quadratic")
    with pytest.raises(ValueError) as err:
        specs.user_factory({"_target_": target})
    assert str(err.value) == f"objective._target_={target} cannot be imported ({why})"
