"""Objectives as S-stage chains on a flat parameter vector (see ``base.Objective``), each one an
:class:`~rpd.objectives.entry.ObjectiveEntry` in :data:`OBJECTIVES` (importing this registers rpd's own)."""

from rpd.objectives.base import BlockLayout, Objective, on_device
from rpd.objectives.chain import Chain, two_point_value_and_grad
from rpd.objectives.entries import ENTRIES
from rpd.objectives.entry import OBJECTIVES, Metric, ObjectiveEntry, entry_of, params_of, register
from rpd.objectives.linear import (
    LogisticRegressionParams,
    NesterovQuadraticParams,
    RandomQuadraticParams,
    logistic_regression,
    nesterov_mu,
    nesterov_quadratic,
    random_quadratic,
)
from rpd.objectives.mlp import MLPChainParams, mlp_chain
from rpd.objectives.nanochat import NanochatParams

__all__ = [
    "OBJECTIVES",
    "BlockLayout",
    "Chain",
    "LogisticRegressionParams",
    "MLPChainParams",
    "Metric",
    "NanochatParams",
    "NesterovQuadraticParams",
    "Objective",
    "ObjectiveEntry",
    "RandomQuadraticParams",
    "entry_of",
    "params_of",
    "logistic_regression",
    "mlp_chain",
    "nesterov_mu",
    "nesterov_quadratic",
    "on_device",
    "random_quadratic",
    "register",
    "two_point_value_and_grad",
]

for _entry in ENTRIES:
    register(_entry)
