"""The plan's answer, not only its table (docs/plan.md#the-answer): which row to use, what to change
when nothing fits, and the chosen row's bytes per rank.

* :func:`parse_bytes`: a memory cap with its unit, ``40GiB``, ``80GB``, ``8.5e10`` (bytes);
  GB = 10⁹ bytes, GiB = 2³⁰; a bare number below 1 MiB is refused (a size missing its unit).
* :func:`answer`: the first lines of the plan -- the fastest *synchronous* row that fits (its
  worst rank's peak at most (1 − margin) × the cap), then the fastest row that fits overall when
  that one is asynchronous, with its stale delay (updates between the weights a gradient was
  computed on and the ones it is applied to).
* :func:`knob_lines`: when nothing fits, what does, from rows the caller computed with one knob
  changed each (recomputation, TP, ZeRO, more stages, a smaller micro-batch).
* :func:`breakdown_lines`: the chosen row's bytes per rank by kind.
"""

from __future__ import annotations

import re

from rpd.model.plan import Row
from rpd.validation import required

UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
KINDS = (
    "weights",
    "master_weights",
    "gradients",
    "optimizer",
    "stashed_versions",
    "activations",
    "offloaded",
    "buffers",
)


# a bare number below this is a size missing its unit (memory_cap=1 meant 1 GiB, not one byte)
BARE_MIN = 2**20
UNIT_NAMES = "B, kB, MB, GB, TB, KiB, MiB, GiB, TiB"


def parse_bytes(value, field: str = "memory_cap") -> float:
    """Bytes of ``value``: a number (bytes, at least 1 MiB) or a string with a unit (module
    docstring)."""
    if isinstance(value, bool):
        raise TypeError(f"{field} must be bytes or a size like 40GiB, got {value!r}")
    unit = ""
    if isinstance(value, (int, float)):
        out = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(value))
        if m is None or m.group(2).lower() not in UNITS:
            raise ValueError(f"{field} must be bytes or a size like 40GiB, 80GB, 512MiB; got {value!r}")
        unit = m.group(2)
        out = float(m.group(1)) * UNITS[unit.lower()]
    if not out > 0:
        raise ValueError(f"{field} must be > 0, got {value!r}")
    if not unit and out < BARE_MIN:
        raise ValueError(
            f"{field}={value!r} without a unit is {out:g} bytes, below 1 MiB: give its unit "
            f"({UNIT_NAMES}), e.g. {field}={value!r}GiB"
        )
    return out


def describe(r: Row) -> str:
    """One row as a configuration a user can type."""
    v = f", v={r.v}" if r.v and r.v > 1 else ""  # a schedule with chunks per rank as a parameter
    sp = ", SP" if r.SP else ""
    z = f", zero={r.zero}" if r.zero else ""
    off = ", offload" if r.offload else ""
    if r.replicas is not None:  # PipeDream's partitioner: stage g on replicas[g] groups of TP workers
        reps = ",".join(map(str, r.replicas))
        return f"{r.schedule} with TP={r.TP}{sp}, S={r.S}, replicas=({reps}), recompute={r.recompute}"
    cp = f", CP={r.CP}" if r.CP > 1 else ""
    return f"{r.schedule}{v} with TP={r.TP}{sp}{cp}, S={r.S}, D={r.D}, M={r.M}{z}, recompute={r.recompute}{off}"


def workers_of(r: Row) -> int:
    """Workers a row uses: TP·CP·S·D, or TP times the replicas of PipeDream's partitioner."""
    return r.TP * (sum(r.replicas) if r.replicas is not None else r.CP * r.S * r.D)


def _tokens_per_s(r: Row) -> float:
    """A row without an error has its numbers: tokens/s, the key every choice here ranks by."""
    return required("tokens_per_s", r.tokens_per_s)


def mfu_text(r: Row) -> str:
    """MFU as the table prints it: a fraction of peak, three decimals (n/a without FLOPs)."""
    return "n/a" if r.mfu is None else f"{r.mfu:.3f}"


