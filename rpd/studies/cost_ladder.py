"""E11's cost ladder and budgets (``rpd.studies.costs_crossover``, whose module doc defines them):
the rungs, the series, the budget of a rung, PD's microbatches at unit cost, the LocalSGD
rounds a budget reaches, and a curve resampled to the selector's grid. Arithmetic on
timelines and curves; nothing here trains."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from rpd import schedules
from rpd.analysis import simtime
from rpd.results import value_at
from rpd.schedules.machinery.costs import CostModel
from rpd.studies.costs_config import Config
from rpd.studies.crossover import UNIT
from rpd.validation import required


@dataclasses.dataclass(frozen=True)
class Level:
    """One rung: ``key`` names it in arrays and tables; ``costs`` is None at the unit rung."""

    key: str
    c: int | None
    alpha: float | None
    costs: CostModel | None


def levels(cfg: Config) -> list[Level]:
    """The unit rung, then for every c in ``p2p`` every α in ``alphas``."""
    out = [Level(UNIT, None, None, None)]
    for c in cfg.p2p:
        for a in cfg.alphas:
            out.append(
                Level(f"c{c}_a{a:g}", int(c), a, CostModel(F=cfg.tF, B=cfg.tB, p2p=int(c), allreduce=(a, cfg.beta)))
            )
    return out


def series_keys(cfg: Config) -> list[tuple[str, int, int]]:
    """(panel, S, c) of every series: the quadratic's one S, then each S of the logistic panel."""
    return [
        (p, S, c)
        for p, Ss in (("quadratic", (cfg.quad_S,)), ("logistic", cfg.log_S_values))
        for S in Ss
        for c in cfg.p2p
    ]


def block_values(d: int, S: int) -> int:
    """D, the values one stage averages: its block, the largest being ⌈d/S⌉ (docs/science.md#model-and-words)."""
    return -(-d // S)


def pd_only(costs: CostModel | None) -> CostModel | None:
    """The rung's costs without the averaging term (PD never averages): one PD timeline per c."""
    return None if costs is None else dataclasses.replace(costs, allreduce=(0, 0))


def budget(T_paper: int, N_paper: int, S: int, costs: CostModel | None) -> int:
    """The paper's budget stretched by PD's slowdown under ``costs`` (see the module doc)."""
    if costs is None:
        return int(T_paper)
    unit = schedules.pipedream(S, N_paper).T
    return int(math.ceil(T_paper * schedules.pipedream(S, N_paper, costs=pd_only(costs)).T / unit - 1e-12))


def logistic_n_paper(S: int, T: int) -> int:
    """E6's PD microbatches at unit cost: the smallest N whose timeline reaches T."""
    return simtime.smallest_n_reaching(T, lambda n: schedules.pipedream(S, n)).N


def reached_rounds(tl: schedules.Timeline, T: int) -> int:
    """LocalSGD microbatches in the rounds that start before tick T. Rounds are separated by a
    barrier, so later rounds change nothing before T: running only these gives the same curve
    up to T as running all N (protocol (i) without simulating rounds nobody sees)."""
    starts = np.concatenate([[0], np.asarray(tl.sync_time)[:-1] + 1])
    return min(tl.N, int(np.sum(starts < T)) * required("R", tl.R) * required("H", tl.H))


def resample(result, budget: int, T_paper: int):
    """The curve at T_paper + 1 points evenly spaced over [0, budget] (the last tick at or before
    budget·k/T_paper): the grid the selector sees at every rung, so its per-point tests mean
    the same whatever a tick costs. At the unit rung (budget = T_paper) it is every time step."""
    k = np.arange(T_paper + 1, dtype=np.int64)
    ticks = (budget * k) // T_paper
    return value_at(result.axis, result.curve, ticks)
