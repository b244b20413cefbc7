"""Issue 14 benchmark: compile once, run many. The whole E3 figure (the study's ``run``,
objective construction and every compilation included) three ways, each in its own process:

- ``cold``: a fresh process, no persistent cache;
- ``again``: the same process runs the whole figure a second time (the study rebuilds its
  objectives: with programs keyed by ``Objective.program_key`` nothing compiles again);
- ``cached``: a fresh process whose persistent compilation cache and executable store
  (``rpd.runtime.compile_cache.use``: every program cached) were filled by an earlier process.

Side by side, in the ``cold`` process, the lean NumPy per-op loop of ``bench_localsgd.py``
(weight stashing, f − f* after every time step), timed on one γ per method and extrapolated
to the figure's grid, its curves checked against the study's. Rounds are interleaved and
repeated; medians are printed. ``--before DIR`` runs the same processes on another source tree
(e.g. ``git archive <commit> | tar -x -C DIR``) in the same rounds, for a before/after table.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_compile_once.py [--repeats 3] [--before DIR]
"""

from __future__ import annotations

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def child(cache: str | None, numpy_side: bool) -> dict:
    """One process: E3 cold, E3 again, and (``numpy_side``) the lean NumPy loop."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import jax

    if cache:
        try:  # JAX's persistent cache and rpd's executable store (rpd.runtime.programs)
            from rpd.runtime.compile_cache import use
        except ImportError:  # an older tree: its settings by hand
            jax.config.update("jax_compilation_cache_dir", cache)
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
        else:
            use(cache)
    compiles, hits = [0], [0]  # programs compiled or loaded (XLA), and of those loaded from the cache
    # rpd.runtime.compile_cache.count_programs measures the same, but a --before tree may predate it
    seconds = {
        "/jax/core/compile/backend_compile_duration": 0.0,
        "/jax/core/compile/jaxpr_to_mlir_module_duration": 0.0,
        "/jax/core/compile/jaxpr_trace_duration": 0.0,
    }  # time spent compiling, by stage

    def on_duration(ev, d, **kw):
        compiles[0] += ev == "/jax/core/compile/backend_compile_duration"
        if ev in seconds:
            seconds[ev] += d

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(
        lambda ev, **kw: hits.__setitem__(0, hits[0] + (ev == "/jax/compilation_cache/cache_hits"))
    )

    from rpd.studies import pd_vs_localsgd

    cfg = pd_vs_localsgd.config_for("e3_nesterov", "full")
    t0 = time.perf_counter()
    out = pd_vs_localsgd.run(cfg)
    cold = time.perf_counter() - t0
    try:
        from rpd.runtime.programs import COUNTS as stored  # executables loaded from rpd's store, untraced
    except ImportError:  # an older tree
        stored = {"loaded": 0}
    res = {
        "cold": cold,
        "start_to_cold": time.perf_counter() - T_START,
        "compiles_cold": compiles[0] - hits[0],
        "hits_cold": hits[0] + stored["loaded"],
        "xla_s": seconds["/jax/core/compile/backend_compile_duration"],
        "trace_lower_s": seconds["/jax/core/compile/jaxpr_to_mlir_module_duration"]
        + seconds["/jax/core/compile/jaxpr_trace_duration"],
    }
    t0 = time.perf_counter()
    pd_vs_localsgd.run(cfg)
    res["again"] = time.perf_counter() - t0
    res["compiles_again"] = compiles[0] - res["compiles_cold"]
    if not numpy_side:
        return res
    sys.path.insert(0, str(HERE))
    from bench_localsgd import numpy_e3

    total, worst = numpy_e3(out, cfg)
    res.update(numpy=total, numpy_rel_diff=worst)
    return res


def spawn(tree: Path, cache: str | None, numpy_side: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), RPD_JAX_CACHE="0")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", cache or "off"]
    if numpy_side:
        cmd.append("--numpy")
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def one_round(tree: Path, tmp: Path) -> dict:
    a = spawn(tree, None, True)  # cold (no persistent cache) + again + NumPy
    cache = tempfile.mkdtemp(dir=tmp)
    spawn(tree, cache, False)  # fills the persistent cache
    b = spawn(tree, cache, False)  # a fresh process that reads it
    return {
        **a,
        "cached": b["cold"],
        "compiles_cached_process": b["compiles_cold"],
        "hits": b["hits_cold"],
        "start_to_cached": b["start_to_cold"],
    }


def load_average() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", type=Path, default=None, help="another source tree, run in the same rounds")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--numpy", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(None if args.child == "off" else args.child, args.numpy)))
        return
    trees = {"now": ROOT} | ({"before": args.before.resolve()} if args.before else {})
    rows: dict[str, list[dict]] = {k: [] for k in trees}
    print(f"load average {load_average()} on {os.cpu_count()} cores at the start")
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for name, tree in trees.items():
                row = one_round(tree, Path(tmp))
                rows[name].append(row)
                print(
                    f"round {r + 1} {name:>6}: cold {row['cold']:.2f} s ({row['compiles_cold']} compiles: "
                    f"{row['xla_s']:.2f} s in XLA, {row['trace_lower_s']:.2f} s tracing and lowering), "
                    f"again {row['again']:.2f} s ({row['compiles_again']} compiles), cached process "
                    f"{row['cached']:.2f} s ({row['compiles_cached_process']} compiles, {row['hits']} from the caches); NumPy {row['numpy']:.2f} s "
                    f"(curves agree to {row['numpy_rel_diff']:.1e}); load {load_average()}",
                    flush=True,
                )
    med = lambda name, k: statistics.median(row[k] for row in rows[name])  # noqa: E731
    print(
        f"\nE3 whole figure, medians of {args.repeats} interleaved rounds (seconds; ratio = NumPy / rpd, "
        "NumPy timed in the cold process)"
    )
    print(
        f"{'tree':>6} {'cold':>7} {'again':>7} {'cached':>7} {'NumPy':>7}   {'cold x':>6} {'again x':>7} "
        f"{'cached x':>8}   {'start→cold':>10} {'start→cached':>12}   {'cold: XLA':>9} {'trace+lower':>11}"
    )
    for name in trees:
        c, a, k, n = (med(name, key) for key in ("cold", "again", "cached", "numpy"))
        print(
            f"{name:>6} {c:7.2f} {a:7.2f} {k:7.2f} {n:7.2f}   {n / c:5.1f}x {n / a:6.1f}x {n / k:7.1f}x   "
            f"{med(name, 'start_to_cold'):10.2f} {med(name, 'start_to_cached'):12.2f}   "
            f"{med(name, 'xla_s'):9.2f} {med(name, 'trace_lower_s'):11.2f}"
        )
    print(f"load average {load_average()} at the end")


if __name__ == "__main__":
    main()
