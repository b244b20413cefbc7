"""E18 (rpd.studies.kappa_scale): its arms parse and refuse by field, the configs line up, and the
figure JSON's top-level keys that another branch reads (``fits``, ``rows``) are there."""

import types

import pytest

from rpd.cli import figure
from rpd.studies import kappa_arms, load, make_config
from rpd.studies import kappa_scale as ks

FIT_KEYS = {"method", "optimizer", "settings", "c", "gamma", "gamma_ci95", "n_sizes", "N_range"}
ROW_KEYS = {"method", "optimizer", "settings", "N", "kappa", "censored", "relative_gap"}


def test_registered_with_its_json_keys():
    assert load("e18_scale") is ks
    assert figure.resolve("e18_scale").numbers is ks.numbers
    assert figure.resolve("e17_staleness_2026").numbers is None


def test_arms_parse():
    assert kappa_arms.parse_arm("adamw/diloco/M=4/H=8") == (
        dict(method="diloco", optimizer="adamw", settings={"M": 4, "H": 8}),
        4,
    )
    assert kappa_arms.parse_arm("sgd/pipedream") == (dict(method="pipedream", optimizer="sgd", settings={}), 1)
    assert kappa_arms.parse_arm("muon/pipedream_2bw/M=4")[1] == 4
    for bad in (
        "adamw/gpipe",
        "adamw/diloco/M=4",
        "adamw/pipedream/M=2",
        "adamw/diloco/M=x/H=2",
        "adamw/diloco/M=0/H=2",
    ):
        with pytest.raises(ValueError, match="arms"):
            kappa_arms.parse_arm(bad)


@pytest.mark.parametrize("size", ["quick", "full"])
def test_configs_line_up(size):
    cfg = make_config(ks.Config, size, quick=ks.QUICK)
    ks.check(cfg)
    assert set(cfg.arms) <= set(kappa_arms.FULL_ARMS)
    assert ks.n_steps(cfg) == len(cfg.widths) * len(cfg.arms)
    if size == "full":  # at least a factor 16 in parameters across the sizes (vocabulary 84, the corpus's)
        N = [ks.params(w, S, 84, cfg.lm_seq) for w, S in zip(cfg.widths, cfg.stages)]
        assert max(N) / min(N) >= 16 and N == sorted(N)


def test_params_by_hand():
    """W = 8, S = 3, V = 84, T = 16: (84 + 16)·8 + (12·64 + 13·8) + 8·84 + 2·8 = 800 + 872 + 688 = 2360."""
    assert ks.params(8, 3, 84, 16) == 2360


@pytest.mark.parametrize(
    "over, field",
    [
        (dict(record_mb=7), "record_mb"),
        (dict(arms=("adamw/diloco/M=8/H=8",), D_mb=32, record_mb=16), "arms"),
        (dict(arms=("sgd/pipedream",), gamma_exps={"adamw": (-8, -5)}), "gamma_exps"),
        (dict(stages=(3,)), "widths"),
    ],
)
def test_check_names_the_field(over, field):
    with pytest.raises(ValueError, match=field):
        ks.check(make_config(ks.Config, "full", **over))


def test_numbers_schema():
    """The JSON keys another branch reads, from a hand-made table and summary."""
    row = dict(method="diloco", optimizer="adamw", settings={"M": 2, "H": 8}, N=2360, kappa=1.2, censored=False,
               relative_gap=0.01, kappa_bound=1.2, status="ok", S=3, width=8, extra="not exported")  # fmt: skip
    fit = dict(method="diloco", optimizer="adamw", settings={"M": 2, "H": 8}, c=0.1, gamma=-0.3,
               gamma_ci95=(-0.5, -0.1), n_sizes=4, N_range=(2360, 44064), n_censored=0)  # fmt: skip
    out = ks.numbers({"fits": [fit]}, [row])
    assert set(out) == {"fits", "rows"}
    assert set(out["fits"][0]) == FIT_KEYS and ROW_KEYS <= set(out["rows"][0]) and "extra" not in out["rows"][0]


