"""An optimizer is one function: a toy optimizer written and registered in this file alone (its
factory over optax's own transforms, one :class:`~rpd.train.transforms.OptimizerEntry`, one yaml
written at test time) is trained, typed by its signature on the command line, refused a field it
does not take, swept and tabled, run in E12's table, and planned with the state it declares
(one fp32 value per parameter), with no other file of rpd edited
(docs/architecture.md#adding-an-optimizer).

The toy: heavy ball with dampening, t <- β t + (1 - d) g, x <- x - lr t. With d = 0 (its default)
it is optax's momentum, bit for bit: every comparison below against ``momentum`` could fail."""

from __future__ import annotations

import json
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hydra_helpers import TINY_E12, TINY_LINEAR, compose, config_dir, registered, run_registered, sweep_losses

from rpd.cli import plan as plan_entry
from rpd.objectives.linear import random_quadratic
from rpd.studies import make_config
from rpd.studies import optimizers as e12
from rpd.train import methods, optimizers, transforms

NAME = "toy_dampened"
LR = 2.0**-5


# ------------------------------------------------------------------ the toy's module


def toy_dampened(learning_rate: float, beta: float = 0.9, dampening: float = 0.0) -> optax.GradientTransformation:
    """Heavy ball with dampening: t <- beta t + (1 - dampening) g, x <- x - lr t."""
    return optax.chain(optax.scale(1.0 - dampening), optax.trace(decay=beta), optax.scale(-learning_rate))


ENTRY = transforms.OptimizerEntry(NAME, toy_dampened, momentum=("beta",), state=1)  # its trace t

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


toy_registered = registered(register, transforms.OPTIMIZERS, NAME)


toy_configs = config_dir("optimizer", NAME, YAML)


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


