"""The sweep table's columns beyond a run's own: a column for every override a sweep varies
(:func:`swept_columns`), any key of the runs' summary.json on request (:func:`summary_column`),
used by :mod:`rpd.io.sweeps`."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from rpd.io import store
from rpd.results import unit_name

EMPTY = "-"  # what an empty cell (NaN, None) reads as in a table a person reads


def as_text(df) -> str:
    """``df`` as the terminal prints it: no index, an empty cell as :data:`EMPTY`, never ``NaN``."""
    return df.to_string(index=False, na_rep=EMPTY)


# a swept override already shown by a column of its own
OVERRIDE_COLUMNS = {
    "method": "method",
    "schedule": "schedule",
    "objective": "objective",
    "costs": "costs",
    "optimizer": "optimizer",
    "optimizer.correction": "correction",
    "schedule.S": "S",
    "schedule.M": "M",
    "schedule.H": "H",
    "schedule.N": "N",
    "schedule.T": "T",
    "method.delta": "delta",
}


def _override_items(text) -> dict[str, str]:
    items = {}
    for token in str(text or "").split():
        key, sep, value = token.partition("=")
        key = key.lstrip("+~")
        if sep and not key.startswith("hydra"):
            items[key] = value
    return items


def swept_columns(overrides) -> dict[str, list]:
    """A column for every override key whose value differs between the jobs (``overrides``: the
    job's override strings) and that no column of :data:`SWEEP_COLUMNS` already shows
    (:data:`OVERRIDE_COLUMNS`): named by the key (``method.gamma_lo``), valued by each job's
    override (None where a job has none)."""
    items = [_override_items(o) for o in overrides]
    keys = sorted({k for i in items for k in i})
    varied = [k for k in keys if len({i.get(k) for i in items}) > 1 and k not in OVERRIDE_COLUMNS]
    return {k: [scalar(i.get(k)) for i in items] for k in varied}


def scalar(text):
    """An override's value as typed: None, int, float or the text."""
    if text is None or text.lower() in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def section(config: dict, key: str) -> dict:
    """``config[key]`` where it is a dict (a config group as stored), else {}."""
    value = config.get(key)
    return value if isinstance(value, dict) else {}


def objective_columns(config: dict, summary: dict) -> dict:
    """A run's objective as the sweep table shows it: its sizes (``n``, ``D``, ``batch_size``,
    from summary.json: a user's factory's own, docs/api.md#writing-your-own-objective) and its
    ``options`` (``objective.options`` of the key, as "noise=0.1 scale=2"; None when none)."""
    objective = section(config, "objective")
    options = objective.get("options") or {}
    return {
        "n": summary.get("objective/n"),
        "D": summary.get("D"),
        "batch_size": summary.get("objective/batch_size"),
        "options": " ".join(f"{k}={options[k]}" for k in sorted(options)) or None,
    }


def summary_column(df, key: str) -> list:
    """Summary key ``key`` (any key of a run's summary.json) of each row's stored run (None where
    the row has no complete run or its summary lacks the key); a list value as its text."""
    out = []
    for result in df["result"]:
        complete = store._read_complete(Path(result)) if isinstance(result, str) else None
        value = json.loads(complete[1]["summary.json"]).get(key) if complete is not None else None
        out.append(json.dumps(value) if isinstance(value, (list, dict)) else value)
    return out


WIDE = 32  # a text cell wider than this is abbreviated in the terminal


def _abbreviate(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    if "/" in text and " " not in text:  # a path: its last part names it (a run's hash)
        return "…/" + text.rstrip("/").rsplit("/", 1)[-1][-(width - 2) :]
    return text[: width - 1] + "…"


def for_terminal(df, width: int = WIDE, collapse: bool = True):
    """``df`` as the terminal shows it. A column that holds one value in every row leaves the
    table for a line above it (``collapse``; always for a text column wider than ``width``,
    such as ``T_rule``): the short ones share one line ``every row: method=pd costs=unit ...``,
    a wide one has its own. The other wide text cells are abbreviated (a path to its last
    part, text to ``width`` characters ending in …). Returns (table, lines above it); the
    full text of every abbreviated column is in ``table.attrs["full_text"]`` (and in
    ``--csv``), the lifted columns and their values in ``attrs["constant"]``. ``final_best`` equal
    to ``final_selected`` in every row (the chosen γ is the best everywhere) is said once above."""
    table = df.copy()
    full, constant, lines, short = {}, {}, [], []
    for col in list(table.columns):
        values = table[col]
        text = values.dropna()
        wide = len(text) and all(isinstance(v, str) for v in text) and text.astype(str).str.len().max() > width
        one = len(table) > 1 and values.notna().all() and values.astype(str).nunique() == 1 and col != "job"
        if one and (wide or collapse):
            constant[col] = values.iloc[0]
            if wide:
                lines.append(f"{col}: {values.iloc[0]}")
            else:
                short.append(f"{col}={values.iloc[0]}")
            table = table.drop(columns=col)
            continue
        if not wide:
            continue
        full[col] = list(values)
        table[col] = [v if not isinstance(v, str) else _abbreviate(v, width) for v in values]
    if {"final_best", "final_selected"} <= set(table.columns) and len(table) > 1:
        best, chosen = table["final_best"], table["final_selected"]
        if ((best == chosen) | (best.isna() & chosen.isna())).all():  # the chosen γ is the best in every row
            constant["final_best"] = "final_selected"
            short.append("final_best=final_selected")
            table = table.drop(columns="final_best")
    table.attrs.update(full_text=full, constant=constant)
    every = textwrap.wrap(f"every row: {' '.join(short)}", 100, subsequent_indent="  ") if short else []
    return table, every + lines


def unequal_time(df) -> str | None:
    """A line saying that the rows of a sweep table that hold a result end at different
    simulated times T (so they are not compared at equal time), or None when they share one."""
    done = df[df["status"].isin(["ok", "diverged"]) & df["T"].notna()]
    ends = sorted(
        {(int(t), unit_name(u if isinstance(u, str) else None)) for t, u in zip(done["T"], done["time_unit"])}
    )
    if len(ends) < 2:
        return None
    shown = ", ".join(f"{t} {u}" for t, u in ends)
    return (
        f"note: the rows end at different simulated times T ({shown}): not compared at equal time "
        "(compare=equal_time, the default, with no schedule.T or compare_T, gives a sweep one T)"
    )
