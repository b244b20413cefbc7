"""An objective owns its parameters: a frozen dataclass beside its builder holds
its config fields and defaults, the config schema is derived from it, and a new objective with a
field of its own is one module and one yaml (docs/architecture.md#adding-an-objective, whose
code block is this file's objective, run as written)."""

from __future__ import annotations

import dataclasses
import inspect
import re

import numpy as np
import pytest
from hydra_helpers import ROOT, compose, config_dir, registered, run_registered

from experiments import compose_check, schemas
from rpd import objectives
from rpd.cli import checks, train
from rpd.io import store
from rpd.objectives.nanochat import nanochat

NAME = "shifted"
YAML = f"defaults:\n  - /objective_schema@_here_: {NAME}\n  - _self_\nname: {NAME}\n"
# The tiny sizes, S = 3 blocks of d = 12
TINY = ["objective.n=32", "objective.d=12", "objective.batch_size=4", "schedule.S=3", "schedule.N=8"]
TINY += ["method=pd", "method.gammas=[0.0625]", "method.stride=1"]


def _docs_block() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text[text.index("## Adding an objective") :]
    (code,) = re.findall(r"```python\n(.*?)```", section[: section.index("\n## ", 3)], flags=re.S)
    return code


def register() -> None:
    """The docs' module, run as written (it registers the objective)."""
    exec(compile(_docs_block(), "docs/architecture.md#adding-an-objective", "exec"), {})


shifted_registered = registered(register, objectives.OBJECTIVES, NAME)
shifted_configs = config_dir("objective", NAME, YAML)


