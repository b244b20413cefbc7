"""E2 (the PD delay law) and E7 (schedule pictures), as studies (``Config``/``QUICK``/``run``/
``figure`` for E2, ``E7Config``/``E7_QUICK``/``run_e7``/``figure_e7`` for E7):

    python -m experiments.figure experiment=e2_delay_law      # S = 2..150, about 2 s of work
    python -m experiments.figure experiment=e2_delay_law study.S_max=300
    python -m experiments.figure experiment=e7_schedules study.S=6
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Callable

import numpy as np

from rpd import schedules
from rpd.plotting import style
from rpd.plotting.schedules import schedule_gantt
from rpd.results import StudyOutput
from rpd.schedules.machinery import delays
from rpd.studies import schedule_table
from rpd.validation import check_int, required

# ---------------------------------------------------------------- E2: the delay law


@dataclasses.dataclass(frozen=True)
class Config:
    """E2 at the paper's size: PD (NOAM = S) for S = S_min..S_max with N = n_per_stage * S."""

    S_min: int = 2
    S_max: int = 150
    n_per_stage: int = 10


QUICK: dict = {}  # the full study takes about two seconds


def check(cfg: Config, prefix: str = "") -> None:
    """E2's range before any work: 1 <= S_min <= S_max, n_per_stage >= 1 (names ``prefix + field``)."""
    lo = check_int(f"{prefix}S_min", cfg.S_min)
    hi = check_int(f"{prefix}S_max", cfg.S_max)
    check_int(f"{prefix}n_per_stage", cfg.n_per_stage)
    if hi < lo:
        raise ValueError(f"{prefix}S_max must be >= {prefix}S_min, got S_min={lo}, S_max={hi}")


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    """Delay statistics over the second half of the iterations, closed-form check, fits."""
    check(cfg)
    law = delays.delay_law(range(cfg.S_min, cfg.S_max + 1), cfg.n_per_stage)
    if progress is not None:
        progress(f"S = {cfg.S_min}..{cfg.S_max}")
    arrays = {f.name: np.asarray(getattr(law, f.name)) for f in dataclasses.fields(law)}
    arrays["closed_max"] = np.array([delays.max_delay(int(S)) for S in law.S])
    arrays["closed_mean"] = np.array([delays.mean_delay(int(S)) for S in law.S])
    summary = {
        "closed_form_ok": bool(law.closed_form_ok.all()),
        "steady_entries_checked": int(law.steady_entries.sum()),
        "max_fit": {"S^2": law.max_fit[0], "S": law.max_fit[1], "1": law.max_fit[2]},
        "mean_fit": {"S^2": law.mean_fit[0], "S": law.mean_fit[1], "1": law.mean_fit[2]},
        "paper_fits": "max ~ 1.0 S^2 - 0.5 S, mean ~ 0.5 S^2",
    }
    shown = sorted({S for S in (2, 4, 8, 16, 32, 64, 128) if cfg.S_min <= S <= cfg.S_max} | {cfg.S_max})
    table = [
        {
            **row,
            "floor(S^2-S/2)": delays.max_delay(row["S"]),
            "(S^2-1)/2": delays.mean_delay(row["S"]),
            # the same delay in the stages' own optimizer steps: stage s lags S - 1 - s (docs/optimizers.md)
            "optimizer steps, stage 0 (S-1)": row["S"] - 1,
        }
        for row in law.rows()
        if row["S"] in shown
    ]
    return StudyOutput(arrays=arrays, summary=summary, table=table)


def figure(out: StudyOutput, path) -> None:
    a = out.arrays
    style.delay_law_figure(a["S"], a["mean"], a["p10"], a["max"], a["max_fit"], a["mean_fit"], path)


# ---------------------------------------------------------------- E7: schedule pictures


@dataclasses.dataclass(frozen=True)
class E7Config:
    """PD 1F1B and naive (NOAM = 1) on S machines; LocalSGD with R = S, H in local_sgd_H."""

    S: int = 4
    pd_N: int = 10
    naive_N: int = 3
    local_sgd_H: tuple[int, ...] = (1, 2, 3)
    local_sgd_rounds: int = 2  # N = rounds * R * H
    family: bool = True  # also chart every schedule of the family (S = 4, M = 8, unit costs)


E7_QUICK: dict = {}


def _e7_timelines(cfg: E7Config) -> dict[str, tuple[str, schedules.Timeline]]:
    S = cfg.S
    out = {
        "pd": (f"PipeDream-style 1F1B schedule (S = {S})", schedules.pipedream(S, cfg.pd_N)),
        "naive": (f"Naive model parallelism (NOAM = 1, S = {S})", schedules.pipedream(S, cfg.naive_N, noam=1)),
    }
    for H in cfg.local_sgd_H:
        tl = schedules.local_sgd(S, cfg.local_sgd_rounds * S * H, S, H)
        out[f"local_sgd_H{H}"] = (f"LocalSGD schedule (R = {S}, H = {H})", tl)
    return out


def run_e7(cfg: E7Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    arrays, table, titles = {}, [], {}
    for name, (title, tl) in _e7_timelines(cfg).items():
        schedules.validate(tl)
        arrays.update({f"{name}/op": tl.op, f"{name}/mb": tl.mb, f"{name}/sync_time": tl.sync_time})
        titles[name] = title
        if tl.averaged:
            law = 2 * tl.N + math.ceil(tl.N / (required("R", tl.R) * required("H", tl.H))) * (2 * tl.S - 2)
        else:
            law = 2 * tl.S * tl.N if tl.noam == 1 else 2 * tl.N + 2 * tl.S - 2
        table.append(
            {"schedule": name, "S": tl.S, "N": tl.N, "T": tl.T, "T_law": law, "bubble_ratio": delays.bubble_ratio(tl)}
        )
        if progress is not None:
            progress(name)
    family = {}
    if cfg.family:  # unit costs: F = B, and F = I = W for the split-backward schedules
        for name, ops in schedule_table.pictures(schedule_table.ORDER, b=1).items():
            arrays[f"family/{name}"] = ops
        family = {"costs": "F = B (split: F = I = W), chunks at half cost", "scale": schedule_table.SCALE}
    return StudyOutput(arrays=arrays, summary={"titles": titles, "family": family}, table=table)


def figure_e7(out: StudyOutput, path) -> None:
    panels = [
        {
            "title": title,
            "op": out.arrays[f"{name}/op"],
            "mb": out.arrays[f"{name}/mb"],
            "sync_time": out.arrays[f"{name}/sync_time"],
        }
        for name, title in out.summary["titles"].items()
    ]
    style.schedule_pictures(panels, path)
    family = [k for k in out.arrays if k.startswith("family/")]
    if family:  # the schedule family, ops drawn with their ticks (I and W in their own colours)
        path = Path(path)
        schedule_gantt(
            [dict(title=k.split("/", 1)[1], ops=out.arrays[k], scale=out.summary["family"]["scale"]) for k in family],
            path.with_name(path.stem + "_family.png"),
        )
