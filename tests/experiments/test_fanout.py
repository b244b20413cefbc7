"""A figure's study fanned out as jobs (docs/running.md#figures-on-a-cluster-fan-out): the
payload codec, the unit protocol (E3 and E10 split, the others one unit), the in-process study
equal to assembling its stored units; in the slow suite, E3 and E10 at the quick size on joblib
and submitit's local executor equal to the in-process study, and a job killed mid-run (SIGKILL)
resubmitted alone on the next call."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from experiments import reproduce_paper_figures as R
from rpd.cli import fanout as D
from rpd.cli import figure as F
from rpd.io import payload, store
from rpd.studies import fanout, frontier, pd_vs_localsgd
from rpd.studies import units as U

NUMBERS = ("figure", "size", "config", "summary", "table")  # a figure JSON's numbers (not its timings)


def test_payload_gives_back_equal_values_of_the_same_types(tmp_path):
    value = {
        "rows": [{"loss": float("nan"), "T": 7, "ok": True, "why": None}, {"loss": -float("inf"), "name": "nan"}],
        "shape": (2, (3, 4)),
        "curve": np.linspace(0, 1, 5, dtype=np.float32),
        "g": np.float64(0.1) + np.float64(0.2),
        "n": np.int64(3),
    }
    key = {"unit": "u"}
    payload.save(tmp_path / "u", key, value, runtime_s=1.5)
    back, extra = payload.load(tmp_path / "u")
    assert extra == {"runtime_s": 1.5}
    assert np.isnan(back["rows"][0]["loss"]) and back["rows"][1]["loss"] == -np.inf
    assert back["rows"][1]["name"] == "nan" and back["rows"][0]["T"] == 7 and back["rows"][0]["ok"] is True
    assert back["shape"] == (2, (3, 4)) and isinstance(back["shape"][1], tuple)
    assert back["curve"].dtype == np.float32 and back["curve"].tobytes() == value["curve"].tobytes()
    assert type(back["g"]) is np.float64 and back["g"] == value["g"] and type(back["n"]) is np.int64
    assert payload.roundtrip(value)["shape"] == (2, (3, 4))
    with pytest.raises(TypeError, match=r"payload\.x: cannot store a set"):
        payload.encode({"x": {1}})


def test_e3_and_e10_split_into_units_the_others_are_one():
    e3 = pd_vs_localsgd.config_for("e3_nesterov", "quick")
    assert [u["key"] for u in pd_vs_localsgd.units(e3)] == [
        "main/seed0/PD",
        "main/seed0/LocalSGD H=2",
        "main/seed0/LocalSGD H=5",
        "main/seed0/LocalSGD H=30",
    ]
    e4 = pd_vs_localsgd.config_for("e4_logistic", "quick")
    assert len(pd_vs_localsgd.units(e4)) == pd_vs_localsgd.n_steps(e4) == 4 * 3  # PD + 3 H, per noise seed
    four = ["nesterov_quadratic", "logistic_regression", "mlp_chain", "nanochat"]
    e10 = F.study_config(F.resolve("e10_frontier"), "quick", {"objectives": four})
    keys = [u["key"] for u in frontier.units(e10)]
    # one unit per (objective, S): 4 objectives at S = 4, each unit both cost settings (they share programs)
    assert keys == ["nesterov_quadratic/S4", "logistic_regression/S4", "mlp_chain/S4", "nanochat/S4"]
    quick = frontier.units(F.study_config(F.resolve("e10_frontier"), "quick"))
    assert [u["key"] for u in quick] == ["nesterov_quadratic/S4"]  # the quick preset: the quadratic alone
    with pytest.raises(ValueError, match="costs: unknown"):
        frontier.units(F.study_config(F.resolve("e10_frontier"), "quick", {"costs": ["F=3B"]}))
    e2 = F.resolve("e2_delay_law")
    assert U.of(e2.module, e2.run).units(None) == [{"key": U.WHOLE}]


def test_assembling_stored_units_equals_the_in_process_study(tmp_path):
    """Each unit run as a job would (run_job, stored), then assembled: the study's own run()."""
    study = F.resolve("e3_nesterov")
    cfg = F.study_config(study, "quick", {"N": 40, "H": [2, 5]})
    key = F.study_key("e3_nesterov", "quick", cfg)
    units = U.of(study.module, study.run)
    specs = units.units(cfg)
    root = fanout.jobs_root(tmp_path, "e3_nesterov", key)
    assert [s.status for s in fanout.states(root, key, specs)] == ["missing"] * 3
    assert [fanout.run_job(units, cfg, root, key, s) for s in specs] == ["ok"] * 3
    assert fanout.run_job(units, cfg, root, key, specs[0]) == "reused"
    out, _, _ = fanout.assemble(units, cfg, root, key, specs)
    ref = study.run(cfg)
    assert store.to_jsonable(out.summary) == store.to_jsonable(ref.summary)
    assert store.to_jsonable(out.table) == store.to_jsonable(ref.table)
    assert out.arrays.keys() == ref.arrays.keys()
    for k in ref.arrays:
        np.testing.assert_array_equal(out.arrays[k], ref.arrays[k])


