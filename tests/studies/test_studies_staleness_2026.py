"""E17's protocol pieces (rpd.studies.staleness_2026_tuning): the tuning never settles on a grid
edge while it may widen, updates to a target, and a plan's delay in both units."""

import numpy as np
import pytest

from rpd import schedules
from rpd.cli import figure
from rpd.schedules.machinery import delays
from rpd.studies import load, staleness_2026
from rpd.studies.staleness_2026_tuning import delay_units, tune, updates_to_target
from rpd.train import plans, semantics


def test_registered():
    assert load("e17_staleness_2026") is staleness_2026
    # experiments.figure prints the study's own console view in place of the generic table
    assert figure.resolve("e17_staleness_2026").console is staleness_2026.console
    assert figure.resolve("e9_frontier").console is None


def test_tuning_widens_until_the_choice_is_interior():
    """Score (log2 γ + 3)² + seed: the best exponent -3 lies above the first grid -9..-6, so the grid
    grows upward two at a time until -3 is inside; every seed ran every exponent tried."""
    calls = []

    def run(seed, gammas):
        calls.append((seed, len(gammas)))
        return np.log2(gammas)[:, None] * np.ones((1, 3))

    def score(seed, curves):
        return (curves[:, -1] + 3.0) ** 2 + 1.0 + seed

    t = tune(run, score, [0, 1], -9, -6, max_widen=5)
    assert t["exp"] == -3 and t["edge"] is None
    assert t["exps"] == [-9, -2] and t["widened"] == 2
    assert all(n == 4 for _, n in calls)  # padded to the first grid's length: one compiled shape
    np.testing.assert_array_equal(t["scores"], [1.0, 2.0])


def test_tuning_reports_an_edge_it_could_not_leave():
    t = tune(lambda s, g: np.log2(g)[:, None], lambda s, c: 10.0 - c[:, 0], [0], -3, -1, max_widen=1)
    assert t["edge"] == "high" and t["exp"] == 1 and t["exps"] == [-3, 1]


def test_updates_to_target():
    c = np.array([[4.0, 2.0, 1.0, 0.5], [4.0, np.nan, 0.1, 0.1], [4.0, 3.0, 3.0, 3.0]])
    np.testing.assert_array_equal(updates_to_target(c, 1.0), [2, 2, np.inf])
    np.testing.assert_array_equal(updates_to_target(c, [2.0, 0.05, 3.0]), [1, np.inf, 1])


def test_delay_in_both_units():
    """PipeDream 1F1B: max ⌊S² − S/2⌋ block updates (the delay law) and S − 1 − s own steps per
    stage; 2BW: one step on every stage; 1F1B with flushes: none."""
    for S in (4, 5, 8):
        tl = schedules.pipedream(S, 12 * S)
        pd = delay_units(plans.pipedream_plan(tl, 1)[0], S, tl)
        assert pd["block_updates_max"] == delays.max_delay(S)
        assert pd["optimizer_steps_per_stage"] == [S - 1 - s for s in range(S)]
    tl = schedules.pipedream_2bw(4, 48, 4)
    assert delay_units(semantics.pipedream_2bw_plan(tl, 4), 4)["optimizer_steps_per_stage"] == [1, 1, 1, 1]
    tl = schedules.one_f_one_b(4, 48, 4)
    sync = semantics.of(tl).plan(tl, 4, 4)[0]
    assert delay_units(sync, 4)["optimizer_steps_per_stage"] == [0, 0, 0, 0]


def test_progress_has_a_known_total(monkeypatch):
    """``n_steps`` is the number of progress calls of ``run`` (was "[1/?]"), at both sizes; the
    tuning is replaced by a stand-in so that no arm trains."""

    def tuned(cfg, run, score, opt):
        k = len(cfg.seeds)
        return dict(curves=np.ones((k, 3)), scores=np.full(k, 10.0), exp=-3, edge=None, widened=0, exps=[-3, -3])

    monkeypatch.setattr(staleness_2026, "_tuned", tuned)
    paper = staleness_2026.Config()
    quick = staleness_2026.Config(**staleness_2026.QUICK)
    for cfg, total in ((paper, 6 * 2 + 4 * 2 + 2 * 4), (quick, 6 + 3 + 2 * 2)):
        calls = []
        staleness_2026.run(cfg, progress=calls.append)
        assert len(calls) == staleness_2026.n_steps(cfg) == total


@pytest.mark.slow  # four small programs, ~5 s
def test_shared_programs_leave_the_numbers_bit_for_bit():
    """E17's shared programs: the synchronous run holding PipeDream's ring and slots (part
    (c)) and 2BW recording a second, unread point before its T with the sync arm's ring and slots
    (part (a)) give the numbers of the runs alone, bit for bit, and each pair compiles one program."""
    from rpd import objectives
    from rpd.train import core, methods

    g = np.array([2.0**-6, 2.0**-4])
    obj = objectives.nesterov_quadratic(32, 8, 4, 4, mu=0.05, seed=0)
    tl = schedules.pipedream(4, 16)
    plan, slots = plans.pipedream_plan(tl, 1)
    alone = methods.sgd(obj, 16, g, stride=4, optimizer=None).curve
    before = core._program.cache_info().currsize
    pd = methods.pipedream(obj, tl, g, axis="block_update", stride=4, optimizer=None)
    shared = methods.sgd(obj, 16, g, stride=4, optimizer=None, ring_size=plans.ring_size(plan, 4), n_slots=slots)
    assert core._program.cache_info().currsize == before + 1 and pd.meta["ring_size"] == shared.meta["ring_size"] > 1
    np.testing.assert_array_equal(shared.curve, alone)

    sync, two = schedules.one_f_one_b(4, 16, 4), schedules.pipedream_2bw(4, 16, 4)
    T = int(two.T)
    assert int(sync.T) > T
    own = methods.train(obj, two, g, at=[T], optimizer=None).curve
    padded = methods.train(obj, two, g, at=[T - 1, T], optimizer=None, ring_size=2, n_slots=2).curve
    np.testing.assert_array_equal(padded[:, [0, -1]], own)
