"""A :class:`~rpd.results.Result` in a notebook: xarray and pandas views, a plot,
and a file that round-trips it exactly.

``to_xarray(r)``, ``to_pandas(r)``, ``plot(r)``, ``save(r, path)`` and ``load(path)``. pandas, xarray and matplotlib are imported on first use,
so importing :mod:`rpd` pays for none of them.

The file is a plain ``.npz`` (``numpy.load(path)`` reads it, no pickle): the arrays ``gammas``,
``axis``, ``curve``, ``x_final``, one ``traces/<name>`` per trace, NumPy values of ``meta`` as
``meta/<key>``, and a JSON ``header`` with the format, ``method``, ``axis_name`` and the rest of
``meta``.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rpd.io.atomic import atomic_write
from rpd.objectives.entry import entry_of
from rpd.results import Result, axis_label, gamma_label

if TYPE_CHECKING:
    import matplotlib.axes
    import pandas as pd
    import xarray as xr

FORMAT = "rpd.Result/1"


# The dimensions of the methods' traces after gamma (rpd.train): per block update k (the core's
# scan), per microbatch in order (LocalSGD's losses, with loss_time), per LocalSGD round; None:
# the trace has no gamma axis. diag holds (‖x − z‖², ‖∇f(x) − ∇f(z)‖², ‖∇f(x)‖²) per update.
TRACE_DIMS = {
    "loss_z": (True, ("update",)),
    "block_grad_norm": (True, ("update",)),
    "diag": (True, ("update", "diag_quantity")),
    "update_time": (False, ("update",)),
    "loss_time": (False, ("microbatch",)),
    "round_end_curve": (True, ("round",)),
}


def _trace_dims(name: str, shape: tuple[int, ...], G: int, traces: dict) -> tuple[str, ...]:
    """Named dimensions of a trace (:data:`TRACE_DIMS`; LocalSGD's ``loss_z`` is per
    microbatch, beside its ``loss_time``); an unknown trace: ``gamma`` when its leading axis has
    G entries, then ``<name>_dim_<i>``."""
    gamma, named = TRACE_DIMS.get(name, (None, ()))
    if name == "loss_z" and "loss_time" in traces:
        named = ("microbatch",)
    lead = ("gamma",) if (gamma if gamma is not None else bool(shape) and shape[0] == G) else ()
    rest = len(shape) - len(lead)
    dims = named if len(named) == rest else tuple(f"{name}_dim_{i}" for i in range(len(lead), len(shape)))
    return lead + dims


def _jsonable_attrs(mapping: dict) -> dict:
    attrs = {}
    for key, value in mapping.items():
        value = value.item() if isinstance(value, np.generic) else value
        try:
            json.dumps(value, allow_nan=True)
        except (TypeError, ValueError):
            continue
        attrs[str(key)] = value
    return attrs


def to_xarray(r: Result) -> xr.Dataset:
    """``curve`` (gamma, <axis_name>), ``diverged`` and ``final`` (gamma), ``x_final`` (gamma, d),
    and every trace under its own name with named dims (:data:`TRACE_DIMS`: ``loss_z`` and
    ``block_grad_norm`` (gamma, update), ``update_time`` (update), LocalSGD's ``loss_z``
    (gamma, microbatch) ...; an unknown one ``<name>_dim_<i>``); attrs: ``method``,
    ``axis_name`` and the JSON-able ``meta``."""
    import xarray as xr

    G = len(r.gammas)
    data = {
        "curve": (("gamma", r.axis_name), r.curve),
        "diverged": ("gamma", r.diverged),
        "final": ("gamma", r.final),
        "x_final": (("gamma", "d"), r.x_final),
    }
    sizes = {"gamma": G, r.axis_name: len(r.axis), "d": np.shape(r.x_final)[-1]}
    for name, value in r.traces.items():
        if name in data:
            raise ValueError(f"trace {name!r} clashes with the Result variable of that name")
        value = np.asarray(value)
        dims = _trace_dims(name, value.shape, G, r.traces)
        # a named dimension another variable has at another length: this trace's own name for it
        dims = tuple(d if sizes.setdefault(d, n) == n else f"{name}_{d}" for d, n in zip(dims, value.shape))
        data[name] = (dims, value)
    attrs = {**_jsonable_attrs(r.meta), "method": r.method, "axis_name": r.axis_name}
    return xr.Dataset(data, coords={"gamma": r.gammas, r.axis_name: r.axis}, attrs=attrs)


def to_pandas(r: Result) -> pd.DataFrame:
    """Tidy long table, one row per (γ, axis point): method, gamma, <axis_name>, value, diverged.
    ``pd.concat`` of several results' frames gives one table to group or plot."""
    import pandas as pd

    G, P = r.curve.shape
    return pd.DataFrame(
        {
            "method": r.method,
            "gamma": np.repeat(r.gammas, P),
            r.axis_name: np.tile(r.axis, G),
            "value": r.curve.reshape(-1),
            "diverged": np.repeat(r.diverged, P),
        }
    )


