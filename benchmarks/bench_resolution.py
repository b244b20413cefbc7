"""Simulated time costs events, not ticks: ``experiments.train method=pipeline schedule=1f1b
costs.F=F costs.B=2F`` (every other value the default) at F = 1, 10², 10⁴, 10⁶, one fresh
process per F, its wall time and peak RSS (``os.wait4``'s rusage of that child), and the final
loss of the chosen γ. Done when F = 10⁶ is within 1.5× of F = 1 in both, with the same loss.

Then the zero-bubble paper's profiled costs (Qi et al. 2023, arXiv 2401.10241, Table 9: 1.5B
model, p = 8 stages, m = 24 microbatches per iteration; T_F 18.522 ms, T_B 18.086 ms, T_W
9.337 ms, T_comm 0.601 ms), written in microseconds (``costs.unit=us``: F = 18522, I = 18086,
W = 9337, p2p = 601), trained end to end under ZB-H1 and ZB-H2 next to the same schedule at
unit costs.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_resolution.py [--F 1 100 10000 1000000] [--no-zb]

Everything the runs write goes to a temporary folder (results store, hydra's run folder)."""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

# Table 9 of the zero-bubble paper, 1.5B, p = 8, m = 24, in microseconds
ZB_US = ["costs.F=18522", "costs.I=18086", "costs.W=9337", "costs.p2p=601", "costs.unit=us"]
ZB_SHAPE = ["schedule.S=8", "schedule.M=24", "schedule.N=96"]  # four iterations of 24 microbatches


def one(F: int, root: str, overrides: list[str] | None = None, name: str | None = None) -> dict:
    out = os.path.join(root, name or f"F{F}")
    args = (
        overrides if overrides is not None else ["method=pipeline", "schedule=1f1b", f"costs.F={F}", f"costs.B={2 * F}"]
    )
    cmd = [
        sys.executable,
        "-m",
        "experiments.train",
        *args,
        f"results_root={out}",
        f"hydra.run.dir={out}/hydra",
        "logger=none",
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    log = proc.stdout.read().decode(errors="replace")
    if status != 0:
        raise RuntimeError(f"F={F} failed:\n{log[-3000:]}")
    summary = [json.load(open(p)) for p in glob.glob(f"{out}/**/summary.json", recursive=True)]
    s = summary[0] if summary else {}
    return dict(
        F=F if name is None else name,
        wall_s=round(wall, 2),
        peak_rss_gb=round(usage.ru_maxrss / 2**20, 3),
        final=s.get("final/selected"),
        gamma=s.get("tuning/gamma"),
        T=s.get("makespan"),
        time_unit=s.get("time_unit"),
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--F", type=int, nargs="+", default=[1, 100, 10_000, 1_000_000])
    ap.add_argument("--no-zb", action="store_true", help="skip the zero-bubble paper's microsecond costs")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as root:
        rows = [one(F, root) for F in args.F]
        zb = []
        for sched in [] if args.no_zb else ["zb_h1", "zb_h2"]:
            base = ["method=pipeline", f"schedule={sched}", *ZB_SHAPE]
            zb += [one(0, root, base, f"{sched}_unit"), one(0, root, base + ZB_US, f"{sched}_us")]
    for r in rows:
        print(json.dumps(r))
    base = rows[0]
    for r in rows[1:]:
        print(
            f"F={r['F']}: wall {r['wall_s'] / base['wall_s']:.2f}x, RSS {r['peak_rss_gb'] / base['peak_rss_gb']:.2f}x "
            f"of F={base['F']}; same final loss: {r['final'] == base['final']}"
        )
    for unit, us in zip(zb[::2], zb[1::2]):
        print(json.dumps(unit))
        print(json.dumps(us))
        print(
            f"{us['F']}: T = {us['T']} us ({us['T'] / 1e6:.3f} s simulated), wall {us['wall_s'] / unit['wall_s']:.2f}x, "
            f"RSS {us['peak_rss_gb'] / unit['peak_rss_gb']:.2f}x of unit costs ({unit['T']} ticks)"
        )


if __name__ == "__main__":
    main()
