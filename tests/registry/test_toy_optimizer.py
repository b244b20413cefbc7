"""An optimizer is one function: a toy optimizer written and registered in this file alone (its
factory over optax's own transforms, one :class:`~rpd.train.transforms.OptimizerEntry`, one yaml
written at test time) is trained, typed by its signature on the command line, refused a field it
does not take, swept and tabled, and run in E12's table, with no other file of rpd edited
(docs/architecture.md#adding-an-optimizer).

The toy: heavy ball with dampening, t <- β t + (1 - d) g, x <- x - lr t. With d = 0 (its default)
it is optax's momentum, bit for bit: every comparison below against ``momentum`` could fail."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import optax
import pytest
from hydra_helpers import ROOT, TINY_LINEAR

from rpd.objectives.linear import random_quadratic
from rpd.studies import make_config
from rpd.studies import optimizers as e12
from rpd.train import methods, optimizers, transforms

NAME = "toy_dampened"
HERE = Path(__file__).resolve().parent
LR = 2.0**-5


# ------------------------------------------------------------------ the toy's module


def toy_dampened(learning_rate: float, beta: float = 0.9, dampening: float = 0.0) -> optax.GradientTransformation:
    """Heavy ball with dampening: t <- beta t + (1 - dampening) g, x <- x - lr t."""
    return optax.chain(optax.scale(1.0 - dampening), optax.trace(decay=beta), optax.scale(-learning_rate))


ENTRY = transforms.OptimizerEntry(NAME, toy_dampened, momentum=("beta",))

YAML = textwrap.dedent(
    f"""\
    # @package _global_
    defaults:
      - /optimizer_schema@optimizer: {NAME}
      - _self_
    method:
      gamma_lo: -11
      gamma_hi: -3
    """
)


def register() -> None:
    transforms.register(ENTRY)


@pytest.fixture
def toy_registered():
    register()
    yield
    del transforms.OPTIMIZERS[NAME]


@pytest.fixture
def toy_configs(tmp_path):
    (tmp_path / "cfg" / "optimizer").mkdir(parents=True)
    (tmp_path / "cfg" / "optimizer" / f"{NAME}.yaml").write_text(YAML)
    return tmp_path / "cfg"


def _cli(args: list[str], configs: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """``python -m experiments.train <args>`` run by a script that registers the toy first."""
    script = (
        f"import sys; sys.path[:0] = [{str(HERE)!r}, {str(HERE.parent)!r}]; "
        "import test_toy_optimizer as t; t.register(); "
        "import runpy; runpy.run_module('experiments.train', run_name='__main__', alter_sys=True)"
    )
    cmd = [
        sys.executable,
        "-c",
        script,
        *args,
        f"hydra.searchpath=[file://{configs}]",
        f"results_root={tmp_path / 'results'}",
        f"hydra.sweep.dir={tmp_path / 'multirun'}",
        f"hydra.run.dir={tmp_path / 'outputs'}",
    ]
    env = dict(os.environ, WANDB_MODE="disabled", PYTHONPATH=str(ROOT))
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


# ------------------------------------------------------------------ the tests


def test_toy_takes_its_signature(toy_registered):
    """Its hyper-parameters and defaults are its signature's; delay_beta1 raises its β."""
    opt = optimizers.make(NAME, dampening=0.5)
    assert opt.params == {"beta": 0.9, "dampening": 0.5}
    assert optimizers.describe(opt) == {"name": NAME, "beta": 0.9, "dampening": 0.5}
    with pytest.raises(ValueError, match=r"has no hyper-parameter \['eps'\] \(its: \['beta', 'dampening'\]\)"):
        optimizers.make(NAME, eps=1e-8)
    with pytest.raises(ValueError, match="beta must lie in"):  # a β is checked by its name, whoever takes it
        optimizers.make(NAME, beta=1.5)
    assert transforms.taking("dampening") == [NAME]


