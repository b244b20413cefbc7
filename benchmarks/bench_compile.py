"""Where a figure's time goes: per quick figure, the programs built and the seconds spent building
them against the seconds spent running, with an empty compile cache (``cold``) and with the cache
that run filled (``warm``), each in a fresh process.

A figure's study (``rpd.cli.figure.resolve(name).run`` on its quick config; drawing and the
results store excluded) runs in a child process whose JAX persistent cache and rpd executable
store (``rpd.runtime.compile_cache.use``) and numba cache (``NUMBA_CACHE_DIR``) sit in a new
temporary directory: the ``cold`` child starts with it empty, the ``warm`` child reads what the
cold one wrote. Per child:

- ``compiled``: XLA programs compiled; ``loaded``: programs loaded from the caches
  (``compile_cache.count_programs``); ``numba``: numba functions compiled (or loaded from its
  cache, numba's ``numba:compile`` events, outermost only);
- ``build s``: core-seconds spent building programs (tracing, lowering and XLA compilation or
  loading, summed over the threads a study compiles on, so it can exceed the wall time), plus
  numba's compile events; ``XLA s`` the XLA compilation part of it;
- ``wall s``: the study's wall time; ``start s``: interpreter start to the study. A figure's
  compile cost in wall time is its cold wall less its warm wall.

The machine is shared: every number is one measurement, timings are noisy (the load average is
printed beside them); the counts do not depend on load. ``--sweep`` instead counts the programs
a sweep over S = 2, 4, 8, 16, 32 of one method compiles (``experiments.train``'s ``run`` of
``experiment=e3_nesterov`` per S, one process, an empty cache; ``--method``, ``--n``);
``--sweep --over H`` a sweep over LocalSGD's H = 1, 2, 5, 10, 30 at E3's S = R = 16.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_compile.py [--only e3,e9,e10,e12] [--tree DIR]
    PYTHONPATH=. .venv/bin/python benchmarks/bench_compile.py --sweep [--method pd] [--over S|H] [--tree DIR]

``--tree DIR`` runs the children on another source tree (``git archive <commit> | tar -x -C DIR``)
for a before/after table; the default is this checkout.
"""

from __future__ import annotations

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = "e3,e9,e10,e12"
SWEEP_S = (2, 4, 8, 16, 32)
SWEEP_H = (1, 2, 5, 10, 30)
XLA_EVENT = "/jax/core/compile/backend_compile_duration"


def _listen() -> dict:
    """Seconds of XLA compilation and numba compiles (count, seconds), accumulated from here on."""
    import jax
    from numba.core import event

    acc = {"xla_s": 0.0, "numba": 0, "numba_s": 0.0}

    def on_duration(ev, secs, **_kw):
        if ev == XLA_EVENT:
            acc["xla_s"] += secs

    class Outermost(event.Listener):  # a compile nested in another counts once, in its parent's time
        depth, t0 = 0, 0.0

        def on_start(self, _ev):
            if self.depth == 0:
                self.t0 = time.perf_counter()
            self.depth += 1

        def on_end(self, _ev):
            self.depth -= 1
            if self.depth == 0:
                acc["numba"] += 1
                acc["numba_s"] += time.perf_counter() - self.t0

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    event.register("numba:compile", Outermost())
    return acc


def child_figure(name: str, cache: str) -> dict:
    from experiments.reproduce_paper_figures import select
    from rpd.cli.figure import resolve, study_config
    from rpd.runtime import compile_cache

    compile_cache.use(cache)
    acc = _listen()
    (full,) = select(name)
    study = resolve(full)
    cfg = study_config(study, "quick")
    start = time.perf_counter() - T_START
    t0 = time.perf_counter()
    with compile_cache.count_programs() as n:
        study.run(cfg, progress=lambda *_a, **_k: None)
    wall = time.perf_counter() - t0
    build = n["seconds"] + acc["numba_s"]
    return {
        "figure": full,
        "compiled": n["compiled"],
        "loaded": n["from_cache"],
        "numba": acc["numba"],
        "build_s": build,
        "xla_s": acc["xla_s"],
        "numba_s": acc["numba_s"],
        "wall_s": wall,
        "run_s": wall - build,  # negative where threads compiled side by side: see build s
        "start_s": start,
    }


