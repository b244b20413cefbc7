"""Reading an offline wandb run back (:func:`read_offline_run`), and waiting until a finishing
run's log is complete (:func:`wait_until_complete`, for :meth:`rpd.io.tracking.WandbLogger.finish`).

A run's ``.wandb`` file is a LevelDB-style log of protobuf records, parsed with wandb's own
schema (``wandb.proto``, imported only when a log is read).
"""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path
from typing import NamedTuple


class OfflineRun(NamedTuple):
    config: dict
    history: list[dict]  # one dict per logged row
    summary: dict
    group: str
    tags: tuple[str, ...]
    name: str = ""  # the run's display name
    id: str = ""
    media: tuple[Path, ...] = ()  # files/media/** (images, tables) as wandb wrote them
    artifacts: tuple[tuple[str, str], ...] = ()  # (name, type) of each logged artifact


_BLOCK, _HEADER = 32768, 7  # LevelDB log block size and record header (crc32, length, type)


def _records(data: bytes):
    if data[:4] != b":W&B":
        raise ValueError("not a wandb transaction log")
    pos, chunk = 7, b""  # 7-byte file header: ":W&B", magic, version
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # block trailer padding
            pos += left
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        chunk += data[pos + _HEADER : pos + _HEADER + length]
        pos += _HEADER + length
        if kind in (1, 4):  # FULL or LAST
            yield chunk
            chunk = b""
        elif kind == 0 and length == 0:
            break


def _record_kinds(log: Path):
    from wandb.proto import wandb_internal_pb2 as pb

    for raw in _records(log.read_bytes()):
        rec = pb.Record()  # type: ignore[attr-defined]  # wandb builds its protobuf classes at import (no .pyi)
        rec.ParseFromString(raw)
        yield rec.WhichOneof("record_type"), rec


def wait_until_complete(run_dir: Path, timeout: float, poll: float = 0.05) -> bool:
    """True once ``run_dir/run-*.wandb`` holds its final "exit" record."""
    deadline = time.monotonic() + timeout
    while True:
        logs = list(Path(run_dir).glob("run-*.wandb"))
        try:
            if logs and any(kind == "exit" for kind, _ in _record_kinds(logs[0])):
                return True
        except Exception:  # a half-written record: not complete yet
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)


def _items(items) -> dict:
    out = {}
    for it in items:
        key = it.key or "/".join(it.nested_key)
        out[key] = json.loads(it.value_json)
    return out


def read_offline_run(run_dir: str | os.PathLike) -> OfflineRun:
    """An offline run as wandb wrote it: config, history rows, summary, group, tags, name and
    id from ``offline-run-*/run-*.wandb``, and the media files (images, tables) under
    ``files/media/``.

    wandb (0.31) has no public reader of offline runs: ``wandb.Api`` reads the server only,
    ``wandb sync`` has no ``--view``, and offline runs get no ``files/wandb-summary.json`` or
    ``files/config.yaml``; so the transaction log is parsed with wandb's own protobuf schema
    (``wandb.proto``). Media are plain files, read without it."""
    run_dir = Path(run_dir)
    (log,) = run_dir.glob("run-*.wandb")
    config, history, summary, group, tags, name, rid, arts = {}, [], {}, "", (), "", "", []
    for which, rec in _record_kinds(log):
        if which == "run":
            config.update(_items(rec.run.config.update))
            # wandb may write several run records (start, then updates); later ones can leave
            # group and tags empty, so keep the first non-empty values.
            group = group or rec.run.run_group
            tags = tags or tuple(rec.run.tags)
            name = name or rec.run.display_name
            rid = rid or rec.run.run_id
        elif which == "config":
            config.update(_items(rec.config.update))
        elif which == "history":
            history.append(_items(rec.history.item))
        elif which == "summary":
            summary.update(_items(rec.summary.update))
        elif which == "artifact":
            arts.append((rec.artifact.name, rec.artifact.type))
    config = {k: v.get("value", v) if isinstance(v, dict) else v for k, v in config.items()}
    media = tuple(sorted(p for p in (run_dir / "files" / "media").rglob("*") if p.is_file()))
    return OfflineRun(config, history, summary, group, tags, name, rid, media, tuple(arts))
