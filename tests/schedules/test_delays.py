"""rpd.schedules.machinery.delays: delay table against a literal loop, the closed forms of
docs/science.md#delays-and-the-delay-law, versions, E2 stats."""

import math

import numpy as np
import pytest

from rpd import schedules
from rpd.schedules import BWD, FWD
from rpd.schedules.machinery import delays


def reference_table(tl):
    """Walk the timeline in iteration order (time, then stage); F(m, r) records how many updates
    came before it, B(m, a) is update k. -> d [K, S], j [N, S]."""
    j = np.full((tl.N, tl.S), -1)
    rows, count = [], 0
    for t in range(tl.T):
        for s in range(tl.S):
            if tl.op[t, s] == FWD:
                j[tl.mb[t, s], s] = count
            elif tl.op[t, s] == BWD:
                rows.append(tl.mb[t, s])
                count += 1
    return np.arange(count)[:, None] - j[rows], j


CASES = [("pd", S, N, None) for S in (1, 2, 3, 5, 8) for N in (1, S + 1, 3 * S + 2)]
CASES += [("pd", 4, 13, 1), ("pd", 6, 20, 3), ("ls", 4, 19, (4, 2)), ("ls", 3, 14, (5, 1))]


def make(kind, S, N, extra):
    if kind == "pd":
        return schedules.pipedream(S, N, extra)
    return schedules.local_sgd(S, N, *extra)


@pytest.mark.parametrize("case", CASES)
def test_delay_table_equals_reference(case):
    tl = make(*case)
    d_ref, j_ref = reference_table(tl)
    d = delays.delay_table(tl)
    assert d.dtype == np.int32 and d.shape == (tl.K, tl.S)
    np.testing.assert_array_equal(d, d_ref)
    np.testing.assert_array_equal(delays.forward_index(tl), j_ref)
    k = delays.update_index(tl)
    np.testing.assert_array_equal(tl.update_mb[k], np.broadcast_to(np.arange(tl.N)[:, None], k.shape))
    np.testing.assert_array_equal(tl.update_stage[k], np.broadcast_to(np.arange(tl.S), k.shape))


@pytest.mark.parametrize("S", range(2, 41))
def test_closed_form_on_every_steady_state_entry(S):
    D = delays.steady_state_delays(S)
    for N in (2 * S + 1, 3 * S, 10 * S):
        tl = schedules.pipedream(S, N)
        d = delays.delay_table(tl)
        steady = delays.steady_state_mask(tl)
        assert steady.sum() == (N - 2 * S) * S
        np.testing.assert_array_equal(d[steady], D[tl.update_stage[steady]])


def test_strictly_earlier_convention_does_not_match():
    # Counting only updates of strictly earlier steps gives other (larger) delays for r > 0.
    S, N = 6, 30
    tl = schedules.pipedream(S, N)
    t_of_update = tl.update_time
    j_strict = np.searchsorted(t_of_update, tl.f_time, side="left")
    d_strict = np.arange(tl.K)[:, None] - j_strict[tl.update_mb]
    steady = delays.steady_state_mask(tl)
    D = delays.steady_state_delays(S)[tl.update_stage[steady]]
    assert np.array_equal(d_strict[steady][:, 0], D[:, 0])
    assert np.all(d_strict[steady][:, 1:] > D[:, 1:])


@pytest.mark.parametrize("S", range(1, 61))
def test_max_mean_min_closed_forms(S):
    D = delays.steady_state_delays(S)
    assert D.max() == delays.max_delay(S) == math.floor(S * S - S / 2) == D[0, 0]
    assert D.mean() == pytest.approx(delays.mean_delay(S), abs=1e-12)
    assert delays.mean_delay(S) == (S * S - 1) / 2
    assert D.min() == delays.min_delay(S) == math.ceil(S / 2) - 1 == D[S - 1, S - 1]


def test_closed_form_known_values():
    # S = 4 (even): d(a, r) = 2(6 - a - r) + ⌊(4 - r)/2⌋ + ⌊a/2⌋
    np.testing.assert_array_equal(
        delays.steady_state_delays(4),
        [[14, 11, 9, 6], [12, 9, 7, 4], [11, 8, 6, 3], [9, 6, 4, 1]],
    )
    # S = 3 (odd): d(a, r) = 7 - a - 2r
    np.testing.assert_array_equal(delays.steady_state_delays(3), [[7, 5, 3], [6, 4, 2], [5, 3, 1]])


