"""Where the winner changes along a cost ladder, as one number: the crossover α* that E11 reports
and draws (pure functions of saved numbers)."""

from __future__ import annotations

import math


def crossover_point(x: dict, alphas) -> float | None:
    """A series' crossover as one number for comparisons across S: α* (the bracket's upper rung
    if not interpolable), +inf when the α = 0 winner keeps winning, None when PD starts ahead."""
    if x["from"] != "LocalSGD":
        return None
    if x["to"] is None:
        return math.inf
    return x["alpha_star"] if x["alpha_star"] is not None else x["alpha_hi"]


def crossover_point_any(x: dict) -> float:
    """α* of a crossover that happened, whichever way (the bracket's upper rung if not interpolable)."""
    return x["alpha_star"] if x["alpha_star"] is not None else x["alpha_hi"]


def fmt(v) -> str:
    return "n/a" if v is None else f"{v:.3g}"
