"""An objective is one entry: a toy objective written and registered in this file alone (its
factory and one :class:`~rpd.objectives.ObjectiveEntry`) is checked and keyed from the config,
trained from the CLI and tabled in a sweep, trained by the plan (time to a target loss) and in
E10's frontier table, with no other file of rpd edited (docs/architecture.md#adding-an-objective).

The toy: the random quadratic under its own name, with its own metric key and one check of its
own. Its iterates are the random quadratic's, so every comparison below against
``random_quadratic`` could fail."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hydra_helpers import TINY_LINEAR, compose, registered, resolved, run_registered, sweep_losses

from experiments import compose_check
from rpd import objectives
from rpd.cli import checks, train
from rpd.io import store
from rpd.objectives.linear import random_quadratic
from rpd.studies import frontier

NAME = "toy_renamed_quadratic"
METRIC = objectives.Metric("loss/toy_gap", "toy gap")


# ------------------------------------------------------------------ the toy's module


def toy(n: int, d: int, S: int, batch_size: int, seed: int = 0) -> objectives.Objective:
    return dataclasses.replace(random_quadratic(n, d, S, batch_size, seed=seed), name=NAME)


def _check(o, S: int) -> None:
    if int(o.d) < 2 * S:
        raise ValueError(f"objective.d must be >= 2 * schedule.S for {NAME}, got d={o.d}, S={S}")


ENTRY = objectives.ObjectiveEntry(
    NAME,
    lambda o, S: toy(o.n, o.d, S, o.batch_size, seed=o.seed),
    reads=("n", "d"),
    metric=METRIC,
    gamma_exps=(-5, -4),
    check=_check,
)


def register() -> None:
    objectives.register(ENTRY)


toy_registered = registered(register, objectives.OBJECTIVES, NAME)


# ------------------------------------------------------------------ the tests


def test_toy_is_checked_and_keyed_from_its_entry(toy_registered):
    """Its store key keeps the fields it reads and nulls the rest (the quadratic's basis, the
    LM's sizes); its own check refuses, naming the field; an unregistered name is refused in
    one line that lists the registered ones, the toy's included."""
    cfg = checks.typed(compose([*TINY_LINEAR, f"objective.name={NAME}"]))
    key = train.run_config(resolved(cfg))["objective"]
    assert (key["name"], key["n"], key["d"], key["batch_size"]) == (NAME, 32, 12, 4)
    assert key["rotate"] is key["align"] is key["mu"] is key["width"] is key["text_path"] is None
    plain = train.run_config(resolved(checks.typed(compose(TINY_LINEAR))))["objective"]
    assert plain["rotate"] is False and plain["name"] == "random_quadratic"
    with pytest.raises(ValueError, match=rf"^objective\.d must be >= 2 \* schedule\.S for {NAME}, got d=4, S=3$"):
        checks.validate(checks.typed(compose([*TINY_LINEAR, f"objective.name={NAME}", "objective.d=4"])))
    refused = compose_check.check("train", [f"objective.name={NAME}x"])
    assert refused is None  # composes (a name is a string): refused by validate, below
    with pytest.raises(ValueError, match=rf"^objective\.name must be one of .*'{NAME}'.*got '{NAME}x'$"):
        checks.validate(checks.typed(compose([*TINY_LINEAR, f"objective.name={NAME}x"])))


def test_toy_trains_with_its_metric(toy_registered, tmp_path):
    """``train.run``: the curves under the entry's metric key, the random quadratic's numbers."""
    common = [*TINY_LINEAR, f"results_root={tmp_path}", "method=pd"]
    out = train.run(compose([*common, f"objective.name={NAME}"]))
    ref = train.run(compose(common))
    assert out.status == ref.status == "ok"
    assert out.summary["metric"] == METRIC.name and out.summary["objective"] == NAME
    assert METRIC.name in out.curves and "loss/f_minus_fstar" not in out.curves
    np.testing.assert_array_equal(out.curves[METRIC.name], ref.curves["loss/f_minus_fstar"])
    assert out.path != ref.path and store.load_run(out.path).config["objective"]["name"] == NAME


def test_toy_is_a_row_of_e10s_frontier_table(toy_registered):
    """E10 (``rpd.studies.frontier``) builds a registered objective it has no sizes of by its
    entry, at the linear models' sizes: the toy's rows are the random quadratic's."""
    cfg = frontier.Config(
        objectives=(NAME, "random_quadratic"),
        S_values=(2,),
        costs=("F=B",),
        variants=("GPipe", "PipeDream"),
        mb_per_S=4,
        points=4,
        n=40,
        d=8,
        gamma_exps={NAME: (-5, -4), "random_quadratic": (-5, -4)},
    )
    rows = frontier.run(cfg).table
    toy_rows = [r for r in rows if r["objective"] == NAME]
    ref = [r for r in rows if r["objective"] == "random_quadratic"]
    assert [r["schedule"] for r in toy_rows] == ["GPipe", "PipeDream"] and all(r["status"] == "ok" for r in toy_rows)
    for t, r in zip(toy_rows, ref):
        assert t["loss_stable"] == r["loss_stable"] and np.isfinite(t["loss_stable"])


@pytest.mark.slow
def test_toy_trains_from_the_cli_and_is_tabled_in_a_sweep(tmp_path):
    """``python -m experiments.train -m objective.name=<toy>,random_quadratic`` run by a script
    that registers it first; ``python -m rpd.io.sweeps ls`` tables both jobs, the same loss."""
    args = ["-m", f"objective.name={NAME},random_quadratic", *TINY_LINEAR]
    proc = run_registered(__file__, args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    losses = sweep_losses(tmp_path / "multirun", "objective", (NAME, "random_quadratic"))
    assert losses[NAME] == losses["random_quadratic"]


@pytest.mark.slow
def test_toy_is_trained_by_the_plan(tmp_path):
    """``python -m experiments.plan objective=random_quadratic objective.name=<toy>`` run by a
    script that registers it first: the plan trains each row's schedule on the toy, its name in
    the JSON, its losses and times to target the random quadratic's (the same iterates)."""
    common = ["objective=random_quadratic", "objective.n=32", "objective.d=12", "objective.batch_size=4"]
    common += ["model=gpt2_small", "pipeline.S=3", "pipeline.M=4", "schedules=[1f1b,gpipe]", "optimizer=sgd"]
    common += ["train.N=8", "train.gamma_lo=-5", "train.gamma_hi=-4"]
    found = {}
    for name in (NAME, "random_quadratic"):
        out, cwd = tmp_path / f"{name}.json", tmp_path / name
        cwd.mkdir()
        args = [*common, f"objective.name={name}", f"out={out}"]
        proc = run_registered(__file__, args, cwd, module="experiments.plan")
        assert proc.returncode == 0, proc.stderr[-3000:]
        found[name] = json.loads(out.read_text())["time_to_target"]
    assert found[NAME]["objective"] == NAME and found["random_quadratic"]["objective"] == "random_quadratic"
    (toy,), (ref,) = found[NAME]["groups"], found["random_quadratic"]["groups"]
    assert [r["schedule"] for r in toy["rows"]] == ["1f1b", "gpipe"] and toy["blocks"] == 3
    assert toy == ref and all(np.isfinite(r["loss_at_T"]) for r in toy["rows"])
