"""The figure runner and the reproduce-paper-figures script (experiments.figure,
experiments.reproduce_paper_figures), on a fake registered study and, in the slow suite, on
every real one in quick mode."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from experiments import reproduce_paper_figures as R
from rpd import studies
from rpd.cli import figure as F
from rpd.cli import report
from rpd.io import store
from rpd.results import StudyOutput


@dataclasses.dataclass(frozen=True)
class FakeConfig:
    steps: int = 5
    scale: float = 2.0


def _fake_module(name: str, calls: list, fail: bool = False) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.Config = FakeConfig
    mod.QUICK = {"steps": 3}
    mod.n_steps = lambda cfg: cfg.steps

    def run(cfg, progress=None):
        calls.append(cfg)
        for i in range(cfg.steps):
            if progress is not None:
                progress(f"fake step {i}")
        if fail:
            raise RuntimeError("the fake study broke")
        x = np.arange(cfg.steps, dtype=np.float64)
        return StudyOutput(
            arrays={"x": x, "y": cfg.scale * x},
            summary={"slope": cfg.scale, "steps": cfg.steps},
            table=[{"quantity": "slope", "measured": cfg.scale, "paper": 2.0}],
        )

    def figure(out, path):
        calls.append(("figure", {k: np.asarray(v) for k, v in out.arrays.items()}, out.table))
        path.write_bytes(b"\x89PNG fake")

    mod.run, mod.figure = run, figure
    return mod


@pytest.fixture
def fakes(monkeypatch):
    """Registers fake_ok (works), fake_broken (raises) and fake_ghost (module absent)."""
    calls = {"fake_ok": [], "fake_broken": []}
    for name, fail in (("fake_ok", False), ("fake_broken", True)):
        modname = f"tests_fake_studies.{name}"
        monkeypatch.setitem(sys.modules, modname, _fake_module(modname, calls[name], fail))
        monkeypatch.setitem(studies.REGISTRY, name, modname)
    monkeypatch.setitem(studies.REGISTRY, "fake_ghost", "rpd.studies.fake_ghost_not_written")
    return calls


def test_reproduce_writes_figures_manifest_table_and_progress(fakes, tmp_path):
    out, res = tmp_path / "paper_figures", tmp_path / "results"
    log = io.StringIO()
    reports = R.reproduce(
        ["fake_ok", "fake_broken", "fake_ghost"],
        "quick",
        results_root=str(res),
        out_dir=str(out),
        messages={"fake_ok": "slope is two"},
        file=log,
    )
    assert [r.status for r in reports] == ["ok", "failed", "missing"]
    assert "the fake study broke" in reports[1].error and "not in the repository" in reports[2].error

    # the study ran once at quick size; the figure got the arrays read back from the store
    (cfg, (tag, arrays, table)) = fakes["fake_ok"]
    assert cfg == FakeConfig(steps=3) and tag == "figure"
    np.testing.assert_array_equal(arrays["y"], [0.0, 2.0, 4.0])
    assert table == [{"quantity": "slope", "measured": 2.0, "paper": 2.0}]
    assert (out / "fake_ok.png").read_bytes().startswith(b"\x89PNG")

    numbers = json.loads((out / "fake_ok.json").read_text())
    assert numbers["size"] == "quick" and numbers["config"] == {"steps": 3, "scale": 2.0}
    assert numbers["summary"] == {"slope": 2.0, "steps": 3} and numbers["table"] == table

    manifest = json.loads((out / "MANIFEST.json").read_text())["figures"]
    ok = manifest["fake_ok"]
    assert (ok["status"], ok["png"], ok["numbers"], ok["size"]) == ("ok", "fake_ok.png", "fake_ok.json", "quick")
    assert ok["config"] == {"steps": 3, "scale": 2.0} and ok["runtime_s"] >= 0
    assert set(ok["programs"]) == {"compiled", "from_cache", "seconds"}  # counted while the study ran
    assert numbers["programs"] == ok["programs"]
    assert "git_commit" in ok
    assert manifest["fake_broken"]["status"] == "failed" and manifest["fake_ghost"]["status"] == "missing"

    text = log.getvalue()
    assert "figures" in text and "fake step 2" in text  # the outer bar and the study's progress
    assert "[ok] fake_ok" in text and "paper: slope is two" in text
    assert "quantity" in text and "measured" in text  # the study's table is printed
    assert "1/3 figures made; not made: fake_broken, fake_ghost" in text

    # the failure is in the store; a failed output is never drawn
    broken = [r for r in store.iter_runs(res) if r.status == "failed"]
    assert len(broken) == 1 and "the fake study broke" in broken[0].error


def test_a_change_to_the_code_recomputes_the_stored_study(fakes, tmp_path, monkeypatch):
    """A study's output is keyed by the code too (docs/running.md#one-figure-or-all-of-them): after a change to rpd
    the same figure is computed again, never drawn from the old code's output."""
    from rpd.cli import figure as F

    kw = dict(results_root=str(tmp_path / "r"), out_dir=str(tmp_path / "pf"), file=io.StringIO())
    assert R.reproduce(["fake_ok"], **kw)[0].status == "ok"
    n_runs = sum(isinstance(c, FakeConfig) for c in fakes["fake_ok"])
    monkeypatch.setattr(F, "code_identity", lambda: "another-code")
    again = R.reproduce(["fake_ok"], **kw)[0]
    assert again.status == "ok" and not again.outcome.cached
    assert sum(isinstance(c, FakeConfig) for c in fakes["fake_ok"]) == n_runs + 1


