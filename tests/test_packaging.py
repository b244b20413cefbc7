"""What a fresh install gets: dependencies and extras, wandb only when asked for, a licence and
a citation."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(requirements) -> set[str]:
    return {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in requirements}


def test_wandb_is_an_extra_and_optax_a_dependency():
    """optax is what every optimizer runs on (rpd.train.optimizers); wandb only when asked for."""
    deps, extras = _names(PROJECT["dependencies"]), PROJECT["optional-dependencies"]
    assert "wandb" not in deps and {"optax", "pandas", "xarray", "ortools"} <= deps
    assert _names(extras["wandb"]) == {"wandb"}
    assert {"wandb", "pytest", "ruff"} <= _names(extras["test"])  # CI exercises the logger
    assert extras["cuda12"] == extras["cuda"] == ["jax[cuda12]>=0.10.2"]  # cuda: the older name of cuda12
    assert extras["cuda13"] == ["jax[cuda13]>=0.10.2"]


@pytest.mark.slow
def test_no_module_imports_wandb_pandas_or_xarray_at_import_time():
    code = (
        "import sys, rpd, rpd.io.tracking, rpd.io.dashboard, rpd.results, experiments.train, "
        "experiments.figure, experiments.reproduce_paper_figures; "
        "print(sorted(m for m in ('wandb', 'xarray', 'pandas') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


@pytest.fixture
def no_wandb(monkeypatch):
    """Imports of wandb fail, as on an install without the extra."""
    monkeypatch.setitem(sys.modules, "wandb", None)


def test_wandb_logger_without_wandb_names_the_extra(no_wandb):
    from rpd.io import tracking

    with pytest.raises(ModuleNotFoundError, match=re.escape("pip install -e '.[wandb]'")):
        tracking.make_logger("wandb", project="p", experiment="e", method="pd", S=2)
    assert isinstance(tracking.make_logger("none"), tracking.NoOpLogger)
    tracking.shutdown()  # nothing to stop, and no warning


def test_train_with_logger_wandb_fails_before_any_work(no_wandb, tmp_path, monkeypatch):
    from hydra import compose, initialize_config_dir

    import experiments.schemas  # noqa: F401  (the schemas in hydra's ConfigStore)
    from rpd.cli import train

    def no_work(cfg):
        raise AssertionError("trained although the logger cannot work")

    monkeypatch.setattr(train, "train", no_work)
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=[f"results_root={tmp_path}", "logger=wandb"])
    with pytest.raises(ModuleNotFoundError, match=re.escape("pip install -e '.[wandb]'")):
        train.run(cfg)
    assert not any(tmp_path.iterdir())  # nothing stored, not even a failure record


def test_licence_is_mit_and_declared():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Copyright (c) 2026 the rpd authors" in text
    assert PROJECT["license"] == "MIT" and PROJECT["license-files"] == ["LICENSE"]


def test_citation_cites_the_software_and_the_paper():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert cff["license"] == "MIT" and cff["version"] == PROJECT["version"]
    (paper,) = cff["references"]
    assert paper["title"] == "Demystifying Pipeline Parallelism: First Theory for PipeDream"
    assert [a["family-names"] for a in paper["authors"]] == ["Ilin", "Richtárik"]
    assert paper["identifiers"][0]["value"] == "arXiv:2606.03498"


def test_changelog_follows_keep_a_changelog():
    text = (ROOT / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[([^\]]+)\]", text, flags=re.M)
    assert versions[0] == "Unreleased" and PROJECT["version"] in versions
    assert set(re.findall(r"^### (\w+)", text, flags=re.M)) <= {
        "Added",
        "Changed",
        "Deprecated",
        "Removed",
        "Fixed",
        "Security",
    }