def test_a_job_of_other_code_than_planned_it_is_refused(tmp_path, monkeypatch):
    """A plan's key names the code (``code_identity``): a job whose rpd differs from the code that
    planned it refuses before computing, so no unit is stored under the wrong code."""
    from experiments import figure_job

    study = F.resolve("e3_nesterov")
    cfg = F.study_config(study, "quick", {"N": 40, "H": [2, 5]})
    key = F.study_key("e3_nesterov", "quick", cfg)
    specs = U.of(study.module, study.run).units(cfg)
    root = fanout.jobs_root(tmp_path, "e3_nesterov", key)
    plan = fanout.write_plan(root, "e3_nesterov", "quick", {"N": 40, "H": [2, 5]}, key, specs)
    monkeypatch.setattr(F, "code_identity", lambda: "another-code")
    with pytest.raises(ValueError, match="config or code"):
        figure_job.run(plan, 0)
    assert [s.status for s in fanout.states(root, key, specs)] == ["missing"] * 3


def _figure(name, root: Path, overrides=(), launcher=None, force=False):
    cfg = R.figure_config(
        name, "quick", force=force, results_root=str(root / "results"), out_dir=str(root / "out"), fanout=bool(launcher)
    )
    for o in overrides:  # study.<field>=value
        k, v = o.split("=", 1)
        cfg.study[k] = json.loads(v)
    launch = {"launcher": launcher} if launcher else {}
    out = F.make_figure(cfg, **launch)
    return {k: v for k, v in json.loads(out.numbers.read_text()).items() if k in NUMBERS}


E10_SMALL = ('objectives=["nesterov_quadratic"]', 'variants=["GPipe", "1F1B", "PipeDream", "LocalSGD", "WPipe"]')


@pytest.mark.slow  # each launch starts fresh processes (about a minute on 2 cores)
@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
@pytest.mark.parametrize("name,overrides", [("e3_nesterov", ()), ("e10_frontier", E10_SMALL)])
def test_fanned_out_figure_equals_the_in_process_one(tmp_path, launcher, name, overrides):
    pytest.importorskip(
        {"joblib": "hydra_plugins.hydra_joblib_launcher"}.get(launcher, "hydra_plugins.hydra_submitit_launcher")
    )
    ref = _figure(name, tmp_path / "in_process", overrides)
    assert _figure(name, tmp_path / "fanout", overrides, launcher) == ref
    # a second call only draws: nothing is launched, no unit rewritten
    markers = {p: p.read_bytes() for p in (tmp_path / "fanout" / "results").rglob(store.MARKER)}
    assert _figure(name, tmp_path / "fanout", overrides, launcher) == ref
    assert {p: p.read_bytes() for p in (tmp_path / "fanout" / "results").rglob(store.MARKER)} == markers


def _kill_one_mid_run(jobs: Path, killed: list, stop: threading.Event) -> None:
    """SIGKILL the first job caught mid-run: each job that shows its running.json is stopped
    (SIGSTOP), killed if its unit is not stored yet, else let go on."""
    seen = set()
    while not stop.is_set() and not killed:
        for running in jobs.rglob(fanout.RUNNING):
            try:
                pid = json.loads(running.read_text())["pid"]
            except (OSError, ValueError):
                continue
            if pid in seen:
                continue
            seen.add(pid)
            os.kill(pid, signal.SIGSTOP)
            if store.is_complete(running.parent):
                os.kill(pid, signal.SIGCONT)
                continue
            os.kill(pid, signal.SIGKILL)
            killed.append(running.parent)
            return
        time.sleep(0.002)


