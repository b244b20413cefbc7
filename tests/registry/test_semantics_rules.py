"""Each registered schedule trains by the rule its paper states, checked against an independent
source: docs/schedules.md#training-semantics's table (which version each gradient reads, how many
microbatches it averages, when the update lands), written out here by hand per schedule, and read
back off the update plan the registry's entry builds for a small timeline. The registry's own tests
compare the registry with the family's entries; this one fails when a schedule's rule is swapped
(in its entry or in ``rpd.train.semantics.RULES``) for one that trains differently."""

from __future__ import annotations

import numpy as np
import pytest

from rpd import registry
from rpd.schedules import BWD, BWD_W
from rpd.train.plans import versions_before

S = 4  # stages = objective blocks; N = 16 microbatches, M = S (DualPipe's: 2S)

# docs/schedules.md#training-semantics, per schedule: "flush" (per flush, the mean of M gradients
# at W_q, landing at the stage's last B or W), "replicated" (the same, landing after the replicas'
# all-reduce at the flush's end), "two_bw" (W_{q-1}), "stashed" (PipeDream: every microbatch,
# w_{k-(S-1-r)} in steady state, stashed for the backward), "two_point" (PipeMare: every
# microbatch, the backward at the current weights), "ampnet" (a step every k = M backwards, forward
# reads floor(max(0, n - (D-1-s)) / k) steps, backward floor(n / k)), and the two that are not a
# plan for the core: LocalSGD's rounds ("replicas") and AvgPipe's elastic averaging ("elastic").
RULE = {
    "gpipe": "flush",
    "1f1b": "flush",
    "interleaved": "flush",
    "looped_bfs": "flush",
    "interleaved_zb": "flush",
    "combined_1f1b": "flush",
    "zb_h1": "flush",
    "zb_h2": "flush",  # without post-validation: exactly synchronous (docs/schedules.md#zb-h2)
    "zb_v": "flush",
    "v_half": "flush",
    "v_min": "flush",
    "dualpipe_v": "flush",
    "searched": "flush",
    "chimera": "replicated",
    "gems": "replicated",
    "dualpipe": "replicated",
    "bitpipe": "replicated",
    "pipedream_2bw": "two_bw",
    "pipedream": "stashed",
    "pipemare": "two_point",
    "ampnet": "ampnet",
    "local_sgd": "replicas",
    "avgpipe": "elastic",
}
# Not in the table: WPipe (its plan needs 2S objective blocks) and 1F1B-RR (PipeDream's
# replicated stages, rpd.train.semantics_parallel), tested in their own modules.
UNTABLED = {"wpipe", "pipedream_rr"}


def test_every_registered_schedule_of_rpds_family_is_in_the_table():
    from rpd.schedules import family

    assert set(RULE) | UNTABLED == set(family.ENTRIES)


@pytest.mark.parametrize("name", sorted(RULE))
def test_a_schedule_trains_by_its_papers_rule(name):
    rule = RULE[name]
    sem = registry.SCHEDULES[name].semantics
    if rule in ("replicas", "elastic"):
        assert sem.plan is None and sem.runner == rule
        return
    tl = registry.build(name, registry.ScheduleParams(S=S, N=16))
    plan, _ = sem.plan(tl, S, 64)
    q = plan.batch // (tl.M or 1)  # the flush (minibatch) of each update's gradient
    fresh = np.asarray(plan.fresh, bool)
    if rule in ("flush", "replicated", "two_bw"):
        stale = 1 if rule == "two_bw" else 0
        assert plan.n_micro == tl.M and plan.read_bwd is None
        np.testing.assert_array_equal(plan.read, np.broadcast_to(np.maximum(q - stale, 0)[:, None], plan.read.shape))
        assert sorted(np.bincount(plan.block)) == [16 // tl.M] * S  # one update per block per flush
        if rule == "replicated":
            np.testing.assert_array_equal(plan.time, np.asarray(tl.flush_time)[q])
        elif rule == "flush" and tl.n_stages == S:  # stage = block: its last B (or W) of the flush
            t = tl.table
            last = BWD_W if tl.split else BWD
            for k in range(len(plan.block)):
                ends = t.end[(t.kind == last) & (t.mb // tl.M == q[k]) & (t.stage == plan.block[k])]
                assert plan.time[k] == ends.max() - 1  # the op's last tick
        return
    assert plan.n_micro == 1
    if rule == "stashed":
        assert plan.read_bwd is None
        steady = fresh & (plan.batch >= 2 * S)
        m = plan.batch[steady][:, None]
        np.testing.assert_array_equal(plan.read[steady], m - (S - 1 - np.arange(S))[None, :])
    elif rule == "two_point":
        assert plan.read_bwd is not None
        current = versions_before(plan.block, S)[:-1]
        mine = np.arange(len(plan.block)), plan.block
        np.testing.assert_array_equal(plan.read_bwd[mine], current[mine])  # B(m, r) at block r's current weights
    else:  # ampnet
        k = tl.M
        n = plan.batch[:, None]
        s = np.arange(S)[None, :]
        np.testing.assert_array_equal(plan.read, k * (np.maximum(0, n - (S - 1 - s)) // k))
        later = s >= plan.block[:, None]  # the blocks the backward runs through
        np.testing.assert_array_equal(
            np.where(later, plan.read_bwd, -1), np.where(later, k * (plan.batch[:, None] // k), -1)
        )
