"""The stale block-SGD core: one compiled scan that executes an update plan.

For k = 0..K-1, with a = block[k]:

    z^k      = (version read[k, r] of block r)_r          (the mixed, stale point)
    g        = grad f(z^k; batch[k])                        (fresh, or reused from slot[k])
    x_a     <- x_a - gamma * (g_a + sigma_g * xi_k)          (only block a moves)

Options a plan may carry (static: each recompiles once), for the schedule family (docs/schedules.md#training-semantics):

- ``n_micro`` = M > 1: g is the mean of the M microbatch gradients on batches batch[k] ..
  batch[k] + M - 1 (mod n_batches), all at z^k (synchronous flushes, 2BW);
- ``read_bwd``: a two-point gradient (``rpd.objectives.chain``): forward at z^k, every stage's
  VJP at z_B^k, whose block r is version read_bwd[k, r] of block r (PipeMare). If every
  update is fresh, each computes that whole gradient (a forward and S stage VJPs). A plan
  that shares each microbatch's gradient stage by stage (``plans.stage_wise``, PipeMare's)
  runs like the pipeline instead: the microbatch's fresh update (block S-1, after all its
  forwards) runs the forward at z^k and keeps a_0 .. a_{S-1} and δ_S in its slot; every update
  of block a then runs stage a's VJP alone, at block a of z_B^k on the kept a_a and δ_{a+1},
  and keeps δ_a for the slot's next update (block a - 1). Per microbatch: one forward and S
  stage VJPs, each re-running its stage's forward at the backward weights where its
  Jacobians depend on them (~4/3 of PD's one gradient on the MLP chain, the same on the
  linear chains); the slots hold the activations of NOAM microbatches. The trace ``loss_z``
  is then, as for PD, the forward loss at the microbatch's fresh update (NaN at the others);
- ``horizon`` / ``horizon_bwd`` (float [K, S]): the point read is moved along each block's
  update velocity u (an EMA of the steps it received, kept per version in a second ring):
  block r of z^k becomes w_r - horizon[k, r] * u_r (weight prediction, PipeMare's T2);
- ``scale`` (float [K]): update k's step is gamma * scale[k] (PipeMare's T1 warm-up).

An optimizer (``CoreOptions.optimizer``, :mod:`rpd.train.optimizers`) replaces the SGD step: block
a's state advances with the applied gradient and x_a <- x_a + gamma * u, u the transform's
update; each block keeps its own state (not stashed, not versioned). None keeps the SGD step.

Exact history, bounded memory: the state is a ring ``ring[C, D + P]`` holding, for every block
r, its last C versions (version v of block r lives in row v mod C, columns of block r; P = the
largest block size pads the end so that any block is a fixed-size window), plus the version
counters. C comes from the plan (``plans.ring_size``), so PD keeps at most NOAM + 1 versions of
each block. A read outside the ring, forward or backward, is flagged inside the scan and raised
on the host after the run (:class:`RingOverflowError`): never a silent wrong read.

Per update the work is O(block size): the update reads and writes one block window; the full
mixed point z^k is gathered only when a gradient is computed (:mod:`rpd.train.ring_reads`), and
the full iterate only when it is recorded; a stage-wise update reads one block of z_B^k and two
activation rows of its slot.
``make_run`` builds one jitted function for fixed shapes; step sizes are traced and vmapped, so
a whole gamma grid is one compile and one scan.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rpd.objectives import chain
from rpd.objectives.base import Objective, ProgramKey, on_device
from rpd.runtime.programs import Program
from rpd.train import optimizers, ring_reads
from rpd.train.chain_rows import ChainRows
from rpd.train.plans import UpdatePlan, last_writes, plan_extras, stage_wise


class RingOverflowError(RuntimeError):
    """A read needed a block version that the history ring no longer holds."""


class CoreState(NamedTuple):
    ring: jax.Array  # float [C, D + P]: last C versions of every block (version v of r in row v % C)
    vel: jax.Array  # float [C or 1, D + P]: update velocity u of every block, per version (if used)
    version: jax.Array  # int32 [S]: updates received by each block so far
    grads: jax.Array  # float [n_slots, D + P]: gradients shared by several updates (PD; 0 rows if stage-wise)
    inflight: tuple  # stage-wise two-point plans: the slots' activation rows (ChainRows.empty); () otherwise
    snapshots: jax.Array  # float [n_records + 1, D]: x recorded for evaluation (last row: discard)
    missed: jax.Array  # bool []: some read fell outside the ring
    opt: object = ()  # every block's optimizer state (rpd.train.optimizers.init_state); () for SGD


class CoreOptions(NamedTuple):
    """Static choices of a compiled run (changing one recompiles)."""

    ring_size: int
    n_slots: int
    n_records: int
    diag_stride: int = 0  # > 0: every diag_stride iterations record ||x-z||^2 and gradient gaps
    n_micro: int = 1  # microbatch gradients averaged per fresh gradient
    two_point: bool = False  # forward and backward weights differ (plan carries read_bwd)
    stagewise: bool = False  # two-point, one stage's backward per update (plans.stage_wise)
    velocity: bool = False  # keep each block's update velocity (plan carries horizons)
    ema: float = 0.9  # u <- ema * u + (1 - ema) * step
    scaled: bool = False  # per-update step-size multipliers (plan carries scale)
    optimizer: optimizers.Optimizer | None = None  # rpd.train.optimizers.Optimizer, bound to the objective; None: SGD
    clip: float = 0.0  # > 0: a fresh gradient g becomes g * min(1, clip / ||g||) (global-norm clip)


def _gradient(obj: Objective, opts: CoreOptions, data):
    """(z_F, z_B, b) -> (loss, flat gradient) for the plan's options: one or M microbatches,
    one point or two (``z_B`` is ignored unless ``opts.two_point``)."""
    if opts.two_point:
        one = lambda zf, zb, b: chain.two_point_value_and_grad(obj, data, zf, zb, b)
    else:
        one = lambda zf, zb, b: obj.value_and_grad(data, zf, b)
    if opts.n_micro == 1:
        return one
    micro = jnp.arange(opts.n_micro, dtype=jnp.int32)

    def mean_of_microbatches(zf, zb, b):
        losses, grads = jax.vmap(lambda bb: one(zf, zb, bb))((b + micro) % obj.n_batches)
        return losses.mean(), grads.mean(axis=0)

    return mean_of_microbatches


def _run(obj: Objective, opts: CoreOptions, noisy: bool, consts, data, plan_arrays, extra, record, gamma, key):
    offsets = jnp.asarray(obj.layout.offsets, jnp.int32)
    sizes = jnp.asarray(obj.layout.sizes, jnp.int32)
    C, D, P = opts.ring_size, obj.D, max(obj.layout.sizes)
    pad = lambda v: jnp.concatenate([v, jnp.zeros((P,), v.dtype)])
    rows = ChainRows(obj, data) if opts.stagewise else None
    state = CoreState(
        ring=jnp.broadcast_to(pad(consts["x0"]), (C, D + P)),
        vel=jnp.zeros((C if opts.velocity else 1, D + P), obj.dtype),
        version=jnp.zeros(obj.S, jnp.int32),
        grads=jnp.zeros((0 if opts.stagewise else opts.n_slots, D + P), obj.dtype),
        inflight=rows.empty(opts.n_slots) if rows is not None else (),  # rows: stage-wise runs only
        snapshots=jnp.zeros((opts.n_records + 1, D), obj.dtype),
        missed=jnp.zeros((), bool),
        opt=()
        if opts.optimizer is None
        else optimizers.init_state(
            opts.optimizer,
            jnp.stack(
                [
                    jnp.where(jnp.arange(P) < size, pad(consts["x0"])[off : off + P], 0.0)
                    for off, size in zip(obj.layout.offsets, obj.layout.sizes)
                ]
            ),
            obj.layout.sizes,
        ),
    )
    grad_fn = _gradient(obj, opts, data)
    nan = jnp.full((), jnp.nan, obj.dtype)

    def point(state, read, horizon):
        return ring_reads.gather(state.ring, read, obj.layout, *((state.vel, horizon) if opts.velocity else ()))

    def slot_gradient(state, a, b, read, fresh, slot, ex):
        """(grads, inflight, g_a [P], loss): a fresh update computes the whole gradient (one- or
        two-point) into grads[slot]; every update applies block a of grads[slot]."""

        def compute(grads):
            z_f = point(state, read, ex.get("horizon"))
            z_b = point(state, ex["read_bwd"], ex.get("horizon_bwd")) if opts.two_point else z_f
            loss, g = grad_fn(z_f, z_b, b)
            if opts.clip > 0:  # the whole fresh gradient's norm (ZB post-validation's clip)
                g = g * jnp.minimum(1.0, opts.clip / jnp.sqrt(jnp.sum(g**2)))
            return grads.at[slot].set(pad(g)), loss

        # A cond even when every update is fresh (RPD): measured, XLA compiles this program
        # faster and runs it no slower than one without the branch, and PD and RPD runs of
        # the same shapes then share one compiled program.
        grads, loss = jax.lax.cond(fresh, compute, lambda grads: (grads, nan), state.grads)
        return grads, state.inflight, jax.lax.dynamic_slice(grads[slot], (offsets[a],), (P,)), loss

    def stage_backward(s):
        """Switch branch s: (g_s padded to [P], δ_s row) from block s's window w of the
        backward point and the slot's float rows s, s + 1 and int row s."""
        size = obj.layout.sizes[s]

        def branch(w, float_rows, int_row):
            g, delta = rows.backward(data, s, w[:size], float_rows, int_row)
            return jnp.pad(g, (0, P - size)), delta

        return branch

    def stage_gradient(state, a, b, read, fresh, slot, ex):
        """(grads, inflight, g_a [P], loss) of a stage-wise two-point plan: a fresh update (block
        S-1) runs the forward at z^k into the slot's rows; every update runs its own stage's
        backward at block a of the backward point, on the slot's rows a, a + 1, and leaves δ_a
        in row a for the slot's next update (block a - 1)."""

        def start(inflight):
            loss, floats, ints = rows.forward(data, point(state, read, ex.get("horizon")), b)
            return (
                jax.lax.dynamic_update_index_in_dim(inflight[0], floats, slot, 0),
                jax.lax.dynamic_update_index_in_dim(inflight[1], ints, slot, 0),
            ), loss

        (floats, ints), loss = jax.lax.cond(fresh, start, lambda inflight: (inflight, nan), state.inflight)
        row = ex["read_bwd"][a] % C
        w = jax.lax.dynamic_slice(state.ring, (row, offsets[a]), (1, P))[0]
        if opts.velocity:
            w = w - ex["horizon_bwd"][a] * jax.lax.dynamic_slice(state.vel, (row, offsets[a]), (1, P))[0]
        at = (slot, a, jnp.int32(0))
        float_rows = jax.lax.dynamic_slice(floats, at, (1, 2, rows.width))[0]
        int_row = jax.lax.dynamic_slice(ints, at, (1, 1, rows.int_width))[0, 0]
        g_a, delta = jax.lax.switch(a, [stage_backward(s) for s in range(obj.S)], w, float_rows, int_row)
        floats = jax.lax.dynamic_update_slice(floats, delta[None, None], at)
        return state.grads, (floats, ints), g_a, loss

    def step(state: CoreState, inp):
        (k, a, b, read, fresh, slot, rec), ex = inp
        lag = lambda v, current: (current - v < 0) | (current - v >= C)
        out_of_ring = lambda v: jnp.any(lag(v, state.version))
        reads_z = fresh | (k % opts.diag_stride == 0) if opts.diag_stride else fresh  # reuse reads nothing
        if opts.stagewise:  # the forward point when fresh, block a's backward version always
            missed = (reads_z & out_of_ring(read)) | lag(ex["read_bwd"][a], state.version[a])
            grads, inflight, g_a, loss_z = stage_gradient(state, a, b, read, fresh, slot, ex)
        else:
            bad = out_of_ring(read) | (out_of_ring(ex["read_bwd"]) if opts.two_point else False)
            missed = reads_z & bad
            grads, inflight, g_a, loss_z = slot_gradient(state, a, b, read, fresh, slot, ex)
        missed = state.missed | missed
        off = offsets[a]
        in_block = jnp.arange(P) < sizes[a]
        if noisy:
            g_a = g_a + consts["grad_noise"] * jax.random.normal(jax.random.fold_in(key, k), (P,), obj.dtype)
        g_a = jnp.where(in_block, g_a, 0.0)
        x_a = jax.lax.dynamic_slice(state.ring, (state.version[a] % C, off), (1, P))[0]
        row = (state.version[a] + 1) % C
        old = jax.lax.dynamic_slice(state.ring, (row, off), (1, P))[0]
        lr = gamma * ex["scale"] if opts.scaled else gamma
        opt = state.opt
        if opts.optimizer is None:
            step_a = lr * g_a
        else:  # the optimizer's update u (to add), from block a's state; x_a past the block is 0
            stale = None
            if opts.optimizer.needs_stale:  # DC-ASGD: block a of the point the gradient was read at
                stale = jax.lax.dynamic_slice(state.ring, (read[a] % C, off), (1, P))[0]
                if opts.velocity:
                    stale = stale - ex["horizon"][a] * jax.lax.dynamic_slice(state.vel, (read[a] % C, off), (1, P))[0]
                stale = jnp.where(in_block, stale, 0.0)
                missed = missed | lag(read[a], state.version[a])
            u_a, opt = optimizers.update(opts.optimizer, opt, a, g_a, jnp.where(in_block, x_a, 0.0), stale)
            step_a = -(lr * u_a)
        new_a = jnp.where(in_block, x_a - step_a, old)
        ring = jax.lax.dynamic_update_slice(state.ring, new_a[None], (row, off))
        vel = state.vel
        if opts.velocity:  # u_a <- ema * u_a + (1 - ema) * step, stored as version v + 1
            u_a = jax.lax.dynamic_slice(vel, (state.version[a] % C, off), (1, P))[0]
            u_old = jax.lax.dynamic_slice(vel, (row, off), (1, P))[0]
            u_new = jnp.where(in_block, opts.ema * u_a + (1 - opts.ema) * step_a, u_old)
            vel = jax.lax.dynamic_update_slice(vel, u_new[None], (row, off))
        version = state.version.at[a].add(1)
        snapshots = jax.lax.cond(
            rec < opts.n_records,
            lambda s: s.at[rec].set(ring_reads.gather(ring, version, obj.layout)),
            lambda s: s,
            state.snapshots,
        )
        out = {"loss_z": loss_z, "block_grad_norm": jnp.sqrt(jnp.sum(g_a**2))}
        if opts.diag_stride:

            def diag(_):
                x, z = (
                    ring_reads.gather(state.ring, state.version, obj.layout),
                    ring_reads.gather(state.ring, read, obj.layout),
                )
                gx, gz = obj.full_grad_data(data, x), obj.full_grad_data(data, z)
                return jnp.stack([jnp.sum((x - z) ** 2), jnp.sum((gx - gz) ** 2), jnp.sum(gx**2)])

            out["diag"] = jax.lax.cond(
                k % opts.diag_stride == 0, diag, lambda _: jnp.full((3,), jnp.nan, obj.dtype), None
            )
        return CoreState(ring, vel, version, grads, inflight, snapshots, missed, opt), out

    K = plan_arrays[0].shape[0]
    xs = ((jnp.arange(K),) + tuple(plan_arrays) + (record,), dict(extra or {}))
    final, per_update = jax.lax.scan(step, state, xs)
    x_final = ring_reads.gather(final.ring, final.version, obj.layout)
    return final.snapshots[:-1], per_update, x_final, final.missed


