"""Streaming DiLoCo (Douillard et al. 2025, "Streaming DiLoCo with overlapping communication",
arXiv 2501.18512, §2): DiLoCo whose parameters are cut into P fragments synced in turn, each
fragment's outer update landing τ inner steps after its sync (docs/time_to_loss.md).

R replicas; replica r at local step t takes microbatch m = t·R + r (LocalSGD's order,
:mod:`rpd.train.rounds`: replica r's h-th step of round q is m = q·R·H + h·R + r) and steps

    x_r <- x_r - gamma * grad f(x_r; xi_m)        (or x_r + gamma * u with an inner optimizer).

Fragments: block b of the objective belongs to fragment b mod P (strided, as the paper cuts
layers). Fragment f syncs after local step t when (t + 1) mod H = ((f + 1) · H / P) mod H, so
the fragments take turns H / P steps apart and each syncs once every H steps. At its sync the
pseudo-gradient of the fragment is taken from the replicas of that moment,

    Delta_f = theta_f - mean_r x_{r,f}(t),

and after local step t + τ (the exchange in flight meanwhile, the replicas stepping on)

    theta_f <- theta_f + outer(Delta_f),   x_{r,f} <- alpha · x_{r,f}(t + τ) + (1 − alpha) · theta_f.

``alpha`` is the paper's mixing of the local fragment into the new global one (rpd's default 0:
replaced, as DiLoCo does). τ < H / P: one fragment in flight at a time. The outer optimizer is
one of :mod:`rpd.train.diloco`'s (element-wise: one state over the whole vector, a fragment's
coordinates advanced at its landing, equals one state per fragment). P = 1, τ = 0, alpha = 0 is
DiLoCo: θ <- θ + outer(θ − mean_r x_r) every H steps, the replicas restarting from θ.

The curve is f(θ) − f* of the global parameters after every local step (axis ``local_step``).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from rpd.objectives.base import Objective, ProgramKey, on_device
from rpd.results import EVENTS, Result, time_unit
from rpd.train import diloco, optimizers
from rpd.validation import check_gammas, check_int, check_real


def fragment_of_step(t: np.ndarray, H: int, P: int) -> np.ndarray:
    """int [len(t)]: the fragment that syncs after local step t, −1 where none does."""
    t = np.asarray(t)
    k = H // P
    phase = (t + 1) % H  # fragment f syncs where phase == ((f + 1) k) mod H
    f = np.where(phase == 0, P - 1, phase // k - 1)
    return np.where(phase % k == 0, f, -1)


def check(R: int, H: int, P: int, tau: int, S: int) -> tuple[int, int, int, int]:
    R, H, P = check_int("R", R), check_int("H", H), check_int("diloco.P", P)
    tau = check_int("diloco.tau", tau, minimum=0)
    if H % P:
        raise ValueError(f"diloco.P={P} must divide H={H} (the fragments in turn, H / P steps apart)")
    if P > S:
        raise ValueError(f"diloco.P={P} must be at most the objective's {S} blocks (a fragment is a set of blocks)")
    if tau >= H // P:
        raise ValueError(f"diloco.tau={tau} must be < H / P = {H // P} (one fragment in flight at a time)")
    return R, H, P, tau


@functools.lru_cache(maxsize=16)
def _program(pk: ProgramKey, R: int, n_steps: int, H: int, P: int, tau: int, alpha: float, inner, outer):
    """The jitted ``(x0, data, batch, valid, gammas) -> (θ, f(θ) per step, losses)``, vmapped over γ,
    cached on the objective's program key (built from the numberless ``pk.obj``)."""
    obj = pk.obj
    D, seg = obj.D, obj.layout.segment_ids
    masks = np.stack([(seg % P == f) for f in range(P)]).astype(obj.dtype)  # [P, D]
    frag = fragment_of_step(np.arange(n_steps), H, P)
    grad = jax.vmap(obj.value_and_grad, in_axes=(None, 0, 0))
    tx = outer.transform()
    if inner is not None:
        inner_init = jax.vmap(lambda x: optimizers.init_blocks(inner, x, obj.layout))
        inner_update = jax.vmap(lambda st, g, x: optimizers.update_blocks(inner, st, g, x, obj.layout))

    def run(x0, data, batch, valid, gamma):
        def step(carry, xs):
            X, st, theta, ost, pend, pmask, due = carry
            t, b, ok, f = xs
            loss, g = grad(data, X, b)
            if inner is None:
                X = X + jnp.where(ok[:, None], -gamma * g, 0.0)
            else:  # a replica without a microbatch keeps its state
                u, new = inner_update(st, g, X)
                X = X + jnp.where(ok[:, None], gamma * u, 0.0)
                st = jax.tree.map(lambda n, o: jnp.where(ok.reshape(ok.shape + (1,) * (n.ndim - 1)), n, o), new, st)
            sync = f >= 0  # fragment f's pseudo-gradient taken now, its update due at t + tau
            m = jnp.asarray(masks)[jnp.maximum(f, 0)]
            pend = jnp.where(sync, m * (theta - jnp.mean(X, axis=0)), pend)
            pmask = jnp.where(sync, m, pmask)
            due = jnp.where(sync, t + tau, due)
            land = due == t
            u, ost_new = tx.update(pend, ost, theta)
            new_theta = theta + pmask * u
            theta = jnp.where(land, new_theta, theta)
            on = land & (pmask > 0)
            ost = jax.tree.map(lambda n, o: jnp.where(on if n.shape == (D,) else land, n, o), ost_new, ost)
            X = jnp.where(on[None, :], alpha * X + (1.0 - alpha) * theta[None, :], X)
            due = jnp.where(land, -1, due)
            return (X, st, theta, ost, pend, pmask, due), (obj.loss(data, theta), jnp.where(ok, loss, jnp.nan))

        X0 = jnp.broadcast_to(x0, (R, D))
        st0 = () if inner is None else inner_init(X0)
        zeros = jnp.zeros(D, x0.dtype)
        carry = (X0, st0, x0, tx.init(x0), zeros, zeros, jnp.int32(-1))
        xs = (jnp.arange(n_steps, dtype=jnp.int32), batch, valid, jnp.asarray(frag, jnp.int32))
        (_, _, theta, *_), (f_theta, losses) = jax.lax.scan(step, carry, xs)
        return theta, f_theta, losses

    return jax.jit(jax.vmap(run, in_axes=(None, None, None, None, 0)))


