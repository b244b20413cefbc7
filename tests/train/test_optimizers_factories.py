"""Optimizers as factories (docs/optimizers.md#named-optimizers-one-factory-each): each name's
hyper-parameters and defaults are its factory's signature, and they are the values every run was
keyed and described by before (so no stored run, meta or figure moves); the config node of
``optimizer=<name>`` is made from the signature; a key the chosen optimizer lacks is one line
naming those that take it; a multirun's shared key of a swept optimizer group is staged."""

import inspect

import pytest
from hydra_helpers import compose

from experiments import compose_check
from rpd.cli import checks, specs
from rpd.train import optimizers, transforms

# what each name pinned before its factory held it (the old transforms.DEFAULTS and yaml files)
PINNED = {
    "sgd": {},
    "momentum": {"beta": 0.9},
    "nesterov": {"beta": 0.9},
    "adam": {"b1": 0.9, "b2": 0.999, "eps": 1e-8, "eps_root": 0.0},
    "adamw": {"b1": 0.9, "b2": 0.999, "eps": 1e-8, "eps_root": 0.0, "weight_decay": 1e-2},
    "nadam": {"b1": 0.9, "b2": 0.999, "eps": 1e-8, "eps_root": 0.0},
    "muon": {
        "beta": 0.95,
        "nesterov": True,
        "ns_steps": 5,
        "ns_coeffs": (3.4445, -4.775, 2.0315),
        "eps": 1e-8,
        "weight_decay": 0.0,
        "adam_b1": 0.9,
        "adam_b2": 0.999,
        "adam_eps_root": 0.0,
        "adam_weight_decay": 0.0,
    },
    "nesterov_async": {
        "b1": 0.9,
        "b2": 0.999,
        "eps": 1e-8,
        "momentum_decay": 0.004,
        "weight_decay": 0.0,
        "beta_max": 0.99,
    },
    "adam_rotated": {"b1": 0.95, "b2": 0.95, "eps": 1e-8, "weight_decay": 0.01, "shampoo_beta": -1.0, "frequency": 10},
}


def test_every_name_pins_what_it_pinned_before():
    assert set(transforms.OPTIMIZERS) == set(PINNED)
    for name, values in PINNED.items():
        opt = optimizers.make(name)
        assert opt.params == values, name
        assert {k: type(v) for k, v in opt.params.items()} == {k: type(v) for k, v in values.items()}, name
        assert optimizers.describe(opt) == {
            "name": name,
            **{k: list(v) if isinstance(v, tuple) else v for k, v in values.items()},
        }


def test_the_signature_is_the_only_declaration():
    """The defaults are read off the factory: a factory's signature default is what make() pins,
    and the delay-aware / shaped facts are the keyword-only parameters the core binds."""
    for name, e in transforms.OPTIMIZERS.items():
        sig = inspect.signature(e.factory).parameters
        assert list(sig)[0] == "learning_rate"
        assert e.defaults == {k: p.default for k, p in sig.items() if k not in ("learning_rate", *transforms.BOUND)}
    assert [n for n, e in transforms.OPTIMIZERS.items() if e.delayed] == ["nesterov_async"]
    assert [n for n, e in transforms.OPTIMIZERS.items() if e.shaped] == ["adam_rotated"]
    assert [n for n, e in transforms.OPTIMIZERS.items() if e.matrices] == ["muon"]
    assert [n for n, e in transforms.OPTIMIZERS.items() if not e.momentum] == ["sgd", "nesterov_async"]


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_config_node_is_the_signature(name):
    """``optimizer=<name>`` composes to the node the run's key was made of before: every pinned
    value, lists for tuples, nothing else set (sgd: the core's original path, None)."""
    node = specs.optimizer_of(compose([f"optimizer={name}"]))
    want = {k: list(v) if isinstance(v, tuple) else v for k, v in PINNED[name].items()}
    assert node == (None if name == "sgd" else {"name": name, **want})


def test_overrides_are_typed_and_foreign_keys_refused_in_one_line():
    node = specs.optimizer_of(compose(["optimizer=adamw", "optimizer.b2=0.95"]))
    assert node["b2"] == 0.95 and node["weight_decay"] == 1e-2
    assert compose_check.check("train", ["optimizer=adam", "optimizer.weight_decay=0.1"]) == (
        "optimizer.weight_decay: optimizer adam has no such parameter; taken by adamw, muon, "
        "nesterov_async, adam_rotated (optimizer=<name>); adam's: b1, b2, eps, eps_root"
    )
    assert compose_check.check("train", ["optimizer.b1=0.5"]).startswith(
        "optimizer.b1: optimizer sgd has no such parameter; taken by adam, adamw, nadam"
    )
    assert compose_check.check("train", ["optimizer=adamw", "optimizer.b2=0.95"]) is None
    # a sweep: every job checked with the key as written, then the key staged for hydra's base compose
    assert compose_check.check("train", ["-m", "optimizer=momentum,nesterov", "optimizer.beta=0.5"]) is None
    assert compose_check.check("train", ["-m", "optimizer=momentum,sgd", "optimizer.beta=0.5"]).startswith(
        "optimizer.beta: optimizer sgd has no such parameter"
    )
    argv = ["-m", "optimizer=momentum,nesterov", "optimizer.beta=0.5", "schedule.S=3", "method.gamma_hi=-4,-3"]
    assert compose_check.staged(argv) == [*argv[:2], "++optimizer.beta=0.5", *argv[3:]]
    assert compose_check.staged(argv[1:]) == argv[1:]  # a single run: as written


def test_a_plain_dict_config_is_typed_by_its_optimizer():
    cfg = checks.typed({"optimizer": {"name": "adam", "b1": 0.8}})
    assert specs.optimizer_of(cfg) == {"name": "adam", **PINNED["adam"], "b1": 0.8}
    with pytest.raises(ValueError, match=r"^optimizer\.b1: optimizer sgd has no such parameter; taken by adam"):
        checks.typed({"optimizer": {"name": "sgd", "b1": 0.8}})
