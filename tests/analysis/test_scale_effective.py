"""rpd.analysis.scale's face: κ = 1 for synchronous training, κ from a published gap through the
law, tokens to a loss, Streaming DiLoCo's stated assumption, and one-line refusals."""

import doctest

import pytest

from rpd.analysis.scale import (
    CHINCHILLA,
    LossLaw,
    effective,
    effective_tokens,
    relative_loss_gap,
    simulated,
    tokens_to_loss,
)

EASY = LossLaw(E=1.0, A=100.0, B=100.0, alpha=0.5, beta=0.5, source="by hand")


def test_synchronous_is_one_exactly():
    e = effective_tokens("1f1b", 8e9, 1.6e11, S=8, M=8)
    assert (e.kappa, e.relative_gap, e.tokens_sync) == (1.0, 0.0, 1.6e11)
    assert relative_loss_gap("dp", 1e9, 2e10) == 0.0


def test_kappa_is_the_gap_through_the_law_by_hand():
    # EASY at N = 10^4, D = 10^6: L = 2.1; a gap g gives ΔL = 2.1 g, κ = (1 + 2.1 g · 1000/100)^2
    e = effective_tokens("diloco", 1e4, 1e6, law=EASY, M=8, H=500)
    assert e.kappa == pytest.approx((1 + 21 * e.relative_gap) ** 2, rel=1e-12)
    assert e.kappa < 1 and "Douillard et al. 2023" in e.source  # the 2023 row: DiLoCo ahead
    assert e.tokens_sync == pytest.approx(1e6 / e.kappa, rel=1e-12)
    assert e.loss == pytest.approx(2.1 * (1 + e.relative_gap), rel=1e-12)  # the method's loss at D


def test_tokens_to_loss_reaches_the_target():
    N, L = 8e9, 2.3
    sync = CHINCHILLA.tokens(N, L)
    e = tokens_to_loss("diloco", N, L, M=8, H=30)
    assert CHINCHILLA.loss(N, e.D) * (1 + e.relative_gap) == pytest.approx(L, rel=1e-12)
    assert e.tokens_sync == pytest.approx(sync, rel=1e-9) and e.kappa > 1
    assert tokens_to_loss("1f1b", N, L).D == pytest.approx(sync, rel=1e-12)


def test_streaming_diloco_is_diloco_by_stated_assumption():
    s = effective_tokens("streaming_diloco", 1e9, 2e10, M=4, H=30, P=4, tau=2)
    d = effective_tokens("diloco", 1e9, 2e10, M=4, H=30)
    assert s.kappa == d.kappa and "assumed" in s.source and "2501.18512" in s.source


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: relative_loss_gap("diloko", 1e9, 2e10, M=2, H=30), r"^method must be one of .*did you mean diloco"),
        (lambda: relative_loss_gap("diloco", 1e9, 2e10, M=2, H=30, R=4), r"^diloco has no setting 'R'"),
        (lambda: relative_loss_gap("diloco", 1e9, 2e10, M=2), r"^diloco needs the setting H"),
        (lambda: relative_loss_gap("diloco", 1e9, 2e10, M=2, H=100), r"^no source of kappa for method 'diloco'"),
        (lambda: relative_loss_gap("diloco", 1e9, 2e10, M=2, H=30, optimizer="adamx"), r"^optimizer must be one of"),
        (
            lambda: relative_loss_gap("pipedream", 1e9, 2e10, S=8, optimizer="sgd"),
            r"^no source of kappa for method 'pipedream'",
        ),
        (lambda: relative_loss_gap("nesterov_async", 1e9, 2e10, optimizer="adamw"), r"^optimizer must be one of"),
        (
            lambda: relative_loss_gap("nesterov_async", 1e9, 2e10, S=8),
            r"^no source of kappa for method 'nesterov_async'",
        ),
        (lambda: tokens_to_loss("1f1b", 1e9, 1.7), r"^target_loss must be >"),
        (lambda: relative_loss_gap("diloco", -1, 2e10, M=2, H=30), r"^N must be > 0"),
    ],
)
def test_refusals_are_one_line_naming_the_field(call, match):
    with pytest.raises(ValueError, match=match) as err:
        call()
    assert "\n" not in str(err.value)


