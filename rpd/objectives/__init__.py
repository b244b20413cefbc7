"""Objectives as S-stage chains on a flat parameter vector (see ``base.Objective``)."""

from rpd.objectives.base import BlockLayout, Objective
from rpd.objectives.linear import logistic_regression, nesterov_mu, nesterov_quadratic, random_quadratic

__all__ = [
    "BlockLayout",
    "Objective",
    "logistic_regression",
    "nesterov_mu",
    "nesterov_quadratic",
    "random_quadratic",
]
