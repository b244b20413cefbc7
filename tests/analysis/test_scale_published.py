"""DiLoCo's published gap: the 8 published development rows within 0.3 percentage points, gaps
computed here by hand from the rows' losses; the 2023 H = 500 row from its perplexities."""

import math

import pytest

from rpd.analysis.scale import relative_loss_gap

# Charles et al. 2025 (arXiv 2503.09799), C4, H = 30, D = 20N: data-parallel | DiLoCo M = 1 / 2 / 4 / 8
DP = {35e6: 3.485, 550e6: 2.653}
DILOCO = {35e6: (3.482, 3.508, 3.554, 3.621), 550e6: (2.645, 2.657, 2.673, 2.698)}


@pytest.mark.parametrize("N", [35e6, 550e6])
@pytest.mark.parametrize("i,M", list(enumerate([1, 2, 4, 8])))
def test_the_eight_development_rows_within_0_3_pp(N, i, M):
    row = (DILOCO[N][i] - DP[N]) / DP[N]
    assert abs(relative_loss_gap("diloco", N, 20 * N, M=M, H=30) - row) <= 0.003


def test_gap_shrinks_with_size_and_grows_with_replicas():
    g = {(N, M): relative_loss_gap("diloco", N, 20 * N, M=M, H=30) for N in (35e6, 550e6) for M in (2, 4, 8)}
    assert g[(35e6, 2)] < g[(35e6, 4)] < g[(35e6, 8)]
    assert all(g[(550e6, M)] < g[(35e6, M)] for M in (2, 4, 8))


def test_the_2023_row_at_h500_from_its_perplexities():
    # loss = ln(perplexity): ln(15.02) / ln(15.30) - 1
    assert relative_loss_gap("diloco", 150e6, 3e9, M=8, H=500) == pytest.approx(
        math.log(15.02) / math.log(15.30) - 1, rel=1e-12
    )
