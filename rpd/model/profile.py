"""A model from a user's profile file: measured time and bytes per layer (docs/plan.md, "A measured model: profile files").

JSON: ``{"name": ..., "tokens_per_microbatch": ..., "layers": [{...}, ...]}`` or just the list
of layers. CSV: one row per layer with a header. Fields per layer:

* ``name`` (required), ``params`` (required, values);
* ``fwd_s`` (required): forward seconds per microbatch; the backward as ``i_s`` and ``w_s``, or
  ``bwd_s`` (split I = W = bwd_s / 2), default I = W = fwd_s;
* ``act_bytes`` (kept for the backward), ``act_w_bytes`` (of those, what W still needs; default
  0), ``out_bytes`` (sent to the next stage), default 0;
* ``flops_fwd`` (optional, for MFU; the backward counted as twice it), ``kind`` (embedding /
  block / head, default block).

Errors name the file's field: ``layers[3].fwd_s must be >= 0``.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from rpd.model.layers import Layer, Model
from rpd.validation import check_int, check_real

_FIELDS = (
    "name",
    "params",
    "fwd_s",
    "bwd_s",
    "i_s",
    "w_s",
    "act_bytes",
    "act_w_bytes",
    "out_bytes",
    "flops_fwd",
    "kind",
)


def _number(where: str, value, integer: bool):
    if isinstance(value, str):
        try:
            value = float(value) if not integer else int(float(value))
        except ValueError:
            raise ValueError(f"{where} must be a number, got {value!r}") from None
    if integer:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return check_int(where, value, minimum=0)
    return check_real(where, value, allow_zero=True)


def layer_from_row(row: dict, i: int) -> Layer:
    """One :class:`Layer` of a profile row (a dict of the module docstring's fields)."""
    where = f"layers[{i}]"
    unknown = sorted(set(row) - set(_FIELDS))
    if unknown:
        raise ValueError(f"{where} has unknown fields {unknown}; known: {list(_FIELDS)}")
    for f in ("name", "params", "fwd_s"):
        if row.get(f) in (None, ""):
            raise ValueError(f"{where}.{f} is required")
    get = lambda f, integer=False, default=None: (  # noqa: E731
        default if row.get(f) in (None, "") else _number(f"{where}.{f}", row[f], integer)
    )
    fwd = get("fwd_s")
    if row.get("i_s") not in (None, "") or row.get("w_s") not in (None, ""):
        if row.get("i_s") in (None, "") or row.get("w_s") in (None, ""):
            raise ValueError(f"{where}.i_s and {where}.w_s must be given together")
        t_i, t_w = get("i_s"), get("w_s")
    elif row.get("bwd_s") not in (None, ""):
        t_i = t_w = get("bwd_s") / 2
    else:
        t_i = t_w = fwd
    flops = get("flops_fwd", default=0.0)
    return Layer(
        name=str(row["name"]),
        params=get("params", True),
        flops_fwd=flops,
        flops_i=flops,
        flops_w=flops,
        act_bytes=get("act_bytes", True, 0),
        act_w_bytes=get("act_w_bytes", True, 0),
        out_bytes=get("out_bytes", True, 0),
        kind=str(row.get("kind") or "block"),
        time_fwd=fwd,
        time_i=t_i,
        time_w=t_w,
    )


def load_profile(path, tokens_per_microbatch: int | None = None) -> Model:
    """The :class:`Model` of a JSON or CSV profile file (by its suffix)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"profile file not found: {path}")
    name, tokens = path.stem, tokens_per_microbatch
    rows: object  # the layer rows: a list of objects, checked below
    if path.suffix.lower() == ".csv":
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    elif path.suffix.lower() == ".json":
        data = json.loads(path.read_text())
        if isinstance(data, dict):
            name = data.get("name", name)
            tokens = tokens if tokens is not None else data.get("tokens_per_microbatch")
            rows = data.get("layers")
        else:
            rows = data
        if not isinstance(rows, list):
            raise ValueError(f"{path}: layers must be a list of objects")
    else:
        raise ValueError(f"profile file must end in .json or .csv, got {path.name}")
    tokens = check_int("tokens_per_microbatch", 1 if tokens is None else tokens)
    return Model(
        name=str(name), layers=tuple(layer_from_row(r, i) for i, r in enumerate(rows)), tokens_per_microbatch=tokens
    )