def test_rerun_reuses_the_stored_study_unless_forced(fakes, tmp_path):
    kw = dict(results_root=str(tmp_path / "r"), out_dir=str(tmp_path / "pf"), file=io.StringIO())
    assert R.reproduce(["fake_ok"], **kw)[0].status == "ok"
    n_runs = sum(isinstance(c, FakeConfig) for c in fakes["fake_ok"])
    again = R.reproduce(["fake_ok"], **kw)[0]
    assert again.status == "reused" and again.outcome.cached
    assert sum(isinstance(c, FakeConfig) for c in fakes["fake_ok"]) == n_runs  # not recomputed
    assert (tmp_path / "pf" / "fake_ok.png").exists()  # but redrawn
    forced = R.reproduce(["fake_ok"], force=True, **kw)[0]
    assert forced.status == "ok" and sum(isinstance(c, FakeConfig) for c in fakes["fake_ok"]) == n_runs + 1
    full = R.reproduce(["fake_ok"], "full", **kw)[0]
    assert full.outcome.config == {"steps": 5, "scale": 2.0} and full.outcome.size == "full"
    manifest = json.loads((tmp_path / "pf" / "MANIFEST.json").read_text())["figures"]
    assert manifest["fake_ok"]["size"] == "full"


def test_one_figure_joins_the_manifest_of_its_directory(fakes, tmp_path, capsys):
    """``python -m experiments.figure`` (``run_and_report``) merges its figure into
    ``<out_dir>/MANIFEST.json`` next to the figures already there, with its provenance."""
    out = tmp_path / "pf"
    kw = dict(results_root=str(tmp_path / "r"), out_dir=str(out))
    R.reproduce(["fake_broken"], file=io.StringIO(), **kw)
    F.run_and_report(R.figure_config("fake_ok", "full", force=False, **kw))
    assert "fake_ok (full" in capsys.readouterr().out
    figures = json.loads((out / "MANIFEST.json").read_text())["figures"]
    assert set(figures) == {"fake_ok", "fake_broken"}  # merged, not replaced
    ok = figures["fake_ok"]
    assert (ok["status"], ok["size"], ok["config"]) == ("ok", "full", {"steps": 5, "scale": 2.0})
    assert ok["provenance"]["jax"] and ok["png"] == "fake_ok.png"


def test_study_config_overrides_and_unknown_fields(fakes):
    study = F.resolve("fake_ok")
    assert F.study_config(study, "quick", {"scale": 3.0}) == FakeConfig(steps=3, scale=3.0)
    with pytest.raises(ValueError, match="unknown config key study.overrides.bogus: fake_ok's fields are scale, steps"):
        F.study_config(study, "quick", {"bogus": 1})
    with pytest.raises(TypeError, match=r"study.overrides.steps must be like its default 5, got 2.5"):
        F.study_config(study, "quick", {"steps": 2.5})
    assert F.study_config(study, "quick", {"scale": 3}).scale == 3  # an int where a float is fine
    with pytest.raises(ValueError, match="study.name must be one of"):
        F.resolve("no_such_figure")


