"""E11's configuration (``rpd.studies.costs_crossover``), a leaf: the cost ladder, both panels'
sizes and the quick overrides, read by the ladder, the analysis and the study."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Config:
    """E11 at the paper's sizes: E3's quadratic and E6's logistic regression on the cost ladder."""

    # The cost ladder (ticks; one tick = one F).
    tF: int = 1
    tB: int = 2
    p2p: tuple[int, ...] = (0, 1)  # latency c of every cross-rank dependency; one series each
    alphas: tuple[int, ...] = (0, 4, 16, 64, 256, 1024, 4096)  # averaging latency α, the ladder
    beta: float = 1 / 64  # averaging cost per value averaged (ticks): ⌈α + β·D⌉, D = ⌈d/S⌉
    # E3 panel: Nesterov's quadratic, protocol (i).
    quad_S: int = 16
    quad_R: int = 16
    quad_d: int = 512
    quad_n: int = 600
    quad_batch_size: int = 5
    quad_N: int = 600
    quad_mu: float = 0.01
    quad_H: tuple[int, ...] = (2, 5, 30)
    quad_tail_frac: float = 0.2
    # E6 panel: logistic regression with gradient noise, protocol (ii), R = S.
    log_S_values: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128)
    log_T: int = 3180  # the paper's budget in unit time steps
    log_n: int = 50
    log_d: int = 512
    log_batch_size: int = 1
    log_lam: float = 1e-4
    log_grad_noise: float = 0.5
    log_H: int = 5
    log_tail_frac: float = 0.01
    log_seeds: tuple[int, ...] = (0, 1, 2, 3)  # gradient-noise seeds; curves averaged (E6: one, seed 0)
    # Both panels.
    pd_gamma_exps: tuple[int, int] = (-12, -3)
    localsgd_gamma_exps: tuple[int, int] = (-8, 2)
    seed: int = 0  # data seed (both panels) and the quadratic's only seed (it has no noise)


# E3's and E6's quick sizes (so the unit rung equals paper_figures/quick/e3_nesterov, e6_scaling, for
# E3 at its smallest and largest H), a shorter ladder (α = 0, 16, 256) and E3's H = 2 and 30 only:
# 13 compiled programs instead of 17.
QUICK = dict(
    quad_S=4,
    quad_R=4,
    quad_d=64,
    quad_n=120,
    quad_N=120,
    quad_H=(2, 30),
    log_S_values=(2, 8),
    log_T=400,
    p2p=(0,),
    alphas=(0, 16, 256),
    log_seeds=(0, 1),
)
