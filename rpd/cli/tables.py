"""The study tables as the figure script prints them: columns in a reading order, step sizes as
powers of two (re-exported as ``rpd.cli.figure.format_table`` / ``column_order``)."""

from __future__ import annotations

from rpd.results import gamma_label, pow2_label

# format_table's column order: what identifies a row, then the step size, then the values (in
# first-seen order), then the verdicts and notes. Stored tables come back with sorted keys, so
# the order is set here, not by the study.
ID_COLUMNS = (
    "objective",
    "panel",
    "quantity",
    "selector",
    "costs",
    "S",
    "S_range",
    "M",
    "c",
    "alpha",
    "p2p",
    "method",
    "schedule",
    "H",
    "delta",
    "rpd_delta",
    "N",
)
LEAD_VALUES = (
    "final",
    "best_final",
    "f_minus_fstar_at_cut",
    "train_loss_smoothed_at_T",
    "heldout_loss_final",
    "loss_stable",
    "loss_best_final",
    "bubble_f_total",
    "slope",
    "ci95",
    "ratio_to_pd",
    "ratio",
)
STATUS_COLUMNS = (
    "winner",
    "winner_best_final",
    "pareto",
    "n_diverged",
    "status",
    "reason",
    "holds",
    "measured",
    "paper",
    "note",
    "notes",
)


def _is_gamma_column(name: str) -> bool:
    """γ columns ("gamma", "rule", "stable_gamma", "pd_gamma", "gamma_best_final"), not values
    measured at a γ ("f_at_stable_gamma", "best_final_any_gamma")."""
    words = name.split("_")
    return name == "rule" or ("gamma" in words and not {"f", "at", "any"} & set(words))


def column_order(rows: list[dict]) -> list[str]:
    """The columns of ``rows`` in a reading order: identifying columns (:data:`ID_COLUMNS`, in
    that order: objective/panel, S, method/schedule, H, δ, N), the γ columns, the values in
    first-seen order, headline values (:data:`LEAD_VALUES`) first), the status and notes
    (:data:`STATUS_COLUMNS`)."""
    seen: list[str] = []
    for r in rows:
        seen += [k for k in r if k not in seen]

    def rank(item):
        i, k = item
        if k in ID_COLUMNS:
            return (0, ID_COLUMNS.index(k), i)
        if _is_gamma_column(k):
            return (1, 0, i)
        if k in STATUS_COLUMNS:
            return (3, STATUS_COLUMNS.index(k), i)
        if k in LEAD_VALUES:
            return (2, LEAD_VALUES.index(k), i)
        return (2, len(LEAD_VALUES), i)

    return [k for _, k in sorted(enumerate(seen), key=rank)]


def format_table(rows: list[dict]) -> str:
    """Rows of dicts as an aligned plain-text table, columns in :func:`column_order`; step sizes
    in γ columns as the figures print them (``"2^-4"`` or 0.0625 -> "2⁻⁴",
    :func:`rpd.results.gamma_label`)."""
    import re

    if not rows:
        return "  (no rows)"
    cols = column_order(rows)

    def fmt(v, col):
        if _is_gamma_column(col) and col != "rule":
            if isinstance(v, str) and (m := re.fullmatch(r"2\^\{?(-?\d+)\}?", v)):
                return pow2_label(int(m.group(1)))
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                return gamma_label(v)
        if isinstance(v, float):
            return f"{v:.4g}"
        return "" if v is None else str(v)

    rows, notes = _note_rows(rows, cols)
    noted = {k for _, items in notes for k, _ in items}
    cols = [c for c in cols if c not in noted or any(_filled(r.get(c)) for r in rows)]
    cells = [[fmt(r.get(c), c) for c in cols] for r in rows]
    cut = any(len(v) > MAX_CELL for row in cells for v in row)
    cells = [[v if len(v) <= MAX_CELL else v[: MAX_CELL - 1] + "…" for v in row] for row in cells]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    line = lambda vals: "  " + "  ".join(v.ljust(w) for v, w in zip(vals, widths)).rstrip()  # noqa: E731
    below = [f"  {name}: " + "; ".join(f"{k} {fmt(v, k)}" for k, v in items) for name, items in notes]
    if cut:
        below.append(f"  (cells over {MAX_CELL} characters end in …: the full table is in the figure's JSON)")
    return "\n".join([line(cols), line(["-" * w for w in widths])] + [line(r) for r in cells] + below)


MAX_CELL = 48  # a longer cell is abbreviated in the printed table


def _filled(v) -> bool:
    return v is not None and v != ""


CLAIM_COLUMNS = ("holds", "measured", "paper")  # a study's check of a paper claim


def _note_rows(rows: list[dict], cols: list[str]) -> tuple[list[dict], list[tuple[str, list]]]:
    """The rows that are notes, not data (E3's "paper claim": a label in an identifying column
    and values only in :data:`CLAIM_COLUMNS` or in columns no other row fills), taken out of the
    table and returned as (label, [(column, value), ...]) to print under it; the others as they are."""
    if len(rows) < 2:
        return rows, []
    kept, notes = [], []
    for i, r in enumerate(rows):
        others = rows[:i] + rows[i + 1 :]
        own = [c for c in cols if _filled(r.get(c)) and c not in ID_COLUMNS]
        label = [str(r[c]) for c in cols if _filled(r.get(c)) and c in ID_COLUMNS]
        claim = own and set(own) <= set(CLAIM_COLUMNS)
        if label and (claim or (own and not any(_filled(o.get(c)) for o in others for c in own))):
            notes.append((" ".join(label) or "note", [(c, r[c]) for c in own]))
        else:
            kept.append(r)
    return (kept, notes) if kept else (rows, [])  # a table of notes only stays a table
