"""rpd's public surface (docs/api.md#the-public-surface): the names in the ``__all__`` of its
packages. Every python block of README.md and docs/*.md imports only those; every name listed
exists; and a module written outside the package, with those names only, registers a schedule, an
objective and an optimizer that ``python -m experiments.train`` runs together."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
import sys
import textwrap

import numpy as np
import pytest
from hydra_helpers import ROOT, run_registered

FACES = (
    "rpd.analysis",
    "rpd.io",
    "rpd.io.sweeps",
    "rpd.model",
    "rpd.objectives",
    "rpd.registry",
    "rpd.schedules",
    "rpd.schedules.machinery",
    "rpd.train",
)


def private_imports(code: str) -> list[str]:
    """The imports of rpd in ``code`` that reach past the surface: ``from M import n`` with n not in
    M's ``__all__`` (M without one has no public names), except ``from rpd import <subpackage>``
    (whose own ``__all__`` then holds), and any ``import rpd.<...>`` of a module by path."""
    out = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("rpd.")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rpd":
            module = importlib.import_module(node.module)
            public = set(getattr(module, "__all__", ()))
            for a in node.names:
                sub = node.module == "rpd" and importlib.util.find_spec(f"rpd.{a.name}") is not None
                if a.name not in public and not sub:
                    out.append(f"{node.module}.{a.name}")
    return out


def _documented_blocks() -> dict[str, str]:
    out = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)):
            out[f"{path.relative_to(ROOT)} block {i + 1}"] = block
    return out


def test_documented_examples_import_only_public_names():
    blocks = _documented_blocks()
    assert len(blocks) >= 8  # api.md's, architecture.md's three recipes, running.md's
    found = {where: bad for where, code in blocks.items() if (bad := private_imports(code))}
    assert found == {}


def test_the_check_finds_an_import_past_the_surface():
    assert private_imports("from rpd.schedules.machinery.ir import ops\nfrom rpd.schedules import ops") == [
        "rpd.schedules.machinery.ir.ops"
    ]
    assert sorted(private_imports("from rpd.train.transforms import register\nimport rpd.train.methods")) == [
        "rpd.train.methods",
        "rpd.train.transforms.register",
    ]
    assert private_imports("from rpd import objectives, schedules\nfrom rpd.objectives import on_device") == []
    assert private_imports("from rpd.objectives.base import on_device") == ["rpd.objectives.base.on_device"]


@pytest.mark.parametrize("face", FACES)
def test_every_public_name_exists(face):
    module = importlib.import_module(face)
    assert module.__all__ and [n for n in module.__all__ if not hasattr(module, n)] == []
    assert len(set(module.__all__)) == len(module.__all__)


# ------------------------------------------------------------------ a user's module, outside rpd

USER = textwrap.dedent(
    '''\
    """my_rpd_things.py: a schedule, an objective and an optimizer of one's own, written against
    rpd's public surface only (docs/api.md#the-public-surface)."""
    import dataclasses

    import optax

    from rpd import objectives
    from rpd.registry import register_schedule
    from rpd.schedules import BWD, FWD, Look, ScheduleEntry, Source, Timeline, concat, ops, shift_mb, timed
    from rpd.train import OptimizerEntry, register_optimizer


    @dataclasses.dataclass(frozen=True)
    class Params:
        reverse: bool = False  # each rank's backwards in reverse microbatch order


    def my_flush_order(S, M, reverse):
        order = []
        for r in range(S):
            backs = range(M - 1, -1, -1) if reverse else range(M)
            order.append(ops([(FWD, r, j) for j in range(M)] + [(BWD, r, j) for j in backs]))
        return order


    def my_flush(S: int, N: int, M: int, costs=None, reverse: bool = False) -> Timeline:
        if N % M:
            raise ValueError(f"N must be a whole number of flushes of M microbatches, got N={N}, M={M}")
        one = my_flush_order(S, M, bool(reverse))
        order = concat([shift_mb(one, q * M) for q in range(N // M)])
        return timed("my_flush", order, S=S, N=N, M=M, costs=costs, barrier_every=M, sync=True)


    SCHEDULE = ScheduleEntry(
        "my_flush",
        my_flush,
        ("M",),
        flush=True,
        params_type=Params,
        look=Look("my flush", "#123456", "s"),
        source=Source("tests/test_public_surface.py"),
    )


    def my_quadratic(n, d, S, batch_size, seed=0):
        return dataclasses.replace(objectives.random_quadratic(n, d, S, batch_size, seed=seed), name="my_quadratic")


    OBJECTIVE = objectives.ObjectiveEntry(
        "my_quadratic",
        lambda o, S: my_quadratic(o.n, o.d, S, o.batch_size, seed=o.seed),
        reads=("n", "d"),
        metric=objectives.Metric("loss/my_gap", "my gap"),
        gamma_exps=(-5, -4),
    )


    def my_heavy_ball(learning_rate: float, beta: float = 0.5) -> optax.GradientTransformation:
        return optax.chain(optax.trace(decay=beta), optax.scale(-learning_rate))


    OPTIMIZER = OptimizerEntry("my_heavy_ball", my_heavy_ball, momentum=("beta",), state=1)


    def register():
        register_schedule(SCHEDULE)
        objectives.register(OBJECTIVE)
        register_optimizer(OPTIMIZER)
    '''
)

SCHEDULE_YAML = textwrap.dedent(
    """\
    defaults:
      - /schedule_schema@_here_: my_flush
      - _self_
    name: my_flush
    S: 3
    N: 6
    M: null
    T: null
    """
)

OPTIMIZER_YAML = textwrap.dedent(
    """\
    # @package _global_
    defaults:
      - /optimizer_schema@optimizer: my_heavy_ball
      - _self_
    """
)


@pytest.fixture
def user_module(tmp_path):
    (tmp_path / "my_rpd_things.py").write_text(USER)
    (tmp_path / "cfg" / "schedule").mkdir(parents=True)
    (tmp_path / "cfg" / "optimizer").mkdir()
    (tmp_path / "cfg" / "schedule" / "my_flush.yaml").write_text(SCHEDULE_YAML)
    (tmp_path / "cfg" / "optimizer" / "my_heavy_ball.yaml").write_text(OPTIMIZER_YAML)
    return tmp_path / "my_rpd_things.py"


def test_the_users_module_imports_only_public_names():
    assert private_imports(USER) == []


def test_the_users_module_registers_all_three(user_module, monkeypatch):
    """In process: registered, the schedule times as by hand (S = 3, M = 3 at unit costs: a flush
    of (M + S - 1)·2 = 10 ticks, two in N = 6: T = 20, either backward order), the objective and
    the optimizer are found by name."""
    from rpd import objectives, registry, train

    monkeypatch.syspath_prepend(str(user_module.parent))
    mine = importlib.import_module("my_rpd_things")
    try:
        mine.register()
        for reverse in (False, True):
            tl = registry.build("my_flush", registry.ScheduleParams(S=3, N=6, params={"reverse": reverse}))
            assert tl.T == 20 and tl.M == 3 and tl.synchronous
        assert objectives.OBJECTIVES["my_quadratic"].metric.name == "loss/my_gap"
        assert train.OPTIMIZERS["my_heavy_ball"].defaults == {"beta": 0.5}
    finally:
        registry.SCHEDULES.pop("my_flush", None)
        objectives.OBJECTIVES.pop("my_quadratic", None)
        train.OPTIMIZERS.pop("my_heavy_ball", None)
        sys.modules.pop("my_rpd_things", None)


@pytest.mark.slow  # a hydra subprocess: several seconds on 2 cores
def test_the_users_schedule_objective_and_optimizer_run_from_the_cli(user_module, tmp_path):
    """``python -m experiments.train`` after the module's ``register()``: one run of the user's
    schedule, objective and optimizer together, stored with each one's own fields."""
    args = [
        "method=pipeline",
        "schedule=my_flush",
        "schedule.reverse=true",
        "optimizer=my_heavy_ball",
        "optimizer.beta=0.25",
        "objective.name=my_quadratic",
        "objective.n=32",
        "objective.d=12",
        "objective.batch_size=4",
        "method.seeds=[0]",
    ]
    proc = run_registered(str(user_module), args, tmp_path, tmp_path / "cfg")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (config,) = (tmp_path / "results" / "train").glob("*/config.json")
    stored = json.loads(config.read_text())
    text = json.dumps(stored)
    for needle in ('"my_flush"', '"reverse": true', '"my_heavy_ball"', '"beta": 0.25', '"my_quadratic"'):
        assert needle in text, needle
    summary = json.loads((config.parent / "summary.json").read_text())
    # by hand, as above: two flushes of 10 ticks; the user's metric is the stored curve's key
    assert (summary["schedule"], summary["T"], summary["metric"]) == ("my_flush", 20, "loss/my_gap")
    with np.load(config.parent / "curves.npz") as curves:
        assert "loss/my_gap" in curves.files
