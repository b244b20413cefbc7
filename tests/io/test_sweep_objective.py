"""A user's objective in the sweep table (docs/api.md#writing-your-own-objective): its own sizes
(n, D, batch size) and options are columns, so runs differing only in
``+objective.options.noise`` are told apart; its config.json holds only what it was called with."""

from __future__ import annotations

import json
import sys

import pytest

from rpd.cli import train
from rpd.io import sweeps

MODULE = """\
import dataclasses

from rpd import objectives


def make(S, n=40, d=12, batch_size=4, noise=0.0, seed=0):
    obj = objectives.random_quadratic(n, d, S, batch_size, seed=seed)
    return dataclasses.replace(obj, name="noisy_quadratic", grad_noise=noise)
"""


@pytest.fixture
def two_runs(tmp_path):
    (tmp_path / "noisy.py").write_text(MODULE)
    sys.path.insert(0, str(tmp_path))
    base = {
        "schedule": {"S": 2, "N": 8},
        "method": {"gamma_lo": -4, "gamma_hi": -4, "seeds": [0]},
        "results_root": str(tmp_path / "results"),
    }
    try:
        runs = [
            train.run({**base, "objective": {"_target_": "noisy.make", "options": {"noise": noise}}})
            for noise in (0.0, 0.5)
        ]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("noisy", None)
    return tmp_path, runs


def test_a_users_objective_shows_its_sizes_and_options(two_runs, capsys):
    tmp_path, runs = two_runs
    assert runs[0].path != runs[1].path
    df = sweeps.load_sweep(tmp_path / "results" / "train").sort_values("options")
    assert list(df["objective"]) == ["noisy_quadratic"] * 2
    assert list(df["n"]) == [40, 40] and list(df["D"]) == [12, 12] and list(df["batch_size"]) == [4, 4]
    assert list(df["options"]) == ["noise=0.0", "noise=0.5"]
    assert sweeps.main(["ls", str(tmp_path / "results" / "train")]) == 0
    out = capsys.readouterr().out
    assert "objective=noisy_quadratic n=40 D=12 batch_size=4" in out  # what both rows share, once
    assert "noise=0.0" in out and "noise=0.5" in out  # and what tells them apart


def test_config_json_holds_only_what_the_factory_was_called_with(two_runs):
    _, runs = two_runs
    key = json.loads((runs[1].path / "config.json").read_text())["objective"]
    assert "grad_noise" not in key  # the factory has no such argument; the run added none
    assert key["options"] == {"noise": 0.5} and key["args"] == {}
    assert (key["name"], key["n"], key["D"], key["batch_size"]) == ("noisy_quadratic", 40, 12, 4)
