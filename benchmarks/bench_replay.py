"""The replay of a measured trace and every attribution (rpd.analysis.stragglers), timed on a
64-worker, 44-step trace made here: ST scaled (docs/replay.md#benchmark).

The trace: ST's layout widened to dp = 16 (16 × pp 4 = 64 workers, M = 4), 44 steps. Each op's
duration is ST's typical one for its (stage, op type) -- the mean compute duration, the median
transfer -- times a seeded lognormal factor (σ = 0.03), and the forward and backward of one
worker (dp 5, stage 1) 25 % slower; the timeline is the Megatron 1F1B step of
:mod:`rpd.model.megatron_step` replayed at those durations (so a fused p2p op's rows share start
and end, as in the artifact's traces), times per step from 0, written in the artifact's format.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_replay.py [--out /tmp/bench_trace] [--repeats 3]
    [--theirs /tmp/StragglerAnalysis --theirs-python /tmp/sa-venv/bin/python]

``--theirs DIR`` also times the trace authors' analyzer (``analyzer/wia.py`` of
ByteDance-Seed/StragglerAnalysis, checked out in DIR, run by a Python with pandas < 2.2 and
numpy < 2) on the same files, end to end in a fresh process, beside rpd's replay and
attribution in-process (the trace's reading included; imports excluded).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from rpd.analysis.stragglers import attribute, durations, job_order, present_ops
from rpd.io.trace import read_meta, read_trace
from rpd.model.job_layout import JobLayout
from rpd.model.megatron_step import build_step
from rpd.schedules.machinery.measured import replay

ST = Path(__file__).resolve().parents[1] / "tests" / "data" / "trace_st"


def make_trace(out: Path, dp: int = 16, steps: int = 44, seed: int = 0) -> tuple[Path, Path]:
    """Write the scaled trace and its meta file under ``out``; returns their paths."""
    st_layout = read_meta(ST / "meta-ST.yaml")
    st = read_trace(ST / "trace-ST.parquet", st_layout)
    order, M = job_order(st_layout, st)
    typical = durations(st, build_step(st_layout, order, M, present_ops(st, st_layout.pp)), M)
    layout = JobLayout(dp=dp, pp=st_layout.pp, world=dp * st_layout.pp, name="ST-scaled")
    step = build_step(layout, order, M, present_ops(st, layout.pp))
    # each half's typical value: ST's (stage, op type) typical, the median over ST's halves of it
    base = {}
    for h in range(len(typical.step.half_slot)):
        key = (int(typical.step.half_stage[h]), str(typical.step.half_optype[h]))
        base.setdefault(key, []).append(float(np.median(typical.measured[h])))
    rng = np.random.default_rng(seed)
    val = np.array([np.median(base[(int(s), str(o))]) for s, o in zip(step.half_stage, step.half_optype)])
    val = val[:, None] * rng.lognormal(0.0, 0.03, (len(val), steps))
    slow = (
        (step.half_dp == 5)
        & (step.half_stage == 1)
        & np.isin(step.half_optype, ("forward-compute", "backward-compute"))
    )
    val[slow] *= 1.25
    first = np.r_[0, np.nonzero(np.diff(step.half_slot))[0] + 1]
    start, end = replay(step.program, np.maximum.reduceat(val, first, axis=0))
    h_start, h_end = start[step.half_slot], end[step.half_slot]
    rows = []
    compute = np.isin(step.half_optype, ("forward-compute", "backward-compute"))
    for k in range(steps):
        rows.append(
            pd.DataFrame(
                {
                    "dp_rank": step.half_dp.astype(np.int8),
                    "stage": step.half_stage.astype(np.int8),
                    "rank": (step.half_dp * layout.pp + step.half_stage).astype(np.int16),
                    "step": np.full(len(val), k, np.int64),
                    "optype": step.half_optype.astype(str),
                    "start_ts": h_start[:, k].astype(np.float32),
                    "duration": (h_end[:, k] - h_start[:, k]).astype(np.float32),
                    "seq_id": step.half_seq.astype(np.int32),
                    "mc": np.where(
                        compute | np.isin(step.half_optype, ("params-all-gather", "grads-reduce-scatter")), 0, -1
                    ).astype(np.int8),
                    "mb_id": np.where(compute, step.half_seq, np.where(step.half_optype == "gc", 0, -1)).astype(
                        np.int8
                    ),
                    "gmc": np.where(compute, step.half_stage, -1).astype(np.int16),
                }
            )
        )
    df = pd.concat(rows, ignore_index=True)
    df["optype"] = df["optype"].astype("category")
    out.mkdir(parents=True, exist_ok=True)
    trace, meta = out / "trace-ST-scaled.parquet", out / "meta-ST-scaled.yaml"
    df.to_parquet(trace)
    meta.write_text(
        yaml.safe_dump(
            dict(
                trial_name="STscaled",
                run_id=0,
                dp_size=dp,
                dsp_size=1,
                pp_size=layout.pp,
                tp_size=1,
                vpp_size=1,
                world_size=dp * layout.pp,
            )
        )
    )
    return trace, meta


def time_rpd(trace: Path, meta: Path, repeats: int) -> tuple[float, float, object]:
    """Best wall and best CPU seconds of read + attribution, in this process."""
    best, cpu, attr = float("inf"), float("inf"), None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        layout = read_meta(meta)
        attr, _ = attribute(read_trace(trace, layout), layout)
        best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return best, cpu, attr


def time_rpd_fresh(trace: Path, meta: Path, repeats: int) -> tuple[float, float]:
    """Best wall and CPU seconds of the same work in a fresh process, interpreter and imports
    (jax with rpd) included, as their analyzer is timed."""
    best, cpu = float("inf"), float("inf")
    code = (
        "import sys; from rpd.io.trace import read_meta, read_trace; from rpd.analysis.stragglers import attribute; "
        "L = read_meta(sys.argv[2]); attribute(read_trace(sys.argv[1], L), L)"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    for _ in range(repeats):
        t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", code, str(trace), str(meta)], env=env, check=True, timeout=900)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, time.perf_counter() - t0)
        cpu = min(cpu, r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    return best, cpu


def time_theirs(trace: Path, meta: Path, src: Path, python: str, repeats: int) -> tuple[float, float, str]:
    """Best wall and CPU seconds of their analyzer in a fresh process (interpreter and imports
    included), and its result JSON (or the error's tail)."""
    best, cpu, log = float("inf"), float("inf"), ""
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{src / 'analyzer'}"}  # as `python analyzer/wia.py` sees it
    for _ in range(repeats):
        dump = trace.parent / "theirs"
        t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(
            [
                python,
                "-c",
                "import time; t=time.perf_counter(); import sys; sys.argv=sys.argv[1:]; "
                "import runpy; runpy.run_path(sys.argv[0], run_name='__main__'); print('ANALYSIS_S', time.perf_counter()-t)",
                str(src / "analyzer" / "wia.py"),
                "--metadata",
                str(meta),
                "--trace",
                str(trace),
                "--dump-dir",
                str(dump),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            return float("nan"), float("nan"), proc.stderr[-2000:]
        best = min(best, wall)
        cpu = min(cpu, r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
        log = (dump / "STscaled.json").read_text()
    return best, cpu, log


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench_trace"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--theirs", type=Path, default=None)
    ap.add_argument("--theirs-python", default="python")
    args = ap.parse_args()
    trace, meta = make_trace(args.out)
    t, c, attr = time_rpd(trace, meta, args.repeats)
    print(f"trace: {trace} (64 workers, 44 steps, {len(pd.read_parquet(trace))} ops)")
    print(
        f"rpd: read + replay + ideal + attribution by stage, dp rank, op type, worker: {t:.2f} s wall, {c:.2f} s CPU (best of {args.repeats})"
    )
    print(
        f"  replay {attr.replay_s:.4f} s, ideal {attr.ideal_s:.4f} s, S {attr.slowdown:.4f}, "
        f"top stage {next(iter(attr.by_stage))}, top dp rank {next(iter(attr.by_dp_rank))}"
    )
    tf, cf = time_rpd_fresh(trace, meta, args.repeats)
    print(
        f"rpd, the same in a fresh process (imports included): {tf:.2f} s wall, {cf:.2f} s CPU (best of {args.repeats})"
    )
    if args.theirs is not None:
        t2, c2, log = time_theirs(trace, meta, args.theirs, args.theirs_python, args.repeats)
        print(
            f"theirs (analyzer/wia.py, fresh process, imports included): {t2:.2f} s wall, {c2:.2f} s CPU (best of {args.repeats}); rpd fresh / theirs: {tf / t2:.2f} wall, {cf / c2:.2f} CPU"
        )
        if t2 != t2:
            print(log)
        else:
            import json

            r = json.loads(log)
            k = sorted(r["step_t_nodelay"])
            print(
                f"  theirs: replay {np.mean([r['step_t_nodelay'][i] for i in k]):.4f} s, ideal "
                f"{np.mean([r['step_t_noblk'][i] for i in k]):.4f} s, S {r['blocking_slowdown']:.4f}, "
                f"by stage {r.get('blocking_decompose_by_stage')}"
            )


if __name__ == "__main__":
    main()
