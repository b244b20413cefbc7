"""torch.distributed.pipelining's text forms of a schedule, both ways (docs/schedules.md#torchs-text-form). Text only:
torch is never imported.

**Actions.** torch's ``pipeline_order`` maps rank -> list of actions (``None`` = idle). A
compute action prints as ``{stage}{type}{microbatch}``, type ``F`` (forward), ``I`` (backward
with respect to the input), ``W`` (backward with respect to the weights) or ``B`` (full
backward): ``2F0``, ``1I3``, ``0W2``, ``3B1``. Overlapped ops print as
``(0F7;7B3)OVERLAP_F_B``, the sub-actions in the order the rank issues them. In rpd's IR
(:mod:`rpd.schedules.machinery.ir`) that pair is two rows, the second with ``fused = 1``; a run of more
than two fused rows becomes one container with that many sub-actions.

**Parsing** follows torch's ``_Action.from_str``: surrounding whitespace is stripped, an empty
string or ``None`` is an idle and is skipped (rpd's IR has no idles), an action is
``(\\d+)(type)(\\d*)`` and a container is ``(sub;sub;...)TYPE``, empty sub-actions skipped.
Where torch is lax, this parser refuses with a ``ValueError`` naming the rank and the text:

* text after the action (torch's ``re.match`` reads ``0F1x`` as ``0F1``), or a compute action
  with no microbatch (torch gives ``microbatch_index=None`` and fails later);
* a container other than ``OVERLAP_F_B``, or with nested parentheses;
* communication, resharding and gradient-reduce actions (``SEND_F``, ``RECV_F``, ``SEND_B``,
  ``RECV_B``, ``UNSHARD``, ``RESHARD``, ``REDUCE_GRAD``), which torch derives from the
  compute-only form (``_prepare_schedule_with_comms``): pass ``compute_only=True`` to drop them
  instead (so a ``compute_comms`` dump imports as its compute order).

**Legacy naming.** Older torch artifacts (e.g. torch's own
``test/distributed/pipelining/artifacts/zb1p_2rank_2stagep_*.csv``) wrote backward-input as
``B`` and the full backward as ``BW``. ``legacy=True`` reads that naming (``B`` -> I,
``BW`` -> B, ``W`` -> W) and then refuses ``I``; the default (current) naming refuses ``BW``.
Export always writes the current naming.

**CSV** (``PipelineScheduleMulti._dump_csv`` / ``_load_csv(format="compute_only")``): one row
per rank in rank order, one field per action, an empty field for an idle, written by Python's
:mod:`csv` module (so rows end ``\\r\\n`` by default, as torch's). :func:`from_csv` reads with
:mod:`csv` too, so quoting and line ends behave as in torch; as in torch, an empty row is a rank
with no actions. One extension: lines starting with ``#`` are comments and skipped (torch would
refuse them).

Round trip: ``from_actions(to_actions(o))`` and ``from_csv(to_csv(o))`` give arrays equal to
``o``'s (int32 ``[n, 4]`` per rank) for any order with known kinds, non-negative stages and
microbatches, and no fused first row.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping

import numpy as np

from rpd.schedules.machinery.ir import BWD, BWD_I, BWD_W, FWD, Col, Order

CURRENT_NAMES = {"F": FWD, "I": BWD_I, "W": BWD_W, "B": BWD}
LEGACY_NAMES = {"F": FWD, "B": BWD_I, "W": BWD_W, "BW": BWD}
EXPORT_NAMES = {FWD: "F", BWD_I: "I", BWD_W: "W", BWD: "B"}
NON_COMPUTE = ("UNSHARD", "RESHARD", "REDUCE_GRAD", "SEND_F", "RECV_F", "SEND_B", "RECV_B")
OVERLAP = "OVERLAP_F_B"

# the type alternatives are tried longest first, so "BW" and "SEND_F" are never cut short
_TYPES = sorted(set(CURRENT_NAMES) | set(LEGACY_NAMES) | set(NON_COMPUTE), key=len, reverse=True)
_SINGLE = re.compile(r"(\d+)(" + "|".join(_TYPES) + r")(\d*)")
_CONTAINER = re.compile(r"\(([^()]*)\)([A-Z_]+)")


# -- export ----------------------------------------------------------------------------------


def to_actions(order: Order) -> dict[int, list[str]]:
    """rank -> torch action strings in execution order (no idles); a row with ``fused = 1``
    joins the previous action in an ``OVERLAP_F_B`` container."""
    out: dict[int, list[str]] = {}
    for r, a in enumerate(order):
        a = np.asarray(a)
        groups: list[list[str]] = []
        for i, row in enumerate(a.reshape(-1, 4).tolist()):
            kind, stage, mb, fused = row
            if kind not in EXPORT_NAMES:
                raise ValueError(f"rank {r}, op {i}: kind {kind} has no torch name (IDLE rows are not ops)")
            if stage < 0 or mb < 0:
                raise ValueError(f"rank {r}, op {i}: stage {stage} / microbatch {mb} must be >= 0")
            if fused not in (0, 1):
                raise ValueError(f"rank {r}, op {i}: fused must be 0 or 1, got {fused}")
            text = f"{stage}{EXPORT_NAMES[kind]}{mb}"
            if fused:
                if not groups:
                    raise ValueError(f"rank {r}: the first op cannot be fused with a predecessor")
                groups[-1].append(text)
            else:
                groups.append([text])
        out[r] = [g[0] if len(g) == 1 else f"({';'.join(g)}){OVERLAP}" for g in groups]
    return out


def to_csv(order: Order, *, lineterminator: str = "\r\n") -> str:
    """torch's compute-only CSV of ``order``: one row per rank, one field per action (no idle
    fields: torch re-derives waits). ``\\r\\n`` line ends by default, as ``csv.writer``
    (torch's ``_dump_csv``) writes them."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator=lineterminator)
    for acts in to_actions(order).values():
        writer.writerow(acts)
    return buf.getvalue()


# -- import ----------------------------------------------------------------------------------


def from_actions(
    actions: Mapping[int, Iterable] | Iterable[Iterable], *, legacy: bool = False, compute_only: bool = False
) -> Order:
    """An rpd order from torch's ``pipeline_order`` (a dict rank -> actions, or a list of
    per-rank lists). An action is a string or anything whose ``str()`` is one (torch's
    ``_Action``); ``None`` and blank strings are idles and are skipped. The dict's keys must be
    exactly the ranks 0..n-1, as torch's ``_validate_schedule`` requires."""
    per_rank = dict(actions) if isinstance(actions, Mapping) else dict(enumerate(actions))
    if sorted(per_rank) != list(range(len(per_rank))):
        raise ValueError(f"ranks must be 0..n-1, got {sorted(per_rank)}")
    names = LEGACY_NAMES if legacy else CURRENT_NAMES
    order = []
    for r in range(len(per_rank)):
        rows: list[tuple[int, int, int, int]] = []
        for step, act in enumerate(per_rank[r]):
            if act is None:
                continue
            text = str(act).strip()
            if not text:
                continue
            for k, op in enumerate(_parse_entry(text, names, legacy, compute_only, r, step)):
                rows.append(op + (1 if k else 0,))
        arr = np.zeros((len(rows), 4), np.int32)
        if rows:
            arr[:] = rows
        order.append(arr)
    return order


def from_csv(text: str, *, legacy: bool = False, compute_only: bool = False) -> Order:
    """An rpd order from torch's compute-only CSV text (rows = ranks, empty fields = idles,
    ``#`` lines skipped). See :func:`from_actions` for ``legacy`` and ``compute_only``."""
    body = [ln for ln in io.StringIO(text, newline="") if not ln.lstrip().startswith("#")]
    rows = list(csv.reader(body))
    return from_actions(rows, legacy=legacy, compute_only=compute_only)


def _parse_entry(
    text: str, names: dict, legacy: bool, compute_only: bool, rank: int, step: int
) -> list[tuple[int, int, int]]:
    """(kind, stage, mb) per compute op of one field: one for an action, one per sub-action
    for an overlap container, none for a dropped non-compute action."""
    where = f"rank {rank}, step {step}"
    if text.startswith("("):
        box = _CONTAINER.fullmatch(text)
        if box is None:
            raise ValueError(f"{where}: cannot parse torch container action {text!r} (expected '(sub;sub){OVERLAP}')")
        inner, ctype = box.groups()
        if ctype != OVERLAP:
            raise ValueError(f"{where}: container type {ctype!r} in {text!r} is not {OVERLAP}")
        out = []
        for sub in inner.split(";"):
            sub = sub.strip()
            if sub:
                out += _parse_single(sub, names, legacy, compute_only, where)
        return out
    return _parse_single(text, names, legacy, compute_only, where)


def _parse_single(text: str, names: dict, legacy: bool, compute_only: bool, where: str) -> list[tuple[int, int, int]]:
    hit = _SINGLE.fullmatch(text)
    if hit is None:
        raise ValueError(f"{where}: cannot parse torch action {text!r} (expected [stage][type][microbatch], e.g. 2F0)")
    stage, ctype, mb = hit.groups()
    if ctype in NON_COMPUTE:
        if compute_only:
            return []
        raise ValueError(
            f"{where}: {text!r} is not a compute action; pass compute_only=True to "
            f"drop communication / resharding / gradient-reduce actions"
        )
    if ctype not in names:
        hint = "legacy=False" if legacy else "legacy=True"
        raise ValueError(
            f"{where}: action type {ctype!r} in {text!r} is not known in "
            f"{'legacy' if legacy else 'current'} naming (try {hint})"
        )
    if mb == "":
        raise ValueError(f"{where}: compute action {text!r} names no microbatch")
    return [(names[ctype], int(stage), int(mb))]


# -- placement -------------------------------------------------------------------------------


def stage_to_rank(order: Order, *, replicated: bool = False) -> dict[int, int] | dict[int, tuple[int, ...]]:
    """The stage -> rank placement an order implies, inferred as torch's ``_validate_schedule``
    does (every op of a stage names the rank that runs it), sorted by stage.

    A stage on two ranks is an error, as in torch, unless ``replicated=True`` (Chimera's two
    pipelines hold a replica of every stage): then every stage maps to the sorted tuple of the
    ranks that run it."""
    where: dict[int, set[int]] = {}
    for r, a in enumerate(order):
        a = np.asarray(a).reshape(-1, 4)
        for g in np.unique(a[:, Col.STAGE]).tolist():
            where.setdefault(int(g), set()).add(r)
    if replicated:
        return {g: tuple(sorted(rs)) for g, rs in sorted(where.items())}
    for g, rs in sorted(where.items()):
        if len(rs) > 1:
            a, b = sorted(rs)[:2]
            raise ValueError(
                f"stage {g} runs on ranks {a} and {b} (pass replicated=True for "
                f"schedules that replicate stages, e.g. Chimera)"
            )
    return {g: next(iter(rs)) for g, rs in sorted(where.items())}
