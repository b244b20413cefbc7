"""What the figure script prints when it ends (``experiments.reproduce_paper_figures``): per
figure its status, the paper's message, the study's claims with their verdicts, E10's and E12's
panel winners and the first rows of its table."""

from __future__ import annotations

from typing import Sequence

from rpd.cli.manifest import Report
from rpd.cli.tables import format_table

MAX_ROWS = 40  # rows of a study's table printed in the summary (all of them are in its JSON)


def _programs_text(programs: dict | None) -> str:
    """ ", 12 programs compiled, 3 from the cache (4.1 s)" (nothing for outputs stored before the
    count; no seconds for those stored before they were measured)."""
    if not programs:
        return ""
    seconds = f" ({programs['seconds']:.1f} s)" if "seconds" in programs else ""
    return f", {programs['compiled']} programs compiled, {programs['from_cache']} from the cache{seconds}"


def _cell_text(c: dict) -> str:
    """One panel's line: E10's (winner, Pareto front, first to the target) or E12's (the ranking
    per optimizer and the paper's claim on it)."""
    if "front" in c:
        return (
            f"  {c['objective']} S={c['S']} {c['costs']}: lowest loss at the budget "
            f"{' = '.join(c['best'])} ({c['best_loss']:.4g}); Pareto front "
            f"{', '.join(c['front'])}; first to the target {' = '.join(c['fastest'])}"
        )
    ranking = ", ".join(c.get("ranking", [])[:4]) or "none ran"
    return f"  {c['objective']} {c.get('optimizer', '')}: lowest first {ranking}; {c.get('verdict', '')}"


def summary_text(reports: Sequence[Report], messages: dict) -> str:
    """What each figure shows: status, the paper's message and the study's table."""
    lines = ["", "=" * 78, "What each figure shows", "=" * 78]
    for r in reports:
        o = r.outcome
        head = f"[{r.status}] {r.name}"
        if o is not None:
            head += f" ({o.size}, computed in {o.runtime_s:.1f} s{_programs_text(o.programs)}) -> {o.png}"
        lines += ["", head, f"  paper: {messages.get(r.name, '')}"]
        if o is not None:
            for claim in (o.summary or {}).get("claims", []):  # E9 and others: the seeds' claims, measured
                holds = (
                    {True: "holds", False: "FAILS", None: "depends"}[claim["holds"]]
                    if "holds" in claim
                    else "see verdict"
                )
                measured = f": {claim['measured']}" if claim.get("measured") else ""
                lines.append(f"  claim: {claim['claim']} -> {holds}{measured}")
                if claim.get("verdict"):
                    lines.append(f"         {claim['verdict']}")
            for c in (o.summary or {}).get("cells", []):  # E10 and E12: the winner of every panel
                lines.append(_cell_text(c))
            lines.append(format_table(o.table[:MAX_ROWS]))
            if len(o.table) > MAX_ROWS:
                lines.append(f"  ... {len(o.table) - MAX_ROWS} more rows in {o.numbers}")
        elif r.error:
            lines.append(f"  {r.error}")
    bad = [r.name for r in reports if r.status in ("failed", "missing")]
    lines += [
        "",
        f"{len(reports) - len(bad)}/{len(reports)} figures made" + (f"; not made: {', '.join(bad)}" if bad else ""),
    ]
    return "\n".join(lines)
