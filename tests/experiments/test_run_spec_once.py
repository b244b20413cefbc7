"""A run is resolved once and passed down (docs/architecture.md#adding-an-objective): one
``experiments.train.run`` resolves its (method, schedule, options, costs) exactly once, in
``checks.validate``, and the checks, the store key and the training all take that RunSpec; no
module-level cache serves one job's spec to the next."""

from __future__ import annotations

from hydra_helpers import TINY_LINEAR, compose

from rpd.cli import specs, train


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
