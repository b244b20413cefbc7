"""Stochastic time (rpd.schedules.machinery.jitter): persistent stragglers against hand-computed
makespans, jitter at CV 0 equal to the exact timeline, seeds, and the lognormal's moments."""

import numpy as np
import pytest

from rpd import schedules
from rpd.schedules.machinery import jitter
from rpd.schedules.machinery.costs import CostModel

JIT = (0.2, 0.3, 0.25, 0.5, 0.4)  # F, B, IW, p2p, allreduce


@pytest.mark.parametrize("f, F1, B1", [(1.0, 2, 4), (1.5, 3, 6), (2.0, 4, 8), (1.25, 2, 5)])
def test_two_stage_1f1b_with_a_slow_last_stage(f, F1, B1):
    """S = 2, M = N = 4, F = 2, B = 4, rank 1 slowed by f >= 1: F1 = rint(2f), B1 = rint(4f) ticks
    (f = 1.25: 2.5 rounds half to even, to 2). Rank 1 is the bottleneck: it starts at F0(0)'s end
    (2) and then runs its four F, B pairs back to back (each F1(j) needs F0(j), which rank 0 has
    sent by then), so it ends at 2 + 4(F1 + B1); the flush ends with rank 0's last B (4 ticks)
    after it: T = 6 + 4(F1 + B1) (f = 1: 30, GPipe's (M + S - 1)(F + B) = 5·6)."""
    tl = schedules.one_f_one_b(2, 4, 4, CostModel(F=2, B=4, slow=((1,), f)))
    assert tl.T == 6 + 4 * (F1 + B1)


def test_a_slow_first_stage_by_hand():
    """S = 2, M = N = 2, F = B = 2, rank 0 slowed by 2 (F0 = B0 = 4): rank 0 runs F0(0) [0, 4),
    F0(1) [4, 8) (warm-up 1, then 1F1B: F0(1) is its next op), rank 1 F1(0) [4, 6), B1(0) [6, 8),
    F1(1) [8, 10), B1(1) [10, 12); rank 0's B0(0) [8, 12), B0(1) [12, 16): T = 16."""
    tl = schedules.one_f_one_b(2, 2, 2, CostModel(F=2, B=2, slow=((0,), 2.0)))
    assert tl.T == 16
    t = tl.table
    b0 = (t.rank == 0) & (t.kind == schedules.BWD)
    assert sorted(t.end[b0].tolist()) == [12, 16]


@pytest.mark.parametrize(
    "build",
    [
        lambda c: schedules.one_f_one_b(4, 16, 8, c),
        lambda c: schedules.gpipe(4, 16, 8, c),
        lambda c: schedules.zb_h1(4, 16, 8, c),
        lambda c: schedules.pipedream(4, 16, costs=c),
        lambda c: schedules.local_sgd(4, 16, 4, 2, c),
    ],
)
def test_cv_zero_is_the_exact_timeline(build):
    base = dict(F=100, I=100, W=100, p2p=7, allreduce=(30, 0.0))
    exact = build(CostModel(**base))
    zero = build(CostModel(**base, jitter=(0, 0, 0, 0, 0), slow=((2,), 1.0), seed=5))
    assert zero.T == exact.T
    np.testing.assert_array_equal(zero.table.start, exact.table.start)
    np.testing.assert_array_equal(zero.table.end, exact.table.end)


def test_same_seed_same_timeline_other_seeds_differ():
    tl = lambda seed: schedules.zb_h1(4, 16, 8, CostModel(F=100, I=100, W=100, p2p=10, jitter=JIT, seed=seed))  # noqa: E731
    a, b = tl(3), tl(3)
    np.testing.assert_array_equal(a.table.end, b.table.end)
    ends = {tuple(tl(s).table.end.tolist()) for s in range(4)}
    assert len(ends) == 4


def test_jitter_scales_each_op_by_its_own_factor():
    """Each op's duration is round(cost · X) with X the factor of its (kind, stage, microbatch),
    the same draw in two schedules that run the op at different times, and in a run of 16
    microbatches for its first 8 (the draws are microbatch-major)."""
    c = CostModel(F=1000, B=2000, jitter=(0.3, 0.3), seed=11)
    z = np.random.default_rng([11, 19, 1]).standard_normal((16, 5, 4))  # [microbatch, kind, stage]
    for tl in (schedules.gpipe(4, 8, 8, c), schedules.one_f_one_b(4, 8, 8, c), schedules.one_f_one_b(4, 16, 8, c)):
        t = tl.table
        want = np.rint(np.where(t.kind == schedules.FWD, 1000, 2000) * jitter.factor(0.3, z[t.mb, t.kind, t.stage]))
        np.testing.assert_array_equal(t.end - t.start, want.astype(np.int64))


def test_lognormal_mean_one_and_cv():
    """E[X] = 1 and sd[X] = cv analytically: sigma^2 = ln(1 + cv^2), so exp(sigma^2) - 1 = cv^2;
    and by quadrature of exp(sigma z - sigma^2/2) against the normal density."""
    z = np.linspace(-12, 12, 200001)
    pdf = np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)
    dz = z[1] - z[0]
    for cv in (0.05, 0.2, 0.5, 1.0):
        s = jitter.sigma(cv)
        assert np.exp(s * s) - 1 == pytest.approx(cv * cv, rel=1e-12)
        x = jitter.factor(cv, z)
        mean = np.sum(x * pdf) * dz
        var = np.sum((x - 1) ** 2 * pdf) * dz
        assert mean == pytest.approx(1.0, abs=1e-9)
        assert np.sqrt(var) == pytest.approx(cv, rel=1e-7)
    assert np.all(jitter.factor(0.0, z) == 1.0)


def test_p2p_and_allreduce_jitter_move_only_their_edges():
    """p2p jitter leaves compute durations alone and changes the timeline; all-reduce jitter
    changes LocalSGD's round ends by its rounds' own factors."""
    exact = schedules.one_f_one_b(4, 8, 8, CostModel(F=100, B=100, p2p=20))
    p2p = schedules.one_f_one_b(4, 8, 8, CostModel(F=100, B=100, p2p=20, jitter=(0, 0, 0, 0.5)))
    np.testing.assert_array_equal(exact.table.end - exact.table.start, p2p.table.end - p2p.table.start)
    assert p2p.T != exact.T
    gap = 50
    ls = schedules.local_sgd(2, 8, 2, 2, CostModel(F=10, B=10, allreduce=(gap, 0), jitter=(0, 0, 0, 0, 0.5), seed=2))
    z = np.random.default_rng([2, 19, 3]).standard_normal(2)
    gaps = np.rint(gap * jitter.factor(0.5, z)).astype(np.int64)
    ends = np.full(2, -1)
    np.maximum.at(ends, ls.table.mb // 4, ls.table.end)
    np.testing.assert_array_equal(ls.sync_time, ends + gaps - 1)


def test_bad_stochastic_costs_name_their_field():
    with pytest.raises(ValueError, match=r"costs.slow_ranks\[0\]=4 is not a rank"):
        schedules.one_f_one_b(4, 8, 8, CostModel(F=2, B=2, slow=((4,), 1.5)))
    with pytest.raises(ValueError, match="costs.jitter_cv_B"):
        CostModel(jitter=(0.1, -0.1))
    with pytest.raises(ValueError, match="costs.slow_factor"):
        CostModel(slow=((0,), 0.0))
    with pytest.raises(ValueError, match="distinct"):
        CostModel(slow=((1, 1), 2.0))
