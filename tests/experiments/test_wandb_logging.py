"""wandb runs of stored results (experiments.wandb_log; the online hang):
a stored run logged without recomputing it, readable names, swept values as tags and config,
provenance, the per-γ table, the curves image and artifact, the wandb id in the stored summary,
runs under the job's output directory, figures, and an unreachable server that falls back to
offline within the init timeout. One train run and one figure are logged per module."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest
from hydra_helpers import compose, resolved

# Skipped without wandb, found without importing it: both xdist workers collect every file, and
# importing wandb here cost the worker that does not run these tests ~0.8 CPU-s.
if importlib.util.find_spec("wandb") is None:
    pytest.skip("wandb is not installed (the test extra has it)", allow_module_level=True)

from rpd import studies  # noqa: E402
from rpd.cli import checks, train, wandb_log  # noqa: E402
from rpd.cli import config as C  # noqa: E402
from rpd.cli import figure as F  # noqa: E402
from rpd.cli.job import Job  # noqa: E402
from rpd.io import offline_run, store, sweeps, tracking
from rpd.results import StudyOutput  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TINY = [
    "objective.n=32",
    "objective.d=12",
    "objective.batch_size=4",
    "schedule.S=3",
    "schedule.N=8",
    "method.gammas=[0.03125,0.0625,64.0]",
    "method.seeds=[0]",  # 64 diverges
    "method=localsgd",
    "schedule.H=2",
    "experiment_name=e3_nesterov",
]


def _compose(overrides, name="train"):
    return compose(overrides, name)


@pytest.fixture(scope="module")
def wandb_env(tmp_path_factory):
    """wandb strictly offline, quiet, its own dirs under a temporary directory."""
    root = tmp_path_factory.mktemp("wandb")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        for var in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
            mp.setenv(var, str(root / var.lower()))
        mp.delenv("WANDB_API_KEY", raising=False)
        mp.delenv("WANDB_BASE_URL", raising=False)
        yield root
    tracking.shutdown()


@pytest.fixture(scope="module")
def logged(wandb_env):
    """A LocalSGD run stored with logger=none, then rerun with logger=wandb inside a (fake) hydra
    job directory while training is forbidden: it must be logged from the store."""
    res, job = wandb_env / "results", wandb_env / "job"
    first = train.run(_compose([f"results_root={res}", *TINY]))
    assert first.status == "ok" and "wandb_id" not in first.summary
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(train, "train", lambda cfg: (_ for _ in ()).throw(AssertionError("recomputed")))
        out = train.run(_compose([f"results_root={res}", *TINY, "logger=wandb"]), Job(output_dir=job))
    (run_dir,) = (job / "wandb").glob("offline-run-*")
    return first, out, offline_run.read_offline_run(run_dir), run_dir


@pytest.mark.slow
def test_stored_run_is_logged_without_recomputing(logged):
    first, out, back, _ = logged
    assert out.skipped and out.path == first.path
    stored = store.load_run(out.path).summary
    assert out.summary["wandb_id"] == stored["wandb_id"] == back.id and back.id
    assert stored["wandb_mode"] == "offline" and stored["wandb_project"] == "rpd"
    # the logged numbers are the stored run's
    for key in ("final/selected", "tuning/gamma", "tuning/gamma_log2", "f0", "n_diverged"):
        assert back.summary[key] == stored[key], key
    assert back.summary["results/hash"] == out.path.name
    curve = first.curves["loss/f_minus_fstar"].mean(axis=0)[stored["tuning/index"]]
    rows = [r for r in back.history if "loss/f_minus_fstar" in r]
    np.testing.assert_allclose([r["loss/f_minus_fstar"] for r in rows], curve)
    assert [r["sim_time"] for r in rows] == first.curves["axis/sim_time"].tolist()
    # everything but the summary's wandb keys is unchanged; load_sweep reads the id
    assert {k: v for k, v in stored.items() if not k.startswith("wandb_")} == first.summary
    df = sweeps.load_sweep(out.path.parent)
    assert list(df["wandb_id"]) == [back.id]


def test_name_tags_and_config_hold_the_swept_values_and_provenance(logged):
    from rpd.io.provenance import git_state

    _, out, back, _ = logged
    assert back.name == "e3_nesterov/localsgd/S3/H2/N8" and back.group == "e3_nesterov"
    assert {"localsgd", "local_sgd", "S3", "H2", "N8"} <= set(back.tags)
    meta = back.config["meta"]
    assert (meta["method"], meta["schedule"], meta["S"], meta["H"], meta["N"]) == ("localsgd", "local_sgd", 3, 2, 8)
    assert meta["delta"] is None and meta["T"] is None
    assert back.config["results"] == {"hash": out.path.name, "path": str(out.path.resolve()), "status": "ok"}
    prov = back.config["provenance"]
    assert prov["jax"] == __import__("jax").__version__ and prov["numpy"] == np.__version__
    assert prov["git_commit"] == git_state()[0]
    assert back.config["method"]["gammas"] == [0.03125, 0.0625, 64.0]  # the run's key


def test_table_image_and_artifact_are_in_the_offline_run(logged):
    first, out, back, run_dir = logged
    assert all(p.is_relative_to(run_dir / "files" / "media") for p in back.media)
    (png,) = [p for p in back.media if p.suffix == ".png"]
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 1000
    (table,) = [p for p in back.media if p.name.endswith(".table.json")]
    t = json.loads(table.read_text())
    rows = [dict(zip(t["columns"], r)) for r in t["data"]]
    s = first.summary
    assert [r["gamma"] for r in rows] == s["gammas"] and [r["gamma_log2"] for r in rows] == [-5, -4, 6]
    # a diverged γ (its NaN tail mean made wandb refuse the table) is logged, marked
    assert s["diverged"] == [False, False, True] and rows[2]["diverged"] is True
    assert [r["final"] for r in rows[:2]] == pytest.approx(s["final"][:2])
    assert rows[2]["tail_mean"] is None or np.isfinite(rows[2]["tail_mean"])
    assert [r["selected"] for r in rows] == [i == s["tuning/index"] for i in range(3)]
    assert (f"curves-{out.path.name}", "curves") in back.artifacts


def test_run_names_and_tags_from_the_key():
    rpd_key = train.run_config(resolved(_compose(["method=rpd", "experiment_name=e1"])))
    meta = wandb_log.sweep_meta("e1", rpd_key)
    assert wandb_log.run_name(meta) == "e1/rpd/S8/delta60/N400"
    assert {"rpd", "S8", "delta60", "N400"} <= set(wandb_log.sweep_tags(meta))
    pipe = wandb_log.sweep_meta("x", train.run_config(resolved(_compose(["method=pipeline", "schedule=gpipe"]))))
    assert wandb_log.run_name(pipe) == "x/pipeline/gpipe/S8/M8/N400"
    fixed = wandb_log.sweep_meta("x", train.run_config(resolved(_compose(["schedule=fixed_time"]))))
    assert fixed["N"] is None and wandb_log.run_name(fixed) == f"x/pd/S8/T{fixed['T']}"
    pd3 = wandb_log.sweep_meta("e3_nesterov", train.run_config(resolved(_compose(["experiment=e3_nesterov"]))))
    assert wandb_log.run_name(pd3) == "e3_nesterov/pd/S16/N600"


def test_online_without_a_server_falls_back_to_offline_within_the_timeout(wandb_env, monkeypatch):
    """Issue 13: logger.mode=online with no reachable server must not hold the job."""
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens: refused
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    t0 = time.monotonic()
    with pytest.warns(RuntimeWarning, match=r"online init failed.*offline instead.*wandb sync"):
        lg = tracking.WandbLogger(
            project="p", experiment="E", method="pd", S=2, mode="online", dir=wandb_env / "online", init_timeout=2
        )
    assert lg.fell_back_offline and lg.mode == "offline"
    run_dir = lg.run_dir
    lg.log_summary({"x": 1.5})
    lg.finish()
    assert time.monotonic() - t0 < 20
    assert run_dir.name.startswith("offline-run-") and run_dir.is_relative_to(wandb_env / "online")
    assert offline_run.read_offline_run(run_dir).summary["x"] == 1.5


def test_init_timeout_is_validated():
    with pytest.raises(ValueError, match="logger.init_timeout"):
        checks.validate(checks.typed(_compose(["logger=wandb", "logger.init_timeout=0"])))
    with pytest.raises(ValueError, match="logger.init_timeout"):
        tracking.WandbLogger(project="p", experiment="E", init_timeout=-1)


# ------------------------------------------------------------------ figures


@dataclasses.dataclass(frozen=True)
class FakeConfig:
    steps: int = 4
    scale: float = 2.0


def _fake_study() -> types.ModuleType:
    mod = types.ModuleType("tests_fake_studies.fake_wandb")
    mod.Config, mod.QUICK = FakeConfig, {}

    def run(cfg, progress=None):
        x = np.arange(cfg.steps, dtype=np.float64)
        return StudyOutput(
            arrays={"x": x, "y": cfg.scale * x},
            summary={"slope": cfg.scale, "fit": {"r2": 0.99}},
            table=[
                {"quantity": "slope", "measured": cfg.scale, "paper": 2.0},
                {"quantity": "steps", "measured": cfg.steps, "paper": None},
            ],
        )

    def figure(out, path):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(2, 2))
        ax.plot(out.arrays["x"], out.arrays["y"])
        fig.savefig(path)
        plt.close(fig)

    mod.run, mod.figure = run, figure
    return mod


def test_figure_logs_its_image_table_and_numbers(wandb_env, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tests_fake_studies.fake_wandb", _fake_study())
    monkeypatch.setitem(studies.REGISTRY, "fake_wandb", "tests_fake_studies.fake_wandb")
    logs = wandb_env / "figure_logs"
    cfg = checks.typed(
        {
            "study": {"name": "fake_wandb", "overrides": {"scale": 3.0}},
            "size": "quick",
            "results_root": str(wandb_env / "results"),
            "out_dir": str(wandb_env / "pf"),
            "logger": {"kind": "wandb", "dir": str(logs)},
        },
        C.FigureConfig,
    )
    F.run_and_report(cfg)
    (run_dir,) = (logs / "wandb").glob("offline-run-*")
    back = offline_run.read_offline_run(run_dir)
    assert f"wandb run {back.id}" in capsys.readouterr().out
    assert back.name == "fake_wandb/quick/scale3" and back.group == "fake_wandb"
    assert {"figure", "fake_wandb", "quick"} <= set(back.tags)
    assert back.summary["slope"] == 3.0 and back.summary["fit/r2"] == 0.99
    assert back.config["study"] == {"steps": 4, "scale": 3.0}
    (png,) = [p for p in back.media if p.suffix == ".png"]
    assert png.read_bytes() == (wandb_env / "pf" / "fake_wandb.png").read_bytes()
    (table,) = [p for p in back.media if p.name.endswith(".table.json")]
    t = json.loads(table.read_text())
    assert [dict(zip(t["columns"], r)) for r in t["data"]] == [
        {"quantity": "slope", "measured": 3.0, "paper": 2.0},
        {"quantity": "steps", "measured": 4, "paper": None},
    ]
    (path,) = [p for p in (wandb_env / "results" / "figures" / "fake_wandb").iterdir()]
    assert store.load_run(path).summary["wandb_id"] == back.id
    assert (f"figure-fake_wandb-{path.name}", "figure") in back.artifacts


def test_wandb_sync_finds_the_offline_run_under_the_job_dir(logged, wandb_env):
    """The README / slurm sync line: `wandb sync <job dir>/wandb/offline-run-*` (dry run, no
    network) recognises the run written under the job's output directory."""
    import glob
    import os
    import subprocess

    _, _, back, run_dir = logged
    runs = glob.glob(str(wandb_env / "job" / "wandb" / "offline-run-*"))
    assert runs == [str(run_dir)]
    wandb_cli = Path(sys.executable).with_name("wandb")
    proc = subprocess.run(
        [str(wandb_cli), "sync", "--dry-run", *runs], capture_output=True, text=True, timeout=60, env=dict(os.environ)
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "Would sync 1 run" in out and f"run-{back.id}.wandb" in out


@pytest.mark.slow  # a fresh process: imports, compiles, wandb init (~15 s)
def test_cli_logs_under_its_hydra_job_dir_and_links_the_id(wandb_env, tmp_path):
    import os
    import subprocess

    job = tmp_path / "job"
    cmd = [
        sys.executable,
        "-m",
        "experiments.train",
        "logger=wandb",
        f"hydra.run.dir={job}",
        f"results_root={tmp_path / 'res'}",
        *TINY,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ), cwd=CONFIGS.parent)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run_dir,) = (job / "wandb").glob("offline-run-*")
    link = json.loads((job / "result.json").read_text())
    assert run_dir.name.endswith(link["wandb_id"])
    assert store.load_run(link["result"]).summary["wandb_id"] == link["wandb_id"]
    assert offline_run.read_offline_run(run_dir).name == "e3_nesterov/localsgd/S3/H2/N8"
