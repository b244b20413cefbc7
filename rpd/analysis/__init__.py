"""Reading results: simulated time, step-size selection, the paper's theory, crossovers.

The modules (docs/api.md): :mod:`~rpd.analysis.simtime` (time axes and the equal-time
protocols), :mod:`~rpd.analysis.tuning` (step-size grids and selectors),
:mod:`~rpd.analysis.theory` (the bound, fits), :mod:`~rpd.analysis.crossover`,
:mod:`~rpd.analysis.kappa` (the effective-token multiplier κ read off loss curves, its power law in N).
"""

from rpd.analysis import crossover, kappa, simtime, theory, tuning

__all__ = ["crossover", "kappa", "simtime", "theory", "tuning"]
