"""Time to a loss at scale (docs/scale.md): loss laws L(N, D), the effective-token
multiplier κ of each method and its sources.

hours_m(L) = κ_m · tokens_sync(L) / throughput_m. The modules: :mod:`~rpd.analysis.scale.laws`
(L(N, D), its inverse in D, κ from a loss gap), :mod:`~rpd.analysis.scale.published` (DiLoCo's
gap fitted on the published development rows), :mod:`~rpd.analysis.scale.simulated` (E18's
simulated κ law), :mod:`~rpd.analysis.scale.effective` (the face: a method's κ with its sources).
"""

from rpd.analysis.scale.effective import METHODS, EffectiveTokens, effective_tokens, relative_loss_gap, tokens_to_loss
from rpd.analysis.scale.laws import BESIROGLU, CHINCHILLA, LAWS, LossLaw, gap_from_kappa, get_law, kappa_from_gap

__all__ = [
    "BESIROGLU",
    "CHINCHILLA",
    "LAWS",
    "METHODS",
    "EffectiveTokens",
    "LossLaw",
    "effective_tokens",
    "gap_from_kappa",
    "get_law",
    "kappa_from_gap",
    "relative_loss_gap",
    "tokens_to_loss",
]
