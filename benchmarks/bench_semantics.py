"""Schedule-semantics benchmark: every schedule's update plan through the one core, against
straightforward implementations, side by side in one process.

(a) synchronous plans (target: <= 1.2x plain minibatch SGD per microbatch gradient):
    ``methods.train(obj, tl, gammas)`` on a 1F1B timeline (S = 8, M = 32, N = M * flushes)
    against a plain minibatch SGD written here: one jitted ``lax.scan`` of
    x <- x - γ (1/M) Σ_j ∇f(x; b_qM+j) over the same flushes and batches, the M microbatch
    gradients vmapped, the same γ grid vmapped, no ring. Both record f - f* at the same points:
    "train only" = the last iterate only (train: ``axis="block_update", stride=K``), "f per flush"
    = after every flush (train: ``stride=S``, the flush's S block updates; plain: every step),
    both as one flat batch of points. The iterates are checked to agree. Also printed: the
    compiled core alone (``core.execute`` on the prebuilt plan; the rest of train is host-side
    plan building and curve assembly) and, for the quadratic, train's default recording (f after
    every tick of the timeline: T points). Objectives: the random quadratic at E1's size
    (n = 2000, d = 512, B = 100) and ``objectives.mlp_chain`` (n = 512, width 32, B = 16).
(b) asynchronous semantics (target: <= 1.5x a PD update): ``methods.train`` on PipeMare (plain,
    T1, T2, weight prediction), PipeDream-2BW (M = S) and PipeDream with ``predict=True``,
    against ``methods.pipedream`` (PD) on the same objective, S = 8 and N; f recorded at the end
    only. PipeMare runs stage-wise (``rpd.train.core``: a microbatch's forward at its first update,
    then one stage's VJP per update); "PipeMare whole" is the same plan with every update
    computing its whole two-point chain gradient (``run_plan`` on the plan with every update
    fresh: what PipeMare cost before), the iterates checked equal. The ratio is total time over
    PD's at the same N (the same microbatches processed); per block update and per microbatch
    times are printed too (2BW makes S block updates per minibatch of M microbatches, the
    others S per microbatch).

Every time is the median of ``--repeats`` warm calls (``time.perf_counter`` around
``jax.block_until_ready``), the implementations interleaved (order alternating per repeat) so
that load from other processes hits all alike; "cold" is the first call in this process
(tracing + XLA compilation + one run).

    .venv/bin/python benchmarks/bench_semantics.py            # a and b, both objectives (~2.5 min)
    .venv/bin/python benchmarks/bench_semantics.py --quick    # smaller N; a: quadratic, "train only";
                                                              # b: MLP, no T1 nor whole (<1 min)
    .venv/bin/python benchmarks/bench_semantics.py b --objectives mlp --repeats 7
"""

from __future__ import annotations

import argparse
import functools
import os
import time

T_START = time.perf_counter()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import rpd  # noqa: E402,F401
from rpd import objectives, results, schedules  # noqa: E402
from rpd.analysis import tuning  # noqa: E402
from rpd.train import core, methods, plans, semantics  # noqa: E402

S = 8
GAMMAS = tuning.pow2_grid(-8, -4)  # 5 stable step sizes on both objectives (L ≈ 2.2): no overflow paths
ONE_POINT = 10**9  # a stride past the end: only the last iterate is recorded


@functools.lru_cache(maxsize=None)
def make_objective(name: str):
    if name == "quad":
        return objectives.random_quadratic(n=2000, d=512, S=S, batch_size=100, seed=0)
    return objectives.mlp_chain(n=512, width=32, S=S, batch_size=16, seed=0)


# ---------------------------------------------------------------- timing


def measure(fns: dict, repeats: int):
    """(cold, median, all warm times) per name: first call, then ``repeats`` interleaved rounds."""
    cold, outs = {}, {}
    for name, fn in fns.items():
        t = time.perf_counter()
        outs[name] = jax.block_until_ready(fn())
        cold[name] = time.perf_counter() - t
    times = {name: [] for name in fns}
    names = list(fns)
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            t = time.perf_counter()
            jax.block_until_ready(fns[name]())
            times[name].append(time.perf_counter() - t)
    return cold, {n: float(np.median(v)) for n, v in times.items()}, times, outs


def spread(ts) -> str:
    return f"{min(ts):.3f}-{max(ts):.3f}"


# ---------------------------------------------------------------- (a) synchronous plans


