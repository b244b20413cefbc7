"""LocalSGD's programs across H (docs/running.md#compile-time): H, the rounds and their events
are numbers of one compiled round program, the padding never runs and changes no number."""

import jax
import numpy as np
import pytest

from rpd import schedules
from rpd.objectives.linear import random_quadratic
from rpd.runtime.compile_cache import count_programs
from rpd.train import localsgd, methods, rounds
from rpd.train.rounds import SHARED_BYTES, clock_resolution, flat_rounds, round_events, round_plan

GAMMAS = [0.01, 0.03, 0.05]  # G = 3 and d = 7: shapes no other test module compiles


@pytest.fixture(scope="module")
def quad():
    return random_quadratic(n=40, d=7, S=3, batch_size=2, seed=4)


def _layout(tl, n_batches: int, row_bytes: int = 64) -> dict:
    p = round_plan(tl, tl.S, n_batches)
    ev_tick, ev_rel = round_events(p["t_rel"], p["valid"], p["length"], clock_resolution(tl))
    return flat_rounds(p, ev_tick, ev_rel, True, None, row_bytes)


def _shape(lay: dict) -> tuple[int, int, int, int]:
    return len(lay["steps"][0]), len(lay["rounds"]["live"]), lay["T_pad"], lay["E_pad"]


def test_e3s_quick_h_grid_lays_out_in_one_shape():
    """E3 quick (S = R = 4, N = 120, H = 2, 5, 30): 30 local steps per replica, 15 / 6 / 1 rounds
    of at most 19 / 43 / 243 events, 285 / 258 / 243 in all: one bucket, steps and rounds 64
    (twice a replica's 30 microbatches), a round's buffer 256 events, the curve 512."""
    lays = [_layout(schedules.local_sgd(4, 120, 4, H), 24) for H in (2, 5, 30)]
    assert [_shape(lay) for lay in lays] == [(64, 64, 256, 512)] * 3
    assert [int(lay["n_ev"].sum()) for lay in lays] == [285, 258, 243]
    assert [int(lay["rounds"]["Q"]) for lay in lays] == [15, 6, 1]
    first = lays[0]["rounds"]
    np.testing.assert_array_equal(first["off"][:15], np.arange(15) * 19)  # 19 events in every round
    assert first["live"][:15].all() and not first["live"][15:].any()


def test_over_the_memory_cap_a_run_keeps_its_own_buckets():
    """Past SHARED_BYTES the shared padding is dropped for the run's own powers of two."""
    lay = _layout(schedules.local_sgd(4, 120, 4, 2), 24, row_bytes=SHARED_BYTES // 64)
    assert _shape(lay) == (64, 16, 32, 512)  # 15 rounds, 19 events a round, 285 in all


def test_an_h_sweep_compiles_one_round_program(quad):
    """H = 3, 4, 5, 6 (N = 24, R = 2: 4, 3, 3, 2 rounds) in one bucket: after the first run (the
    round program, f(x⁰), f(x̄) at its round ends and the process's first small programs) the
    others compile only f(x̄) at round ends for a round count not seen yet (a batch's rounding
    depends on its shape): H = 5 compiles nothing.

    The counts are of programs built in this process, so the test starts from what a new process
    has: another test's run of the same shapes (this module's padding test: this objective, these
    γ, H = 3 and 6) leaves its programs in memory, and the sweep would then build none of them."""
    localsgd._compiled.cache_clear()
    localsgd._start_value.cache_clear()
    localsgd._round_values.cache_clear()
    jax.clear_caches()
    counts = []
    for H in (3, 4, 5, 6):
        with count_programs() as n:
            methods.local_sgd(quad, schedules.local_sgd(3, 24, 2, H), GAMMAS)
        counts.append(n["compiled"] + n["from_cache"])
    assert counts[0] >= 3 and counts[1:] == [1, 0, 1]


@pytest.mark.parametrize("H", [3, 6])
def test_padding_changes_no_number(quad, H):
    """The shared bucket, the run's own buckets (past the memory cap) and ``pad_to`` give every
    array bit for bit (the padded steps, rounds and events never run); f(x̄) at round ends is
    evaluated over the exact rounds, or over ``pad_to``'s rounds (one program per rung group,
    compared here with its own rounds only)."""
    tl = schedules.local_sgd(3, 24, 2, H)
    Q, T_round = len(tl.sync_time), int(_layout(tl, quad.n_batches)["n_ev"].max())
    shared = methods.local_sgd(quad, tl, GAMMAS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rounds, "SHARED_BYTES", 0)
        own = methods.local_sgd(quad, tl, GAMMAS)
    padded = methods.local_sgd(quad, tl, GAMMAS, pad_to=(Q + 3, T_round + 9))
    exact = methods.local_sgd(quad, tl, GAMMAS, pad_to=(Q, T_round))
    for res, every in [(own, True), (exact, True), (padded, False)]:
        for got, want in [(res.curve, shared.curve), (res.x_final, shared.x_final), (res.axis, shared.axis)]:
            np.testing.assert_array_equal(got, want)
        for k, v in shared.traces.items():
            if every or k != "round_end_curve":
                np.testing.assert_array_equal(res.traces[k], v)
