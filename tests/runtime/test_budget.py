"""Sizes are bounded before allocation: rpd.runtime.budget and the config estimate."""

from __future__ import annotations

import contextlib
import tracemalloc
from pathlib import Path

import pytest
from hydra_helpers import compose
from jax import monitoring

from rpd import schedules
from rpd.cli import checks, footprint, specs, train
from rpd.runtime import budget

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@contextlib.contextmanager
def no_jax_program():
    """The JAX programs traced while the block runs (jax.monitoring's compile-stage events), as a
    list the caller checks is empty: work begins with the first traced program. The listener cannot
    be unregistered through jax's public API, so it records only while the block is open."""
    seen: list[str] = []
    recording = [True]

    def listen(event: str, duration: float, **_: object) -> None:
        if recording[0] and event.startswith("/jax/core/compile/"):
            seen.append(event)

    monitoring.register_event_duration_secs_listener(listen)
    try:
        yield seen
    finally:
        recording[0] = False


def _compose(overrides, name="train"):
    return compose(overrides, name)


def _terms(cfg) -> list[budget.Term]:
    """The memory estimate of a checked config (rpd.cli.footprint), its run resolved once."""
    return footprint.config_terms(cfg, specs.run_spec(cfg))


def test_check_names_the_fields_of_the_largest_term():
    terms = [
        budget.Term("data", ("objective.n", "objective.d"), 3 * budget.GB),
        budget.Term("ring", ("schedule.noam", "objective.d"), 5 * budget.GB),
    ]
    assert budget.check(terms, cap=8 * budget.GB) == 8 * budget.GB  # at the cap: allowed
    with pytest.raises(
        budget.TooLargeError,
        match=r"^schedule.noam, objective.d too large: the run needs "
        r"about 8 GiB \(ring: 5 GiB\), more than the cap \(7 GiB\)",
    ):
        budget.check(terms, cap=7 * budget.GB)


def test_cap_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(budget.CAP_ENV, "0.5")
    assert budget.cap_bytes() == (budget.GB // 2, "$RPD_MAX_MEMORY_GB")
    with pytest.raises(budget.TooLargeError, match=r"more than \$RPD_MAX_MEMORY_GB \(0.5 GiB\)\. Lower x\.$"):
        budget.check([budget.Term("t", ("x",), budget.GB)])
    monkeypatch.setenv(budget.CAP_ENV, "lots")
    with pytest.raises(ValueError, match="RPD_MAX_MEMORY_GB must be a number of GiB, got 'lots'"):
        budget.cap_bytes()
    monkeypatch.delenv(budget.CAP_ENV)
    cap, what = budget.cap_bytes()
    assert what == "the available memory" and (cap is None or cap > 0)


def test_pipedream_of_a_huge_S_refuses_before_allocating():
    # Refused from S and N alone: a schedule of 10⁵ stages × 100 microbatches built first would
    # hold ~10⁷ cells (hundreds of MB); the refusal may allocate only its message. Measured in
    # bytes (tracemalloc sees numpy's buffers), not seconds, so load on the machine cannot flake it.
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="too large to simulate"):
            schedules.pipedream(10**5, 100)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20


SMALL_LM = ["objective=nanochat", "objective.batch_size=10", "schedule.N=20", "schedule.S=4"]
SMALL = ["objective.n=200", "objective.d=32", *SMALL_LM[1:]]  # the default objective, the random quadratic
HUGE = [  # (overrides, the fields the error names first)
    (  # the curves at the update events: one per op, for every γ of the grid
        ["schedule.N=1000000000"],
        r"schedule.N, schedule.S, method.gamma_lo, method.gamma_hi too large \(schedule.N=1000000000, schedule.S=4, "
        r"method.gamma_lo=-8, method.gamma_hi=0\)",
    ),
    (["schedule.T=1000000000"], "schedule.T, schedule.S, method.gamma_lo, method.gamma_hi too large"),
    (["schedule.noam=1000000000"], "schedule.noam, objective.d too large"),
    (["objective.n=1000000000", "objective.d=1000000"], "objective.n, objective.d too large"),
    (["method=localsgd", "schedule.H=1000000000"], "schedule.R, schedule.H too large"),
    (["method=localsgd", "schedule.R=1000000000"], "schedule.R, objective.d too large"),
    (["method=rpd", "method.delta=1000000000"], "method.delta, objective.d too large"),
    (
        [*SMALL_LM, "objective.batch_size=100000", "objective.seq_len=100000"],
        "objective.batch_size, objective.seq_len, objective.width too large",
    ),
]