@pytest.mark.parametrize("case", CASES)
def test_forward_version_is_backward_version(case):
    # Weight stashing: update k (B(m, a)) reads block r of x^{j_k^(r)}; the version of block r
    # in x^{j} (updates of block r among the first j iterations) is exactly what F(m, r) read.
    tl = make(*case)
    if tl.kind != "pipedream":
        return
    j = delays.forward_index(tl)
    per_stage = np.zeros((tl.K + 1, tl.S), np.int64)
    per_stage[1:][np.arange(tl.K), tl.update_stage] = 1
    per_stage = np.cumsum(per_stage, axis=0)  # [k, r]: updates of block r among the first k
    v = delays.forward_versions(tl)
    np.testing.assert_array_equal(per_stage[j, np.arange(tl.S)], v)
    # and B(m, a) uses F(m, a)'s stashed copy: read_versions at the own block
    rv = delays.read_versions(tl)
    np.testing.assert_array_equal(rv[np.arange(tl.K), tl.update_stage], v[tl.update_mb, tl.update_stage])
    np.testing.assert_array_equal(rv, v[tl.update_mb])


@pytest.mark.parametrize("S", [1, 2, 3, 4, 7, 10, 16])
def test_pipedream_local_staleness(S):
    N = 6 * S
    tl = schedules.pipedream(S, N)
    st = delays.local_staleness(tl)
    steady = slice(S, N - S)
    np.testing.assert_array_equal(st[steady], np.broadcast_to(S - 1 - np.arange(S), (N - 2 * S, S)))
    assert st.min() >= 0 and st.max() <= S - 1
    stash = delays.stashed_versions(tl)
    assert stash.max() <= tl.noam + 1 and stash[S - 1] == 1
    assert np.all(stash >= S - np.arange(S))  # steady state holds S - s versions of block s
    naive = schedules.pipedream(S, 5, noam=1)
    assert np.all(delays.local_staleness(naive) == 0)
    assert np.all(delays.stashed_versions(naive) == 1)


@pytest.mark.parametrize("S, R, H, N", [(2, 2, 1, 9), (4, 4, 2, 19), (3, 5, 3, 31), (4, 6, 1, 25), (5, 5, 5, 24)])
def test_local_sgd_has_no_local_staleness(S, R, H, N):
    assert np.all(delays.local_staleness(schedules.local_sgd(S, N, R, H)) == 0)


def test_bubble_ratio():
    S, N = 5, 12
    tl = schedules.pipedream(S, N)
    assert delays.bubble_ratio(tl) == pytest.approx(1 - 2 * N / (2 * N + 2 * S - 2), abs=1e-15)
    naive = schedules.pipedream(S, N, noam=1)
    assert delays.bubble_ratio(naive) == pytest.approx(1 - 1 / S, abs=1e-15)


@pytest.mark.parametrize("S", [1, 2, 3, 4, 5, 6, 9, 12, 17, 24])
def test_delay_stats_equal_numpy_on_the_table(S):
    for N, noam in [(10 * S, None), (3 * S + 1, None), (2 * S, None), (4 * S, 2)]:
        tl = schedules.pipedream(S, N, noam)
        half = delays.delay_table(tl)[tl.K // 2 :].ravel()
        st = delays.delay_stats(tl)
        assert st.mean == pytest.approx(half.mean(), rel=1e-13)
        assert st.p10 == np.percentile(half, 10)
        assert (st.max, st.min) == (half.max(), half.min())
        assert st.closed_form_ok == (noam is None or noam == S)


def test_delay_law_reports_the_closed_forms():
    law = delays.delay_law(range(2, 31))
    assert np.all(law.closed_form_ok)
    np.testing.assert_array_equal(law.N, 10 * law.S)
    np.testing.assert_array_equal(law.max, [delays.max_delay(S) for S in law.S])
    assert np.all(law.min >= [delays.min_delay(S) for S in law.S])
    # the paper's fits: max ≈ 1.0 S² - 0.5 S, mean ≈ 0.5 S²
    assert law.max_fit[0] == pytest.approx(1.0, abs=0.01) and law.max_fit[1] == pytest.approx(-0.5, abs=0.1)
    assert law.mean_fit[0] == pytest.approx(0.5, abs=0.02)
    rows = law.rows()
    assert rows[0]["S"] == 2 and rows[-1]["S"] == 30 and isinstance(rows[0]["closed_form_ok"], bool)


@pytest.mark.parametrize(
    "call, name, exc",
    [
        (lambda: delays.steady_state_delay(0, 0, 0), "S", ValueError),
        (lambda: delays.steady_state_delay(4, 4, 0), "a", ValueError),
        (lambda: delays.steady_state_delay(4, 0, -1), "r", ValueError),
        (lambda: delays.steady_state_delay(4, 0.0, 1), "a", ValueError),
        (lambda: delays.max_delay(2.0), "S", TypeError),
        (lambda: delays.delay_law([2, 0]), "S", ValueError),
        (lambda: delays.delay_law([2, 3], n_per_stage=0), "n_per_stage", ValueError),
    ],
)
def test_bad_arguments_name_the_argument(call, name, exc):
    with pytest.raises(exc, match=f"^{name} must"):
        call()
