"""E17 in words, from saved numbers only (rpd.studies.staleness_2026): each claim's verdict as a
sentence with the numbers behind it, the caveat of a run smaller than the paper's, and the console
table (means ± sd per arm, one block per claim, at most :data:`WIDTH` columns; every seed's value
stays in the figure's JSON). The figure (:mod:`rpd.plotting.staleness_2026`) and the study's
console hook print the same lines."""

from __future__ import annotations

import textwrap

from rpd.objectives.entry import entry_of
from rpd.results import pow2_label

WIDTH = 160  # the console table's widest line
OPT = {"adamw": "AdamW", "muon": "Muon"}


def plural(n, one: str, many: str | None = None) -> str:
    """``n`` and the noun in the number it takes: 1 optimizer step, 2 optimizer steps."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def _per(cfg: dict, key: str, parts: list[str], detail) -> str:
    return "; ".join(f"{name} {v}" + detail(name) for name, v in zip(cfg[key], parts))


def verdicts(summary: dict) -> list[tuple[str, str, str]]:
    """(verdict, claim, the numbers per objective) for every verdict the study computed."""
    cfg, v = summary["config"], summary["verdicts"]
    out = []
    for key, entry in v.items():
        if key == "a_adamw_degrades_more_than_muon":
            gap = entry["gap_mean"]
            detail = _per(
                cfg,
                "a_objectives",
                entry["per_objective"],
                lambda n: f" ({gap[n]['adamw']:.3g} vs {gap[n]['muon']:.3g})",
            )
            out.append(
                (
                    entry["verdict"],
                    f"(a) under 2BW AdamW's gap to synchronous is larger than Muon's, S = {cfg['a_S']}",
                    detail,
                )
            )
        elif key.startswith("a_error_feedback_shrinks_"):
            o = key.removeprefix("a_error_feedback_shrinks_").removesuffix("_gap")
            gap = v.get("a_adamw_degrades_more_than_muon", {}).get("gap_mean", {})
            detail = _per(
                cfg,
                "a_objectives",
                entry["per_objective"],
                lambda n: f" ({gap[n][o]:.3g} -> {gap[n][o + '+EF']:.3g})" if n in gap else "",
            )
            out.append((entry["verdict"], f"(a) error feedback shrinks {OPT.get(o, o)}'s gap", detail))
        elif key.startswith("b_nesterov_async_beats_"):
            sched, _, opt = key.removeprefix("b_nesterov_async_beats_").partition("_")
            at = entry["loss_at_T"]
            detail = _per(cfg, "b_objectives", entry["per_objective"], lambda n: f" ({at[n][0]:.3g} vs {at[n][1]:.3g})")
            rival = f"{'PipeDream' if sched == 'PD' else sched} + {opt}"
            out.append(
                (
                    entry["verdict"],
                    f"(b) PipeDream + nesterov_async beats {rival} at equal time, S = {cfg['b_S']}",
                    detail,
                )
            )
        elif key.startswith("c_"):
            label = key.removeprefix("c_").replace("_", " ")
            S, adam, rot = entry["S"], entry["slowdown_adam"], entry["slowdown_adam_rotated"]
            span = f"S = {S[0]}..{S[-1]}" if len(S) > 1 else f"S = {S[0]}"
            grows = f"Adam {adam[0]:g} -> {adam[-1]:g} at {span} (Spearman rho {entry['spearman_rho']:g})"
            out.append((entry["adam_slowdown_grows_with_S"], f"(c) Adam's slowdown grows with S, {label}", grows))
            removed = ", ".join(f"{x:g}" for x in entry["removed_fraction_per_seed"])
            most = f"adam_rotated {rot[-1]:g} vs Adam {adam[-1]:g} at S = {S[-1]}; removed per seed {removed}"
            out.append((entry["rotation_removes_most"], f"(c) adam_rotated removes most of it (>= 1/2), {label}", most))
        else:  # a verdict this module has no sentence for yet: its name and value
            out.append((str(entry.get("verdict", entry) if isinstance(entry, dict) else entry), key, ""))
    return out


def verdict_lines(summary: dict, width: int = WIDTH - 2) -> list[str]:
    """One line per verdict, ``HOLDS   claim: numbers``; the numbers on a line of their own
    where one line would pass ``width``."""
    out = []
    for v, claim, detail in verdicts(summary):
        head = f"{v.upper():8s}{claim}"
        one = f"{head}: {detail}" if detail else head
        out += [one] if len(one) <= width else [head + ":", " " * 10 + detail]
    return out


def caveat(cfg: dict, paper: dict | None) -> str | None:
    """What a run smaller than the paper's leaves out, or None at the paper's size."""
    if not paper:
        return None
    less = []
    if len(cfg["seeds"]) < len(paper["seeds"]):
        less.append(f"{plural(len(cfg['seeds']), 'seed')} (paper {len(paper['seeds'])})")
    lm = lambda c: any(entry_of(o).is_lm for o in tuple(c["a_objectives"]) + tuple(c["b_objectives"]))  # noqa: E731
    if lm(paper) and not lm(cfg):
        less.append("no char LM (MLP chain only)")
    for key, what in (("a_S", "(a)"), ("b_S", "(b)")):
        if cfg[key] != paper[key]:
            less.append(f"S = {cfg[key]} in {what} (paper {paper[key]})")
    if tuple(cfg["c_S"]) != tuple(paper["c_S"]):
        less.append(f"S = {', '.join(map(str, cfg['c_S']))} in (c) (paper {', '.join(map(str, paper['c_S']))})")
    if not less:
        return None
    return (
        "Smaller than the paper's run: "
        + "; ".join(less)
        + ". Its verdicts may differ from the README's (size=full reproduces those)."
    )


def _pm(r: dict, key: str) -> str:
    m, sd = r.get(key + "_mean"), r.get(key + "_sd")
    if m is None:
        return ""
    return f"{m:.4g} ± {sd:.2g}" if sd else f"{m:.4g}"


def _gamma(r: dict) -> str:
    if r.get("gamma_exp") is None:
        return ""
    return pow2_label(int(r["gamma_exp"])) + (f" (edge: {r['gamma_edge']})" if r.get("gamma_edge") else "")


def _block(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(c[i]) for c in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = lambda cells: "  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return [title, line(header), line(["-" * w for w in widths]), *(line(c) for c in rows)]


def table(rows: list[dict], cfg: dict) -> str:
    """The console table: one block per claim, means ± sd over the seeds, tuned γ."""
    a = [r for r in rows if r["part"] == "a"]
    b = [r for r in rows if r["part"] == "b"]
    c = [r for r in rows if r["part"] == "c" and "updates_mean" in r]
    slow = {(r["objective"], r["S"], r["optimizer"]): r for r in rows if r["part"] == "c" and "slowdown_mean" in r}
    out = _block(
        f"(a) 2BW vs synchronous 1F1B, S = {cfg['a_S']}, M = {cfg['a_M']}: gap = (loss 2BW - loss sync) / loss sync",
        ["objective", "optimizer", "arm", "loss", "gap, equal updates", "gap, equal time", "gamma"],
        [
            [
                r["objective"],
                r["optimizer"],
                r["arm"],
                _pm(r, "loss"),
                _pm(r, "gap_updates"),
                _pm(r, "gap_time"),
                _gamma(r),
            ]
            for r in a
        ],
    )
    out += _block(
        f"(b) equal simulated time (PipeDream's T), S = {cfg['b_S']}",
        ["objective", "schedule", "optimizer", "loss at T", "loss at its own end", "gamma"],
        [
            [r["objective"], r["schedule"], r["optimizer"], _pm(r, "loss_time"), _pm(r, "loss_end"), _gamma(r)]
            for r in b
        ],
    )
    cells = []
    for r in c:
        s = slow.get((r["objective"], r["S"], r["optimizer"])) if r["schedule"] == "PD" else None
        censored = f"{s['censored']} of {len(s['slowdown'])}" if s is not None else ""
        cells.append(
            [
                r["objective"],
                str(r["S"]),
                r["schedule"],
                r["optimizer"],
                _pm(r, "updates"),
                _pm(s, "slowdown") if s else "",
                censored,
                _gamma(r),
            ]
        )
    out += _block(
        "(c) updates to target; slowdown = PipeDream / no staleness (a lower bound where censored: target not reached)",
        ["objective", "S", "schedule", "optimizer", "updates", "slowdown", "censored", "gamma"],
        cells,
    )
    return "\n".join(out)


def console(rows: list[dict], summary: dict, paper: dict | None = None) -> str:
    """What the figure command prints: the verdicts, the caveat of a smaller run, the table."""
    cfg = summary["config"]
    lines = ["verdicts (holds: in every seed on every objective; fails: in none; depends otherwise):"]
    lines += ["  " + x for x in verdict_lines(summary)]
    note = caveat(cfg, paper)
    if note:
        lines += textwrap.wrap("note: " + note, WIDTH, subsequent_indent="      ")
    return "\n".join([*lines, table(rows, cfg)])