@pytest.mark.parametrize("overrides, message", HUGE, ids=[" ".join(o) for o, _ in HUGE])
def test_oversized_configs_fail_before_any_work(overrides, message, tmp_path, monkeypatch):
    monkeypatch.setenv(budget.CAP_ENV, "16")
    small = [] if overrides[: len(SMALL_LM)] == SMALL_LM else SMALL  # the LM has no n, d
    cfg = _compose([f"results_root={tmp_path}", *small, *overrides])
    with no_jax_program() as traced, pytest.raises(budget.TooLargeError, match=message):
        train.run(cfg)
    assert traced == []  # refused before any program was traced or compiled: no work began
    assert not (tmp_path / "train").exists()  # nothing computed, nothing recorded


@pytest.mark.slow
def test_the_estimate_of_a_small_run_is_small(monkeypatch):
    monkeypatch.setenv(budget.CAP_ENV, "16")
    for small, extra in ((SMALL, []), (SMALL, ["method=localsgd"]), (SMALL, ["method=rpd"]), (SMALL_LM, [])):
        terms = _terms(checks.typed(_compose([*small, *extra])))
        # (the LM's activation estimate, calibrated on XLA's temporaries at E5's size, is 143 MB here)
        assert 0 < budget.check(terms) < 256 * 2**20, extra

    def timeline(extra):
        cfg = checks.typed(_compose([*SMALL, *extra]))
        (t,) = [t for t in _terms(cfg) if t.what == "curves read per clock tick"]
        return t.nbytes // (len(checks.gammas(cfg.method)) * footprint.VALUE_BYTES)  # the bound on T in clock ticks

    assert timeline([]) == 2 * 20 + 2 * 4 == schedules.pipedream(4, 20).T + 2  # PD: 2N + 2S - 2
    assert timeline(["schedule.noam=1"]) == 2 * 20 * 4 + 2 * 4 >= schedules.pipedream(4, 20, 1).T
    gpipe = ["method=pipeline", "schedule=gpipe"]  # 5 flushes of M = 4: 5 * 2 * (4 + 3) = 70
    assert timeline(gpipe) == 2 * 20 + 5 * 2 * 4 >= schedules.gpipe(4, 20, 4).T == 70
    assert timeline([*gpipe, "costs=b2f"]) == 2 * timeline(gpipe)  # B = 2 ticks
    # The clock's resolution is a multiple of the costs' gcd: costs in microseconds count no more points.
    assert timeline([*gpipe, "costs.F=1000000", "costs.B=2000000"]) == timeline([*gpipe, "costs=b2f"])


def test_localsgd_lm_activations_count_every_replica(monkeypatch):
    """LocalSGD differentiates its R replicas at once: R times the activations of one gradient
    per γ (the estimate once left R out; XLA's temporaries at E5's size are ~R times)."""
    monkeypatch.setenv(budget.CAP_ENV, "16")

    def acts(extra):
        (t,) = [t for t in _terms(checks.typed(_compose([*SMALL_LM, *extra]))) if t.what == "LM activations"]
        return t

    two, four = acts(["method=localsgd", "schedule.R=2"]), acts(["method=localsgd", "schedule.R=4"])
    assert four.nbytes == 2 * two.nbytes and "schedule.R" in four.fields
    assert "schedule.R" not in acts([]).fields  # PD: one gradient per γ at a time
