"""Update plans: the one description every stale block-SGD method shares (ARCHITECTURE.md).

A plan says, for every iteration k = 0..K-1: update block ``block[k]`` with the gradient on
dataset batch ``batch[k]`` taken at the mixed point z^k whose block r is version ``read[k, r]``
of block r, and the update lands in simulated time step ``time[k]``. Methods differ only in how
they build the plan: PD reads it off a timeline, RPD samples it, SGD has no staleness.

A gradient can be shared by several updates (PD with weight stashing computes the gradient of
microbatch m once, at its first backward, and its S block updates apply the pieces): ``fresh[k]``
says whether iteration k computes a new gradient into gradient slot ``slot[k]`` or reuses it.

A two-point plan (``read_bwd``: the backward of the gradient runs at other weights than its
forward, PipeMare) shares a microbatch's chain gradient the same way, stage by stage: either
every update is fresh and computes its whole two-point gradient, or each slot runs microbatches
down the chain (:func:`stage_wise`): a fresh update of block S-1 runs the forward at z^k and the
slot's next updates, of blocks S-2, .., 0, each run their own stage's backward at version
``read_bwd[k, a]`` of their block a.

What the core (``rpd.train.core.execute``) reads of a plan on the host: its optional per-update
arrays (:func:`plan_extras`) and the snapshot rows it writes, the last write to each kept
(:func:`last_writes`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rpd.schedules import Timeline
from rpd.schedules.machinery.delays import read_versions
from rpd.validation import check_choice, check_int, required


class UpdatePlan(NamedTuple):
    block: np.ndarray  # int32 [K]: a_k, the block iteration k updates
    batch: np.ndarray  # int32 [K]: b_k, the dataset batch of its gradient
    read: np.ndarray  # int32 [K, S]: v_k^(r), version of block r inside z^k
    fresh: np.ndarray  # bool [K]: compute a new gradient at z^k (else reuse slot[k])
    slot: np.ndarray  # int32 [K]: gradient slot written (fresh) or read
    time: np.ndarray  # int64 [K]: simulated time step in which the update lands
    # Options of the schedule family (docs/schedules.md#training-semantics); None / 1 = PD's single-point,
    # one-microbatch core.
    n_micro: int = 1  # microbatch gradients averaged per fresh gradient (batches batch[k] + j)
    read_bwd: np.ndarray | None = None  # int32 [K, S]: versions of the backward weights (two-point)
    horizon: np.ndarray | None = None  # float [K, S]: forward point w - horizon * u (prediction)
    horizon_bwd: np.ndarray | None = None  # float [K, S]: backward point w - horizon_bwd * u (T2)
    scale: np.ndarray | None = None  # float [K]: step-size multiplier of update k (T1)
    clip: float | None = None  # global-norm clip of every fresh gradient (ZB post-validation)


def versions_before(block_K: np.ndarray, S: int) -> np.ndarray:
    """int32 [K+1, S]: row k = how many updates each block received in iterations 0..k-1."""
    counts = np.zeros((len(block_K) + 1, S), np.int32)
    np.add.at(counts, (np.arange(1, len(block_K) + 1), block_K), 1)
    return np.cumsum(counts, axis=0, dtype=np.int32)


def stage_wise(plan: UpdatePlan, S: int) -> bool:
    """Whether a two-point plan shares each microbatch's gradient stage by stage (module doc):
    every slot's updates, in order, are a fresh one of block S-1 followed by blocks S-2, .., 0,
    then the next microbatch's. False if every update is fresh (each computes its whole
    two-point gradient); any other two-point plan raises a ValueError."""
    if plan.read_bwd is None:
        raise ValueError("stage_wise applies to two-point plans (with read_bwd)")
    fresh = np.asarray(plan.fresh, bool)
    if fresh.all():
        return False
    slot = np.asarray(plan.slot)
    order = np.lexsort((np.arange(len(slot)), slot))  # by slot, then iteration
    pos = np.arange(len(slot)) - np.searchsorted(slot[order], slot[order])  # position within the slot
    step = pos % S
    if not (np.array_equal(np.asarray(plan.block)[order], S - 1 - step) and np.array_equal(fresh[order], step == 0)):
        raise ValueError(
            "a two-point plan that reuses gradients must run each slot's microbatches down "
            "the chain: a fresh update of block S-1, then blocks S-2, .., 0"
        )
    if plan.n_micro != 1:
        raise ValueError("a stage-wise two-point plan takes one microbatch per gradient (n_micro=1)")
    return True


def ring_size(plan: UpdatePlan, S: int, diag_stride: int = 0) -> int:
    """Smallest per-block history that serves every read of the plan: 1 + max over (k, r) of
    (current version of r at k) - (version read). Forward versions are read by the iterations
    that compute a fresh gradient, and with ``diag_stride`` > 0 every diag_stride-th
    (diagnostics); a reused gradient reads nothing, so PD needs at most NOAM + 1 versions.
    Backward versions (two-point plans) are read whole by a fresh update, and one block, the
    updated one, by every update of a stage-wise plan (:func:`stage_wise`). Raises if a plan
    reads a future version."""
    block = np.asarray(plan.block)
    current = np.asarray(versions_before(block, S)[:-1])
    reads = np.asarray(plan.fresh, bool).copy()
    if diag_stride:
        reads[:: int(diag_stride)] = True
    lag = (current - np.asarray(plan.read))[reads].ravel()
    if plan.read_bwd is not None:
        lag_bwd = current - np.asarray(plan.read_bwd)
        if stage_wise(plan, S):
            lag_bwd = lag_bwd[np.arange(len(block)), block]
        lag = np.concatenate([lag, lag_bwd.ravel()])
    if lag.size and lag.min() < 0:
        raise ValueError("plan reads a version that does not exist yet")
    return int(lag.max(initial=0)) + 1


def pipedream_plan(tl: Timeline, n_batches: int) -> tuple[UpdatePlan, int]:
    """PD's plan from a 1F1B timeline; returns it with the number of gradient slots (NOAM).

    Weight stashing makes z^k depend on the microbatch only, so the gradient is computed once at
    the microbatch's first backward (stage S-1) and applied block by block at each B."""
    if not tl.stash:
        raise ValueError(f"PipeDream's plan reads a stashing timeline (PipeDream's), got kind={tl.kind!r}")
    noam = int(required("noam", tl.noam))  # microbatches in flight: the gradient slots
    m = tl.update_mb
    first = np.zeros(len(m), bool)
    first[np.unique(m, return_index=True)[1]] = True
    plan = UpdatePlan(
        block=tl.update_stage,
        batch=(m % n_batches).astype(np.int32),
        read=read_versions(tl),
        fresh=first,
        slot=(m % noam).astype(np.int32),
        time=tl.update_time,
    )
    return plan, noam


