"""The rounds of LocalSGD and of D pipelines with local steps: the host-side integer plan a round
runner executes (:mod:`rpd.train.localsgd`), the timeline's clock resolution and each round's
events (docs/science.md#simulated-time-at-events).

A round's curve changes only in the ticks in which some replica's block increment lands, at its
first tick and at its sync; the runner integrates and evaluates f there only, so its cost is set
by the events, whatever the unit the costs are written in.
"""

from __future__ import annotations

import numpy as np

from rpd.schedules import Timeline
from rpd.train import semantics_parallel
from rpd.validation import required


def localsgd_plan(tl: Timeline, n_batches: int) -> dict:
    """Host-side integer plan, shaped [Q rounds, H local steps, R replicas, ...]."""
    if not tl.averaged:
        raise ValueError(f"expected a LocalSGD timeline, got kind={tl.kind!r}")
    S, N, R, H = tl.S, tl.N, required("R", tl.R), required("H", tl.H)
    Q = -(-N // (R * H))
    m = np.arange(Q * R * H).reshape(Q, H, R)  # microbatch of (round, local step, replica)
    valid = m < N
    mc = np.minimum(m, N - 1)
    start = np.concatenate([[0], tl.sync_time[:-1] + 1])  # first time step of each round
    length = tl.sync_time - start + 1
    t_rel = tl.b_time[mc] - start[:, None, None, None]  # [Q, H, R, S]
    t_rel = np.where(valid[..., None], t_rel, 0)
    return dict(
        batch=(mc % n_batches).astype(np.int32),
        valid=valid,
        t_rel=t_rel.astype(np.int64),  # ticks: int64 (µs, ns costs)
        mb=m.astype(np.int32),
        start=start,
        length=length,
        T_round=int(length.max()),
        loss_time=tl.f_time[mc, S - 1],  # when the last-stage forward of m ran
        R=R,
        n_micro=1,
        sync=np.asarray(tl.sync_time),
        n_steps=N,
    )


def round_plan(tl: Timeline, S_obj: int, n_batches: int) -> dict:
    """The round plan of a LocalSGD timeline (:func:`localsgd_plan`) or of D pipelines with local
    steps (:func:`rpd.train.semantics_parallel.dp_rounds_plan`): the arrays above plus ``R``,
    ``n_micro`` (microbatch gradients averaged per local step), ``sync`` (round-end ticks) and
    ``n_steps`` (local steps of all replicas)."""
    if tl.averaged:
        if tl.S != S_obj:
            raise ValueError(f"timeline has S={tl.S} stages but the objective has S={S_obj} blocks")
        return localsgd_plan(tl, n_batches)
    return semantics_parallel.dp_rounds_plan(tl, S_obj, n_batches)


def clock_resolution(tl: Timeline) -> int:
    """The largest integer dividing every op's start and end, every sync / flush boundary and T
    (1 under unit costs; c when every cost is a multiple of c): the timeline's clock tick."""
    t = tl.table
    marks = [np.asarray(t.start, np.int64), np.asarray(t.end, np.int64), np.asarray([int(tl.T)], np.int64)]
    for m in (tl.sync_time, tl.flush_time, getattr(tl, "dp_sync", None)):
        if m is not None and len(m):
            marks.append(np.asarray(m, np.int64)[np.asarray(m) >= 0] + 1)
    return max(int(np.gcd.reduce(np.concatenate(marks))), 1)


def round_events(t_rel: np.ndarray, valid: np.ndarray, length: np.ndarray, tick: int = 1) -> tuple[list, np.ndarray]:
    """The events of every round: (ticks, relative to the round's start, in which an increment
    lands, with the round's first clock tick (``tick``), the average it starts from, and its
    last, its sync; [Q] int arrays) and ``t_rel`` [Q, H, R, S]
    rewritten as each increment's index in its round's list. The curve within a round changes
    only there, so the runner integrates and evaluates per event, never per tick."""
    ticks, rel = [], np.zeros_like(t_rel)
    for q in range(len(length)):
        landed = t_rel[q][np.broadcast_to(valid[q][..., None], t_rel[q].shape)]
        e = np.union1d(landed, [min(int(tick), int(length[q])) - 1, int(length[q]) - 1]).astype(np.int64)
        ticks.append(e)
        rel[q] = np.searchsorted(e, t_rel[q])
    return ticks, rel.astype(np.int32)


def round_shape(tl: Timeline) -> tuple[int, int]:
    """(rounds, ticks of the longest round, its averaging included) of a LocalSGD or D-pipeline
    timeline: the shape of the program that runs it (see ``pad_to`` of :func:`local_sgd`)."""
    sync = np.asarray(tl.sync_time if tl.averaged else semantics_parallel.data_parallel_timeline(tl).dp_sync)
    start = np.concatenate([[0], sync[:-1] + 1])
    return int(len(sync)), int((sync - start + 1).max())


# Largest padded per-γ state (a round's event buffer and the round ends) a program may hold
# before the layout falls back to per-run buckets (fewer programs shared across H, less memory).
SHARED_BYTES = 1 << 26


def _pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def flat_rounds(p: dict, ev_tick: list, ev_rel: np.ndarray, track_time: bool, pad_to, row_bytes: int) -> dict:
    """The plan laid out for one program shared across H (docs/running.md#compile-time): local
    steps flat in (round, step) order, [steps, R] and ``t`` [steps, R, S] (each increment's
    event index in its round); per round its event count ``n_ev``, the offset ``off`` of its
    events in the flat curve and ``live`` (a microbatch on some replica); H and Q as numbers.
    Every axis is padded to a bucket the program never runs: steps to a power of two of at least
    twice a replica's microbatches (so whatever H), rounds to the steps' bucket, a round's event
    buffer to a power of two of at least half the run's events and the flat curve to twice that
    (a run has about as many events whatever its H: fewer rounds, more events each, so the runs
    of an H grid tend to land in one bucket: E3's do, at either size; of E4's, H = 30 has a round
    of more than half the events and a bucket of its own). The buffer is cleared every round, so
    its size is time as well as memory.
    ``pad_to=(rounds, round_ticks)`` fixes the rounds and the buffer instead; ``row_bytes``
    (G × D × itemsize) caps the shared padding at :data:`SHARED_BYTES`."""
    Q, H, R = p["batch"].shape
    n_ev = np.array([len(e) for e in ev_tick], np.int32) if track_time else np.ones(Q, np.int32)
    E, T_run = int(n_ev.sum()), int(n_ev.max())
    if pad_to is not None:
        Q_pad, T_pad = pad_to
        steps_pad, E_pad = Q_pad * H, Q_pad * T_pad
    else:
        steps_pad = _pow2(max(Q * H, 2 * -(-p["n_steps"] // R)))  # Q H < N / R + H: twice N / R for most H
        Q_pad, T_pad = steps_pad, _pow2(max(T_run, -(-E // 2))) if track_time else 0
        E_pad = 2 * T_pad  # >= E
        if (Q_pad + T_pad) * row_bytes > SHARED_BYTES:  # this run's own buckets
            Q_pad, T_pad, E_pad = _pow2(Q), _pow2(T_run), _pow2(E)
    if not track_time:  # no event buffer, no curve of events
        T_pad = E_pad = 1
    flat = lambda a: np.concatenate(
        [a.reshape((Q * H,) + a.shape[2:]), np.zeros((steps_pad - Q * H,) + a.shape[2:], a.dtype)]
    )
    per_round = lambda a: np.concatenate([a, np.zeros(Q_pad - Q, a.dtype)])
    return dict(
        steps=[flat(p["batch"]), flat(p["valid"]), flat(ev_rel.astype(np.int32)), flat(p["mb"])],
        rounds=dict(
            H=np.int32(H),
            Q=np.int32(Q),
            n_ev=per_round(n_ev),
            off=per_round((np.cumsum(n_ev) - n_ev).astype(np.int32)),
            live=per_round(p["valid"].reshape(Q, -1).any(axis=1)),
        ),
        n_ev=n_ev,
        T_pad=int(T_pad),
        E_pad=int(E_pad),
    )