def _cross_at(y: np.ndarray, top: float | None) -> tuple[int, float] | None:
    """(index, height) of a diverged curve's ×: where it first leaves the plot (NaN and inf
    included), drawn at the top; else its last finite point; None when it has none."""
    if top is not None:
        out = np.flatnonzero(~(y <= top))  # NaN compares False
        if out.size:
            return int(out[0]), top
    finite = np.flatnonzero(np.isfinite(y))
    return (int(finite[-1]), float(y[finite[-1]])) if finite.size else None


def _selected_index(r: Result, selected) -> int | None:
    """The γ index ``selected`` names: an index, a γ of the grid, a selection with ``.index``
    (``rpd.analysis.tuning.select_gamma``), or None: the stored run's choice
    (``meta["summary"]["tuning/index"]``, a sweep row's result) when there is one."""
    if selected is None:
        selected = (r.meta.get("summary") or {}).get("tuning/index")
    selected = getattr(selected, "index", selected)
    if selected is None:
        return None
    if isinstance(selected, (int, np.integer)) and not isinstance(selected, bool):
        if not 0 <= selected < len(r.gammas):
            raise ValueError(f"selected: index {selected} is not one of the {len(r.gammas)} γ")
        return int(selected)
    hit = np.nonzero(np.isclose(np.asarray(r.gammas, np.float64), float(selected), rtol=1e-12, atol=0))[0]
    if not hit.size:
        raise ValueError(f"selected: γ = {selected} is not on the grid {list(r.gammas)}")
    return int(hit[0])


def plot(
    r: Result, ax: matplotlib.axes.Axes | None = None, *, cmap: str = "viridis", selected=None, **line_kw
) -> matplotlib.axes.Axes:
    """One line per γ against the axis, log y, labelled "γ = 2⁻ᵏ". A diverged γ is dashed,
    "(diverged)" in its label, and marked × where it leaves the plot (or at its last finite
    point); the y range is that of the γ that did not diverge, so a blow-up does not flatten them.
    The selected γ (``selected``: an index, a γ or a ``select_gamma`` result; by default a stored
    run's own choice) is drawn thick and black, "(selected)" in its label, the others lighter.
    The x axis is labelled with the result's time unit (``meta["time_unit"]``, the costs'
    ``unit``; ``rpd.results.axis_label``), its ticks whole numbers of it.
    ``ax`` defaults to ``plt.gca()``; ``line_kw`` go to every ``ax.plot``."""
    import matplotlib as mpl
    from matplotlib.ticker import StrMethodFormatter

    if ax is None:
        import matplotlib.pyplot as plt

        ax = plt.gca()
    chosen = _selected_index(r, selected)
    div = r.diverged
    colors = mpl.colormaps[cmap](np.linspace(0.0, 0.9, max(len(r.gammas), 1)))
    kept = r.curve[~div]
    shown = kept[np.isfinite(kept) & (kept > 0)]
    top = float(shown.max()) * 10.0 if shown.size else None
    for g, (gamma, y) in enumerate(zip(r.gammas, r.curve)):
        label = f"γ = {gamma_label(gamma)}" + (" (diverged)" if div[g] else "") + (" (selected)" if g == chosen else "")
        style = dict(color=colors[g], lw=1.5, ls="--" if div[g] else "-")
        if chosen is not None:  # the choice stands out; the rest recede
            style.update(dict(color="black", lw=3.0, zorder=3) if g == chosen else dict(alpha=0.55))
        ax.plot(r.axis, np.where(np.isfinite(y), y, np.nan), label=label, **{**style, **line_kw})
        cross = _cross_at(y, top) if div[g] else None
        if cross is not None:
            ax.plot(r.axis[cross[0]], cross[1], "x", color=colors[g], ms=8, mew=2, clip_on=False)
    ax.set_yscale("log")
    if top is not None:
        ax.set_ylim(shown.min() / 2.0, top)
    ax.set_xlabel(axis_label(r))
    if r.axis_name == "sim_time":  # whole times in the label's unit, never "× 1e7" beside them
        ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.set_ylabel(entry_of(str(r.meta.get("objective"))).metric.label)
    ax.set_title(r.method)
    ax.legend(fontsize="small")
    return ax