def make_run(obj: Objective, opts: CoreOptions) -> BoundRun:
    """``run(data, plan_arrays, record, gammas [G], seed, extra=None) -> (curve [G, n_records],
    f0, per_update, x_K [G, D], missed [G])``.

    ``plan_arrays`` = (block, batch, read, fresh, slot) of an :class:`UpdatePlan`, shared by the
    grid; ``extra`` the per-update arrays its options need (``read_bwd``, ``horizon``,
    ``horizon_bwd``, ``scale``: see :func:`rpd.train.plans.plan_extras`); ``record[k]`` = snapshot row that x^{k+1} is written to (n_records: not recorded).
    The curve is f(snapshot) - f* for every row and f0 = f(x^0) - f*. ``seed`` (an int) keys
    the gradient noise, the same key for every step size, so the grid differs only in gamma.

    One compile per (program key, options, shapes): the jitted program is cached on
    ``obj.program_key`` (shapes, dtypes, the builders' functions, static options), never on
    the object, and takes x0, f* and σ_g as arguments, so a rebuilt objective, or one with
    another seed, runs the same compiled program. The grid is a vmap."""
    return BoundRun(_program(ProgramKey(obj), opts), obj.constants())


class BoundRun:
    """A shared compiled program (:attr:`program`, an :class:`rpd.runtime.programs.Program`) bound to one
    objective's numbers (:attr:`consts`: x0, f*, σ_g); call it, or ``lower`` it, like the
    program without the first argument."""

    __slots__ = ("consts", "program")

    def __init__(self, program, consts: dict):
        self.program, self.consts = program, consts

    def __call__(self, data, *args, **kwargs):
        return self.program(self.consts, data, *args, **kwargs)

    def lower(self, data, *args, **kwargs):
        return self.program.lower(self.consts, data, *args, **kwargs)

    def _cache_size(self) -> int:
        return self.program._cache_size()


