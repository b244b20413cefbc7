"""One source of truth for what a figure computes: the study's typed fields
(``study.<field>=``), train-cell overrides refused by ``experiments.figure``, one γ grid per
method and experiment, ``--help`` on every entry point."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from hydra_helpers import compose, run_as_main

import experiments.figure  # noqa: F401  (the studies' schemas in hydra's ConfigStore)
from rpd.cli import checks
from rpd.cli import config as C
from rpd.cli import figure as F

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


def _compose(overrides, name="figure"):
    return compose(overrides, name)


def _study_config(cfg):
    cfg = checks.typed(cfg, C.FigureConfig)
    return F.study_config(F.resolve(cfg.study.name), C._value(cfg.size), C.study_fields(cfg.study))


def test_typed_study_fields_set_what_the_figure_computes():
    preset = _study_config(_compose(["experiment=e3_nesterov"]))
    assert (preset.S, preset.N, preset.H) == (4, 120, (2, 5, 30))  # E3's quick preset
    cfg = _study_config(_compose(["experiment=e3_nesterov", "study.S=8", "study.N=100", "study.H=[2,5]"]))
    assert (cfg.S, cfg.N, cfg.H, cfg.d) == (8, 100, (2, 5), preset.d)
    full = _study_config(_compose(["experiment=e3_nesterov", "size=full", "study.N=100"]))
    assert (full.S, full.N) == (16, 100)
    # the typed form and the untyped +study.overrides are the same computation (same store key)
    untyped = _study_config(
        _compose(
            ["experiment=e3_nesterov", "+study.overrides.S=8", "+study.overrides.N=100", "+study.overrides.H=[2,5]"]
        )
    )
    assert F.study_key("e3_nesterov", "quick", untyped) == F.study_key("e3_nesterov", "quick", cfg)
    # every study with an experiment file exposes every field of its Config
    for name in ("e1_pd_vs_rpd", "e8_delta", "e6_scaling", "e11_costs", "staleness_scaling"):
        study = _compose([f"experiment={name}"]).study
        fields = {f.name for f in dataclasses.fields(F.resolve(name).Config)}
        assert fields <= set(study) and all(study[f] is None for f in fields)


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["study.S=abc"], "study.S=abc"),  # a type error at compose time
        (["study.quad_S=3"], "study.quad_S"),  # E11's field, not E3's
    ],
)
def test_bad_study_fields_fail_at_compose(overrides, match):
    with pytest.raises(ConfigCompositionException, match=match):
        _compose(["experiment=e3_nesterov", *overrides])


def test_a_field_given_typed_and_untyped_is_an_error():
    cfg = _compose(["experiment=e3_nesterov", "study.N=100", "+study.overrides.N=90"])
    with pytest.raises(ValueError, match="study.N and study.overrides.N are both set"):
        C.study_fields(cfg.study)


@pytest.mark.parametrize(
    "override, hint",
    [
        ("schedule.S=8", "write study.S=8"),
        ("schedule.N=100", "write study.N=100"),
        ("objective.mu=0.1", "write study.mu=0.1"),
        ("method=localsgd", "its fields are"),
        ("method.gamma_lo=-4", "e3_nesterov's fields are"),
        ("+costs.p2p=1", "e3_nesterov's fields are"),
    ],
)
def test_train_cell_overrides_are_refused_naming_them(override, hint):
    with pytest.raises(ValueError, match="would be ignored by experiments.figure") as err:
        F.check_not_ignored(["size=quick", "study.S=8", "force=true", override], "e3_nesterov")
    assert str(err.value).startswith(override) and hint in str(err.value)
    F.check_not_ignored(
        [
            "size=full",
            "study.S=8",
            "+study.overrides.N=3",
            "results_root=x",
            "experiment=e3_nesterov",
            "hydra.run.dir=y",
            "logger=none",
        ],
        "e3_nesterov",
    )


@pytest.mark.slow
def test_figure_cli_refuses_an_ignored_override_before_any_work(tmp_path):
    """The issue's command: it used to run E3's own preset silently."""
    cmd = [
        sys.executable,
        "-m",
        "experiments.figure",
        "experiment=e3_nesterov",
        "schedule.S=8",
        "schedule.N=100",
        f"results_root={tmp_path / 'results'}",
        f"out_dir={tmp_path / 'out'}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "schedule.S=8 would be ignored" in proc.stderr and "write study.S=8" in proc.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "out").exists()


# The γ grid each study runs per method (log2 exponents), from the study's own full-size Config.
STUDY_GRIDS = {
    "e1_pd_vs_rpd": {"pd": "gamma_exps", "rpd": "gamma_exps"},
    "e8_delta": {"pd": "gamma_exps", "rpd": "gamma_exps"},
    "e3_nesterov": {"pd": "pd_gamma_exps", "localsgd": "localsgd_gamma_exps"},
    "e4_logistic": {"pd": "pd_gamma_exps", "localsgd": "localsgd_gamma_exps"},
    "e6_scaling": {"pd": "pd_gamma_exps", "rpd": "pd_gamma_exps", "localsgd": "localsgd_gamma_exps"},
    "e11_costs": {"pd": "pd_gamma_exps", "localsgd": "localsgd_gamma_exps"},
    "e5_nanochat": {"pd": "gamma_exps", "localsgd": "gamma_exps"},
}


@pytest.mark.parametrize("experiment", sorted(STUDY_GRIDS))
def test_each_method_runs_its_studys_grid(experiment):
    """``experiments.train experiment=X method=M`` runs the γ grid the study X runs for M
    (configs/grid/X/M.yaml, else the method's own): LocalSGD never inherits PD's grid."""
    study = F.resolve(experiment)
    cfg = F.study_config(study, "full")
    for method, field in STUDY_GRIDS[experiment].items():
        train = _compose([f"experiment={experiment}", f"method={method}"], "train")
        assert (train.method.gamma_lo, train.method.gamma_hi) == tuple(getattr(cfg, field)), method


def test_method_grids_are_their_own():
    """Without an experiment every method has its configs/method grid; with one, a method the
    experiment gives no grid keeps its own."""
    assert {
        m: (_compose([f"method={m}"], "train").method.gamma_lo, _compose([f"method={m}"], "train").method.gamma_hi)
        for m in ("pd", "localsgd")
    } == {"pd": (-8, 0), "localsgd": (-8, 2)}
    e3_pd = _compose(["experiment=e3_nesterov"], "train").method
    e3_sgd = _compose(["experiment=e3_nesterov", "method=sgd"], "train").method
    assert (e3_pd.gamma_lo, e3_pd.gamma_hi, e3_sgd.gamma_lo, e3_sgd.gamma_hi) == (-12, -3, -8, 0)
    s4 = _compose(["experiment=staleness_scaling", "method=rpd"], "train").method
    assert list(s4.gammas) == [2.0**-10]
    # the command line still wins over the experiment's grid
    over = _compose(["experiment=e3_nesterov", "method.gamma_lo=-5"], "train").method
    assert (over.gamma_lo, over.gamma_hi) == (-5, -3)


@pytest.mark.parametrize(
    "module, expect",
    [
        ("experiments.figure", "experiment: e10_frontier, e11_costs"),
        ("experiments.train", "compare: Compare = Compare.equal_time"),
        ("experiments.plan", "n_workers: null"),
        ("experiments.schedule", "out: schedule.png"),
        ("experiments.figure_job", "plan: ???"),
        ("experiments.reproduce_paper_figures", "--size {quick,full}"),
    ],
)
def test_a_bare_help_imports_neither_jax_nor_hydra(module, expect, tmp_path):
    """``--help`` answered from the command's file and configs (it took 9-12 s, composing every
    schema and importing JAX): here JAX, hydra and omegaconf cannot be imported at all."""
    for name in ("jax", "hydra", "omegaconf"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('--help imported {name}')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    proc = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert expect in proc.stdout and proc.stdout.count("\n") < 60


@pytest.mark.slow
@pytest.mark.parametrize(
    "module, expect",
    [
        ("experiments.figure", "experiment=<name>"),
        ("experiments.train", "python -m experiments.train"),
        ("experiments.reproduce_paper_figures", "--size"),
    ],
)
def test_help_works_for_every_entry_point(module, expect):
    """With an override, hydra's own help: the composed config."""
    env = dict(os.environ, HYDRA_FULL_ERROR="1")
    extra = [] if module.endswith("reproduce_paper_figures") else ["logger=none"]
    proc = subprocess.run(
        [sys.executable, "-m", module, *extra, "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert expect in proc.stdout


def test_figure_without_an_experiment_says_which_to_pick(tmp_path, monkeypatch, capsys):
    """One line naming the field, exit 2, nothing written (it exited 1 and left a run folder).
    ``python -m experiments.figure`` run in this process (the refusal comes before any import
    a fresh interpreter would add)."""
    run_dir = tmp_path / "run"
    monkeypatch.delenv("RPD_DEBUG", raising=False)  # RPD_DEBUG=1 leaves the check to hydra
    code = run_as_main("experiments.figure", [f"hydra.run.dir={run_dir}"], monkeypatch)
    out, err = capsys.readouterr()
    assert code == 2, err[-2000:]
    assert err.startswith("error: experiment: experiments.figure needs experiment=<name>") and out == ""
    assert len(err.strip().splitlines()) == 1 and "e3_nesterov" in err
    assert not run_dir.exists()


def test_quick_figures_are_not_tracked():
    """The main command writes the quick figures to paper_figures/quick/, which git ignores and
    does not track, so reproducing leaves the checkout clean."""
    import shutil

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    cfg = checks.typed(_compose(["experiment=e3_nesterov"]), C.FigureConfig)
    assert C._value(cfg.size) == "quick" and cfg.out_dir is None  # -> paper_figures/quick
    git = ["git", "-C", str(ROOT)]
    tracked = subprocess.run(git + ["ls-files", "paper_figures/quick"], capture_output=True, text=True)
    assert tracked.returncode == 0 and tracked.stdout == ""
    for path in ("paper_figures/quick/e3_nesterov.png", "paper_figures/quick/MANIFEST.json"):
        assert subprocess.run(git + ["check-ignore", "-q", path]).returncode == 0, path
    assert subprocess.run(git + ["check-ignore", "-q", "paper_figures/e3_nesterov.png"]).returncode == 1


def test_a_study_size_below_one_is_refused_before_the_study_starts():
    """Issue 34, item 6: study.S=0 is refused when the config is made, naming study.S."""
    e1 = F.resolve("e1_pd_vs_rpd")
    with pytest.raises(ValueError, match=r"^study\.S must be >= 1, got 0$"):
        F.study_config(e1, "quick", {"S": 0})
    with pytest.raises(ValueError, match=r"^study\.log_T must be >= 1, got -5$"):
        F.study_config(F.resolve("e11_costs"), "quick", {"log_T": -5})
    assert F.study_config(e1, "quick", {"S": 2}).S == 2
