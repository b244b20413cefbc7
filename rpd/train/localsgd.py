"""LocalSGD on the pipeline (docs/science.md#schedules, #methods): R replicas sharded over a device mesh.

Within a round every replica runs H plain SGD steps on its own microbatches (rule (a) of the
schedule makes a replica's microbatches strictly sequential, so there is no staleness); at the
round's end the replicas are replaced by their mean (``lax.pmean`` over the mesh axis). The
evaluated model is the replica mean x̄.

The timeline decides *when* each block update lands: replica r's step on microbatch m moves
block s in time step B(m, s). We scatter every block increment into a per-round buffer indexed
by the round's events (:func:`rpd.train.rounds.round_events`: the ticks in which an increment
lands, the round's first and its sync), sum it over replicas (``psum``) and integrate it event
by event in a scan that evaluates f(x̄) as it goes: the curve at every event, exactly (the value
after any tick is that of the last event at or before it), without materialising R copies per
event or x̄ for every event, and at a cost set by the events, not by the ticks.

Replicas are the leading axis of the state, sharded with ``shard_map`` over mesh axis
"replica"; R need not equal the device count (R / n_devices replicas per device, vmapped).

The same runner trains D data-parallel pipelines with local steps
(:mod:`rpd.train.semantics_parallel`): R = D replicas, a local step the mean gradient of a
flush's ``n_micro`` = M microbatches (batches b .. b + M - 1), landing per block at the
D-pipeline timeline's ticks (:func:`round_plan` reads either timeline).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from rpd.objectives.base import Objective, ProgramKey, on_device
from rpd.results import EVENTS, Result, time_unit
from rpd.runtime.programs import Program
from rpd.schedules import Timeline
from rpd.train import diloco, optimizers, semantics_parallel
from rpd.train.rounds import clock_resolution, round_events, round_plan, round_shape  # noqa: F401
from rpd.validation import check_gammas, check_int

AXIS = "replica"


def replica_mesh(R: int, devices=None) -> Mesh:
    """A 1-d mesh over the largest number of devices that divides R."""
    devices = list(jax.devices() if devices is None else devices)
    n = max(k for k in range(1, len(devices) + 1) if R % k == 0)
    return Mesh(np.array(devices[:n]), (AXIS,))


def _round_runner(
    obj: Objective,
    R: int,
    T_round: int,
    track_time: bool,
    noisy: bool,
    optimizer: optimizers.Optimizer | None = None,
    outer: diloco.Outer | None = None,
    inner_state: str = "keep",
    n_micro: int = 1,
):
    seg = obj.layout.segment_ids  # a NumPy index: a constant of the traced program
    D = obj.D
    if n_micro == 1:
        value_and_grad = obj.value_and_grad
    else:  # a flush: the mean of n_micro microbatch gradients (as rpd.train.core's n_micro)
        micro = jnp.arange(n_micro, dtype=jnp.int32)

        def value_and_grad(data, x, b):
            losses, grads = jax.vmap(lambda bb: obj.value_and_grad(data, x, bb))((b + micro) % obj.n_batches)
            return losses.mean(), grads.mean(axis=0)

    grad = jax.vmap(value_and_grad, in_axes=(None, 0, 0))  # over local replicas
    if optimizer is not None:  # DiLoCo's inner optimizer: one state per (replica, block)
        inner_init = jax.vmap(lambda x: optimizers.init_blocks(optimizer, x, obj.layout))
        inner_update = jax.vmap(lambda st, g, x: optimizers.update_blocks(optimizer, st, g, x, obj.layout))
    varying = lambda tree: jax.tree.map(lambda leaf: jax.lax.pcast(leaf, AXIS, to="varying"), tree)

    def run(consts, data, batch, valid, t_rel, mb, gamma, key):
        # Shapes inside shard_map: batch/valid/mb [Q, H, R_loc], t_rel [Q, H, R_loc, S].
        R_loc = batch.shape[2]
        replicas = lambda x: jnp.broadcast_to(x, (R_loc, D))

        def local_step(carry, inp):
            X, buf, st = carry
            b, ok, t, m = inp
            loss, g = grad(data, X, b)
            if noisy:
                noise = jax.vmap(lambda m: jax.random.normal(jax.random.fold_in(key, m), (D,), obj.dtype))(m)
                g = g + consts["grad_noise"] * noise
            if optimizer is None:
                step = jnp.where(ok[:, None], -gamma * g, 0.0)
            else:  # a replica without a microbatch keeps its state
                u, new = inner_update(st, g, X)
                step = jnp.where(ok[:, None], gamma * u, 0.0)
                keep = lambda n, o: jnp.where(ok.reshape(ok.shape + (1,) * (n.ndim - 1)), n, o)
                st = jax.tree.map(keep, new, st)
            if track_time:
                buf = buf.at[t[:, seg], jnp.arange(D)[None, :]].add(step)
            return (X + step, buf, st), jnp.where(ok, loss, jnp.nan)

        def round_step(carry, inp):
            xbar, st, ost = carry
            # xbar is replicated (invariant over the mesh). The replicas must be marked as
            # varying before differentiating: the gradient w.r.t. an invariant value is summed
            # over the mesh axis by shard_map's transpose, which would silently turn local
            # steps into synchronous SGD with an R-times step.
            X = jax.lax.pcast(replicas(xbar), AXIS, to="varying")
            buf = jnp.zeros((T_round if track_time else 1, D), obj.dtype)
            buf = jax.lax.pcast(buf, AXIS, to="varying")
            (X, buf, st), losses = jax.lax.scan(local_step, (X, buf, st), inp)
            # A padding round (no microbatch on any replica, see ``pad_to``) leaves x̄ exactly
            # as it is: averaging R equal copies could move it by rounding.
            live = jax.lax.pmax(jnp.any(inp[1]).astype(jnp.int32), AXIS) > 0
            mean = jax.lax.pmean(jnp.mean(X, axis=0), AXIS)
            if outer is None:  # plain averaging
                xbar_new = jnp.where(live, mean, xbar)
            else:  # DiLoCo: the outer step on the pseudo-gradient Δ = x̄ - mean_r x_r
                u, ost_new = outer.transform().update(xbar - mean, ost, xbar)
                xbar_new = jnp.where(live, xbar + u, xbar)
                ost = jax.tree.map(lambda n, o: jnp.where(live, n, o), ost_new, ost)
            if optimizer is not None and inner_state == "average":
                avg = lambda leaf: jax.lax.pcast(
                    jnp.broadcast_to(jax.lax.pmean(jnp.mean(leaf, axis=0), AXIS), leaf.shape), AXIS, to="varying"
                )
                st = diloco.average_state(st, avg)
            elif optimizer is not None and inner_state == "reset":
                st = varying(inner_init(replicas(xbar_new)))
            f_ticks = None
            if track_time:
                # x̄ after tick t is xbar + (sum of the increments landed by t) / R; f(x̄) is
                # evaluated as the ticks are integrated, so x̄ is never stored for every tick.
                def tick(landed, inc):
                    landed = landed + inc
                    return landed, obj.loss(data, xbar + landed / R)

                _, f_ticks = jax.lax.scan(tick, jnp.zeros_like(xbar), jax.lax.psum(buf, AXIS))
            return (xbar_new, st, ost), (f_ticks, losses, xbar_new)

        x0 = consts["x0"]
        st0 = () if optimizer is None else varying(inner_init(replicas(x0)))
        ost0 = () if outer is None else outer.transform().init(x0)
        (xbar, _, _), (f_ticks, losses, ends) = jax.lax.scan(round_step, (x0, st0, ost0), (batch, valid, t_rel, mb))
        return xbar, f_ticks, losses, ends

    return run


@functools.lru_cache(maxsize=32)
def _compiled(
    pk: ProgramKey,
    R: int,
    T_round: int,
    track_time: bool,
    mesh: Mesh,
    optimizer: optimizers.Optimizer | None = None,
    outer: diloco.Outer | None = None,
    inner_state: str = "keep",
    n_micro: int = 1,
):
    """The jitted ``(consts, data, batch, valid, t_rel, mb, gammas, seed)`` program, cached on the
    objective's program key (see ``Objective.program_key``), built from the numberless
    ``pk.obj``: x0, f* and σ_g come in ``consts`` (``Objective.constants``)."""
    obj = pk.obj
    run = _round_runner(obj, R, T_round, track_time, pk.noisy, optimizer, outer, inner_state, n_micro)
    rep = P(None, None, AXIS)
    sharded = jax.shard_map(
        run,
        mesh=mesh,
        in_specs=(P(), P(), rep, rep, rep, rep, P(), P()),
        out_specs=(P(), P(), P(None, None, AXIS), P()),
    )
    grid = jax.vmap(sharded, in_axes=(None, None, None, None, None, None, 0, None))

    def full(consts, data, batch, valid, t_rel, mb, gammas, seed):
        key = jax.random.fold_in(jax.random.key(seed), 2)
        xbar, f_ticks, losses, ends = grid(consts, data, batch, valid, t_rel, mb, gammas, key)
        curve = None if f_ticks is None else f_ticks - consts["f_star"]
        round_curve = jax.vmap(jax.vmap(lambda x: obj.loss(data, x)))(ends) - consts["f_star"]
        return xbar, curve, losses, round_curve

    name = None if pk.id is None else f"rpd.train.localsgd.local_sgd({pk.id}, {R}, {T_round}, {track_time}, {mesh!r})"
    if name is not None and n_micro != 1:  # D pipelines' flushes; LocalSGD keeps its name
        name = f"{name[:-1]}, n_micro={n_micro})"
    if optimizer is not None or outer is not None:  # DiLoCo; plain LocalSGD keeps its name
        stable = (optimizer is None or optimizer.stable) and (outer is None or outer.stable)
        name = None if name is None or not stable else f"{name[:-1]}, {optimizer!r}, {outer!r}, {inner_state!r})"
    return Program(full, name)


@functools.lru_cache(maxsize=32)
def _start_value(pk: ProgramKey) -> Program:
    """The jitted ``(consts, data) -> f(x⁰) - f*``: the curve's first point. A program of its own
    (evaluated eagerly, f would build a program per operation in every process; inside the run's
    program it would change how XLA fuses the round-end evaluations, and their rounding)."""
    obj = pk.obj
    name = None if pk.id is None else f"rpd.train.localsgd.start_value({pk.id})"

    def start_value(consts, data):
        return obj.loss(data, consts["x0"]) - consts["f_star"]

    return Program(start_value, name)


def local_sgd(
    obj: Objective,
    tl: Timeline,
    gamma,
    *,
    seed: int = 0,
    track_time: bool = True,
    mesh: Mesh | None = None,
    pad_to: tuple[int, int] | None = None,
    optimizer=None,
    outer_optimizer=None,
    inner_state: str = "keep",
) -> Result:
    """LocalSGD driven by its pipeline timeline. Replica r = m mod R runs

        x_r <- x_r - gamma * grad f(x_r; xi_m)      for its H microbatches of the round,
        x_r <- mean_r' x_r'                          at the round's end (lax.pmean),

    and the curve is f(x̄) - f* at its events (``track_time``: after every tick in which an
    increment lands and at every round end, ``meta["time_axis"] == "events"``; the value at any
    tick is the last point at or before it, ``rpd.results.value_at``), otherwise only at round
    ends, which is what the language model uses. ``traces["loss_z"]`` [G, N] is the minibatch
    loss of each microbatch in microbatch order and ``traces["loss_time"]`` [N] the time step
    of its last-stage forward.

    ``pad_to=(rounds, round_ticks)``, each at least :func:`round_shape`'s, runs the compiled
    program of that shape: rounds without microbatches are appended (they change nothing) and
    every round's tick buffer is ``round_ticks`` long. Timelines of different lengths (the rungs
    of a cost ladder) then share one compilation. The result is the unpadded one: x̄, the
    minibatch losses and the curve are bitwise equal (f(x̄) is evaluated tick by tick, so the
    padding changes no shape it sees); ``round_end_curve``, evaluated in a batch over rounds,
    may differ in the last bits.

    DiLoCo (:mod:`rpd.train.diloco`): ``optimizer`` (anything ``rpd.train.optimizers.resolve``
    takes) is every replica's inner optimizer, x_r <- x_r + gamma * u, one state per replica and
    block; ``outer_optimizer`` (``rpd.train.diloco.resolve_outer``: None / ``"sgd"`` averaging,
    ``"nesterov"`` DiLoCo's sgd(0.7, momentum 0.9, Nesterov)) replaces the averaging by
    x̄ <- x̄ + outer(x̄ - mean_r x_r); ``inner_state`` (keep | average | reset) is what the inner
    state does at a sync. Within a round the curve is the replica mean x̄ + (landed increments) / R,
    at the round's last tick f(x̄) after the outer step. The defaults are plain LocalSGD, bit for
    bit.

    A D-pipeline timeline (:mod:`rpd.schedules.machinery.data_parallel`) runs as LocalSGD with R = D
    replicas, one flush per local step (:mod:`rpd.train.semantics_parallel`); its result is
    named after the schedule, its meta has R = D, H = ``local_steps`` and M, and its traces add
    ``update_time`` (the tick of every (flush, block) update)."""

    gammas = check_gammas(gamma)
    p = round_plan(tl, obj.S, obj.n_batches)
    ev_tick, ev_rel = round_events(p["t_rel"], p["valid"], p["length"], clock_resolution(tl))
    inputs = [p["batch"], p["valid"], ev_rel, p["mb"]]
    Q, T_round = len(p["length"]), max(len(e) for e in ev_tick)
    if pad_to is not None:
        if len(pad_to) != 2:
            raise ValueError(f"pad_to must be (rounds, round_ticks), got {pad_to!r}")
        rounds = check_int("pad_to[0]", pad_to[0], Q)
        T_round = check_int("pad_to[1]", pad_to[1], T_round)
        inputs = [np.concatenate([a, np.zeros((rounds - Q,) + a.shape[1:], a.dtype)]) for a in inputs]
    R, n_steps = p["R"], p["n_steps"]
    mesh = replica_mesh(R) if mesh is None else mesh
    inner = optimizers.bind(optimizers.resolve(optimizer), obj)
    if inner is not None and inner.correction is not None:
        raise ValueError(
            f"optimizer.correction={inner.correction.name}: LocalSGD's replicas apply fresh gradients "
            "(no staleness), so a staleness correction does not apply"
        )
    outer = diloco.resolve_outer(outer_optimizer)
    inner_state = diloco.check_inner_state(inner_state)
    if inner is None:  # plain SGD has no state: the three rules coincide, one program
        inner_state = "keep"
    # Untracked, the tick buffer is not built, so the round length is not part of the program:
    # timelines that differ only in their ticks (other costs) share it.
    pk, consts = ProgramKey(obj), obj.constants()
    fn = _compiled(pk, R, T_round if track_time else 1, bool(track_time), mesh, inner, outer, inner_state, p["n_micro"])
    xbar, curve, losses, round_curve = fn(
        consts,
        obj.data,
        *(on_device(a) for a in inputs),
        on_device(gammas, obj.dtype),
        np.int32(check_int("seed", seed, 0)),
    )
    round_curve = np.asarray(round_curve)[:, :Q]
    f0 = float(_start_value(pk)(consts, obj.data))
    G = len(gammas)
    if track_time:
        curve = np.asarray(curve)  # [G, Q (padded), T_round (padded)]
        n_ev = np.array([len(e) for e in ev_tick])
        if outer is not None:  # a round's last event is its sync: θ after the outer step
            curve = curve.copy()
            curve[:, np.arange(Q), n_ev - 1] = round_curve
        body = np.concatenate([curve[:, q, : n_ev[q]] for q in range(Q)], axis=1)
        axis_vals = np.concatenate([[0], np.concatenate([p["start"][q] + e for q, e in enumerate(ev_tick)]) + 1])
    else:
        body = np.asarray(round_curve)
        axis_vals = np.concatenate([[0], p["sync"] + 1])
    losses = np.asarray(losses).reshape(G, -1)[:, :n_steps]  # (round, step, replica) order = m order
    traces = {"loss_z": losses, "loss_time": p["loss_time"].reshape(-1)[:n_steps], "round_end_curve": round_curve}
    lsgd = tl.averaged
    if not lsgd:
        traces["update_time"] = p["update_time"]
    if lsgd:
        shape: dict[str, object] = dict(R=tl.R, H=tl.H)
    else:
        dp = semantics_parallel.data_parallel_timeline(tl)
        shape = dict(R=R, H=dp.local_steps, M=dp.M, D=dp.D, schedule=dp.kind)
    return Result(
        method="localsgd" if lsgd else tl.kind,
        gammas=gammas,
        axis=axis_vals,
        axis_name="sim_time",
        curve=np.concatenate([np.full((G, 1), f0), body], axis=1),
        traces=traces,
        x_final=np.asarray(xbar),
        meta=dict(
            S=tl.S,
            N=tl.N,
            **shape,
            T=tl.T,
            time_unit=time_unit(tl),
            seed=seed,
            objective=obj.name,
            devices=int(mesh.devices.size),
            **({"time_axis": EVENTS} if track_time else {}),
            **_diloco_meta(inner, outer, inner_state),
        ),
    )


def _diloco_meta(inner, outer, inner_state: str) -> dict:
    """DiLoCo's choices for a result's meta; nothing for plain LocalSGD (its meta unchanged)."""
    if inner is None and outer is None:
        return {}
    return dict(
        optimizer=optimizers.describe(inner), outer_optimizer=diloco.describe_outer(outer), inner_state=inner_state
    )
