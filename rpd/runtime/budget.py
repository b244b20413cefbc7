"""Memory budget: a run's size estimate is checked before anything is allocated.

An entry point lists the big allocations of a run as :class:`Term` s (bytes, and the config
fields that set them) and calls :func:`check`, which refuses a run whose total exceeds the cap
with an error naming the fields of the largest term and the values they were given. The cap is ``$RPD_MAX_MEMORY_GB`` when set,
otherwise the memory the operating system reports available (Linux ``MemAvailable``). The
estimates are upper bounds of the right order, not exact: their job is to turn a typo
(``schedule.noam=1000000000``) into an error in a second instead of a swap storm or a 3 TB
allocation minutes later.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Sequence

CAP_ENV = "RPD_MAX_MEMORY_GB"
GB = 1 << 30


class TooLargeError(ValueError):
    """A run's estimated memory exceeds the cap; the message names the fields that set it."""


class Term(NamedTuple):
    what: str  # e.g. "schedule op table"
    fields: tuple[str, ...]  # the config fields that set it, e.g. ("schedule.N", "schedule.S")
    nbytes: int
    values: tuple[str, ...] = ()  # the user's values of those fields, e.g. ("schedule.N=512",)


def available_bytes() -> int | None:
    """Memory the OS reports available now (Linux ``MemAvailable``); None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def cap_bytes() -> tuple[int | None, str]:
    """(cap in bytes or None for no cap, what it is) — ``$RPD_MAX_MEMORY_GB`` or available memory."""
    text = os.environ.get(CAP_ENV)
    if text:
        try:
            gb = float(text)
        except ValueError:
            raise ValueError(f"${CAP_ENV} must be a number of GiB, got {text!r}") from None
        if not gb > 0:
            raise ValueError(f"${CAP_ENV} must be > 0, got {text!r}")
        return int(gb * GB), f"${CAP_ENV}"
    return available_bytes(), "the available memory"


def _fmt(n: float) -> str:
    return f"{n / GB:.3g} GiB" if n >= GB / 10 else f"{n / (1 << 20):.3g} MiB"


def check(terms: Sequence[Term], cap: int | None = None) -> int:
    """The estimated total in bytes; raises :class:`TooLargeError` when it exceeds ``cap``
    (default :func:`cap_bytes`), naming the fields of the largest term."""
    total = sum(t.nbytes for t in terms)
    what = "the cap"
    if cap is None:
        cap, what = cap_bytes()
    if cap is None or total <= cap or not terms:
        return total
    big = max(terms, key=lambda t: t.nbytes)
    given = f" ({', '.join(big.values)})" if big.values else ""
    raise TooLargeError(
        f"{', '.join(big.fields)} too large{given}: the run needs about {_fmt(total)} ({big.what}: "
        f"{_fmt(big.nbytes)}), more than {what} ({_fmt(cap)}). Lower {' or '.join(big.fields)}"
        f"{'' if what == f'${CAP_ENV}' else f', or set ${CAP_ENV} if the estimate is wrong'}."
    )
