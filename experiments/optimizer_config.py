"""Config schemas of the optimizer groups (hydra's ConfigStore, :mod:`experiments.config`):
``optimizer`` (rpd.train.optimizers and the staleness corrections) and ``outer_optimizer``
(LocalSGD's outer step, rpd.train.diloco)."""

from __future__ import annotations

import dataclasses
import enum
from typing import List, Optional


class OptimizerName(enum.Enum):  # rpd.train.optimizers.NAMES
    sgd = "sgd"
    momentum = "momentum"
    nesterov = "nesterov"
    adam = "adam"
    adamw = "adamw"
    nadam = "nadam"
    muon = "muon"
    nesterov_async = "nesterov_async"
    adam_rotated = "adam_rotated"


class CorrectionName(enum.Enum):  # rpd.train.corrections.NAMES
    pipemare_lr = "pipemare_lr"
    delay_beta1 = "delay_beta1"
    dc_asgd = "dc_asgd"
    error_feedback = "error_feedback"


@dataclasses.dataclass
class OptimizerConfig:
    """``rpd.train.optimizers``: the optimizer every block update applies (its learning rate is the
    method's γ grid, which each configs/optimizer/*.yaml sets to its own default). Every
    hyper-parameter the name has is pinned in its YAML; null: not this optimizer's."""

    name: OptimizerName = OptimizerName.sgd
    beta: Optional[float] = None  # momentum, nesterov, muon: momentum factor (optax trace: t = g + beta t)
    nesterov: Optional[bool] = None  # muon: Nesterov momentum
    b1: Optional[float] = None  # adam, adamw, nadam, nesterov_async, adam_rotated
    b2: Optional[float] = None
    eps: Optional[float] = None  # adam, adamw, nadam, muon
    eps_root: Optional[float] = None  # adam, adamw, nadam
    weight_decay: Optional[float] = (
        None  # adamw (decoupled, times the learning rate), muon, nesterov_async, adam_rotated
    )
    ns_steps: Optional[int] = None  # muon: Newton-Schulz iterations
    ns_coeffs: Optional[List[float]] = None  # muon: Newton-Schulz coefficients (a, b, c)
    adam_b1: Optional[float] = None  # muon: Adam on the non-matrix leaves
    adam_b2: Optional[float] = None
    adam_eps_root: Optional[float] = None
    adam_weight_decay: Optional[float] = None
    momentum_decay: Optional[float] = None  # nesterov_async: torch NAdam's ψ (0.004)
    beta_max: Optional[float] = None  # nesterov_async: the β1 the most-delayed stage tends to (0.99)
    shampoo_beta: Optional[float] = None  # adam_rotated: EMA of the gradient covariances (< 0: b2)
    frequency: Optional[int] = None  # adam_rotated: updates between basis refreshes (10)
    # a correction arm for staleness (rpd.train.corrections), applied per stage; null: none
    correction: Optional[CorrectionName] = None
    correction_window: Optional[int] = None  # pipemare_lr: warm-up K in updates per block; null: a quarter
    correction_beta_max: Optional[float] = None  # delay_beta1: the β1 the most-delayed stage tends to (0.99)
    correction_lam: Optional[float] = None  # dc_asgd: λ of g + λ g⊙g⊙(w_t - w_stale) (0.04); error_feedback: λ (1)


class OuterOptimizerName(enum.Enum):  # rpd.train.diloco.OUTER_NAMES
    sgd = "sgd"
    momentum = "momentum"
    nesterov = "nesterov"


class InnerState(enum.Enum):  # rpd.train.diloco.INNER_STATES
    keep = "keep"
    average = "average"
    reset = "reset"


@dataclasses.dataclass
class OuterOptimizerConfig:
    """``rpd.train.diloco``: LocalSGD's outer optimizer on the pseudo-gradient θ - mean_r x_r
    (configs/outer_optimizer/): sgd with lr 1 is plain averaging; nesterov is DiLoCo's."""

    name: OuterOptimizerName = OuterOptimizerName.sgd
    lr: Optional[float] = None  # null: the name's default (sgd 1.0, momentum / nesterov 0.7)
    beta: Optional[float] = None  # momentum (optax's trace); null: the name's default (0 / 0.9)