def plain_sgd(obj, M: int, Q: int, per_step: bool):
    """Plain minibatch SGD, jitted: ``run(data, gammas) -> (f - f* [G, R], x_Q [G, D])`` with
    R = Q (f after every step) or 1 (f(x_Q) only); step q averages the M microbatch gradients on
    batches (qM + j) mod n_batches, vmapped, as a synchronous flush does."""
    micro = jnp.arange(M)

    def one(data, gamma):
        def step(x, q):
            _, g = jax.vmap(lambda b: obj.value_and_grad(data, x, b))((q * M + micro) % obj.n_batches)
            x = x - gamma * g.mean(axis=0)
            return x, (x if per_step else None)

        x_Q, xs = jax.lax.scan(step, obj.x0.astype(obj.dtype), jnp.arange(Q))
        return x_Q, (xs if per_step else x_Q[None])

    def run(data, gammas):
        x_Q, points = jax.vmap(one, in_axes=(None, 0))(data, gammas)
        G, R, D = points.shape  # one flat batch of points, as the core evaluates them
        f = jax.vmap(functools.partial(obj.loss, data))(points.reshape(G * R, D)) - obj.f_star
        return f.reshape(G, R), x_Q

    return jax.jit(run)


def bench_sync(obj_name: str, N: int, M: int, repeats: int, full: bool) -> list:
    obj = make_objective(obj_name)
    tl = schedules.one_f_one_b(S, N, M)
    Q, K, G = N // M, (N // M) * S, len(GAMMAS)
    gammas = jnp.asarray(GAMMAS, obj.dtype)
    plan = semantics.synchronous_plan(tl, obj.S, obj.n_batches)
    C = plans.ring_size(plan, obj.S)
    end_rows = results.record_rows(np.arange(K), np.array([K - 1]))
    modes = {"train only": (ONE_POINT, False), "f per flush": (S, True)}
    if not full:  # --quick: the training-only comparison, two compiles fewer
        del modes["f per flush"]
    rows = []
    print(
        f"(a) {obj.name} (D = {obj.D}, B = {obj.batch_size}), 1F1B S = {S}, M = {M}, N = {N} "
        f"({Q} flushes, K = {K} block updates, T = {tl.T} ticks), {G} γ vmapped; "
        f"per microbatch gradient = time / (N x G); median of {repeats}"
    )
    for mode, (stride, per_step) in modes.items():
        sgd = plain_sgd(obj, M, Q, per_step)
        fns = {
            "train": lambda stride=stride: methods.train(obj, tl, GAMMAS, axis="block_update", stride=stride).x_final,
            "plain": lambda sgd=sgd: sgd(obj.data, gammas),
        }
        if mode == "train only":  # the compiled core on the prebuilt plan: what train adds on the host
            fns["core.execute"] = lambda: core.execute(obj, plan, end_rows, 1, GAMMAS, 0, ring_size=C)[3]
        cold, med, times, outs = measure(fns, repeats)
        x_plain = np.asarray(outs["plain"][1])
        err = np.max(np.abs(outs["train"] - x_plain)) / np.max(np.abs(x_plain))
        assert err < 1e-10, f"train and plain SGD iterates differ ({err:.1e})"
        R = 1 if mode == "train only" else Q
        base = med["plain"]
        for name in fns:
            per = med[name] / (N * G)
            compile_s = "train's program" if name == "core.execute" else f"≈ {cold[name] - med[name]:5.2f} s compile"
            print(
                f"    {mode:<11} ({R:>3} pts) {name:<12} warm {med[name]:7.3f} s [{spread(times[name])}]  "
                f"{1e6 * per:6.2f} µs/mb-grad/γ  ratio {med[name] / base:5.2f}x   cold {cold[name]:6.2f} s "
                f"({compile_s})"
            )
            rows.append((obj_name, mode, name, med[name], per, med[name] / base, cold[name]))
        print(f"    {mode:<11} iterates agree: max |x_train - x_plain| / max |x| = {err:.1e}")
    if full and obj_name == "quad":  # train's default: f after every tick (T points, most of them repeats)
        sgd = plain_sgd(obj, M, Q, True)
        cold, med, times, _ = measure(
            {"train": lambda: methods.train(obj, tl, GAMMAS).x_final, "plain": lambda: sgd(obj.data, gammas)}, repeats
        )
        print(
            f"    default recording: train (f after each of T = {tl.T} ticks) warm {med['train']:.3f} s "
            f"[{spread(times['train'])}] = {med['train'] / med['plain']:.2f}x plain ({Q} pts) "
            f"{med['plain']:.3f} s; cold {cold['train']:.2f} s"
        )
        rows.append(
            (
                obj_name,
                "default (T pts)",
                "train",
                med["train"],
                med["train"] / (N * G),
                med["train"] / med["plain"],
                cold["train"],
            )
        )
    return rows


# ---------------------------------------------------------------- (b) asynchronous semantics


