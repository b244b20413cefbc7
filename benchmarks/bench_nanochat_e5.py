"""Cost and PD stashed-version memory of E5 (PD vs LocalSGD on the small LM) at paper size.

    .venv/bin/python -m benchmarks.bench_nanochat_e5 [--N 192] [--N-localsgd 128] [--xla-memory]

Times one PD run (one γ, ``--N`` microbatches of the S = 16 model) and one LocalSGD run
(H = 4, R = 16, one γ, ``--N-localsgd`` microbatches) twice each: the first call includes the
compile, the second is the steady cost, divided by the number of gradients. Extrapolates the
whole paper-size E5 (PD N = 1024; LocalSGD on every H of the grid at the smallest N reaching
PD's T; 5 step sizes each) from those per-gradient costs. Then the memory of PD's history:
the core's ring [C, D + P] (C = ``plans.ring_size`` of the full-size plan, P = largest block)
against PipeDream's bound (NOAM + 1) × model size, and the gradient slots [NOAM, D + P] that
stand in for PipeDream's activation stash; ``--xla-memory`` also compiles the full-size PD run
for the 5-γ grid and prints XLA's buffer sizes for it.
"""

from __future__ import annotations

import argparse
import math
import resource
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.bench_nanochat import _text
from rpd import schedules
from rpd.analysis import simtime
from rpd.objectives import nanochat as nc
from rpd.results import record_rows
from rpd.studies import nanochat as e5
from rpd.train import core, methods, plans

MiB = 2.0**20


def _twice(fn) -> tuple[float, float]:
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    fn()
    return first, time.perf_counter() - t0


def timing(obj, N_pd: int, N_ls: int, H: int = 4) -> dict:
    S = obj.S
    tl = schedules.pipedream(S, N_pd)
    pd_first, pd_s = _twice(lambda: methods.pipedream(obj, tl, [2.0**-3], stride=tl.T))
    ls_tl = schedules.local_sgd(S, N_ls, S, H)
    ls_first, ls_s = _twice(lambda: methods.local_sgd(obj, ls_tl, [2.0**-3], track_time=False))
    return dict(
        pd_N=N_pd,
        pd_first_s=pd_first,
        pd_run_s=pd_s,
        pd_s_per_grad=pd_s / N_pd,
        ls_N=N_ls,
        ls_H=H,
        ls_first_s=ls_first,
        ls_run_s=ls_s,
        ls_s_per_grad=ls_s / N_ls,
    )


def extrapolate(cfg: e5.Config, t: dict) -> dict:
    G = cfg.gamma_exps[1] - cfg.gamma_exps[0] + 1
    T = schedules.pipedream(cfg.S, cfg.N).T
    N_ls = {
        H: simtime.smallest_n_reaching(T, lambda n, H=H: schedules.local_sgd(cfg.S, n, cfg.R, H)).N for H in cfg.H_grid
    }
    pd_grads, ls_grads = G * cfg.N, G * sum(N_ls.values())
    shown = G * sum(N_ls[H] for H in cfg.H)
    return dict(
        T=T,
        G=G,
        N_localsgd=N_ls,
        pd_gradients=pd_grads,
        localsgd_gradients=ls_grads,
        full_grid_s=pd_grads * t["pd_s_per_grad"] + ls_grads * t["ls_s_per_grad"],
        shown_H_only_s=pd_grads * t["pd_s_per_grad"] + shown * t["ls_s_per_grad"],
        pd_one_gamma_s=cfg.N * t["pd_s_per_grad"],
    )


def memory(obj, cfg: e5.Config) -> dict:
    tl = schedules.pipedream(cfg.S, cfg.N, cfg.noam)
    plan, n_slots = plans.pipedream_plan(tl, obj.n_batches)
    C, D, P = plans.ring_size(plan, cfg.S), obj.D, max(obj.layout.sizes)
    item = np.dtype(obj.dtype).itemsize
    stride = max(1, math.ceil(tl.T / cfg.heldout_points))
    n_records = len(np.arange(stride - 1, tl.T, stride)) + 1
    return dict(
        noam=tl.noam,
        C=C,
        D=D,
        P=P,
        n_slots=n_slots,
        bytes_per_param=item,
        model_MiB=D * item / MiB,
        ring_MiB=C * (D + P) * item / MiB,
        bound_MiB=(tl.noam + 1) * D * item / MiB,
        versions_only_MiB=C * D * item / MiB,
        grad_slots_MiB=n_slots * (D + P) * item / MiB,
        snapshots_MiB=(n_records + 1) * D * item / MiB,
        n_records=n_records,
    )