def child_sweep(method: str, n: int, cache: str, over: str = "S") -> dict:
    from hydra import compose, initialize_config_dir

    import experiments.schemas  # noqa: F401  (the config schemas in hydra's ConfigStore, as the entry points)
    from rpd.cli import train
    from rpd.runtime import compile_cache

    compile_cache.use(cache)
    rows = []
    with initialize_config_dir(config_dir=str(Path.cwd() / "configs"), version_base="1.3"):
        for v in SWEEP_S if over == "S" else SWEEP_H:
            cell = [f"schedule.S={v}", f"schedule.R={v}"] if over == "S" else ["schedule.R=16", f"schedule.H={v}"]
            args = ["experiment=e3_nesterov", f"method={method}", *cell]
            args += [f"schedule.N={n}", f"results_root={cache}/results", "force=true"]
            t0 = time.perf_counter()
            with compile_cache.count_programs() as c:
                out = train.run(compose("train", overrides=args))
            if out.status != "ok":
                raise RuntimeError(f"{over}={v}: {out.status} {out.error}")
            rows.append({"value": v, **c, "wall_s": time.perf_counter() - t0})
    return {"method": method, "N": n, "over": over, "rows": rows}


def spawn(tree: Path, args: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), RPD_JAX_CACHE="0", OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=DEFAULT, help=f"quick figures, by tag or name (default {DEFAULT})")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the source tree the children run")
    ap.add_argument("--sweep", action="store_true", help="count a sweep over S of one method instead")
    ap.add_argument("--method", default="pd", help="the sweep's method (pd, rpd, localsgd, ...)")
    ap.add_argument("--n", type=int, default=200, help="the sweep's schedule.N")
    ap.add_argument("--over", choices=("S", "H"), default="S", help="the swept value (H: LocalSGD's local steps)")
    ap.add_argument("--child", nargs="+", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        kind, *rest = args.child
        out = child_figure(*rest) if kind == "figure" else child_sweep(rest[0], int(rest[1]), rest[2], rest[3])
        print(json.dumps(out))
        return
    tree = args.tree.resolve()
    print(f"tree {tree}; load average {load()} on {os.cpu_count()} cores; one measurement per cell", flush=True)
    if args.sweep:
        with tempfile.TemporaryDirectory(prefix="bench_compile_") as tmp:
            res = spawn(tree, ["--child", "sweep", args.method, str(args.n), tmp, args.over])
        for row in res["rows"]:
            print(
                f"{args.over}={row['value']:>2}: compiled {row['compiled']}, loaded {row['from_cache']}, "
                f"build {row['seconds']:.2f} s, wall {row['wall_s']:.2f} s",
                flush=True,
            )
        total = sum(r["compiled"] for r in res["rows"])
        values = list(SWEEP_S if args.over == "S" else SWEEP_H)
        print(f"sweep {args.method} {args.over}={values} N={args.n}: {total} programs compiled; load {load()}")
        return
    from experiments.reproduce_paper_figures import select

    print(
        f"{'figure':<20} {'':>5} {'compiled':>8} {'loaded':>6} {'numba':>5} {'build s':>8} {'XLA s':>6} "
        f"{'wall s':>7} {'start s':>7} {'load':>5}"
    )
    for name in select(args.only):
        with tempfile.TemporaryDirectory(prefix="bench_compile_") as tmp:
            os.environ["NUMBA_CACHE_DIR"] = str(Path(tmp) / "numba")
            for phase in ("cold", "warm"):
                r = spawn(tree, ["--child", "figure", name, str(Path(tmp) / "jax")])
                print(
                    f"{name:<20} {phase:>5} {r['compiled']:>8} {r['loaded']:>6} {r['numba']:>5} {r['build_s']:>8.1f} "
                    f"{r['xla_s']:>6.1f} {r['wall_s']:>7.1f} {r['start_s']:>7.1f} {load():>5}",
                    flush=True,
                )
            del os.environ["NUMBA_CACHE_DIR"]


if __name__ == "__main__":
    main()