def bench_async(obj_name: str, N: int, repeats: int, full: bool) -> list:
    obj = make_objective(obj_name)
    G = len(GAMMAS)
    tl_pd, tl_mare = schedules.pipedream(S, N), schedules.pipemare(S, N)
    tl_2bw = schedules.pipedream_2bw(S, N, S)
    end = dict(axis="block_update", stride=ONE_POINT)
    mare = semantics.pipemare_plan(tl_mare, obj.n_batches)
    whole = mare._replace(fresh=np.ones(tl_mare.K, bool), slot=np.zeros(tl_mare.K, np.int32))
    runs = {  # name -> (function, timeline)
        "PD": (lambda: methods.pipedream(obj, tl_pd, GAMMAS, **end), tl_pd),
        "PD predict": (lambda: methods.train(obj, tl_pd, GAMMAS, predict=True, **end), tl_pd),
        f"2BW M={S}": (lambda: methods.train(obj, tl_2bw, GAMMAS, **end), tl_2bw),
        "PipeMare": (lambda: methods.train(obj, tl_mare, GAMMAS, **end), tl_mare),
        "PipeMare T1": (lambda: methods.train(obj, tl_mare, GAMMAS, t1=True, **end), tl_mare),
        "PipeMare T2": (lambda: methods.train(obj, tl_mare, GAMMAS, t2=True, **end), tl_mare),
        "PipeMare predict": (lambda: methods.train(obj, tl_mare, GAMMAS, predict=True, **end), tl_mare),
        "PipeMare whole": (lambda: methods.run_plan(obj, whole, GAMMAS, **end), tl_mare),
    }
    if not full:  # --quick: T1's program is PipeMare's plus a per-update step scale; two compiles fewer
        del runs["PipeMare T1"], runs["PipeMare whole"]
    fns = {name: (lambda f=f: f().x_final) for name, (f, _) in runs.items()}
    cold, med, times, outs = measure(fns, repeats)
    if obj_name == "quad":  # additive linear chain: the backward weights do not matter
        err = np.max(np.abs(outs["PipeMare"] - outs["PD"]))
        assert err < 1e-12, f"PipeMare differs from PD on the linear chain ({err:.1e})"
    if "PipeMare whole" in outs:
        err = np.max(np.abs(outs["PipeMare"] - outs["PipeMare whole"])) / np.max(np.abs(outs["PipeMare whole"]))
        assert err < 1e-12, f"stage-wise PipeMare differs from the whole two-point gradient ({err:.1e})"
    print(
        f"(b) {obj.name} (D = {obj.D}, B = {obj.batch_size}), S = {S}, N = {N}, {G} γ vmapped, "
        f"f at the end only; median of {repeats}; ratio = time / PD's"
    )
    base = med["PD"]
    rows = []
    for name, (_, tl) in runs.items():
        K = tl.K
        print(
            f"    {name:<17} K = {K:>5}  warm {med[name]:7.3f} s [{spread(times[name])}]  "
            f"{1e6 * med[name] / (K * G):7.2f} µs/update/γ  {1e6 * med[name] / (N * G):7.2f} µs/mb/γ  "
            f"ratio {med[name] / base:5.2f}x   cold {cold[name]:6.2f} s"
        )
        rows.append((obj_name, name, K, med[name], med[name] / base, cold[name]))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("sections", nargs="*", help="a and/or b (default: both)")
    p.add_argument("--repeats", type=int, default=5, help="warm calls per implementation (median printed)")
    p.add_argument("--quick", action="store_true", help="smaller N, fewer repeats: about one minute")
    p.add_argument(
        "--objectives",
        default=None,
        help="comma-separated among quad, mlp (default: both; --quick: quad in a, mlp in b)",
    )
    args = p.parse_args()
    args.sections = args.sections or ["a", "b"]
    if not set(args.sections) <= {"a", "b"}:
        p.error(f"sections must be among a b, got {args.sections}")
    objs = (args.objectives or "quad,mlp").split(",")
    if not set(objs) <= {"quad", "mlp"}:
        p.error(f"objectives must be among quad, mlp, got {objs}")
    objs_a, objs_b = (["quad"], ["mlp"]) if args.quick and args.objectives is None else (objs, objs)
    repeats = args.repeats
    # (N for (a), N for (b)) per objective; M = 32 flushes in (a)
    sizes = (
        {"quad": (32 * 16, 128), "mlp": (32 * 8, 64)} if args.quick else {"quad": (32 * 64, 512), "mlp": (32 * 16, 128)}
    )
    print(
        f"jax {jax.__version__}, devices {jax.devices()}, x64 {jax.config.jax_enable_x64}; load average "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; imports {time.perf_counter() - T_START:.1f} s"
    )
    if "a" in args.sections:
        for o in objs_a:
            bench_sync(o, sizes[o][0], 32, repeats, full=not args.quick)
    if "b" in args.sections:
        for o in objs_b:
            bench_async(o, sizes[o][1], repeats, full=not args.quick)
    print(f"total {time.perf_counter() - T_START:.1f} s; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