def test_only_selects_figures_by_tag_or_name():
    assert R.select("e3,e1") == ["e1_pd_vs_rpd", "e3_nesterov"]
    assert R.select("staleness_scaling,e6_scaling") == ["e6_scaling", "staleness_scaling"]
    assert R.select(None) == list(R.FIGURES) and set(R.FIGURES) == set(studies.REGISTRY)  # every study, once
    assert R.select("e9") == ["e9_frontier"]
    with pytest.raises(SystemExit, match="e99"):
        R.select("e1,e99")
    for empty in ("", ",", " , "):  # given but naming nothing: neither all nor none
        with pytest.raises(SystemExit, match=f"--only {empty!r} names no figure"):
            R.select(empty)


def test_overridden_field_errors_name_the_override(fakes, tmp_path):
    """The study's own check of an overridden field is reported as study.overrides.<field>."""

    def run(cfg, progress=None):
        raise ValueError(f"steps must be >= 1, got {cfg.steps}")

    sys.modules["tests_fake_studies.fake_ok"].run = run
    with pytest.raises(ValueError, match=r"^study.overrides.steps must be >= 1, got 0$"):
        F.compute("fake_ok", "quick", {"steps": 0}, results_root=tmp_path)
    (failed,) = store.iter_runs(tmp_path)
    assert failed.error == "ValueError: study.overrides.steps must be >= 1, got 0"
    with pytest.raises(ValueError, match="study.overrides.gamma_exps must not be empty"):
        F.study_config(F.resolve("e5_nanochat"), "quick", {"gamma_exps": []})


def test_manifest_failure_does_not_hide_the_summary(fakes, tmp_path, monkeypatch, capsys):
    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "pf" / "MANIFEST.json"))

    monkeypatch.setattr(R, "write_manifest", read_only)
    log = io.StringIO()
    reports = R.reproduce(["fake_ok"], results_root=str(tmp_path / "r"), out_dir=str(tmp_path / "pf"), file=log)
    assert reports[0].status == "ok" and "1/1 figures made" in log.getvalue()
    assert "warning: MANIFEST.json not written" in capsys.readouterr().err


@pytest.mark.slow  # ~15-20 s on 2 cores: the slow suite (CI's second step)
def test_figures_in_worker_processes_equal_figures_made_in_turn(tmp_path):
    """``jobs=2``: the figures are made in two spawned processes at once; the numbers, the
    manifest and the order of the reports are those of making them one after another."""
    names = ["e1_pd_vs_rpd", "e2_delay_law", "e8_delta"]
    runs = {}
    for jobs in (1, 2):
        out = tmp_path / f"pf{jobs}"
        reports = R.reproduce(
            names, results_root=str(tmp_path / f"r{jobs}"), out_dir=str(out), file=io.StringIO(), jobs=jobs
        )
        assert [r.name for r in reports] == names
        assert all(r.status == "ok" for r in reports), [(r.name, r.error) for r in reports]
        manifest = json.loads((out / "MANIFEST.json").read_text())["figures"]
        assert sorted(manifest) == sorted(names)
        runs[jobs] = {n: json.loads((out / f"{n}.json").read_text()) for n in names}
    for n in names:
        assert runs[2][n]["table"] == runs[1][n]["table"], n
        assert runs[2][n]["summary"] == runs[1][n]["summary"], n


def test_default_jobs_are_the_cores_at_quick_size_and_one_at_full_size(monkeypatch):
    monkeypatch.setenv("RPD_WORKERS", "3")
    assert R.default_jobs("quick") == 3
    assert R.default_jobs("full") == 1  # paper-size studies hold several GB each


def test_jobs_is_checked_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit):
        R.main(["--jobs", "0", "--results", str(tmp_path / "r"), "--out", str(tmp_path / "pf")])
    assert "--jobs must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    with pytest.raises(ValueError, match="jobs"):
        R.reproduce(["fake_ok"], jobs=0)


