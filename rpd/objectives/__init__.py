"""Objectives as S-stage chains on a flat parameter vector (see ``base.Objective``)."""

from rpd.objectives.base import BlockLayout, Objective
from rpd.objectives.chain import Chain, two_point_value_and_grad
from rpd.objectives.linear import logistic_regression, nesterov_mu, nesterov_quadratic, random_quadratic
from rpd.objectives.mlp import mlp_chain

__all__ = [
    "BlockLayout",
    "Chain",
    "Objective",
    "logistic_regression",
    "mlp_chain",
    "nesterov_mu",
    "nesterov_quadratic",
    "random_quadratic",
    "two_point_value_and_grad",
]