def xla_memory(obj, cfg: e5.Config) -> dict:
    """XLA's buffer sizes for the full-size PD run on the whole γ grid (compiled, not run)."""
    tl = schedules.pipedream(cfg.S, cfg.N, cfg.noam)
    plan, n_slots = plans.pipedream_plan(tl, obj.n_batches)
    stride = max(1, math.ceil(tl.T / cfg.heldout_points))
    points = np.arange(stride - 1, tl.T, stride)
    if points[-1] != tl.T - 1:
        points = np.append(points, tl.T - 1)
    record = plans.last_writes(record_rows(np.asarray(plan.time), points), len(points))
    opts = core.CoreOptions(plans.ring_size(plan, cfg.S), n_slots, len(points))
    G = cfg.gamma_exps[1] - cfg.gamma_exps[0] + 1
    arrays = tuple(jnp.asarray(a) for a in (plan.block, plan.batch, plan.read, plan.fresh, plan.slot))
    t0 = time.perf_counter()
    compiled = (
        core.make_run(obj, opts)
        .lower(obj.data, arrays, jnp.asarray(record), jnp.full((G,), 0.1, obj.dtype), np.int32(0))
        .compile()
    )
    m = compiled.memory_analysis()
    return dict(
        G=G,
        compile_s=time.perf_counter() - t0,
        argument_MiB=m.argument_size_in_bytes / MiB,
        output_MiB=m.output_size_in_bytes / MiB,
        temp_MiB=m.temp_size_in_bytes / MiB,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--N", type=int, default=192, help="PD microbatches timed")
    parser.add_argument("--N-localsgd", type=int, default=128, help="LocalSGD microbatches timed (H = 4)")
    parser.add_argument("--xla-memory", action="store_true")
    args = parser.parse_args(argv)
    cfg = e5.Config()
    text, source = _text()
    obj = nc.nanochat(
        cfg.S,
        text=text,
        batch_size=cfg.batch_size,
        seq_len=cfg.seq_len,
        width=cfg.width,
        heads=cfg.heads,
        seed=cfg.seed,
    )
    print(f"E5 paper size: S = R = {cfg.S}, D = {obj.D}, corpus {source}, devices {jax.device_count()}")
    t = timing(obj, args.N, args.N_localsgd)
    print(
        f"PD   N={t['pd_N']:4d}, 1 γ: first call (compile + run) {t['pd_first_s']:.1f} s, "
        f"run {t['pd_run_s']:.1f} s = {t['pd_s_per_grad']:.3f} s per gradient"
    )
    print(
        f"LSGD N={t['ls_N']:4d}, H={t['ls_H']}, R={cfg.R}, 1 γ: first call {t['ls_first_s']:.1f} s, "
        f"run {t['ls_run_s']:.1f} s = {t['ls_s_per_grad']:.3f} s per gradient"
    )
    x = extrapolate(cfg, t)
    print(
        f"extrapolated: T = {x['T']}, LocalSGD N per H {x['N_localsgd']}; one PD γ at N = {cfg.N}: "
        f"{x['pd_one_gamma_s'] / 60:.1f} min; whole E5 ({x['G']} γ, PD {x['pd_gradients']} + LocalSGD "
        f"{x['localsgd_gradients']} gradients, H grid {cfg.H_grid}): {x['full_grid_s'] / 60:.0f} min; "
        f"with H in {cfg.H} only: {x['shown_H_only_s'] / 60:.0f} min (compiles not included)"
    )
    m = memory(obj, cfg)
    print(
        f"PD history (per γ, float32): ring [C={m['C']}, D+P={m['D'] + m['P']}] = {m['ring_MiB']:.1f} MiB "
        f"(versions alone C·D = {m['versions_only_MiB']:.1f} MiB) vs (NOAM+1)·model = "
        f"{m['noam'] + 1}·{m['model_MiB']:.2f} = {m['bound_MiB']:.1f} MiB; ring / bound = "
        f"{m['ring_MiB'] / m['bound_MiB']:.2f}"
    )
    print(
        f"  gradient slots [NOAM={m['n_slots']}, D+P] (PipeDream's activation stash) = {m['grad_slots_MiB']:.1f} MiB;"
        f" held-out snapshots [{m['n_records'] + 1}, D] = {m['snapshots_MiB']:.1f} MiB"
    )
    if args.xla_memory:
        xm = xla_memory(obj, cfg)
        print(
            f"XLA, full-size PD run, {xm['G']} γ vmapped (compile {xm['compile_s']:.0f} s): arguments "
            f"{xm['argument_MiB']:.1f} MiB, outputs {xm['output_MiB']:.1f} MiB, temporaries {xm['temp_MiB']:.1f} MiB"
        )
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
