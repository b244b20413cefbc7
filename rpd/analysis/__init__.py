"""Reading results: simulated time, step-size selection, the paper's theory, crossovers.

The modules (docs/api.md): :mod:`~rpd.analysis.simtime` (time axes and the equal-time
protocols), :mod:`~rpd.analysis.tuning` (step-size grids and selectors),
:mod:`~rpd.analysis.theory` (the bound, fits), :mod:`~rpd.analysis.crossover`,
:mod:`~rpd.analysis.kappa` (the effective-token multiplier κ read off loss curves, its power law in N),
:mod:`~rpd.analysis.scale` (loss laws and each method's effective-token multiplier κ, docs/scale.md),
:mod:`~rpd.analysis.stragglers` and :mod:`~rpd.analysis.what_if` (a measured trace's slowdown,
attribution and what-if; docs/replay.md).
"""

from rpd.analysis import crossover, kappa, scale, simtime, stragglers, theory, tuning, what_if

__all__ = ["crossover", "kappa", "scale", "simtime", "stragglers", "theory", "tuning", "what_if"]
