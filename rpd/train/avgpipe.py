"""AvgPipe's training semantics (**reconstruction**, :mod:`rpd.schedules.family.avgpipe` says what was
and was not read): P replicas, one per pipeline, coupled to a centre x̃ by EASGD's synchronous
elastic averaging (Zhang, Choromanska and LeCun 2015), once per iteration:

    g_i      = (1/m) Σ_j ∇f(x_i; batch of microbatch q M + i m + j),  m = M / P
    x_i     <- x_i - γ g_i - α (x_i - x̃)
    x̃       <- x̃ + α Σ_i (x_i - x̃)            (both with the iteration's old x_i and x̃)

α = ``tl.elastic`` (default 0.9 / P, EASGD's β = P α = 0.9). Each pipeline is synchronous
(all its forwards of iteration q+1 run after its steps of iteration q on their devices, the
order guarantees it), so the rule does not depend on the ticks: the iterates are exact, and
the curve reports f(x̃) - f* at each iteration's end tick (``tl.iteration_end()``). All P
replicas start at x0, the centre too.

A plan of the stale core cannot hold replicas, and LocalSGD's averaging resets the replicas
to the mean (elastic averaging only pulls them towards the centre), so this is its own small
compiled scan: iterations in ``lax.scan``, the γ grid in ``vmap``, one compile per shape.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from rpd.objectives.base import Objective, on_device
from rpd.results import EVENTS, Result, time_unit, value_at
from rpd.schedules import Timeline
from rpd.schedules.family.avgpipe import AvgPipeTimeline
from rpd.validation import check_gammas, required


def moving_rate(tl: AvgPipeTimeline) -> float:
    """α of a timeline: its ``elastic``, else 0.9 / P."""
    return 0.9 / tl.pipelines if tl.elastic is None else float(tl.elastic)


def batches(tl: AvgPipeTimeline, n_batches: int) -> np.ndarray:
    """int32 [Q, P, M / P]: the dataset batch of pipeline i's microbatch j in iteration q."""
    P, M = tl.pipelines, required("M", tl.M)
    return (np.arange(tl.N).reshape(tl.N // M, P, M // P) % n_batches).astype(np.int32)


def update_times(tl: AvgPipeTimeline) -> np.ndarray:
    """int [Q P S], sorted: the tick of each (iteration, pipeline, stage) step, its last backward."""
    P, M, S = tl.pipelines, required("M", tl.M), tl.S
    per = tl.b_time.reshape(tl.N // M, P, M // P, S).max(axis=2)
    return np.sort(per.ravel())


@functools.cache
def _program(obj_key, vg, loss, P: int):
    def run(data, x0, f_star, b_QxPxM, alpha, gamma):
        def step(carry, b_PxM):
            x, c = carry  # [P, D], [D]
            g = jax.vmap(lambda xi, bi: jax.vmap(lambda bb: vg(data, xi, bb)[1])(bi).mean(axis=0))(x, b_PxM)
            x_new = x - gamma * g - alpha * (x - c[None])
            c_new = c + alpha * jnp.sum(x - c[None], axis=0)
            return (x_new, c_new), loss(data, c_new) - f_star

        x = jnp.broadcast_to(x0, (P,) + x0.shape)
        (xs, c), curve = jax.lax.scan(step, (x, x0), b_QxPxM)
        return curve, c, xs

    return jax.jit(jax.vmap(run, in_axes=(None, None, None, None, None, 0)))


def train_avgpipe(obj: Objective, tl: Timeline, gamma, *, seed: int = 0, optimizer=None, at=None) -> Result:
    """Train the P replicas and the centre on ``tl`` (module doc); the curve is f(x̃) - f* on the
    timeline's tick axis at iteration ends (axis 0: the start), or at the ticks ``at`` (each
    read off the last iteration end at or before it, as LocalSGD's round ends are)."""
    if optimizer is not None:
        raise ValueError("avgpipe trains with its elastic SGD rule only: leave optimizer unset")
    if not isinstance(tl, AvgPipeTimeline):
        raise ValueError(f"avgpipe trains on an AvgPipe timeline (rpd.schedules.family.avgpipe), got kind={tl.kind!r}")
    if tl.S != obj.S:
        raise ValueError(f"timeline has S={tl.S} stages but the objective has S={obj.S} blocks")
    gammas = check_gammas(gamma)
    alpha = moving_rate(tl)
    b = batches(tl, obj.n_batches)
    run = _program(obj.program_key, obj.value_and_grad, obj.loss, int(tl.pipelines))
    f_star = getattr(obj, "f_star", 0.0)
    curve, centre, _ = jax.device_get(
        run(obj.data, obj.x0, f_star, on_device(b), alpha, on_device(np.asarray(gammas), obj.dtype))
    )
    f0 = float(jax.device_get(obj.loss(obj.data, obj.x0) - f_star))
    G = len(gammas)
    axis = np.concatenate([[0], tl.iteration_end() + 1]).astype(np.int64)
    curve = np.concatenate([np.full((G, 1), f0), np.asarray(curve)], axis=1)
    if at is not None:  # each asked tick reads the last iteration end at or before it
        keep = np.concatenate([[0], np.asarray(at, np.int64)])
        axis, curve = keep, value_at(axis, curve, keep)
    return Result(
        method="avgpipe",
        gammas=np.asarray(gammas),
        axis=axis,
        axis_name="sim_time",
        curve=curve,
        traces={"update_time": update_times(tl)},
        x_final=np.asarray(centre),
        meta=dict(
            schedule="avgpipe",
            N=tl.N,
            T=tl.T,
            time_unit=time_unit(tl),
            M=tl.M,
            pipelines=tl.pipelines,
            advance=tl.advance,
            elastic=alpha,
            **({"time_axis": EVENTS} if at is None else {}),
        ),
    )
