"""Issue 4 benchmark: the whole E3 figure and E6 at full size, end to end.

E3 (10 PD γ + 3 H × 11 LocalSGD γ, Nesterov quadratic, S = R = 16, N = 600): the study's
``run`` timed in a fresh process *including* objective construction and every compilation
(``cold``), then again (``warm``: same shapes, compiled programs cached). Side by side, in the
same process, a plain NumPy implementation of the same runs: per-op host loops over the timeline
with weight stashing, as the authors' code does, f − f* after every time step. The NumPy side
times one γ per method (PD and each H) and extrapolates to the full grid (10 PD runs, 11 per H);
its curves are checked against the JAX curves for those γ.

E6 (S = 2..128, T = 3180, PD / RPD / LocalSGD): the study's ``run`` at full size, per-S timings.

    .venv/bin/python benchmarks/bench_localsgd.py e3 [--out paper_figures]
    .venv/bin/python benchmarks/bench_localsgd.py e4 [--out paper_figures]   (E4: JAX only)
    .venv/bin/python benchmarks/bench_localsgd.py e6 [--out paper_figures]

``--out DIR`` also writes the figure (``DIR/<study>.png``) and the numbers behind it
(``DIR/<study>.json``: summary, table, seconds) from the timed run.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the NumPy side: no BLAS spin on 2 shared cores

import numpy as np  # noqa: E402

T_START = time.perf_counter()

import rpd  # noqa: E402,F401
from rpd import schedules  # noqa: E402
from rpd.analysis import tuning  # noqa: E402
from rpd.io import store  # noqa: E402
from rpd.schedules import BWD, FWD  # noqa: E402
from rpd.studies import make_config, pd_vs_localsgd, scaling  # noqa: E402


def numpy_run(data: dict, layout, n_batches: int, B: int, tl, gamma: float) -> np.ndarray:
    """f(x̄) − f* after every time step of a PD or LocalSGD timeline, op by op on the host."""
    X, y, A, w_star = (np.asarray(data[k]) for k in ("X", "y", "A", "w_star"))
    R = tl.R or 1
    blocks = [slice(o, o + n) for o, n in zip(layout.offsets, layout.sizes)]
    x = np.zeros((R, X.shape[1]))
    stash: dict[int, np.ndarray] = {}
    sync = set(int(t) for t in tl.sync_time)
    f = lambda v: 0.5 * (v - w_star) @ (A @ (v - w_star))  # noqa: E731
    curve = [f(x.mean(0))]
    for t in range(tl.T):
        for s in range(tl.S):
            op, m = tl.op[t, s], int(tl.mb[t, s])
            if op == FWD:
                stash.setdefault(m, np.zeros(X.shape[1]))[blocks[s]] = x[m % R, blocks[s]]
            elif op == BWD:
                rows = slice((m % n_batches) * B, (m % n_batches) * B + B)
                r = X[rows] @ stash[m] - y[rows]
                x[m % R, blocks[s]] -= gamma * (X[rows, blocks[s]].T @ r) / B
                if s == 0:
                    del stash[m]
        if t in sync:
            x[:] = x.mean(0)
        curve.append(f(x.mean(0)))
    return np.array(curve)


def save(study, name: str, out, seconds: float, out_dir: str | None) -> None:
    """The figure and its numbers, drawn from the saved JSON-able output like the harness does."""
    if out_dir is None:
        return
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    study.figure(out, d / f"{name}.png")
    doc = dict(study=name, seconds=seconds, summary=out.summary, table=out.table)
    (d / f"{name}.json").write_text(json.dumps(store.to_jsonable(doc), indent=1, sort_keys=True))
    print(f"wrote {d / name}.png and .json")


def bench_e4(out_dir: str | None) -> None:
    cfg = pd_vs_localsgd.config_for("e4_logistic", "full")
    t0 = time.perf_counter()
    out = pd_vs_localsgd.run(cfg)
    cold = time.perf_counter() - t0
    print(f"E4 JAX, whole figure: {cold:.2f} s incl. objective (f* solve) and compilation")
    for row in out.table:
        print("  ", row)
    save(pd_vs_localsgd, "e4_logistic", out, cold, out_dir)


def numpy_e3(out, cfg, report=None) -> tuple[float, float]:
    """The E3 figure's selected run of every method again with the lean NumPy loop: returns (the
    whole figure's NumPy time, extrapolated from one γ per method to the grid, and the largest
    relative difference to the study's curves). The study's curves are cut with ``cfg.cut``
    ("authors": ``curve[:T]``, the last point after T − 1 steps; "end": after T steps; older
    trees stored no ``t_last``); ``numpy_run``'s ``curve[i]`` is f − f* after i steps, so it is
    compared up to the same last step. ``report(key, entry, T, seconds, runs, rel_diff)`` is
    called per method."""
    obj = pd_vs_localsgd.make_objective(cfg)
    data = {k: np.asarray(v) for k, v in obj.data.items()}
    n_runs = {"pd": len(tuning.pow2_grid(*cfg.pd_gamma_exps))}
    timelines = {"pd": schedules.pipedream(cfg.S, cfg.N, cfg.noam)}
    for H in cfg.H:
        timelines[f"localsgd_H{H}"] = schedules.local_sgd(cfg.S, cfg.N, cfg.R, H)
        n_runs[f"localsgd_H{H}"] = len(tuning.pow2_grid(*cfg.localsgd_gamma_exps))
    t_last = out.summary.get("t_last")
    if t_last is not None:
        assert np.array_equal(out.arrays["time"], np.arange(t_last + 1)), "JAX time axis is not 0..t_last"
    total, worst = 0.0, 0.0
    for e in out.summary["methods"]:
        key, j = e["key"], e["gamma_index"]
        gamma = float(out.arrays[f"{key}_gammas"][j])
        t0 = time.perf_counter()
        curve = numpy_run(data, obj.layout, obj.n_batches, obj.batch_size, timelines[key], gamma)
        dt = time.perf_counter() - t0
        ref = out.arrays[f"{key}_curves"][j]
        if t_last is not None:
            assert ref.shape == (t_last + 1,), (key, ref.shape, t_last)
        err = float(np.max(np.abs(curve[: len(ref)] - ref) / np.maximum(np.abs(ref), 1e-300)))
        worst = max(worst, err)
        total += dt * n_runs[key]
        if report is not None:
            report(key, e, timelines[key].T, dt, n_runs[key], err)
    return total, worst


def bench_e3(out_dir: str | None) -> None:
    cfg = pd_vs_localsgd.config_for("e3_nesterov", "full")
    t0 = time.perf_counter()
    out = pd_vs_localsgd.run(cfg)
    cold = time.perf_counter() - t0
    save(pd_vs_localsgd, "e3_nesterov", out, cold, out_dir)
    t0 = time.perf_counter()
    pd_vs_localsgd.run(cfg)
    warm = time.perf_counter() - t0
    print(
        f"E3 JAX, whole figure (10 PD γ + {len(cfg.H)} H × 11 γ): cold {cold:.2f} s incl. objective "
        f"and compilation (process start to here {time.perf_counter() - T_START - warm:.2f} s); "
        f"again in the same process {warm:.2f} s (a new objective recompiles)"
    )
    for row in out.table:
        print("  ", row)

    def report(key, e, T, dt, runs, err):
        print(
            f"  NumPy {key:>14}: one run (γ = 2^{e['gamma_exp']}, T = {T}) {dt:.2f} s "
            f"× {runs} runs; max rel. diff to JAX curve {err:.1e}"
        )

    total, worst = numpy_e3(out, cfg, report)
    print(f"E3 NumPy, whole figure (extrapolated from one γ per method): {total:.1f} s")
    print(f"speed-up: cold {total / cold:.1f}x, warm {total / warm:.1f}x; curves agree to {worst:.1e}")
    assert worst < 1e-12, f"NumPy and JAX curves differ by {worst:.1e} (more than float rounding)"


def bench_e6(out_dir: str | None) -> None:
    cfg = make_config(scaling.Config, "full")
    t0 = time.perf_counter()
    last = [t0]

    def progress(msg: str) -> None:
        now = time.perf_counter()
        print(f"  {msg:<16} {now - last[0]:6.1f} s", flush=True)
        last[0] = now

    out = scaling.run(cfg, progress=progress)
    total = time.perf_counter() - t0
    print(f"E6 full size (S = {list(cfg.S_values)}, T = {cfg.T}): {total:.1f} s")
    for row in out.table:
        print("  ", row)
    save(scaling, "e6_scaling", out, total, out_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("e3", "e4", "e6"))
    parser.add_argument("--out", default=None, help="also write <study>.png and <study>.json here")
    args = parser.parse_args()
    {"e3": bench_e3, "e4": bench_e4, "e6": bench_e6}[args.part](args.out)


if __name__ == "__main__":
    main()
