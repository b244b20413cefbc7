"""The plan command's training half (``objective=``): each row's schedule trained on the
objective with the optimizer group, time to a target loss
(docs/plan.md#time-to-a-target-loss-objective-rpdanalysisplan_train)."""

from __future__ import annotations

import numpy as np
from omegaconf import OmegaConf

from rpd import registry
from rpd.analysis.plan_train import time_to_target
from rpd.cli import config as C
from rpd.cli import specs
from rpd.cli.objectives import build_objective


def train_grid(cfg) -> tuple[int, int]:
    """The γ grid's exponents (lo, hi) of ``train.*``, else the optimizer group's ``method.*``."""
    t = cfg.train
    # omegaconf's stub types a container as a union; a config node's is a dict
    method: dict = OmegaConf.to_container(cfg.method, resolve=True) or {}  # type: ignore[assignment]
    lo = t.gamma_lo if t.gamma_lo is not None else method.get("gamma_lo", -8)
    hi = t.gamma_hi if t.gamma_hi is not None else method.get("gamma_hi", 0)
    if lo > hi:
        raise ValueError(f"train.gamma_lo={lo} must be <= train.gamma_hi={hi}")
    return lo, hi


def train_rows(cfg, rows, model, hw, settings) -> dict:
    """Each row's schedule trained on ``cfg.objective`` with ``cfg.optimizer``: time to target."""
    t = cfg.train
    lo, hi = train_grid(cfg)
    opt = specs.optimizer_of(cfg)
    result = time_to_target(
        rows,
        model,
        hw,
        registry.timeline,
        lambda n_blocks: build_objective(cfg.objective, n_blocks),
        t.N,
        2.0 ** np.arange(lo, hi + 1),
        how=settings["partition"],
        tick_s=cfg.tick_s,
        grad_bytes=cfg.grad_bytes or 4,
        target=t.target,
        rule=t.rule,
        points=t.points,
        seed=t.seed,
        optimizer=opt,
        stochastic=specs.stochastic_time(cfg.costs, cfg.pipeline.S),
    )
    return dict(
        result, objective=C._value(cfg.objective.name), optimizer=settings["optimizer"], gamma_lo=lo, gamma_hi=hi
    )
