"""rpd.analysis.scale.laws on numbers computed by hand: a loss, its inverse in D, κ from a gap."""

import math

import pytest

from rpd.analysis.scale import BESIROGLU, CHINCHILLA, LAWS, LossLaw, gap_from_kappa, get_law, kappa_from_gap

# E = 1, A = B = 100, α = β = 1/2: at N = 10^4, D = 10^6 the terms are 100/100 = 1 and 100/1000 = 0.1.
EASY = LossLaw(E=1.0, A=100.0, B=100.0, alpha=0.5, beta=0.5, source="by hand")


def test_loss_and_its_inverse_by_hand():
    assert EASY.loss(1e4, 1e6) == pytest.approx(2.1, rel=1e-12)
    assert EASY.floor(1e4) == pytest.approx(2.0, rel=1e-12)
    # (B / (L - floor))^(1/β) = (100 / 0.1)^2 = 10^6
    assert EASY.tokens(1e4, 2.1) == pytest.approx(1e6, rel=1e-9)


def test_presets_on_chinchilla_70b_at_1_4t_tokens():
    # bc -l: 1.69 + 406.4/e(0.34*l(70*10^9)) + 410.7/e(0.28*l(1.4*10^12)) = 1.936645470558
    assert CHINCHILLA.loss(70e9, 1.4e12) == pytest.approx(1.936645470558, rel=1e-10)
    # bc -l: 1.8172 + 482.01/e(0.3478*l(70*10^9)) + 2085.43/e(0.3658*l(1.4*10^12)) = 1.973881863158
    assert BESIROGLU.loss(70e9, 1.4e12) == pytest.approx(1.973881863158, rel=1e-10)
    assert LAWS == {"chinchilla": CHINCHILLA, "besiroglu": BESIROGLU}
    assert (CHINCHILLA.E, CHINCHILLA.A, CHINCHILLA.B, CHINCHILLA.alpha, CHINCHILLA.beta) == (
        1.69,
        406.4,
        410.7,
        0.34,
        0.28,
    )
    assert get_law("besiroglu") is BESIROGLU and get_law(EASY) is EASY


def test_kappa_from_a_given_gap_by_hand():
    # ΔL = 0.1 at D = 10^6: κ = (1 + 0.1 · 1000 / 100)^2 = 4, and L(D/4) = 2 + 100/500 = 2.2 = 2.1 + 0.1
    assert kappa_from_gap(EASY, 1e6, 0.1) == pytest.approx(4.0, rel=1e-12)
    assert EASY.loss(1e4, 1e6 / 4) == pytest.approx(2.2, rel=1e-12)
    # ΔL = -0.075: κ = (1 - 0.75)^2 = 1/16 < 1; L(16 · 10^6) = 2 + 100/4000 = 2.025
    assert kappa_from_gap(EASY, 1e6, -0.075) == pytest.approx(0.0625, rel=1e-12)
    assert kappa_from_gap(EASY, 1e6, 0.0) == 1.0
    assert gap_from_kappa(EASY, 1e6, 4.0) == pytest.approx(0.1, rel=1e-12)


def test_kappa_on_chinchilla_by_hand():
    # D = 10^10: D^0.28 = e(0.28 · l(10^10)) = 630.957; ΔL = 0.01 -> κ = (1 + 0.01 · 630.957 / 410.7)^(1/0.28)
    D_beta = math.exp(0.28 * math.log(1e10))
    assert D_beta == pytest.approx(630.957344, rel=1e-8)
    assert kappa_from_gap(CHINCHILLA, 1e10, 0.01) == pytest.approx(
        (1 + 0.01 * 630.957344 / 410.7) ** (1 / 0.28), rel=1e-8
    )


def test_refusals_name_the_field():
    with pytest.raises(ValueError, match=r"^target_loss must be > 2"):
        EASY.tokens(1e4, 2.0)
    with pytest.raises(ValueError, match="^delta_L must be >"):
        kappa_from_gap(EASY, 1e6, -0.1)  # the whole data term: no tokens reach it
    with pytest.raises(ValueError, match="^law must be one of"):
        get_law("chinchila")
    with pytest.raises(ValueError, match="^beta must be > 0"):
        LossLaw(E=1.0, A=1.0, B=1.0, alpha=0.3, beta=0.0)