# --- the file format -------------------------------------------------------------------------


def _encode(value: Any, where: str) -> Any:
    """JSON for the builtin parts of ``meta``; tuples tagged so they come back as tuples."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value) or "__tuple__" in value:
            raise TypeError(f"{where}: only dicts with str keys (other than '__tuple__') can be saved")
        return {k: _encode(v, f"{where}.{k}") for k, v in value.items()}
    raise TypeError(f"{where}: cannot save a {type(value).__name__} (no pickle); use builtins or NumPy arrays")


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"__tuple__"}:
            return tuple(_decode(v) for v in value["__tuple__"])
        return {k: _decode(v) for k, v in value.items()}
    return value


def save(r: Result, path: str | os.PathLike) -> Path:
    """Write ``r`` to ``path`` (an .npz; the name is used as given) atomically: readers see the
    old file or the new one, never a part."""

    arrays = {"gammas": r.gammas, "axis": r.axis, "curve": r.curve, "x_final": r.x_final}
    arrays |= {f"traces/{k}": np.asarray(v) for k, v in r.traces.items()}
    meta, numpy_meta = {}, {}
    for key, value in r.meta.items():
        if not isinstance(key, str):
            raise TypeError(f"meta keys must be str to save, got {key!r}")
        if isinstance(value, (np.ndarray, np.generic)):
            arrays[f"meta/{key}"] = np.asarray(value)
            numpy_meta[key] = "scalar" if isinstance(value, np.generic) else "array"
        else:
            meta[key] = _encode(value, f"meta.{key}")
    header = {
        "format": FORMAT,
        "method": r.method,
        "axis_name": r.axis_name,
        "traces": list(r.traces),
        "meta_keys": list(r.meta),
        "meta": meta,
        "numpy_meta": numpy_meta,
    }
    arrays["header"] = np.array(json.dumps(header, allow_nan=True))
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]  # numpy's stub: a ** dict might name allow_pickle
    path = Path(path)
    atomic_write(path, buf.getvalue())
    return path


def load(path: str | os.PathLike) -> Result:
    """The Result that :func:`save` wrote to ``path``, arrays with their dtypes, meta and traces
    in their order."""
    with np.load(path, allow_pickle=False) as npz:
        if "header" not in npz.files:
            raise ValueError(f"{path} is not a saved Result (no header)")
        header = json.loads(npz["header"].item())
        if header.get("format") != FORMAT:
            raise ValueError(f"{path}: unknown format {header.get('format')!r}, expected {FORMAT!r}")
        meta, numpy_meta = _decode(header["meta"]), header["numpy_meta"]
        for key, kind in numpy_meta.items():
            meta[key] = npz[f"meta/{key}"][()] if kind == "scalar" else npz[f"meta/{key}"]
        meta = {k: meta[k] for k in header["meta_keys"]}
        return Result(
            method=header["method"],
            gammas=npz["gammas"],
            axis=npz["axis"],
            axis_name=header["axis_name"],
            curve=npz["curve"],
            traces={k: npz[f"traces/{k}"] for k in header["traces"]},
            x_final=npz["x_final"],
            meta=meta,
        )
