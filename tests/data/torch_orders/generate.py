"""Regenerate the torch fixtures in this folder: each schedule's ``pipeline_order`` as written
by torch.distributed.pipelining itself, in torch's compute-only CSV.

Needs torch (CPU is enough) and nothing else; the tests never import this file. From the
repository root, with torch installed in a scratch environment outside the repository::

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.13.0
    /tmp/torchenv/bin/python tests/data/torch_orders/generate.py

The schedule classes only need their stages' shape (stage index, number of stages, pipeline
group size and rank) to build ``pipeline_order``, so each rank gets placeholder stages carrying
just those fields: no model, no process group, no step is run. Rows are written with
``csv.writer`` as torch's ``_dump_csv`` does (``None`` -> empty field = idle). Torch appends a
``REDUCE_GRAD`` after each stage's last backward in the single-stage schedules (GPipe, 1F1B);
that is a gradient-reduce action, not compute, so it is left out: every file holds compute
actions only (F, B, I, W and OVERLAP_F_B pairs) and idles.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import torch
from torch.distributed.pipelining import schedules as sch
from torch.distributed.pipelining.stage import _PipelineStageBase

HERE = Path(__file__).resolve().parent
COMPUTE = {"F", "I", "W", "B", "OVERLAP_F_B"}


class ShapeOnlyStage(_PipelineStageBase):
    """A stage with the attributes the schedule constructors read and nothing else."""

    def __init__(self, stage_index: int, num_stages: int, group_size: int, group_rank: int):
        # _PipelineStageBase.__init__ wants a module and a process group: skip it on purpose
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = group_rank
        self.group = None
        self.submod = None

    def _create_grad_recv_info(self, *args, **kwargs):
        return None

    def _prepare_forward_infra(self, n_microbatches):
        return None

    def _prepare_backward_infra(self, n_microbatches):
        return None


def looped(S: int, v: int, rank: int) -> list[int]:
    return [c * S + rank for c in range(v)]


def v_shape(S: int, v: int, rank: int) -> list[int]:
    return [rank, 2 * S - 1 - rank]


def build(cls, S: int, M: int, v: int, placement) -> dict:
    """Rank 0's schedule object already holds every rank's ``pipeline_order``."""
    stages = [ShapeOnlyStage(g, S * v, S, 0) for g in placement(S, v, 0)]
    if issubclass(cls, sch.PipelineScheduleSingle):
        schedule = cls(stages[0], n_microbatches=M)
    else:
        schedule = cls(stages, n_microbatches=M)
    return schedule.pipeline_order


def compute_csv(order: dict) -> str:
    out = io.StringIO()
    writer = csv.writer(out)  # torch's _dump_csv: default dialect, "\r\n" line ends
    for rank in sorted(order):
        row = [a for a in order[rank] if a is None or a.computation_type.value in COMPUTE]
        writer.writerow(row)
    return out.getvalue()


# (file name stem, torch class, placement, v, [(S, M), ...])
CASES = [
    ("gpipe", sch.ScheduleGPipe, looped, 1, [(2, 2), (2, 4), (2, 8), (4, 4), (4, 8)]),
    ("1f1b", sch.Schedule1F1B, looped, 1, [(2, 2), (2, 4), (2, 8), (4, 4), (4, 8)]),
    ("zb1p", sch.ScheduleInterleavedZeroBubble, looped, 1, [(2, 2), (2, 4), (2, 8), (4, 4), (4, 8)]),
    ("interleaved_1f1b", sch.ScheduleInterleaved1F1B, looped, 2, [(2, 2), (2, 4), (2, 8), (4, 4), (4, 8), (4, 10)]),
    ("interleaved_zb", sch.ScheduleInterleavedZeroBubble, looped, 2, [(2, 2), (2, 4), (2, 8), (4, 4), (4, 8), (4, 10)]),
    ("looped_bfs", sch.ScheduleLoopedBFS, looped, 2, [(2, 2), (2, 4), (2, 8), (4, 4), (4, 8)]),
    ("zbv", sch.ScheduleZBVZeroBubble, v_shape, 2, [(2, 2), (2, 4), (2, 8), (4, 4), (4, 8)]),
    ("dualpipev", sch.ScheduleDualPipeV, v_shape, 2, [(2, 4), (2, 8), (4, 8), (4, 10)]),
]


def main() -> None:
    written = []
    for stem, cls, placement, v, shapes in CASES:
        for S, M in shapes:
            name = f"{stem}_S{S}_M{M}" + (f"_v{v}" if v > 1 else "") + ".csv"
            text = compute_csv(build(cls, S, M, v, placement))
            (HERE / name).write_bytes(text.encode())
            written.append((name, cls.__name__, S, M, v))
    lines = [
        "# torch's own op orders (compute-only CSV)",
        "",
        f"Written by `generate.py` in this folder with torch {torch.__version__} (CPU wheel), run as",
        "`/tmp/torchenv/bin/python tests/data/torch_orders/generate.py` from the repository root.",
        "Each file is one schedule's `pipeline_order` as torch builds it, one row per rank in rank",
        "order, one field per action (`{stage}{F|I|W|B}{microbatch}`, overlapped pairs",
        "`(aFx;bBy)OVERLAP_F_B`), empty fields where torch pads with `None`; torch's",
        "`REDUCE_GRAD` actions are left out. Line ends are `\\r\\n`, as torch's `_dump_csv` writes.",
        "Read them with `rpd.schedules.machinery.torch_format.from_csv` (tests/test_torch_format.py).",
        "",
        "Known torch quirk, kept as written: `Schedule1F1B._get_pipeline_order` numbers the last",
        "rank's forwards 1..M instead of 0..M-1 (its counter is bumped before the first forward",
        "when the rank has no warm-up), so the `1f1b_*` files name F(S-1, M) and lack F(S-1, 0).",
        "torch's runtime (`_step_microbatches`) counts from 0; only this debug IR is off.",
        "",
        "| file | torch class | S (ranks) | M | stages per rank |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {n} | {c} | {S} | {M} | {v} |" for n, c, S, M, v in written]
    (HERE / "README.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {len(written)} files with torch {torch.__version__}")


if __name__ == "__main__":
    main()
