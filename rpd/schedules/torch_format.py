"""torch.distributed.pipelining's text forms of a schedule, both ways (ZOO.md §7; no torch import).

An action is ``"{stage}{type}{microbatch}"`` -- ``2F0``, ``1I3``, ``0W2``, ``3B1`` -- and an
overlapped pair ``"(0F7;7B3)OVERLAP_F_B"``. A schedule is ``pipeline_order``: rank -> list of
actions (``None`` = idle), and the compute-only CSV has one row per rank, one field per action,
an empty field for an idle. Older torch artifacts named backward-input ``B`` and the full
backward ``BW``: read them with ``legacy=True``. Communication, resharding and gradient-reduce
actions (``SEND_F``, ``RECV_B``, ``UNSHARD``, ``REDUCE_GRAD``, ...) are lowered by torch from
the compute-only form; importing them is an error unless ``compute_only=True`` drops them.
"""

from __future__ import annotations

import re

import numpy as np

from rpd.schedules.ir import BWD, BWD_I, BWD_W, FWD, Order, ops

_COMPUTE = {"F": FWD, "I": BWD_I, "W": BWD_W, "B": BWD}
_LEGACY = {"F": FWD, "B": BWD_I, "W": BWD_W, "BW": BWD}
_OTHER = ("UNSHARD", "RESHARD", "REDUCE_GRAD", "SEND_F", "RECV_F", "SEND_B", "RECV_B")
_ACTION = re.compile(r"^(\d+)(F|I|B|W|BW|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)$")
_PAIR = re.compile(r"^\((.+);(.+)\)OVERLAP_F_B$")
_NAME = {FWD: "F", BWD: "B", BWD_I: "I", BWD_W: "W"}


def to_actions(order: Order) -> dict[int, list[str]]:
    """rank -> torch action strings, fused pairs as ``(aFx;bBy)OVERLAP_F_B``; no idles."""
    out = {}
    for r, a in enumerate(order):
        acts: list[str] = []
        for kind, g, m, fused in np.asarray(a).tolist():
            text = f"{g}{_NAME[kind]}{m}"
            if fused:
                acts[-1] = f"({acts[-1]};{text})OVERLAP_F_B"
            else:
                acts.append(text)
        out[r] = acts
    return out


def from_actions(actions, *, legacy: bool = False, compute_only: bool = False) -> Order:
    """Parse rank -> actions (a dict or a list of lists; ``None`` / ``""`` are idles)."""
    table = _LEGACY if legacy else _COMPUTE
    ranks = actions if isinstance(actions, dict) else dict(enumerate(actions))
    if sorted(ranks) != list(range(len(ranks))):
        raise ValueError(f"ranks must be 0..n-1, got {sorted(ranks)}")
    order = []
    for r in range(len(ranks)):
        rows = []
        for text in ranks[r]:
            if text is None or not str(text).strip():
                continue
            text = str(text).strip()
            pair = _PAIR.match(text)
            if pair:
                first, second = (_parse(p.strip(), table, r, compute_only) for p in pair.groups())
                rows += [first, second[:3] + (1,)]
                continue
            row = _parse(text, table, r, compute_only)
            if row is not None:
                rows.append(row)
        order.append(ops(rows))
    return order


def _parse(text: str, table: dict, rank: int, compute_only: bool):
    hit = _ACTION.match(text)
    if hit is None:
        raise ValueError(f"rank {rank}: cannot parse torch action {text!r}")
    stage, kind, mb = hit.groups()
    if kind in _OTHER:
        if compute_only:
            return None
        raise ValueError(f"rank {rank}: {text!r} is not a compute action (pass compute_only=True to drop "
                         "communication / resharding / reduce actions)")
    if kind not in table:
        raise ValueError(f"rank {rank}: action type {kind!r} is not known in "
                         f"{'legacy' if table is _LEGACY else 'current'} naming")
    if mb == "":
        raise ValueError(f"rank {rank}: compute action {text!r} has no microbatch")
    return (table[kind], int(stage), int(mb), 0)


def to_csv(order: Order) -> str:
    """torch's compute-only CSV: one line per rank, comma-separated actions."""
    return "\n".join(",".join(acts) for acts in to_actions(order).values()) + "\n"


def from_csv(text: str, *, legacy: bool = False, compute_only: bool = False) -> Order:
    """Parse a compute-only CSV (``_dump_csv`` / ``_load_csv`` format); empty fields are idles.
    A fused pair's ``;`` is inside parentheses, so fields split on top-level commas only."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return from_actions([_fields(ln) for ln in lines], legacy=legacy, compute_only=compute_only)


def _fields(line: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in line:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def stage_to_rank(order: Order) -> dict[int, int]:
    """The placement an order implies (as torch's ``_validate_schedule`` infers it); a stage on
    two ranks (Chimera's replicas) is an error here."""
    where: dict[int, int] = {}
    for r, a in enumerate(order):
        for g in np.unique(np.asarray(a)[:, 1]).tolist() if len(a) else []:
            if where.setdefault(int(g), r) != r:
                raise ValueError(f"stage {g} runs on ranks {where[g]} and {r}")
    return where