def sgd_plan(N: int, S: int, n_batches: int) -> UpdatePlan:
    """Minibatch SGD as a plan: step n updates blocks 0..S-1 with one gradient at x^{nS}, taken
    on batch n mod n_batches; step n occupies time step n."""
    k = np.arange(N * S)
    step = (k // S).astype(np.int32)
    return UpdatePlan(
        block=(k % S).astype(np.int32),
        batch=(step % n_batches).astype(np.int32),
        read=np.repeat(step[:, None], S, axis=1),
        fresh=(k % S) == 0,
        slot=np.zeros(N * S, np.int32),
        time=step,
    )


DELAYS = ("uniform", "max", "zero")
BLOCK_ORDERS = ("uniform", "cyclic")
BATCH_ORDERS = ("uniform", "cyclic")


# The sampler runs once per plan in ~4 ms, but its ~11 inlined threefry hashes take XLA ~2 s to
# compile at the default optimisation level and ~0.9 s at level 0 (the same draws: integer
# hashing is exact; tests/test_core.py checks them against eager jax.random calls). Compile time
# is what a study pays, so level 0. One program draws any K, S up to 64, batch count and delta:
# it draws CHUNK iterations from a traced first index k0, S_b delays each (S rounded up to a
# power of two, to at least 64 while K <= 16384), with S, n_batches and delta traced; a sweep's
# plans share it. Its first S columns are the draws of the exact shapes: iteration k's keys come
# from fold_in(key, k), and partitionable threefry (JAX's default; without it the shapes stay
# exact, one call) draws entry i of a vector from counter i, so a longer vector begins with the
# shorter one; the rest is integer arithmetic (tests/runtime/test_sweep_programs.py checks the
# draws against the exact shapes).
CHUNK = 1024


def _sample_rpd(seed, delta, K, S, n_batches, delays, block_order, batch_order):
    """Per iteration, in the order of docs/science.md#methods: block ~ U{0..S-1}, batch ~ U{0..nb-1}, each block's delay
    ~ U{0..min(delta, k)}; one key per iteration by fold_in into fold_in(key(seed), 1). NumPy
    (block [K], batch [K], delay [K, S]), int32."""
    chunk, S_b = max(K, 1), S
    if jax.config.jax_threefry_partitionable:
        chunk, S_b = CHUNK, 1 << max(S - 1, 0).bit_length()
        S_b = max(S_b, 64) if K <= 16 * CHUNK else S_b
    args = (seed, delta, S, n_batches)
    statics = dict(chunk=chunk, S_b=S_b, delays=delays, block_order=block_order, batch_order=batch_order)
    parts = jax.device_get([_sample_chunk(*args, k0, **statics) for k0 in range(0, max(K, 1), chunk)])
    a, b, d = (np.concatenate(p) for p in zip(*parts))
    return a[:K], b[:K], d[:K, :S]


@functools.partial(
    jax.jit,
    static_argnames=("chunk", "S_b", "delays", "block_order", "batch_order"),
    compiler_options={"xla_backend_optimization_level": 0},
)
def _sample_chunk(seed, delta, S, n_batches, k0, chunk, S_b, delays, block_order, batch_order):
    """:func:`_sample_rpd`'s draws for iterations k0 .. k0 + chunk - 1, S_b delays each (S blocks)."""
    key = jax.random.fold_in(jax.random.key(seed), 1)
    k = k0 + jnp.arange(chunk)

    def draw(k):
        k_block, k_batch, k_delay = jax.random.split(jax.random.fold_in(key, k), 3)
        cap = jnp.minimum(delta, k)
        a = jax.random.randint(k_block, (), 0, S)
        b = jax.random.randint(k_batch, (), 0, n_batches)
        d = {
            "uniform": lambda: jax.random.randint(k_delay, (S_b,), 0, cap + 1),
            "max": lambda: jnp.full((S_b,), cap),
            "zero": lambda: jnp.zeros((S_b,), cap.dtype),
        }[delays]()
        return a, b, d

    a, b, d = jax.vmap(draw)(k)
    if block_order == "cyclic":
        a = k % S
    if batch_order == "cyclic":
        b = k % n_batches
    return a.astype(jnp.int32), b.astype(jnp.int32), d.astype(jnp.int32)


def delays_to_reads(block_K: np.ndarray, delay_KxS: np.ndarray) -> np.ndarray:
    """Read versions from global delays: z^k's block r is block r of x^{k - d_k^(r)}."""
    K, S = delay_KxS.shape
    j = np.arange(K)[:, None] - delay_KxS
    if j.min(initial=0) < 0:
        raise ValueError("a delay exceeds its iteration index (d_k^(r) must be <= k)")
    return versions_before(block_K, S)[j, np.arange(S)[None, :]]


def rpd_plan(
    seed: int,
    K: int,
    S: int,
    n_batches: int,
    delta: int,
    *,
    delays: str | np.ndarray = "uniform",
    block_order: str | np.ndarray = "uniform",
    batch_order: str | np.ndarray = "uniform",
) -> UpdatePlan:
    """Randomized PipeDream's plan, sampled from ``seed``. ``delays is "uniform" | "max" | "zero" or an int table
    [K, S] (e.g. PD's exact delay table); ``block_order`` "uniform" | "cyclic" or an int [K]
    array (PD's); ``batch_order`` "uniform" | "cyclic" or an int [K] array. Every iteration
    computes a fresh gradient."""
    K, S, n_batches = check_int("K", K), check_int("S", S), check_int("n_batches", n_batches)
    seed = check_int("seed", seed, 0)
    delta = check_int("delta", delta, 0)
    named = lambda v, choices, name: check_choice(name, v, choices) if isinstance(v, str) else "uniform"
    a, b, d = _sample_rpd(
        np.int32(seed),
        delta,
        K,
        S,
        n_batches,
        named(delays, DELAYS, "delays"),
        named(block_order, BLOCK_ORDERS, "block_order"),
        named(batch_order, BATCH_ORDERS, "batch_order"),
    )
    a, b, d = np.asarray(a), np.asarray(b), np.asarray(d)
    if not isinstance(block_order, str):
        a = _check_table("block_order", block_order, (K,), S)
    if not isinstance(batch_order, str):
        b = _check_table("batch_order", batch_order, (K,), n_batches)
    if not isinstance(delays, str):
        d = _check_table("delays", delays, (K, S), None)
    return UpdatePlan(
        block=a,
        batch=b,
        read=delays_to_reads(a, d).astype(np.int32),
        fresh=np.ones(K, bool),
        slot=np.zeros(K, np.int32),
        time=np.arange(K, dtype=np.int32),
    )


def _check_table(name, table, shape, upper):
    table = np.asarray(table)
    if table.shape != shape or not np.issubdtype(table.dtype, np.integer):
        raise ValueError(f"{name} must be an int array of shape {shape}, got {table.dtype} {table.shape}")
    if table.min(initial=0) < 0 or (upper is not None and table.max(initial=0) >= upper):
        raise ValueError(f"{name} entries must lie in [0, {upper})")
    return table.astype(np.int32)


# ---------------------------------------------------------------- what the core reads of a plan


def last_writes(rows: np.ndarray, n_records: int) -> np.ndarray:
    """Keep only the last write to each snapshot row (earlier ones would be overwritten)."""
    rows = np.asarray(rows, np.int32)
    out = np.full_like(rows, n_records)
    valid = np.nonzero(rows < n_records)[0]
    last: dict[int, int] = {}
    for k in valid[::-1].tolist():
        last.setdefault(int(rows[k]), k)
    idx = np.fromiter(last.values(), dtype=np.int64, count=len(last))
    out[idx] = rows[idx]
    return out


def plan_extras(plan: UpdatePlan) -> dict:
    """The optional per-update arrays of a plan that the core reads (None fields left out)."""
    out = {}
    for name in ("read_bwd", "horizon", "horizon_bwd", "scale"):
        v = getattr(plan, name)
        if v is not None:
            out[name] = np.asarray(v, np.int32 if name == "read_bwd" else None)
    if "horizon_bwd" in out and "read_bwd" not in out:
        raise ValueError("a plan with horizon_bwd needs read_bwd (a two-point gradient)")
    if ("horizon" in out) != ("horizon_bwd" in out) and "read_bwd" in out:
        # both points move along the velocity or neither does: fill the missing one with 0
        shape = out["read_bwd"].shape
        out.setdefault("horizon", np.zeros(shape))
        out.setdefault("horizon_bwd", np.zeros(shape))
    return out
