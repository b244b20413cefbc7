"""How step sizes are printed, in figures, tables, legends and reprs: the one γ-label helper.

Pure Python (no matplotlib), so :mod:`rpd.io.result_io`'s repr and the table printer use it too;
:mod:`rpd.plotting.style` re-exports it.
"""

from __future__ import annotations

import math

_SUPERSCRIPT = str.maketrans("0123456789-+", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺")


def pow2_label(k) -> str:
    """2 to the integer power ``k`` in unicode superscripts: -4 -> "2⁻⁴", 0 -> "2⁰", 3 -> "2³";
    None (no γ picked) -> "none"."""
    return "none" if k is None else "2" + str(int(k)).translate(_SUPERSCRIPT)


def gamma_label(gamma) -> str:
    """A step size as it is printed: a power of two as "2⁻⁴" (:func:`pow2_label`), any other
    positive value as a plain number ("0.3"), None as "none", a non-positive or non-finite value
    as str(value). Text only (no mathtext), so PNG, PDF, legends and terminals show it alike."""
    if gamma is None:
        return "none"
    g = float(gamma)
    if math.isfinite(g) and g > 0:
        k = math.log2(g)
        if abs(k - round(k)) < 1e-9:
            return pow2_label(round(k))
        return f"{g:.3g}"
    return str(g)


def gamma_grid_label(exps) -> str:
    """The power-of-two grid 2^lo..2^hi as "{2⁻⁸, …, 2⁰}"."""
    lo, hi = exps
    return "{" + f"{pow2_label(lo)}, …, {pow2_label(hi)}" + "}"
