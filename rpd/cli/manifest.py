"""What a made figure is (:class:`FigureOutcome`), how a run of the figure script reports it
(:class:`Report`), and ``MANIFEST.json``, the record of every figure in an output folder: its
status, config, runtime, commit and the provenance of the run that made it."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import NamedTuple, Sequence

from rpd.io import store
from rpd.io.atomic import atomic_write
from rpd.io.provenance import provenance


class FigureOutcome(NamedTuple):
    name: str
    png: Path
    numbers: Path
    size: str
    config: dict  # the study's Config, as stored
    runtime_s: float  # of the computation (from the store when reused)
    cached: bool  # the stored output was reused
    table: list[dict]
    summary: dict
    run_path: Path
    programs: dict | None = None  # XLA programs built while computing: {"compiled", "from_cache", "seconds"}


class Report(NamedTuple):
    name: str
    status: str  # "ok" | "reused" | "failed" | "missing"
    outcome: FigureOutcome | None
    error: str | None
    wall_s: float


def write_manifest(
    out_dir: Path, reports: Sequence[Report], size: str, commit: str | None, run_provenance: dict | None = None
) -> Path:
    """Merge this run's figures into ``<out_dir>/MANIFEST.json`` (atomically). The top-level
    ``provenance`` is this run's (default :func:`rpd.io.provenance.provenance`); each figure made
    now carries it too, so figures kept from earlier runs keep theirs."""
    run_provenance = provenance() if run_provenance is None else run_provenance

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "MANIFEST.json"
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        manifest = {}
    figures = manifest.get("figures", {})
    for r in reports:
        o = r.outcome
        figures[r.name] = {
            "status": r.status,
            "error": r.error,
            "size": o.size if o else size,
            "png": o.png.name if o else None,
            "numbers": o.numbers.name if o else None,
            "config": o.config if o else None,
            "runtime_s": o.runtime_s if o else None,
            "programs": o.programs if o else None,
            "wall_s": r.wall_s,
            "results": str(o.run_path) if o else None,
            "git_commit": commit,
            "provenance": run_provenance,
        }
    manifest = {
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": commit,
        "provenance": run_provenance,
        "figures": figures,
    }
    atomic_write(path, json.dumps(store.to_jsonable(manifest), indent=1, sort_keys=True).encode())
    return path