def _f_at_start(n: int, d: int, seed: int, start: float) -> float:
    """f(x0) of the random quadratic at x0 = start · 1, by its definition (docs/science.md#objectives):
    X ~ N(0,1)^{n x d}, then w* ~ N(0, I), from default_rng(seed); f(x) = ||X (x - w*)||² / (2n)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    w_star = rng.standard_normal(d)
    r = X @ (np.full(d, start) - w_star)
    return float(r @ r / (2 * n))


def test_the_old_shared_struct_is_every_objectives_key():
    """The store key of each of rpd's objectives holds the 19 fields of the one config struct
    they all shared before (rpd/cli/config.py's ObjectiveConfig at 31c2acb, but ``args``), a field
    it does not read null: the runs stored before keep their keys."""
    before = "name n d batch_size mu condition_number lam grad_noise seed rotate align text_path seq_len"
    before += " width heads heldout_frac heldout_batches _target_ options"
    for name in ("random_quadratic", "nesterov_quadratic", "logistic_regression", "mlp_chain", "nanochat"):
        cfg = checks.typed(compose([f"objective={name}"]))
        node = dict(cfg.objective)
        node.pop("args")
        key = objectives.OBJECTIVES[name].store_key(node)
        assert sorted(set(key) - {"text_sha256"}) == sorted(before.split()), name
        own = {f.name for f in dataclasses.fields(objectives.OBJECTIVES[name].params_type)}
        assert {k for k, v in key.items() if v is not None} <= own | {
            "name",
            "grad_noise",
            "seed",
            "options",
            "text_sha256",
        }


def test_defaults_are_the_dataclass_s_alone():
    """``objective=<name>`` composes to its dataclass's fields and defaults (its yaml restates
    none), and the LM's builder takes its keywords' defaults from its dataclass."""
    for name, entry in objectives.OBJECTIVES.items():
        node = checks.typed(compose([f"objective={name}"])).objective
        for f in dataclasses.fields(entry.params_type):
            assert node[f.name] == f.default, (name, f.name)
        assert (node.name, node.grad_noise, node._target_, node.args) == (name, 0.0, None, None)
        yaml = (ROOT / "configs" / "objective" / f"{name}.yaml").read_text()
        assert [x for x in yaml.splitlines() if x and not x.startswith((" ", "#", "defaults"))] == [f"name: {name}"]
    signature = inspect.signature(nanochat).parameters
    for f in dataclasses.fields(objectives.NanochatParams):
        if f.name != "text_path":  # the builder's is `path` (or `text`), default None
            assert signature[f.name].default == f.default, f.name


def test_another_objectives_field_is_refused_naming_its_owners():
    """A field only other objectives have is refused in one line naming them, on the command
    line (at compose time) and in a plain dict (rpd.cli.train.run's), before any work."""
    line = "objective.d applies to random_quadratic and nesterov_quadratic and logistic_regression, not to nanochat"
    assert compose_check.check("train", ["objective=nanochat", "objective.d=8"]) == line
    with pytest.raises(ValueError, match=f"^{line}$"):
        checks.typed({"objective": {"name": "nanochat", "d": 8}})
    rotate = "objective.rotate applies to random_quadratic and nesterov_quadratic, not to mlp_chain"
    assert compose_check.check("train", ["objective=mlp_chain", "objective.rotate=true"]) == rotate
    keys = "_target_, args, batch_size, grad_noise, n, name, options, seed, width"  # MLPChainParams' and the shared
    assert compose_check.check("train", ["objective=mlp_chain", "objective.dd=1"]) == (
        f"objective.dd: no such key in objective; keys: {keys}"
    )


def test_a_new_objective_with_its_own_field_is_one_module_and_one_yaml(shifted_registered, shifted_configs, tmp_path):
    """The docs' objective (its dataclass, builder and entry) and its yaml: ``objective=shifted
    objective.start=0.5`` composes typed by its dataclass, trains, and keys the run by ``start``;
    the curve starts at f(x0), computed here by the quadratic's definition."""
    schemas.register()  # the schemas again, the new objective's included (it registered after experiments.schemas)
    search = f"hydra.searchpath=[file://{shifted_configs}]"
    cfg = compose([search, f"objective={NAME}", "objective.start=0.5", *TINY, f"results_root={tmp_path}"])
    assert type(cfg.objective.start) is float and cfg.objective.start == 0.5
    out = train.run(cfg)
    assert out.status == "ok" and out.summary["objective"] == NAME
    key = store.load_run(out.path).config["objective"]
    assert (key["name"], key["start"], key["d"], key["rotate"], key["width"]) == (NAME, 0.5, 12, None, None)
    start = out.curves["loss/shifted_gap"][..., 0]  # (seeds, γ): every one starts at x0
    np.testing.assert_allclose(start, _f_at_start(32, 12, 0, 0.5), rtol=1e-12)
    other = train.run(compose([search, f"objective={NAME}", "objective.start=0.25", *TINY, f"results_root={tmp_path}"]))
    assert other.path != out.path
    np.testing.assert_allclose(other.curves["loss/shifted_gap"][..., 0], _f_at_start(32, 12, 0, 0.25), rtol=1e-12)
    refused = compose_check.check("train", [search, "objective=random_quadratic", "objective.start=1"])
    assert refused == f"objective.start applies to {NAME}, not to random_quadratic"


@pytest.mark.slow
def test_the_new_objective_trains_from_the_command_line(shifted_configs, tmp_path):
    """``python -m experiments.train objective=shifted objective.start=0.5`` by a script that
    registers the docs' module first, its yaml on hydra's search path."""
    proc = run_registered(__file__, [f"objective={NAME}", "objective.start=0.5", *TINY], tmp_path, shifted_configs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = list(store.iter_runs(tmp_path / "results" / "train"))
    assert run.status == "ok" and run.config["objective"]["start"] == 0.5
    np.testing.assert_allclose(run.curves["loss/shifted_gap"][..., 0], _f_at_start(32, 12, 0, 0.5), rtol=1e-12)


def test_a_missing_text_is_refused_naming_the_field_before_any_work(tmp_path):
    """``objective.text_path`` naming no file: one line naming the field, before the run is keyed or
    stored (it was a traceback, a stored failed run, and advice to fetch the default corpus)."""
    missing = tmp_path / "nope.txt"
    cfg = compose(["objective=nanochat", f"objective.text_path={missing}", "schedule.S=3", f"results_root={tmp_path}"])
    with pytest.raises(ValueError, match=f"^objective.text_path: no file at {re.escape(str(missing))} "):
        train.run(cfg)
    assert not (tmp_path / "train").exists()
