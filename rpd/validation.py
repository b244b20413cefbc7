"""Argument checks shared by every constructor: fail before any work, naming the argument."""

from __future__ import annotations

import difflib
import math
import numbers
import re
from collections.abc import Mapping
from typing import TypeVar

import numpy as np

T = TypeVar("T")


def check_int(name: str, value, minimum: int = 1) -> int:
    """An integer >= ``minimum`` (bools and floats are rejected, even 3.0)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_real(name: str, value, *, positive: bool = True, allow_zero: bool = False) -> float:
    """A finite real number; > 0 by default, >= 0 with ``allow_zero``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise TypeError(f"{name} must be a finite number, got {value!r}")
    if positive and (value < 0 or (value == 0 and not allow_zero)):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return float(value)


def required(name: str, value: T | None) -> T:
    """``value``, which the caller's kind of object always sets (a LocalSGD timeline's H, a
    flush schedule's M); a one-line ValueError naming ``name`` if it is None."""
    if value is None:
        raise ValueError(f"{name} must be set here, got None")
    return value


def nearest(word: str, choices, n: int = 3) -> list[str]:
    """The choices closest to ``word`` (difflib), best first; case-insensitive."""
    by_lower = {str(c).lower(): str(c) for c in choices}
    close = [by_lower[m] for m in difflib.get_close_matches(word.lower(), list(by_lower), n=n, cutoff=0.5)]
    stem = word.lower()  # else the choices sharing its longest prefix (2+ characters): e3x -> e3_nesterov
    while not close and len(stem) >= 2:
        close = [c for low, c in by_lower.items() if low.startswith(stem)][:n]
        stem = stem[:-1]
    return close


def check_choice(name: str, value: T, choices) -> T:
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")
    return value


def qualify(message: str, names: Mapping[str, str], prefix: str) -> str:
    """``message`` with each argument name of ``names`` (as a whole word, not already dotted)
    replaced by ``prefix + names[name]``: the library says ``M must be >= 1``, an entry point
    ``schedule.M must be >= 1``."""
    if not names:
        return message
    pattern = r"(?<![\w.])(" + "|".join(sorted(map(re.escape, names), key=len, reverse=True)) + r")(?!\w)"
    return re.sub(pattern, lambda m: prefix + names[m.group(1)], message)


def check_gammas(gamma) -> np.ndarray:
    """float64 [G]: a step size or a 1-d grid of them, each finite and positive."""
    try:
        g = np.atleast_1d(np.asarray(gamma, dtype=np.float64))
    except (TypeError, ValueError):
        raise TypeError(f"gamma must be a number or a 1-d array of numbers, got {gamma!r}") from None
    if g.ndim != 1 or g.size == 0:
        raise ValueError(f"gamma must be a number or a 1-d array, got shape {g.shape}")
    for v in g:
        check_real("gamma", float(v))
    return g
