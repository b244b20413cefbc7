"""A run is resolved once and passed down (docs/architecture.md#adding-an-objective): one
``experiments.train.run`` types and checks its config and resolves it exactly once into a
``TrainSpec`` (its RunSpec from ``checks.validate``, the γ grid, the seeds, the selector, the cut,
the store's root, the logger); the store key, the training and wandb all read that record, never
the config; no module-level cache serves one job's spec to the next."""

from __future__ import annotations

import dataclasses

import pytest
from hydra_helpers import TINY_LINEAR, compose, resolved
from omegaconf import DictConfig

from rpd import registry
from rpd.cli import checks, footprint, specs, train
from rpd.cli import config as C
from rpd.io import store
from rpd.runtime import budget


def test_each_run_resolves_its_spec_once(tmp_path, monkeypatch):
    calls = []
    resolve = specs._resolve

    def counted(cfg):
        calls.append(cfg.schedule.N)
        return resolve(cfg)

    monkeypatch.setattr(specs, "_resolve", counted)
    cfg = [*TINY_LINEAR, f"results_root={tmp_path}", "method=pd"]
    first = train.run(compose(cfg))
    assert first.status == "ok" and not first.skipped and calls == [8]
    again = train.run(compose(cfg))  # the stored run is found (the key needs the spec): resolved again
    assert again.skipped and calls == [8, 8]
    other = train.run(compose([*cfg, "schedule.N=12"]))
    assert other.status == "ok" and calls == [8, 8, 12]


def test_the_resolved_job_holds_checked_plain_values():
    """The record a job is resolved into: the grid 2^lo..2^hi, the seeds, the selector's rule, the
    protocol-(i) cut, the costs as a table cell, typed objective and logger nodes, and the whole
    config as plain values; nothing in it is a config node."""
    ts = resolved(
        compose(
            [
                *TINY_LINEAR,
                "method.seeds=[3,1]",
                "method.selector=stable",
                "compare_T=20",
                "schedule.cut=authors",
                "costs=b2f",
                "experiment_name=x",
            ]
        )
    )
    assert isinstance(ts, specs.TrainSpec) and isinstance(ts.run, registry.RunSpec)
    assert ts.gammas == (2.0**-5, 2.0**-4) and ts.seeds == (3, 1) and ts.selector == "stable"
    assert (ts.compare_T, ts.cut, ts.costs_label, ts.experiment) == (20, "authors", "B=2 I=1 W=1", "x")
    assert isinstance(ts.objective, C.ObjectiveConfig) and type(ts.objective).__name__ == "Objective_random_quadratic"
    assert (ts.objective.n, ts.objective.d) == (32, 12)
    assert type(ts.logger) is C.LoggerConfig and ts.logger.kind is C.LoggerKind.none
    assert ts.entry.metric.name == "loss/f_minus_fstar" and ts.blocks == 3
    assert ts.config["method"]["seeds"] == [3, 1] and ts.config["costs"]["B"] == 2
    assert not any(isinstance(getattr(ts, f.name), DictConfig) for f in dataclasses.fields(ts))


def test_the_steps_below_run_read_the_resolved_job_only(tmp_path, monkeypatch):
    """The training step gets the TrainSpec (no config) and the run is stored under the key
    cut from it: the stored config.json is ``run_config`` of that record."""
    seen = []
    real = train.train

    def spy(*args, **kwargs):
        seen.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(train, "train", spy)
    cfg = compose([*TINY_LINEAR, f"results_root={tmp_path}", "method=sgd"])
    out = train.run(cfg)
    ((args, kwargs),) = seen
    assert len(args) == 1 and not kwargs and isinstance(args[0], specs.TrainSpec)
    assert store.load_run(out.path).config == train.run_config(resolved(cfg))


def test_diloco_options_are_refused_by_the_registry_for_a_method_without_replicas():
    """The registry, not the entry point, refuses DiLoCo's options for a method that does not
    read them (naming the method); plain averaging and keep are no choice to refuse."""
    params = registry.ScheduleParams(S=3, N=8)
    for method in ("pd", "rpd", "sgd"):
        with pytest.raises(
            ValueError, match=f"^outer_optimizer=nesterov: applies to method=localsgd .*method={method}$"
        ):
            registry.prepare(method, None, params, registry.MethodOptions(outer_optimizer="nesterov"))
        with pytest.raises(ValueError, match=f"^inner_state=reset: applies to method=localsgd .*method={method}$"):
            registry.prepare(method, None, params, registry.MethodOptions(inner_state="reset"))
        spec = registry.prepare(method, None, params, registry.MethodOptions(outer_optimizer="sgd", inner_state="keep"))
        assert spec.options.outer_optimizer is None and spec.options.inner_state is None


def test_the_memory_estimate_reads_the_resolved_job(monkeypatch):
    """The estimate is made once, from the TrainSpec (the config stops there): the schedule's op
    table of PD at S = 3, N = 8 is 3 N S ops of OP_TABLE_BYTES each, shown with the user's values."""
    seen = []
    real = footprint.check
    monkeypatch.setattr(footprint, "check", lambda ts: (seen.append(ts), real(ts))[1])
    ts = resolved(compose([*TINY_LINEAR, "method=pd"]))
    assert seen == [ts]
    (table,) = [t for t in footprint.job_terms(ts) if t.what == "schedule op table"]
    assert table.nbytes == 3 * 8 * 3 * footprint.OP_TABLE_BYTES
    assert table.fields == ("schedule.N", "schedule.S") and table.values == ("schedule.N=8", "schedule.S=3")


def test_the_checks_resolve_the_run_and_the_job_refuses_its_size(tmp_path):
    """``checks.validate`` checks values and resolves the run (no estimate: it has no job yet);
    ``train.run`` refuses the resolved job's size before any work, naming the fields."""
    cfg = checks.typed(compose([*TINY_LINEAR, "schedule.N=100000000"]))
    assert checks.validate(cfg).pipeline.params.N == 100000000
    with pytest.raises(
        budget.TooLargeError,
        match=r"^schedule\.N, schedule\.S too large \(schedule\.N=100000000, schedule\.S=3\): .* \(schedule op table: ",
    ):
        train.run(compose([*TINY_LINEAR, "schedule.N=100000000", f"results_root={tmp_path}"]))
    assert not (tmp_path / "train").exists()
