"""The replay command's job (``python -m experiments.replay``, docs/replay.md): a measured trace
read and checked, replayed in rpd's timeline, its ideal, slowdown and attribution, the what-if
table; the JSON and the heatmap written atomically where asked (nothing else is written).

Bad input (a missing file or field, a missing column, an unknown op type, an empty step) is one
line naming it and exit 2, before any file is written (:func:`rpd.cli.checks.refuse` in the entry
point)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Optional

from rpd.analysis.stragglers import Attribution, attribute
from rpd.analysis.what_if import what_if
from rpd.io.atomic import atomic_write
from rpd.io.trace import read_meta, read_trace
from rpd.plotting.stragglers import straggler_heatmap
from rpd.validation import check_int


@dataclasses.dataclass
class ReplayConfig:
    """``python -m experiments.replay``: a trace's replay, slowdown, attribution and what-if."""

    trace: Optional[str] = None  # the trace (parquet, docs/replay.md#the-trace-format)
    meta: Optional[str] = None  # its meta file (YAML: dp_size, pp_size, ...)
    out: Optional[str] = None  # the numbers (JSON); null: not written
    figure: Optional[str] = None  # the stage × dp rank heatmap (PNG, and a PDF beside it); null: none
    H: int = 8  # LocalSGD's period in the what-if table
    top: int = 3  # groups printed per attribution


def schemas() -> list[tuple[str | None, str, type, str | None]]:
    """The replay schema for hydra's ConfigStore (``experiments.schemas``)."""
    return [(None, "replay_schema", ReplayConfig, None)]


def check(cfg) -> tuple[Path, Path]:
    """The config's files and numbers checked before any work: one-line ValueError naming the field."""
    paths = []
    for field in ("trace", "meta"):
        value = getattr(cfg, field)
        if value is None or str(value) == "":
            raise ValueError(f"{field}: give {field}=<path> (the trace's {'parquet' if field == 'trace' else 'YAML'})")
        p = Path(str(value))
        if not p.is_file():
            raise ValueError(f"{field}: no such file {p}")
        paths.append(p)
    check_int("H", cfg.H)
    check_int("top", cfg.top)
    if cfg.figure is not None and Path(str(cfg.figure)).suffix.lower() != ".png":
        raise ValueError(f"figure: must end in .png (a PDF is written beside it), got {cfg.figure}")
    return paths[0], paths[1]


def report(attr: Attribution, straggler: str, rows) -> dict[str, Any]:
    """The JSON the command writes (keys of docs/replay.md#the-command)."""
    return {
        "measured_step_s": attr.measured_s,
        "replay_step_s": attr.replay_s,
        "ideal_step_s": attr.ideal_s,
        "slowdown": attr.slowdown,
        "by_stage": {str(k): v for k, v in attr.by_stage.items()},
        "by_dp_rank": {str(k): v for k, v in attr.by_dp_rank.items()},
        "by_optype": dict(attr.by_optype),
        "by_worker": attr.by_worker.tolist(),
        "straggler": straggler,
        "what_if": [dataclasses.asdict(r) for r in rows],
        "steps": attr.steps.tolist(),
        "measured_steps_s": attr.measured_steps.tolist(),
        "replay_steps_s": attr.replay_steps.tolist(),
        "ideal_steps_s": attr.ideal_steps.tolist(),
        "units": "seconds per training step (mean over the trace's steps); S: replay / ideal",
    }


def run(cfg) -> dict[str, Any]:
    """The command's numbers for ``cfg`` (a :class:`ReplayConfig` or a config node like it);
    writes ``cfg.out`` and ``cfg.figure`` when given."""
    trace_path, meta_path = check(cfg)
    layout = read_meta(meta_path)
    df = read_trace(trace_path, layout)
    attr, _ = attribute(df, layout)
    straggler, rows = what_if(df, layout, attr, H=int(cfg.H))
    numbers = report(attr, straggler, rows)
    if cfg.out is not None:
        out = Path(str(cfg.out))
        os.makedirs(out.parent if str(out.parent) else ".", exist_ok=True)
        atomic_write(out, (json.dumps(numbers, indent=1) + "\n").encode())
    if cfg.figure is not None:
        straggler_heatmap(attr.by_worker, attr.slowdown, str(cfg.figure), title=layout.name)
    return numbers


def lines(numbers: dict[str, Any], top: int = 3) -> list[str]:
    """What the command prints."""
    m, r, i = numbers["measured_step_s"], numbers["replay_step_s"], numbers["ideal_step_s"]
    out = [
        f"measured step {m:.4f} s, replayed {r:.4f} s ({100 * (r / m - 1):+.1f} %), ideal {i:.4f} s; "
        f"slowdown S = {numbers['slowdown']:.4f}"
    ]
    for key, label in (("by_stage", "stage"), ("by_dp_rank", "dp rank"), ("by_optype", "op type")):
        best = list(numbers[key].items())[:top]
        out.append(f"  top {label}s: " + ", ".join(f"{k} {v:.4f}" for k, v in best))
    out.append(f"what-if (s per step; second column: {numbers['straggler']} at its ideal):")
    for row in numbers["what_if"]:
        out.append(f"  {row['schedule']:<32} {row['step_s']:.4f}  {row['step_s_straggler_ideal']:.4f}")
    return out