def test_toy_trains_as_written(toy_registered):
    """Minibatch SGD's plan with the toy at d = 0.5 equals the toy's rule written in numpy (one
    state per block, but every block is updated each step: one state on the whole x), and at
    d = 0 it is optax's momentum bit for bit."""
    quad = random_quadratic(n=40, d=12, S=3, batch_size=10, seed=1)
    N, beta, d = 9, 0.9, 0.5
    res = methods.sgd(quad, N, [LR], optimizer={"name": NAME, "dampening": d})
    x, t = np.asarray(quad.x0, dtype=np.float64), np.zeros(quad.D)
    for n in range(N):
        _, g = quad.value_and_grad(quad.data, x, n % quad.n_batches)
        t = beta * t + (1 - d) * np.asarray(g)
        x = x - LR * t
    np.testing.assert_allclose(res.x_final[0], x, rtol=1e-12, atol=1e-15)
    assert res.meta["optimizer"] == {"name": NAME, "beta": beta, "dampening": d}
    plain = methods.sgd(quad, N, [LR], optimizer=NAME).x_final
    np.testing.assert_array_equal(plain, methods.sgd(quad, N, [LR], optimizer="momentum").x_final)


def test_a_field_the_toy_lacks_is_refused_naming_the_toy(toy_configs, tmp_path):
    """``optimizer=momentum optimizer.dampening=0.5``: one line, exit 2, before any work (no
    results folder), naming the optimizer that takes the field."""
    proc = _cli(["optimizer=momentum", "optimizer.dampening=0.5", *TINY_LINEAR], toy_configs, tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"error: optimizer.dampening: optimizer momentum has no such parameter; taken by {NAME} "
        "(optimizer=<name>); momentum's: beta"
    ]
    assert not (tmp_path / "results").exists() and not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_toy_trains_from_the_cli_and_is_tabled_in_a_sweep(toy_configs, tmp_path):
    """``python -m experiments.train -m optimizer=<toy>,momentum optimizer.beta=0.5``: both take β,
    the toy's d defaults to 0, so the two rows land on the same loss; ``rpd.io.sweeps ls`` tables
    both jobs, and the toy's stored meta holds its signature's parameters."""
    args = ["-m", f"optimizer={NAME},momentum", "optimizer.beta=0.5", *TINY_LINEAR]
    proc = _cli(args, toy_configs, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    env = dict(os.environ, WANDB_MODE="disabled", PYTHONPATH=str(ROOT))
    ls = subprocess.run(
        [sys.executable, "-m", "rpd.io.sweeps", "ls", str(tmp_path / "multirun"), "--columns", "optimizer,final_best"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ls.returncode == 0, ls.stderr[-3000:]
    rows = [x.split() for x in ls.stdout.splitlines() if NAME in x or "momentum" in x]
    assert len(rows) == 2, ls.stdout
    losses = {NAME if NAME in r else "momentum": float(r[-1]) for r in rows}
    assert losses[NAME] == losses["momentum"]
    (config,) = [p for p in (tmp_path / "results" / "train").glob("*/config.json") if NAME in p.read_text()]
    assert '"dampening": 0.0' in config.read_text() and '"beta": 0.5' in config.read_text()


@pytest.mark.slow
def test_toy_runs_in_e12s_table(toy_registered):
    """E12's table takes any registered optimizer: the toy's rows (d = 0) equal momentum's."""
    S, N = 4, 24
    cfg = make_config(
        e12.Config,
        "full",
        objectives=("nesterov_quadratic",),
        optimizers=("momentum", NAME),
        H=(2,),
        diloco=False,
        S={"nesterov_quadratic": S},
        N={"nesterov_quadratic": N},
        n=40,
        d=16,
        gamma_exps={"momentum": (-8, -5), NAME: (-8, -5)},
        max_shifts=1,
        points=6,
    )
    rows = e12.run(cfg).table
    mine = [r for r in rows if r["optimizer"] == NAME]
    theirs = [r for r in rows if r["optimizer"] == "momentum"]
    assert len(mine) == len(theirs) == len(e12.method_labels((2,), False)) == 6
    for a, b in zip(mine, theirs):
        assert a["method"] == b["method"] and a["status"] == b["status"] == "ok"
        assert (a["loss"], a["gamma"], a["finals"]) == (b["loss"], b["gamma"], b["finals"])