@pytest.mark.slow
def test_quick_mode_end_to_end(tmp_path, capsys, monkeypatch):
    """The README's main command at its default (quick) size: every figure of docs/science.md#the-papers-experiments is
    made. The LM reads a generated text placed where the corpus cache would be (tests never depend on
    the downloaded corpus)."""
    words = ["the", "king", "shall", "speak", "of", "love", "and", "night", "to", "her", "lord"]
    rng = np.random.default_rng(0)
    cache = tmp_path / "cache"
    cache.mkdir()
    text = "\n".join(" ".join(rng.choice(words, 12)) + "." for _ in range(6000))
    (cache / "shakespeare.txt").write_text(text)
    monkeypatch.setenv("RPD_CACHE", str(cache))
    from rpd.objectives import corpus  # the generated text stands in for the verified corpus

    monkeypatch.setattr(corpus, "CORPUS_SIZE", len(text.encode()))
    monkeypatch.setattr(corpus, "CORPUS_SHA256", hashlib.sha256(text.encode()).hexdigest())
    # --jobs 1: the figures are made in this process, which sees the patched corpus (worker
    # processes would verify the real one)
    code = R.main(["--jobs", "1", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "pf")])
    manifest = json.loads((tmp_path / "pf" / "MANIFEST.json").read_text())["figures"]
    assert set(manifest) == set(R.FIGURES)
    statuses = {name: entry["status"] for name, entry in manifest.items()}
    assert all(s == "ok" for s in statuses.values()), statuses
    for name, entry in manifest.items():
        assert (tmp_path / "pf" / entry["png"]).stat().st_size > 1000
        assert json.loads((tmp_path / "pf" / entry["numbers"]).read_text())["table"]
    assert code == 0
    assert "What each figure shows" in capsys.readouterr().out


def test_summary_text_reads_every_kind_of_claim():
    """Claims come as E9's (holds, measured), plan_claims' (holds None: depends), E15's (no
    measured) and E16's (a verdict only): the summary prints each, never a KeyError."""
    from rpd.cli.manifest import FigureOutcome, Report

    claims = [
        {"claim": "a", "holds": True, "measured": "1 %"},
        {"claim": "b", "holds": None, "measured": "2 %", "verdict": "depends on M"},
        {"claim": "c", "holds": False, "verdict": "slower"},
        {"claim": "d", "measured": "3 %", "verdict": "agrees"},
    ]
    cells = [  # E12's panels: a ranking and a verdict per (objective, optimizer)
        {"objective": "q", "optimizer": "adam", "ranking": ["PD", "RPD"], "verdict": "holds: PD 1 vs 2"},
        {"objective": "q", "optimizer": "muon", "ranking": [], "verdict": "n/a"},
    ]
    summary = {"claims": claims, "cells": cells}
    out = FigureOutcome("x", Path("x.png"), Path("x.json"), "quick", {}, 0.1, False, [], summary, Path("."))
    text = report.summary_text([Report("x", "ok", out, None, 0.1)], {})
    assert "q adam: lowest first PD, RPD; holds: PD 1 vs 2" in text and "q muon: lowest first none ran; n/a" in text
    assert "a -> holds: 1 %" in text and "b -> depends: 2 %" in text and "c -> FAILS" in text
    assert "d -> see verdict: 3 %" in text and "agrees" in text


@pytest.mark.slow  # spawns three worker pools (a few seconds)
def test_a_dying_worker_loses_only_its_own_figure():
    """A worker killed by a signal breaks its pool, which fails every figure still in it; those
    are made again one process each, so only the figure that dies again is reported failed (a
    LAPACK segfault once lost 10 of 20 figures this way)."""
    from tests.experiments import dying_worker

    names = ["a", "dies", "b", "c", "d"]
    err = io.StringIO()
    reports = R._reproduce_in_processes(names, 2, file=err, make=dying_worker.make)
    assert [r.name for r in reports] == names
    assert {r.name: r.status for r in reports} == {"a": "ok", "dies": "failed", "b": "ok", "c": "ok", "d": "ok"}
    assert reports[1].error.startswith("BrokenProcessPool")