def test_fits_group_by_arm_and_count_censored():
    """Two arms over three sizes: PD's κ − 1 = 0.5·(N/1e6)^−0.5 exactly; DiLoCo's largest size
    censored (counted, not fitted)."""
    rows = []
    for N in (1e4, 1e5, 1e6):
        rows.append(dict(method="pipedream", optimizer="sgd", settings={}, N=N, status="ok",
                         kappa=1 + 0.5 * (N / 1e6) ** -0.5, censored=False, relative_gap=0.01))  # fmt: skip
        cen = N == 1e6
        rows.append(dict(method="diloco", optimizer="sgd", settings={"M": 2, "H": 2}, N=N, status="ok",
                         kappa=None if cen else 1.5, censored=cen, relative_gap=-0.01))  # fmt: skip
    kap, gap = ks.fits(rows)
    pd = next(f for f in kap if f["method"] == "pipedream")
    assert pd["gamma"] == pytest.approx(-0.5) and pd["c"] == pytest.approx(0.5) and pd["n_sizes"] == 3
    dl = next(f for f in kap if f["method"] == "diloco")
    assert dl["n_censored"] == 1 and dl["n_sizes"] == 2 and dl["gamma"] == pytest.approx(0.0)
    assert next(g for g in gap if g["method"] == "diloco")["n_not_positive"] == 3


def test_dev_trend():
    d = ks.dev_trend()
    assert d["2"]["gamma"] == pytest.approx(-0.536, abs=1e-3)
    assert d["8"]["gap_35M"] == pytest.approx(3.621 / 3.485 - 1)


@pytest.mark.slow
def test_quick_study_rows():
    """The quick study end to end: every row has the JSON's keys; LocalSGD M = 1 is its reference."""
    out = ks.run(make_config(ks.Config, "quick", quick=ks.QUICK))
    got = ks.numbers(out.summary, out.table)
    assert len(got["rows"]) == 2 * 2 and all(ROW_KEYS <= set(r) for r in got["rows"])  # 2 widths x 2 arms
    one = [r for r in out.table if r["method"] == "local_sgd" and r["settings"]["M"] == 1]
    assert all(r["status"] == "n/a" and r["kappa"] == 1.0 for r in one)
    ok = [r for r in out.table if r["status"] == "ok"]
    assert ok and all((r["kappa"] is None) == (r["censored"] or r.get("diverged", False)) for r in ok)


def test_references_and_one_point_arms_run_on_pds_ring_and_slots(monkeypatch):
    """Every 1F1B reference and one-point pipeline arm of a size gets PD's ring and gradient slots
    (so 1F1B M = 1 runs in PD's program and 1F1B M in 2BW M's: methods.train's ``n_slots``, tested
    bit for bit in tests/train/test_semantics.py); PipeMare (two-point) keeps its own. By hand at
    S = 3: PD keeps 3 gradients in flight and reads 3 versions of a block."""
    cfg = make_config(ks.Config, "full", widths=(8,), stages=(3,), D_mb=8, record_mb=4, lm_seq=8, lm_batch=2)
    size = ks._size(cfg, 8, 3)  # building the LM compiles nothing
    assert (size.ring, size.slots) == (3, 3)
    seen = {}

    def train(obj, tl, grid, **kw):
        seen[tl.kind] = kw
        return types.SimpleNamespace(curve=None)

    monkeypatch.setattr(ks.methods, "train", train)
    for tl, M in (
        (ks.schedules.one_f_one_b(3, size.run_mb, 1), 1),
        (ks.schedules.pipedream(3, size.run_mb), 1),
        (ks.schedules.pipedream_2bw(3, size.run_mb, 4), 4),
        (ks.schedules.pipemare(3, size.run_mb), 1),
    ):
        size.pipeline_run(cfg, tl, "adamw", M)([1.0])
    for kind in ("1f1b", "pipedream", "pipedream_2bw"):
        assert (seen[kind]["ring_size"], seen[kind]["n_slots"]) == (3, 3), kind
    assert "ring_size" not in seen["pipemare"] and "n_slots" not in seen["pipemare"]
