"""E18 at fixed depth, wider (rpd.studies.kappa_width): registered with E18's JSON keys, its sizes
hold S and span >= 16x in N at S = 4 with a second S, and its fits are per S (rows made by hand)."""

import pytest

from rpd.cli import figure
from rpd.studies import kappa_arms, load, make_config
from rpd.studies import kappa_scale as ks
from rpd.studies import kappa_width as kw
from rpd.studies.kappa_scale_fits import fits


def test_registered_with_e18s_json_keys():
    assert load("e18_width") is kw
    assert figure.resolve("e18_width").numbers is ks.numbers


@pytest.mark.parametrize("size", ["quick", "full"])
def test_configs_line_up(size):
    cfg = make_config(kw.Config, size, quick=kw.QUICK)
    ks.check(cfg)
    assert set(cfg.arms) <= set(kappa_arms.FULL_ARMS)
    if size == "full":
        # W = 24, S = 4, V = 84, T = 32: (84 + 32)·24 + 2(12·576 + 13·24) + 24·84 + 2·24 = 2784 + 14448 + 2016 + 48
        assert ks.params(24, 4, 84, 32) == 19296
        N4 = sorted(ks.params(w, S, 84, cfg.lm_seq) for w, S in zip(cfg.widths, cfg.stages) if S == 4)
        assert len(N4) >= 3 and N4[-1] / N4[0] >= 16 and N4[-1] >= 4e5
        assert len(set(cfg.stages)) == 2  # a second S: κ's S-dependence measured


def test_fits_are_per_S():
    """PD at S = 4: κ − 1 = 0.5 (N/10⁶)^0.25 exactly at three sizes; at S = 6: κ − 1 = 2 (N/10⁶)^0 at two.
    Keyed by S, the two laws come back; without S they would be one fit over five rows."""
    rows = []
    for S, c, g, Ns in ((4, 0.5, 0.25, (2e4, 1e5, 4e5)), (6, 2.0, 0.0, (2e4, 1e5))):
        for N in Ns:
            rows.append(dict(method="pipedream", optimizer="adamw", settings={}, N=N, S=S, status="ok",
                             kappa=1 + c * (N / 1e6) ** g, censored=False, relative_gap=0.01))  # fmt: skip
    kap, _ = fits(kw.with_S(rows))
    by_S = {f["settings"]["S"]: f for f in kap}
    assert set(by_S) == {4, 6} and all(r["settings"] == {} for r in rows)  # the input rows untouched
    assert (by_S[4]["c"], by_S[4]["gamma"], by_S[4]["n_sizes"]) == pytest.approx((0.5, 0.25, 3))
    assert (by_S[6]["c"], by_S[6]["gamma"], by_S[6]["n_sizes"]) == pytest.approx((2.0, 0.0, 2))
    assert len(fits(rows)[0]) == 1


def test_numbers_carry_S_in_settings():
    row = dict(method="pipedream", optimizer="adamw", settings={}, N=19296, kappa=1.2, censored=False,
               relative_gap=0.01, kappa_bound=1.2, status="ok", S=4, width=24)  # fmt: skip
    (got,) = kw.with_S([row])
    out = ks.numbers({"fits": []}, [got])
    assert out["rows"][0]["settings"] == {"S": 4} and out["rows"][0]["S"] == 4