@functools.lru_cache(maxsize=64)
def _program(pk: ProgramKey, opts: CoreOptions):
    """The jitted ``(consts, data, plan_arrays, record, gammas, seed, extra=None)`` of
    :func:`make_run`, built from the numberless ``pk.obj``."""
    obj = pk.obj
    run = jax.vmap(functools.partial(_run, obj, opts, pk.noisy), in_axes=(None, None, None, None, None, 0, None))

    def run_and_evaluate(consts, data, plan_arrays, record, gammas, seed, extra=None):
        key = jax.random.split(jax.random.key(seed), 2)[1]
        snapshots, per_update, x_final, missed = run(consts, data, plan_arrays, extra, record, gammas, key)
        # One flat batch of 1 + G * n_records points: XLA then evaluates a quadratic with one
        # GEMM, ~3x faster than a nested vmap over (gamma, record).
        G, R, D = snapshots.shape
        points = jnp.concatenate([consts["x0"][None], snapshots.reshape(G * R, D)])
        f = jax.vmap(functools.partial(obj.loss, data))(points) - consts["f_star"]
        return f[1:].reshape(G, R), f[0], per_update, x_final, missed

    stable = opts.optimizer is None or opts.optimizer.stable  # a user's transformation: no name
    return Program(
        run_and_evaluate, None if pk.id is None or not stable else f"rpd.train.core.make_run({pk.id}, {opts!r})"
    )


