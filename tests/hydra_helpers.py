"""What the tests share to compose hydra configs: the repository root, its configs/, one
compose call, and tiny train configs."""

from pathlib import Path

from hydra import compose as _hydra_compose
from hydra import initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"

TINY_LINEAR = [
    "objective.n=32",
    "objective.d=12",
    "objective.batch_size=4",
    "schedule.S=3",
    "schedule.N=8",
    "method.gamma_lo=-5",
    "method.gamma_hi=-4",
    "method.seeds=[0]",
]
TINY_LM = [
    "schedule.S=3",
    "schedule.T=24",
    "schedule.R=3",
    "schedule.H=2",
    "objective.batch_size=2",
    "objective.seq_len=8",
    "objective.width=8",
    "objective.heads=2",
    "objective.heldout_batches=1",
    "method.gamma_lo=-3",
    "method.gamma_hi=-3",
    "method.stride=4",
]


def compose(overrides, name: str = "train"):
    """The config ``name`` (configs/<name>.yaml) with hydra ``overrides``, as the entry point sees it."""
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return _hydra_compose(name, overrides=list(overrides))
