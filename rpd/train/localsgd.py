"""LocalSGD on the pipeline (docs/science.md#schedules, #methods): R replicas sharded over a device mesh.

Within a round every replica runs H plain SGD steps on its own microbatches (rule (a) of the
schedule makes a replica's microbatches strictly sequential, so there is no staleness); at the
round's end the replicas are replaced by their mean (``lax.pmean`` over the mesh axis). The
evaluated model is the replica mean x̄.

The timeline decides *when* each block update lands: replica r's step on microbatch m moves
block s in time step B(m, s). We scatter every block increment into a per-round buffer indexed
by the round's events (:func:`rpd.train.rounds.round_events`: the ticks in which an increment
lands, the round's first and its sync), sum it over replicas (``psum``; on one device the
buffer itself) and integrate it event by event in a loop that evaluates f(x̄) as it goes: the
curve at every event, exactly (the value after any tick is that of the last event at or before
it), without materialising R copies per event or x̄ for every event, and at a cost set by the
events, not by the ticks. H, the rounds and each round's events are numbers of the compiled
program, not shapes (:func:`rpd.train.rounds.flat_rounds`): the runs of an H grid share it.

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
from rpd.train.rounds import clock_resolution, flat_rounds, round_events, round_plan, round_shape  # noqa: F401
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
    T_pad: int,
    E_pad: int,
    track_time: bool,
    noisy: bool,
    optimizer: optimizers.Optimizer | None = None,
    outer: diloco.Outer | None = None,
    inner_state: str = "keep",
    n_micro: int = 1,
    n_dev: int = 1,
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
    # Row i of a carried array: a dynamic_update_slice stays one under vmap (``.at[i].set``
    # becomes a scatter there).
    put = lambda a, row, i: jax.lax.dynamic_update_index_in_dim(a, jnp.broadcast_to(row, a.shape[1:]), i, 0)

    def run(consts, data, batch, valid, t_rel, mb, rounds, gamma, key):
        # Shapes inside shard_map: batch/valid/mb [steps, R_loc], t_rel [steps, R_loc, S]; the
        # loops run H and Q (numbers, not shapes) and n_ev[q] events, never the padding.
        R_loc = batch.shape[1]
        replicas = lambda x: jnp.broadcast_to(x, (R_loc, D))
        H = rounds["H"]

        def local_step(i, carry):
            X, buf, st, losses = carry
            b, ok, t, m = batch[i], valid[i], t_rel[i], mb[i]
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
            return X + step, buf, st, put(losses, jnp.where(ok, loss, jnp.nan), i)

        def round_step(q, carry):
            xbar, st, ost, losses, f_out, ends = carry
            # The round's increments by event: a fresh buffer (clearing the rows a carried one
            # used would make XLA copy all of it, to order the clearing after the reads).
            buf = jax.lax.pcast(jnp.zeros((T_pad, D), obj.dtype), AXIS, to="varying")
            # xbar is replicated (invariant over the mesh). The replicas must be marked as
            # varying before differentiating: the gradient w.r.t. an invariant value is summed
            # over the mesh axis by shard_map's transpose, which would silently turn local
            # steps into synchronous SGD with an R-times step.
            X = jax.lax.pcast(replicas(xbar), AXIS, to="varying")
            X, buf, st, losses = jax.lax.fori_loop(q * H, q * H + H, local_step, (X, buf, st, losses))
            # A round without a microbatch on any replica (``pad_to``) leaves x̄ exactly as it
            # is: averaging R equal copies could move it by rounding.
            live = rounds["live"][q]
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
            if track_time:
                # x̄ after event e is xbar + (sum of the increments landed by e) / R; f(x̄) is
                # evaluated as the events are integrated, so x̄ is never stored for every event.
                # On one device the sum over the mesh is the buffer itself, read in place (the
                # curve then stays the device's own: no collective, no copy of the buffer).
                total, off = buf if n_dev == 1 else jax.lax.psum(buf, AXIS), rounds["off"][q]

                def tick(e, c):
                    landed, f_out = c
                    landed = landed + total[e]
                    return landed, put(f_out, obj.loss(data, xbar + landed / R), off + e)

                landed = varying(jnp.zeros_like(xbar)) if n_dev == 1 else jnp.zeros_like(xbar)
                _, f_out = jax.lax.fori_loop(0, rounds["n_ev"][q], tick, (landed, f_out))
            return xbar_new, st, ost, losses, f_out, put(ends, xbar_new, q)

        x0 = consts["x0"]
        st0 = () if optimizer is None else varying(inner_init(replicas(x0)))
        ost0 = () if outer is None else outer.transform().init(x0)
        losses = jax.lax.pcast(jnp.zeros(batch.shape, obj.dtype), AXIS, to="varying")
        f_out = None if not track_time else jnp.zeros(E_pad, obj.dtype)
        f_out = varying(f_out) if n_dev == 1 and track_time else f_out
        ends = jnp.zeros((len(rounds["live"]), D), obj.dtype)
        carry = (x0, st0, ost0, losses, f_out, ends)
        xbar, _, _, losses, f_out, ends = jax.lax.fori_loop(0, rounds["Q"], round_step, carry)
        return xbar, f_out, losses, ends

    return run


@functools.lru_cache(maxsize=32)
def _compiled(
    pk: ProgramKey,
    R: int,
    T_pad: int,
    E_pad: int,
    track_time: bool,
    mesh: Mesh,
    optimizer: optimizers.Optimizer | None = None,
    outer: diloco.Outer | None = None,
    inner_state: str = "keep",
    n_micro: int = 1,
):
    """The jitted ``(consts, data, batch, valid, t_rel, mb, rounds, gammas, seed)`` program
    (:func:`rpd.train.rounds.flat_rounds`: H, Q and the events are numbers, so runs with other H
    share it), cached on the objective's program key (see ``Objective.program_key``), built from
    the numberless ``pk.obj``: x0, f* and σ_g come in ``consts`` (``Objective.constants``).
    Returns x̄, the flat curve [G, E_pad], the losses [G, steps, R] and x̄ after every round."""
    obj = pk.obj
    n_dev = int(mesh.devices.size)
    run = _round_runner(obj, R, T_pad, E_pad, track_time, pk.noisy, optimizer, outer, inner_state, n_micro, n_dev)
    rep = P(None, AXIS)
    sharded = jax.shard_map(
        run,
        mesh=mesh,
        in_specs=(P(), P(), rep, rep, rep, rep, P(), P(), P()),
        out_specs=(P(), P(AXIS) if n_dev == 1 else P(), rep, P()),  # the curve: the device's own on one
    )
    grid = jax.vmap(sharded, in_axes=(None, None, None, None, None, None, None, 0, None))

    def full(consts, data, batch, valid, t_rel, mb, rounds, gammas, seed):
        key = jax.random.fold_in(jax.random.key(seed), 2)
        xbar, f_flat, losses, ends = grid(consts, data, batch, valid, t_rel, mb, rounds, gammas, key)
        curve = None if f_flat is None else f_flat - consts["f_star"]
        return xbar, curve, losses, ends

    name = None
    if pk.id is not None:
        name = f"rpd.train.localsgd.local_sgd({pk.id}, {R}, {T_pad}, {E_pad}, {track_time}, {mesh!r})"
    if name is not None and n_micro != 1:  # D pipelines' flushes; LocalSGD keeps its name
        name = f"{name[:-1]}, n_micro={n_micro})"
    if optimizer is not None or outer is not None:  # DiLoCo; plain LocalSGD keeps its name
        stable = (optimizer is None or optimizer.stable) and (outer is None or outer.stable)
        name = None if name is None or not stable else f"{name[:-1]}, {optimizer!r}, {outer!r}, {inner_state!r})"
    return Program(full, name)


@functools.lru_cache(maxsize=32)
def _round_values(pk: ProgramKey) -> Program:
    """The jitted ``(consts, data, ends [Q, G, D]) -> f(x̄) - f*`` [G, Q] after every round, in
    one batch over (γ, round) of exactly Q rounds: XLA rounds a batched loss by the batch's shape
    and layout, so the padded rounds of the shared run stay out of it, and x̄ comes round-major,
    as a scan over rounds stacks it (the rounding of the runs that evaluated it in their own
    program, bit for bit)."""
    obj = pk.obj
    name = None if pk.id is None else f"rpd.train.localsgd.round_values({pk.id})"

    def round_values(consts, data, ends):
        return jax.vmap(jax.vmap(lambda x: obj.loss(data, x)))(jnp.swapaxes(ends, 0, 1)) - consts["f_star"]

    return Program(round_values, name)


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

    One compiled program runs every H, round count and event count of the same padded shape
    (:func:`rpd.train.rounds.flat_rounds`: the local steps flat, H, the rounds and each round's
    events as numbers, every axis padded to a power of two that the loops never run), so an H
    grid of one timeline family shares it; f(x̄) at round ends is a small program per round count
    (a batched loss rounds by its shape). ``pad_to=(rounds, round_ticks)``, each at least
    :func:`round_shape`'s, fixes the padded rounds and a round's event buffer instead: timelines of
    different lengths (the rungs of a cost ladder) then share one compilation. Either way the
    result is the unpadded one, bit for bit (docs/running.md#compile-time), but for
    ``round_end_curve`` under ``pad_to``: evaluated in a batch over the padded rounds, it may
    differ in the last bits.

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
    Q, T_round = len(p["length"]), max(len(e) for e in ev_tick)
    if pad_to is not None:
        if len(pad_to) != 2:
            raise ValueError(f"pad_to must be (rounds, round_ticks), got {pad_to!r}")
        pad_to = (check_int("pad_to[0]", pad_to[0], Q), check_int("pad_to[1]", pad_to[1], T_round))
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
    G = len(gammas)
    lay = flat_rounds(p, ev_tick, ev_rel, bool(track_time), pad_to, G * obj.D * np.dtype(obj.dtype).itemsize)
    # Untracked, the event buffer is not built, so the round length is not part of the program:
    # timelines that differ only in their ticks (other costs) share it.
    pk, consts = ProgramKey(obj), obj.constants()
    fn = _compiled(pk, R, lay["T_pad"], lay["E_pad"], bool(track_time), mesh, inner, outer, inner_state, p["n_micro"])
    xbar, curve, losses, ends = fn(
        consts,
        obj.data,
        *(on_device(a) for a in lay["steps"]),
        jax.tree.map(on_device, lay["rounds"]),
        on_device(gammas, obj.dtype),
        np.int32(check_int("seed", seed, 0)),
    )
    # f(x̄) at the round ends in one batch of the exact rounds, or of ``pad_to``'s (one program per rung group)
    Q_eval = Q if pad_to is None else pad_to[0]
    ends = on_device(np.asarray(ends)[:, :Q_eval].swapaxes(0, 1))
    round_curve = np.asarray(_round_values(pk)(consts, obj.data, ends))[:, :Q]
    f0 = float(_start_value(pk)(consts, obj.data))
    if track_time:
        n_ev = lay["n_ev"]
        body = np.asarray(curve)[:, : n_ev.sum()]  # every round's events in order
        if outer is not None:  # a round's last event is its sync: θ after the outer step
            body = body.copy()
            body[:, np.cumsum(n_ev) - 1] = round_curve
        axis_vals = np.concatenate([[0], np.concatenate([p["start"][q] + e for q, e in enumerate(ev_tick)]) + 1])
    else:
        body = round_curve
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