@pytest.mark.slow  # a hydra subprocess per call: several seconds on 2 cores
def test_a_field_the_toy_lacks_is_refused_naming_the_toy(toy_configs, tmp_path):
    """``optimizer=momentum optimizer.dampening=0.5``: one line, exit 2, before any work (no
    results folder), naming the optimizer that takes the field."""
    proc = run_registered(
        __file__, ["optimizer=momentum", "optimizer.dampening=0.5", *TINY_LINEAR], tmp_path, toy_configs
    )
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
    proc = run_registered(__file__, args, tmp_path, toy_configs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    losses = sweep_losses(tmp_path / "multirun", "optimizer", (NAME, "momentum"))
    assert losses[NAME] == losses["momentum"]
    (config,) = [p for p in (tmp_path / "results" / "train").glob("*/config.json") if NAME in p.read_text()]
    assert '"dampening": 0.0' in config.read_text() and '"beta": 0.5' in config.read_text()


@pytest.mark.slow
def test_toy_runs_in_e12s_table(toy_registered):
    """E12's table takes any registered optimizer: the toy's rows (d = 0) equal momentum's."""
    cfg = make_config(
        e12.Config, "full", **TINY_E12, optimizers=("momentum", NAME), gamma_exps={"momentum": (-8, -5), NAME: (-8, -5)}
    )
    rows = e12.run(cfg).table
    mine = [r for r in rows if r["optimizer"] == NAME]
    theirs = [r for r in rows if r["optimizer"] == "momentum"]
    assert len(mine) == len(theirs) == len(e12.method_labels((2,), False)) == 6
    for a, b in zip(mine, theirs):
        assert a["method"] == b["method"] and a["status"] == b["status"] == "ok"
        assert (a["loss"], a["gamma"], a["finals"]) == (b["loss"], b["gamma"], b["finals"])


# two layers of 2^28 and 3 * 2^28 values, one per stage of a two-rank 1F1B: each rank's state in
# whole GiB (4 bytes a value: the toy's 1 GiB and 3 GiB, Adam's 2 and 6)
PROFILE = {
    "name": "two_layers",
    "tokens_per_microbatch": 1024,
    "layers": [
        {"name": "a", "params": 2**28, "fwd_s": 1e-3, "act_bytes": 2**20, "out_bytes": 2**10},
        {"name": "b", "params": 3 * 2**28, "fwd_s": 1e-3, "act_bytes": 2**20, "out_bytes": 2**10},
    ],
}
PLAN = ["model=profile", "pipeline.S=2", "pipeline.M=4", "schedules=[1f1b]", "memory_cap=80GiB"]


@pytest.mark.slow  # a hydra subprocess per call: several seconds on 2 cores
def test_the_toy_is_planned_with_the_state_it_declares(toy_configs, tmp_path):
    """``python -m experiments.plan optimizer=<toy>``: its entry's ``state=1`` is what the plan
    counts (docs/plan.md#bytes-per-rank-rpdmodelmemory): 4 bytes per value of each rank, 1 GiB
    and 3 GiB, in the JSON's breakdown and in the printed one."""
    profile = tmp_path / "two_layers.json"
    profile.write_text(json.dumps(PROFILE))
    out = tmp_path / "plan.json"
    args = [f"optimizer={NAME}", *PLAN, f"model.profile={profile}", f"out={out}"]
    proc = run_registered(__file__, args, tmp_path, toy_configs, module="experiments.plan")
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["settings"]["optimizer"] == NAME and data["settings"]["optimizer_states"] == 1
    (row,) = data["rows"]
    assert row["memory"]["optimizer"] == [4.0 * 2**28, 4.0 * 3 * 2**28]
    assert row["memory"]["weights"] == [2.0 * 2**28, 2.0 * 3 * 2**28]  # bf16: the same values, 2 bytes each
    lines = proc.stdout.splitlines()
    head = lines.index(next(x for x in lines if x.startswith("rank ") and "optimizer" in x))
    column = lines[head].split().index("optimizer")
    assert [lines[head + 1 + r].split()[column] for r in (0, 1)] == ["1.00", "3.00"]


def test_the_plan_counts_each_entrys_state_and_refuses_an_undeclared_one(tmp_path):
    """Adam's declared 2 values, momentum's 1 and SGD's 0 per parameter are the bytes the plan
    counts (8, 4, 0 per value); an optimizer that declares none (``nesterov_async``) is refused
    in one line naming the field."""
    profile = tmp_path / "two_layers.json"
    profile.write_text(json.dumps(PROFILE))
    for name, per_value in (("adam", 8.0), ("momentum", 4.0), ("sgd", 0.0)):
        cfg = compose([f"optimizer={name}", *PLAN, f"model.profile={profile}", "out=null"], "plan")
        (row,) = plan_entry.run(cfg)["rows"]
        assert row["memory"]["optimizer"] == [per_value * 2**28, per_value * 3 * 2**28], name
    cfg = compose(["optimizer=nesterov_async", *PLAN, f"model.profile={profile}", "out=null"], "plan")
    with pytest.raises(ValueError, match=r"^optimizer: nesterov_async declares no state per parameter"):
        plan_entry.run(cfg)


def test_each_declared_state_is_what_optax_keeps(toy_registered):
    """An entry's ``state`` is the number of parameter-shaped arrays its optax state holds, for a
    3 x 5 matrix (Muon's Adam on other leaves is masked out there): the toy's trace 1, Adam's two
    moments 2, SGD 0; the numbers the plan counted before entries declared them."""
    x = {"w": jnp.zeros((3, 5))}
    declared = {n: e.state for n, e in transforms.OPTIMIZERS.items() if e.state is not None}
    kept = {}
    for n in declared:
        e = transforms.OPTIMIZERS[n]
        leaves = jax.tree_util.tree_leaves(e.build(e.defaults, vectors=False).init(x))
        kept[n] = sum(getattr(a, "shape", None) == (3, 5) for a in leaves)
    assert kept == declared
    assert declared == {"sgd": 0, "momentum": 1, "nesterov": 1, "adam": 2, "adamw": 2, "nadam": 2, "muon": 1, NAME: 1}