def streaming_diloco(
    obj: Objective,
    R: int,
    H: int,
    N: int,
    gamma,
    *,
    P: int = 1,
    tau: int = 0,
    alpha: float = 0.0,
    optimizer=None,
    outer_optimizer="nesterov",
) -> Result:
    """Streaming DiLoCo on ``obj`` (module docstring): R replicas, N microbatches in all (local
    steps ceil(N / R); replica r's step t takes microbatch t·R + r while it is < N), P fragments
    synced in turn every H steps, each landing τ steps after its sync, mixed by ``alpha``.
    ``optimizer``: every replica's inner optimizer (``rpd.train.optimizers.resolve``; one state
    per replica and block, kept at a sync); ``outer_optimizer``: ``rpd.train.diloco``'s
    (``"nesterov"``: DiLoCo's sgd(0.7, momentum 0.9, Nesterov); ``"sgd"`` averaging).

    Returns a :class:`~rpd.results.Result` on axis ``local_step``: ``curve[g, t]`` f(θ) − f*
    after t local steps (t = 0: the start), ``x_final`` θ, ``traces["loss_z"]`` [G, N] each
    microbatch's loss at the replica that took it."""
    gammas = check_gammas(gamma)
    R, H, P, tau = check(R, H, P, tau, obj.S)
    N = check_int("N", N)
    alpha = check_real("diloco.alpha", alpha, allow_zero=True)
    if alpha >= 1:
        raise ValueError(f"diloco.alpha must be in [0, 1), got {alpha}")
    outer = diloco.resolve_outer(outer_optimizer) or diloco.Outer("sgd", 1.0, 0.0)  # averaging: lr 1, no momentum
    inner = optimizers.bind(optimizers.resolve(optimizer), obj)
    n_steps = -(-N // R)
    m = np.arange(n_steps * R).reshape(n_steps, R)
    batch, valid = (np.minimum(m, N - 1) % obj.n_batches).astype(np.int32), m < N
    fn = _program(ProgramKey(obj), R, n_steps, H, P, tau, float(alpha), inner, outer)
    x0 = on_device(obj.constants()["x0"], obj.dtype)
    theta, f_theta, losses = fn(x0, obj.data, on_device(batch), on_device(valid), on_device(gammas, obj.dtype))
    f0 = float(obj.loss(obj.data, x0))
    curve = np.concatenate([np.full((len(gammas), 1), f0), np.asarray(f_theta)], axis=1) - obj.f_star
    return Result(
        method="streaming_diloco",
        gammas=gammas,
        axis=np.arange(n_steps + 1),
        axis_name="local_step",
        curve=curve,
        traces={"loss_z": np.asarray(losses).reshape(len(gammas), -1)[:, :N]},
        x_final=np.asarray(theta),
        meta=dict(
            R=R,
            H=H,
            N=N,
            P=P,
            tau=tau,
            alpha=alpha,
            objective=obj.name,
            optimizer=optimizers.describe(inner),
            outer_optimizer=diloco.describe_outer(outer),
        ),
    )


def on_timeline(obj: Objective, tl, gamma, **kw) -> Result:
    """:func:`streaming_diloco` with R, H and N of a LocalSGD timeline (``schedules.local_sgd``),
    its curve on the timeline's simulated time: local step t is read at the tick after the last
    of its R microbatches' backwards (every stage), ``meta["time_axis"]`` ``events``. The
    timeline times DiLoCo's syncs (every H); the fragments' exchanges and their overlap are
    timed on the plan's links (:mod:`rpd.model.outer_exchange`), not here."""
    if not tl.averaged:
        raise ValueError(f"Streaming DiLoCo runs on a LocalSGD timeline (schedule=local_sgd), got {tl.kind!r}")
    if tl.S != obj.S:
        raise ValueError(f"timeline has S={tl.S} stages but the objective has S={obj.S} blocks")
    R, H, N = int(tl.R), int(tl.H), int(tl.N)
    res = streaming_diloco(obj, R, H, N, gamma, **kw)
    m = np.minimum(np.arange(len(res.axis) - 1)[:, None] * R + np.arange(R)[None, :], N - 1)  # [steps, R]
    done = np.asarray(tl.b_time)[m].max(axis=(1, 2)) + 1
    return dataclasses.replace(
        res,
        axis=np.concatenate([[0], np.maximum.accumulate(done)]),
        axis_name="sim_time",
        meta=dict(res.meta, S=tl.S, T=tl.T, time_unit=time_unit(tl), time_axis=EVENTS),
    )
