"""A study unit's result in the results store, exactly: what a fanned-out job stores and the
figure assembles from (docs/running.md#figures-on-a-cluster-fan-out).

A payload is any nest of dicts (str keys), lists, tuples, str, int, float, bool, None, NumPy
arrays and NumPy scalars. :func:`encode` splits it into strict JSON and a dict of arrays; the
JSON tags what plain JSON would change (``{"__tuple__": [...]}``, ``{"__float__": "nan"}``,
``{"__array__": key}``, ``{"__scalar__": key}``), so :func:`decode` gives back equal values of
the same types, arrays bit for bit. :func:`save` / :func:`load` put one payload in a run
directory of ``rpd.io.store`` (atomic, checksummed, complete only when marked).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from rpd.io import store

TAGS = ("__tuple__", "__float__", "__array__", "__scalar__")


def encode(value: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """(strict-JSON nest, arrays by key) of ``value``; TypeError names what cannot be stored."""
    arrays: dict[str, np.ndarray] = {}

    def enc(v: Any, where: str) -> Any:
        if isinstance(v, np.ndarray):
            key = f"a{len(arrays)}"
            arrays[key] = v
            return {"__array__": key}
        if isinstance(v, np.generic):
            key = f"a{len(arrays)}"
            arrays[key] = np.asarray(v)
            return {"__scalar__": key}
        if v is None or isinstance(v, (str, bool, int)):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {"__float__": repr(v)}
        if isinstance(v, tuple):
            return {"__tuple__": [enc(x, f"{where}[{i}]") for i, x in enumerate(v)]}
        if isinstance(v, list):
            return [enc(x, f"{where}[{i}]") for i, x in enumerate(v)]
        if isinstance(v, Mapping):
            if not all(isinstance(k, str) for k in v) or (len(v) == 1 and next(iter(v)) in TAGS):
                raise TypeError(f"{where}: only dicts with str keys (not one of {TAGS} alone) can be stored")
            return {k: enc(x, f"{where}.{k}") for k, x in v.items()}
        raise TypeError(f"{where}: cannot store a {type(v).__name__} (builtins and NumPy only)")

    return enc(value, "payload"), arrays


def decode(nest: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    """The value :func:`encode` split into ``nest`` and ``arrays``."""
    if isinstance(nest, list):
        return [decode(x, arrays) for x in nest]
    if isinstance(nest, dict):
        if len(nest) == 1:
            ((tag, body),) = nest.items()
            if tag == "__tuple__":
                return tuple(decode(x, arrays) for x in body)
            if tag == "__float__":
                return float(body)
            if tag == "__array__":
                return arrays[body]
            if tag == "__scalar__":
                return arrays[body][()]
        return {k: decode(x, arrays) for k, x in nest.items()}
    return nest


def roundtrip(value: Any) -> Any:
    """``value`` as :func:`load` would give it back after :func:`save` (through JSON text)."""
    nest, arrays = encode(value)
    return decode(json.loads(json.dumps(nest, allow_nan=False)), arrays)


def save(path: str | os.PathLike, key: Mapping, value: Any, **extra: Any) -> Path:
    """Store ``value`` as the run ``key`` at ``path`` (``extra``: JSON-able, e.g. runtime_s)."""
    nest, arrays = encode(value)
    return store.save_run(path, key, curves=arrays, summary={"payload": nest, **extra})


def load(path: str | os.PathLike) -> tuple[Any, dict]:
    """(payload, the summary's other entries) of a complete run stored by :func:`save`."""
    run = store.load_run(path)
    if run.status == "failed":
        raise RuntimeError(f"{path}: stored run failed: {run.error}")
    summary = dict(run.summary)
    return decode(summary.pop("payload"), run.curves), summary
