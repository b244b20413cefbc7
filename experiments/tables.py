"""The study tables as the figure script prints them: columns in a reading order, step sizes as
powers of two (re-exported as ``experiments.figure.format_table`` / ``column_order``)."""

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

    cells = [[fmt(r.get(c), c) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    line = lambda vals: "  " + "  ".join(v.ljust(w) for v, w in zip(vals, widths))  # noqa: E731
    return "\n".join([line(cols), line(["-" * w for w in widths])] + [line(r) for r in cells])