def test_the_docstring_examples_hold():
    assert doctest.testmod(effective, raise_on_error=True).attempted >= 1


# A made-up E18 fit (not E18's numbers): κ − 1 = 0.5 (N / 10^6)^(−1/2), so κ(4·10^6) = 1.25.
FIT = dict(c=0.5, gamma=-0.5, gamma_ci95=(-0.6, -0.4), n_sizes=4, N_range=(1e5, 4e6))


def test_a_simulated_kappa_becomes_a_gap_by_hand(monkeypatch):
    monkeypatch.setattr(simulated, "FITS", (simulated.SimulatedFit("pipedream", "adamw", (("S", 4),), **FIT),))
    # EASY at N = 4·10^6, D = 10^6: L = 1 + 100/2000 + 100/1000 = 1.15; ΔL = (100/1000)(1.25^0.5 − 1)
    e = effective_tokens("pipedream", 4e6, 1e6, law=EASY, S=4)
    assert e.kappa == pytest.approx(1.25, rel=1e-12) and "E18" in e.source and e.other_kappa is None
    assert e.relative_gap == pytest.approx(0.1 * (1.25**0.5 - 1) / 1.15, rel=1e-12)
    assert e.loss == pytest.approx(1.05 + 100 / (1e6 / 1.25) ** 0.5, rel=1e-12)  # L(N, D/κ) = 1.05 + 0.1118
    t = tokens_to_loss("pipedream", 4e6, 1.15, law=EASY, S=4)  # synchronous: 10^6 tokens to 1.15
    assert (t.D, t.tokens_sync) == pytest.approx((1.25e6, 1e6), rel=1e-12)
    with pytest.raises(ValueError, match=r"^no source of kappa for method 'pipedream' .*fits only at adamw \{'S': 4\}"):
        effective_tokens("pipedream", 4e6, 1e6, S=8)


def test_both_sources_are_reported_with_how_far_apart(monkeypatch):
    monkeypatch.setattr(simulated, "FITS", (simulated.SimulatedFit("diloco", "adamw", (("H", 30), ("M", 2)), **FIT),))
    e = effective_tokens("diloco", 4e6, 8e7, M=2, H=30)
    assert "Charles et al. 2025" in e.source and "E18" in e.other_source
    assert e.other_kappa == pytest.approx(1.25, rel=1e-12) and e.apart == pytest.approx(e.kappa - 1.25, rel=1e-12)
    s = effective_tokens("streaming_diloco", 4e6, 8e7, M=2, H=30, P=2)  # E18's DiLoCo, by the same assumption
    assert s.other_kappa == pytest.approx(1.25, rel=1e-12) and "assumed" in s.other_source


def test_a_setting_e18_held_fixed_or_did_not_vary(monkeypatch):
    fits = tuple(simulated.SimulatedFit("localsgd", "sgd", (("H", 2), ("M", M)), **FIT) for M in (2, 4))
    monkeypatch.setattr(simulated, "FITS", (*fits, simulated.SimulatedFit("pipemare", "sgd", (), **FIT)))
    e = effective_tokens("pipemare", 4e6, 1e6, S=8, optimizer="sgd")  # E18's pipemare fit spans its sizes' S
    assert e.kappa == pytest.approx(1.25, rel=1e-12) and "S=8 not varied by E18" in e.source
    assert "extrapolated" in effective_tokens("pipemare", 2e7, 1e6, optimizer="sgd").source  # within 10x of its sizes
    assert effective_tokens("localsgd", 4e6, 1e6, M=4, H=2, optimizer="sgd").kappa == pytest.approx(1.25, rel=1e-12)
    with pytest.raises(ValueError, match=r"^no source of kappa for method 'localsgd'"):
        effective_tokens("localsgd", 4e6, 1e6, M=8, H=2, optimizer="sgd")