@pytest.mark.slow  # two launches on submitit's local executor (about two minutes on 2 cores)
def test_a_job_killed_mid_run_loses_nothing_and_is_redone_once(tmp_path, capsys):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    ref = _figure("e3_nesterov", tmp_path / "in_process")
    jobs, killed, stop = tmp_path / "fanout" / "results" / fanout.JOBS, [], threading.Event()
    watcher = threading.Thread(target=_kill_one_mid_run, args=(jobs, killed, stop), daemon=True)
    watcher.start()
    with pytest.raises(D.JobsIncomplete, match=r"1 of 4 jobs did not finish") as err:
        _figure("e3_nesterov", tmp_path / "fanout", launcher="submitit_local")
    stop.set()
    watcher.join()
    (dead,) = killed
    assert "not stored (the job died or never ran)" in str(err.value)
    assert not store.is_complete(dead)  # nothing of it stored; the three others are
    markers = {p: p.read_bytes() for p in jobs.rglob(store.MARKER)}
    assert len(markers) == 3 and dead / store.MARKER not in markers
    capsys.readouterr()
    assert _figure("e3_nesterov", tmp_path / "fanout", launcher="submitit_local") == ref
    said = capsys.readouterr().out
    assert "1 of 4 jobs on launcher=submitit_local (3 stored)" in said and "resubmitting" in said
    assert all(p.read_bytes() == b for p, b in markers.items())  # the stored units were not redone
    assert store.is_complete(dead)


def test_units_not_stored_after_a_launch_are_listed_and_resubmitted_alone(tmp_path, monkeypatch, capsys):
    """The driver on a stand-in launcher that runs the jobs here and loses one (as a killed job
    would): the figure is refused naming it; the next call submits that unit only."""
    study = F.resolve("e3_nesterov")
    cfg, key, path = F.target("e3_nesterov", "quick", {"N": 40, "H": [2]}, tmp_path)[1:]
    launches = []

    def launcher(plan, todo, name, overrides=(), *, force=False):
        launches.append(list(todo))
        p = fanout.read_plan(plan)
        for i in todo:
            if len(launches) == 1 and i == 1:
                continue  # this job died
            fanout.run_job(U.of(study.module, study.run), cfg, plan.parent, p["key"], p["units"][i])
        return 0

    monkeypatch.setattr(D, "launch", launcher)
    kw = dict(size="quick", overrides={"N": 40, "H": [2]}, results_root=tmp_path, launcher="joblib")
    with pytest.raises(D.JobsIncomplete, match=r"1 of 2 jobs did not finish") as err:
        D.compute(study, cfg, key, path, **kw)
    assert "main/seed0/LocalSGD H=2: not stored (the job died or never ran)" in str(err.value)
    assert not store.is_complete(path)  # no figure from part of the study
    assert D.compute(study, cfg, key, path, **kw) == (path, False)
    assert launches == [[0, 1], [1]]
    assert "resubmitting main/seed0/LocalSGD H=2 (missing)" in capsys.readouterr().out
    assert D.compute(study, cfg, key, path, **kw) == (path, True) and len(launches) == 2
    ref = study.run(cfg)
    stored = store.load_run(path)
    assert stored.summary["table"] == store.to_jsonable(ref.table)
    with pytest.raises(ValueError, match="launcher must be one of"):
        D.compute(study, cfg, key, path, **{**kw, "launcher": "pbs"})


def test_reproduce_refuses_a_launcher_override_outside_hydra_launcher(capsys):
    with pytest.raises(SystemExit) as exit_:
        R.main(["--fanout", "--launcher", "slurm", "--launcher-override", "partition=cpu"])
    assert exit_.value.code == 2
    assert "--launcher-override must set hydra.launcher.<field>" in capsys.readouterr().err


def test_joblib_jobs_compute_with_this_hosts_blas_threads(monkeypatch):
    """joblib would limit each worker's BLAS to cores / n_jobs, and E10's last bits move with
    it; the launch sets the host's count unless the user set one."""
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    env = D._threads_env("joblib")
    assert env["OPENBLAS_NUM_THREADS"] == str(len(os.sched_getaffinity(0))) and env["OMP_NUM_THREADS"] == "3"
    assert "OPENBLAS_NUM_THREADS" not in D._threads_env("submitit_local")
