"""The GPU (JAX's default device) against the CPU, and two paper figures timed on it: one table.

    python benchmarks/device_check.py            # LocalSGD, PD and the LM on both; E3, E5 at paper size
    python benchmarks/device_check.py --quick    # small runs, E3 / E5 at quick size (a CPU: ~2 min)

Rows (docs/running.md, "GPU"):

- LocalSGD (R = 16, H = 5) and PD (S = 16) on a float64 quadratic, and the LM (float32, its
  matmuls at ``HIGHEST``): the same run on the default accelerator and on the CPU
  (``--cpu-devices`` virtual devices, 8: LocalSGD's replicas sharded over them); ``rel. diff`` is
  max |gpu − cpu| / max |cpu| over the curve and the final iterate.
- E3 and E5 (``experiments.figure.compute``) on the default device, at paper size, with their wall
  time (compilation included) and the largest relative difference of any number of their JSON
  (summary and table) from the committed ``paper_figures/<name>.json``. E5 reads the corpus
  (``python -m rpd.objectives.corpus fetch``); without it the row says so.

Without an accelerator the GPU column reads "absent" and the CPU side still runs. Results go to a
temporary directory (``--out``), never into the checkout; the table and a JSON of it are written there.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small runs; E3 / E5 at quick size (no comparison)")
    ap.add_argument("--out", default=None, help="results directory (default: a new temporary one)")
    ap.add_argument("--cpu-devices", type=int, default=8, help="virtual CPU devices for the CPU side")
    ap.add_argument("--no-figures", action="store_true", help="skip E3 and E5")
    return ap.parse_args(argv)


ARGS = _args()
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):  # before jax starts
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={ARGS.cpu_devices}"
    ).strip()
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import rpd  # noqa: E402, F401  (x64 on)
from rpd import schedules  # noqa: E402
from rpd.objectives import corpus  # noqa: E402
from rpd.objectives import nanochat as nc  # noqa: E402
from rpd.objectives.linear import random_quadratic  # noqa: E402
from rpd.train import methods  # noqa: E402
from rpd.train.localsgd import replica_mesh  # noqa: E402

CPUS = jax.devices("cpu")
ACCEL = jax.devices()[0] if jax.devices()[0].platform != "cpu" else None
GAMMAS = [2.0**-6, 2.0**-4]


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _on(device, devices, fn):
    """fn(devices) with ``device`` as the default device (the objective's arrays built there too);
    returns (its arrays, wall seconds)."""
    t0 = time.perf_counter()
    with jax.default_device(device):
        out = [np.asarray(a) for a in fn(devices)]
    return out, time.perf_counter() - t0


def _quadratic(q: bool):
    return random_quadratic(n=320 if q else 1280, d=64 if q else 256, S=16, batch_size=5, seed=0)


def localsgd(q: bool):
    tl = schedules.local_sgd(16, 160 if q else 800, 16, 5)

    def run(devices):
        r = methods.local_sgd(_quadratic(q), tl, GAMMAS, mesh=replica_mesh(16, devices))
        return r.curve, r.x_final

    return f"LocalSGD R=16 H=5 S=16 N={tl.N} (float64)", run


def pd(q: bool):
    tl = schedules.pipedream(16, 160 if q else 800)

    def run(devices):
        r = methods.pipedream(_quadratic(q), tl, GAMMAS)
        return r.curve, r.x_final

    return f"PD S=16 N={tl.N} (float64)", run


TEXT = "".join(f"{w} " for w in np.random.default_rng(0).choice(["to", "be", "or", "not", "that", "is", "the"], 4000))


def lm(q: bool):
    S, N = 4, 32 if q else 128
    kw = dict(batch_size=4, seq_len=16, width=32, heads=2, heldout_frac=0.2, heldout_batches=3)
    tl = schedules.pipedream(S, N)

    def run(devices):
        obj = nc.nanochat(S, text=TEXT, **kw)
        loss, g = jax.jit(obj.value_and_grad)(obj.data, obj.x0, np.int32(1))
        r = methods.pipedream(obj, tl, [2.0**-3])
        return loss, g, r.curve, r.x_final

    return f"LM S={S} PD N={N} (float32, matmuls {nc.MATMUL_PRECISION.name})", run


def compare(make, q: bool) -> dict:
    name, run = make(q)
    cpu, t_cpu = _on(CPUS[0], CPUS, run)
    row = dict(check=name, device=f"{len(CPUS)} x cpu", cpu_s=t_cpu, gpu_s=None, rel_diff=None, verdict="absent")
    if ACCEL is not None:
        gpu, t_gpu = _on(ACCEL, [ACCEL], run)
        rel = max(_rel(g, c) for g, c in zip(gpu, cpu))
        tol = 1e-4 if "float32" in name else 1e-10
        row.update(gpu_s=t_gpu, rel_diff=rel, verdict="equal" if rel <= tol else f"DIFFERS (> {tol:g})")
        row["device"] = f"{ACCEL.device_kind} vs {row['device']}"
    return row


QUICK_FIGURE = {"e5_nanochat": dict(N=96, H=[4], H_grid=[4], gamma_exps=[-2, -1], smooth_window=16)}


def _numbers(x, path=""):
    """Every number of a JSON value, by its path."""
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return {}
    if isinstance(x, (int, float)):
        return {path: float(x)}
    items = x.items() if isinstance(x, dict) else enumerate(x)
    return {k: v for key, val in items for k, v in _numbers(val, f"{path}/{key}").items()}


def figure(name: str, q: bool, out: Path) -> dict:
    from rpd.cli import figure as F

    size = "quick" if q else "full"
    device = jax.devices()[0]
    row = dict(check=f"{name} ({size})", device=f"{device.device_kind}", cpu_s=None, gpu_s=None, rel_diff=None)
    committed = json.loads((ROOT / "paper_figures" / f"{name}.json").read_text())
    study = F.resolve(name)
    fields = {f for f in study.Config.__dataclass_fields__}
    # paper size: the committed figure's config; quick: the quick size, E5 cut to one H and two γ
    over = {k: v for k, v in committed["config"].items() if k in fields and k != "text_path"}
    if q:
        over = QUICK_FIGURE.get(name, {})
    if name.startswith("e5") and not corpus.default_path().exists():
        return dict(row, verdict=f"absent: no corpus ({corpus.FETCH_COMMAND})")
    t0 = time.perf_counter()
    path, _ = F.compute(name, size, over, results_root=out / "results", force=True)
    wall = time.perf_counter() - t0
    rec = F.draw(name, path, out / "figures")
    row["gpu_s" if device.platform != "cpu" else "cpu_s"] = wall
    if q:
        return dict(row, verdict=f"ran ({len(rec.table)} table rows; quick size: not compared)")
    mine = json.loads(rec.numbers.read_text())
    a = _numbers({"summary": mine["summary"], "table": mine["table"]})
    b = _numbers({"summary": committed["summary"], "table": committed["table"]})
    common = sorted(set(a) & set(b))
    rel = [abs(a[k] - b[k]) / max(abs(b[k]), 1e-300) for k in common if not (math.isnan(a[k]) and math.isnan(b[k]))]
    n_diff = sum(r > 0 for r in rel)
    row.update(rel_diff=max(rel, default=0.0), committed_s=committed["runtime_s"])
    row["verdict"] = (
        f"{len(common) - n_diff}/{len(common)} numbers equal to paper_figures (committed {committed['runtime_s']:.0f} s)"
    )
    if set(a) ^ set(b):
        row["verdict"] += f"; {len(set(a) ^ set(b))} numbers in one JSON only"
    return row


def _fmt(v, spec):
    return format("—", f">{spec.split('.')[0]}") if v is None else format(v, spec)


def main() -> int:
    out = Path(ARGS.out) if ARGS.out else Path(tempfile.mkdtemp(prefix="rpd-device-check-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"jax {jax.__version__}; default device {jax.devices()[0]}; {len(CPUS)} CPU devices; results in {out}")
    rows = []
    for make in (localsgd, pd, lm):
        rows.append(compare(make, ARGS.quick))
        print(f"  {rows[-1]['check']}: {rows[-1]['verdict']}", flush=True)
    if not ARGS.no_figures:
        for name in ("e3_nesterov", "e5_nanochat"):
            rows.append(figure(name, ARGS.quick, out))
            print(f"  {rows[-1]['check']}: {rows[-1]['verdict']}", flush=True)
    head = f"{'check':58} {'device':34} {'cpu s':>7} {'gpu s':>7} {'rel. diff':>9}  verdict"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['check']:58} {r['device'][:34]:34} {_fmt(r['cpu_s'], '7.1f')} {_fmt(r['gpu_s'], '7.1f')} "
            f"{_fmt(r['rel_diff'], '9.1e')}  {r['verdict']}"
        )
    if ACCEL is None:
        lines.append("gpu: absent (no accelerator is JAX's default device); the CPU side ran")
    print("\n".join(lines))
    (out / "device_check.txt").write_text("\n".join(lines) + "\n")
    (out / "device_check.json").write_text(json.dumps(rows, indent=1))
    return 0 if all("DIFFERS" not in r["verdict"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
