"""E2 (the PD delay law) and E7 (schedule pictures): thin entry point over rpd.schedules.delays / rpd.schedules.

    python -m experiments.delay_law                        # both, S = 2..150 (about 2 s of work)
    python -m experiments.delay_law e7.enabled=false e2.S_max=300
    python -m experiments.delay_law e2.enabled=false e7.S=6

Writes into ``out_dir`` (default ``paper_figures/``): ``e2_delay_law.{png,json,csv}`` and
``e7_schedules.{png,json}``; each PNG is drawn from the JSON just written, not from memory.
The module also follows the study protocol of ``experiments.figure`` (``Config``/``QUICK``/
``run``/``figure`` for E2, ``E7Config``/``E7_QUICK``/``run_e7``/``figure_e7`` for E7).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path
from typing import Callable

import hydra
import numpy as np
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from rpd import schedules
from rpd.plotting import style
from rpd.results import StudyOutput
from rpd.schedules import delays
from rpd.validation import check_int

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
        {**row, "floor(S^2-S/2)": delays.max_delay(row["S"]), "(S^2-1)/2": delays.mean_delay(row["S"])}
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
        if tl.kind == "local_sgd":
            law = 2 * tl.N + math.ceil(tl.N / (tl.R * tl.H)) * (2 * tl.S - 2)
        else:
            law = 2 * tl.S * tl.N if tl.noam == 1 else 2 * tl.N + 2 * tl.S - 2
        table.append({"schedule": name, "S": tl.S, "N": tl.N, "T": tl.T, "T_law": law,
                      "bubble_ratio": delays.bubble_ratio(tl)})
        if progress is not None:
            progress(name)
    family = {}
    if cfg.family:  # unit costs: F = B, and F = I = W for the split-backward schedules
        from rpd.studies import schedule_table

        for name, ops in schedule_table.pictures(schedule_table.ORDER, b=1).items():
            arrays[f"family/{name}"] = ops
        family = {"costs": "F = B (split: F = I = W), chunks at half cost", "scale": schedule_table.SCALE}
    return StudyOutput(arrays=arrays, summary={"titles": titles, "family": family}, table=table)


def figure_e7(out: StudyOutput, path) -> None:
    panels = [
        {"title": title, "op": out.arrays[f"{name}/op"], "mb": out.arrays[f"{name}/mb"],
         "sync_time": out.arrays[f"{name}/sync_time"]}
        for name, title in out.summary["titles"].items()
    ]
    style.schedule_pictures(panels, path)
    family = [k for k in out.arrays if k.startswith("family/")]
    if family:  # the schedule family, ops drawn with their ticks (I and W in their own colours)
        from rpd.plotting.schedules import schedule_gantt

        path = Path(path)
        schedule_gantt([dict(title=k.split("/", 1)[1], ops=out.arrays[k], scale=out.summary["family"]["scale"])
                        for k in family], path.with_name(path.stem + "_family.png"))


# ---------------------------------------------------------------- hydra entry point


@dataclasses.dataclass
class E2Section:
    enabled: bool = True
    S_min: int = 2
    S_max: int = 150
    n_per_stage: int = 10


@dataclasses.dataclass
class E7Section:
    enabled: bool = True
    S: int = 4
    pd_N: int = 10
    naive_N: int = 3
    local_sgd_H: list[int] = dataclasses.field(default_factory=lambda: [1, 2, 3])
    local_sgd_rounds: int = 2
    family: bool = True


@dataclasses.dataclass
class DelayLawConfig:
    out_dir: str = "paper_figures"
    e2: E2Section = dataclasses.field(default_factory=E2Section)
    e7: E7Section = dataclasses.field(default_factory=E7Section)


ConfigStore.instance().store(name="delay_law_schema", node=DelayLawConfig)


def _section(cls, node):
    values = OmegaConf.to_container(node, resolve=True)
    values.pop("enabled")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def _save_numbers(path: Path, name: str, cfg, out: StudyOutput) -> Path:
    record = {"figure": name, "config": dataclasses.asdict(cfg), "summary": out.summary,
              "table": out.table, "arrays": {k: np.asarray(v).tolist() for k, v in out.arrays.items()}}
    path.write_text(json.dumps(record, indent=1, default=float))
    return path


def _load_numbers(path: Path) -> StudyOutput:
    record = json.loads(path.read_text())
    arrays = {k: np.asarray(v) for k, v in record["arrays"].items()}
    return StudyOutput(arrays=arrays, summary=record["summary"], table=record["table"])


def run_all(cfg: DictConfig) -> dict[str, dict]:
    """Compute the enabled studies, save their numbers, draw each figure from the saved file."""
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    done = {}
    if cfg.e2.enabled:
        e2 = _section(Config, cfg.e2)
        check(e2, "e2.")
        numbers = _save_numbers(out_dir / "e2_delay_law.json", "e2_delay_law", e2, run(e2))
        saved = _load_numbers(numbers)
        with open(out_dir / "e2_delay_law.csv", "w", newline="") as fh:
            keys = ["S", "N", "mean", "p10", "max", "min", "closed_max", "closed_mean",
                    "steady_entries", "closed_form_ok"]
            writer = csv.writer(fh)
            writer.writerow(keys)
            writer.writerows(zip(*(saved.arrays[k].tolist() for k in keys)))
        figure(saved, out_dir / "e2_delay_law.png")
        done["e2_delay_law"] = {"summary": saved.summary, "table": saved.table}
    if cfg.e7.enabled:
        e7 = _section(E7Config, cfg.e7)
        numbers = _save_numbers(out_dir / "e7_schedules.json", "e7_schedules", e7, run_e7(e7))
        saved = _load_numbers(numbers)
        figure_e7(saved, out_dir / "e7_schedules.png")
        done["e7_schedules"] = {"summary": saved.summary, "table": saved.table}
    return done


@hydra.main(version_base="1.3", config_path="../configs", config_name="delay_law")
def main(cfg: DictConfig) -> None:
    for name, result in run_all(cfg).items():
        print(f"{name}: {json.dumps(result['summary'], default=float)}")
        for row in result["table"]:
            print("  " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
    from rpd.runtime.interrupt import run_main

    run_main(main)  # Ctrl-C: a clean message and exit 130