def execute(
    obj: Objective,
    plan: UpdatePlan,
    record: np.ndarray,
    n_records: int,
    gammas,
    seed: int,
    *,
    ring_size: int,
    n_slots: int = 1,
    diag_stride: int = 0,
    ema: float = 0.9,
    optimizer=None,
):
    """Run a plan for a grid of step sizes; raise on ring overflow. ``optimizer``: anything
    :func:`rpd.train.optimizers.resolve` takes (None: plain SGD).

    Returns (curve [G, n_records], f0, per_update, x_K [G, D]) as host arrays."""
    extra = plan_extras(plan)
    if "read_bwd" in extra and obj.chain is None:
        raise ValueError(f"objective {obj.name!r} has no stage chain: a two-point plan needs one")
    if int(np.max(plan.slot)) >= n_slots:
        raise ValueError(f"the plan uses gradient slot {int(np.max(plan.slot))} but n_slots={n_slots}")
    opts = CoreOptions(
        ring_size=int(ring_size),
        n_slots=int(n_slots),
        n_records=int(n_records),
        diag_stride=int(diag_stride),
        n_micro=int(plan.n_micro),
        two_point="read_bwd" in extra,
        stagewise="read_bwd" in extra and stage_wise(plan, obj.S),
        velocity="horizon" in extra,
        ema=float(ema),
        scaled="scale" in extra,
        optimizer=optimizers.bind_plan(optimizers.bind(optimizers.resolve(optimizer), obj), plan, obj.S),
        clip=float(plan.clip or 0.0),
    )
    arrays = tuple(on_device(a) for a in (plan.block, plan.batch, plan.read, plan.fresh, plan.slot))
    extra = {k: on_device(v, np.int32 if k == "read_bwd" else obj.dtype) for k, v in extra.items()}
    rows = on_device(last_writes(record, n_records))
    gammas = on_device(gammas, obj.dtype)
    out = make_run(obj, opts)(obj.data, arrays, rows, gammas, np.int32(seed), extra or None)
    curve, f0, per_update, x_final, missed = jax.device_get(out)
    if bool(np.any(missed)):
        raise RingOverflowError(
            f"a read fell outside the history ring (ring_size={ring_size}); size it with "
            "rpd.train.plans.ring_size(plan, S)"
        )
    return curve, float(f0), per_update, x_final