def _speed(r: Row, cap: float) -> str:
    step_s, peak = required("step_time_s", r.step_time_s), required("peak_bytes", r.peak_bytes)
    return (
        f"{r.tokens_per_s:,.0f} tokens/s, step {step_s * 1e3:,.1f} ms, MFU {mfu_text(r)}, "
        f"peak {max(peak) / 2**30:.1f} of {cap / 2**30:.1f} GiB"
    )


def rank_key(r: Row) -> tuple:
    """The order of rows: those without an error that fit first, then by tokens/s (fastest
    first), ties by the worst rank's peak bytes (least first), then those that do not fit, then
    the refused."""
    peak = max(r.peak_bytes) if r.peak_bytes else float("inf")
    return (r.error is not None, not r.fits, -(r.tokens_per_s or 0.0), peak)


def best_first(rows: list[Row]) -> list[Row]:
    """``rows`` in :func:`rank_key`'s order."""
    return sorted(rows, key=rank_key)


def choose(rows: list[Row]) -> tuple[Row | None, Row | None]:
    """(fastest synchronous row that fits, fastest row that fits) by tokens/s; at equal speed the
    one with the smaller peak (1F1B before GPipe)."""
    ok = best_first([r for r in rows if r.error is None and r.fits])
    sync = [r for r in ok if r.synchronous is not False]
    return (sync[0] if sync else None), (ok[0] if ok else None)


def answer(rows: list[Row], cap: float, margin: float) -> list[str]:
    """The plan's first lines (module docstring); ``cap`` bytes per device."""
    best_sync, best = choose(rows)
    if best is None:
        return [f"nothing fits in {cap / 2**30:.1f} GiB per device with a {margin:.0%} margin"]
    lines = []
    if best_sync is not None:
        lines.append(f"use: {describe(best_sync)}: {_speed(best_sync, cap)} ({margin:.0%} margin)")
    else:
        lines.append(f"no synchronous schedule fits in {cap / 2**30:.1f} GiB with a {margin:.0%} margin")
    if best is not best_sync and best.synchronous is False:
        gain = _tokens_per_s(best) / _tokens_per_s(best_sync) - 1 if best_sync is not None else None
        more = f", {gain:+.0%} over the synchronous answer" if gain is not None else ""
        lines.append(
            f"fastest overall (asynchronous, gradients stale by up to {best.max_delay} updates, weights "
            f"in {best.weight_versions} versions): {describe(best)}: {_speed(best, cap)}{more}"
        )
    return lines


def knob_lines(tried: dict[str, list[Row]], skipped: dict[str, str] | None = None) -> list[str]:
    """For each knob (its label -> the rows computed with it), what fits and the fastest of it;
    ``skipped``: the knobs that cannot apply (label -> why)."""
    out = [f"  {knob}: cannot apply ({why})" for knob, why in (skipped or {}).items()]
    for knob, rows in tried.items():
        fit = [r for r in rows if r.error is None and r.fits]
        if fit:
            best = best_first(fit)[0]
            names = sorted({r.schedule for r in fit})
            out.append(
                f"  {knob}: {len(fit)} of {len(rows)} rows fit ({', '.join(names)}); fastest "
                f"{best.schedule} M={best.M}, {best.tokens_per_s:,.0f} tokens/s, peak "
                f"{max(required('peak_bytes', best.peak_bytes)) / 2**30:.1f} GiB"
            )
        else:
            out.append(f"  {knob}: none of {len(rows)} rows fits")
    return out


def breakdown_lines(r: Row, limit: int = 8) -> list[str]:
    """Bytes per rank by kind (GiB) of row ``r``: every rank up to ``limit`` ranks, else the first,
    the worst and the last."""
    mem, peak = required("memory", r.memory), required("peak_bytes", r.peak_bytes)
    S = len(mem["weights"])
    worst = max(range(S), key=lambda i: peak[i])
    ranks = list(range(S)) if S <= limit else sorted({0, worst, S - 1})
    head = "rank  " + "  ".join(f"{k:>16}" for k in (*KINDS, "peak")) + "  (GiB)"
    lines = [head]
    for i in ranks:
        cells = [mem[k][i] / 2**30 for k in KINDS] + [peak[i] / 2**30]
        lines.append(f"{i:>4}  " + "  ".join(f"{c:>16.2f}" for c in cells) + ("  worst" if i == worst else ""))
    return lines
