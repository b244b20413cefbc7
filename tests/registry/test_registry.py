"""rpd.registry: every schedule builds from its config file, bad fields fail before any work,
and the registered methods are the library calls the entry point made before the registry."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest
from hydra_helpers import compose, resolved

from rpd import objectives, registry, schedules
from rpd.analysis import simtime
from rpd.analysis.theory import pd_delta
from rpd.cli import checks, specs, train
from rpd.cli import config as C
from rpd.cli import objectives as objective_of
from rpd.schedules.family.flushes import flush_entry
from rpd.schedules.machinery import delays
from rpd.schedules.machinery.costs import CostModel
from rpd.train import methods

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
LEGACY = {"default", "fixed_time", "naive"}  # the paper's protocols: the method's own schedule
GRID = [2.0**-5, 2.0**-4]


def _compose(overrides):
    return checks.typed(compose(overrides))


@pytest.fixture(scope="module")
def obj():
    return objectives.random_quadratic(32, 12, 3, 4, seed=0)


# ------------------------------------------------------------------ schedules


def test_every_registered_schedule_has_a_config_file_and_a_library_constructor():
    files = {p.stem for p in (CONFIGS / "schedule").glob("*.yaml")}
    assert files == set(registry.SCHEDULES) | LEGACY
    assert {e.value for e in C.MethodName} == set(registry.METHODS) >= {"pd", "rpd", "sgd", "localsgd", "pipeline"}
    for entry in registry.SCHEDULES.values():
        accepted = inspect.signature(entry.build).parameters
        assert set(entry.fields) <= set(accepted) and "costs" in accepted
        assert entry.allreduce == ("values" in accepted)


@pytest.mark.parametrize("name", sorted(registry.SCHEDULES))
def test_every_schedule_builds_from_its_config_file(name):
    """schedule=<name> composes, validates and builds the constructor's own timeline at S = 4,
    N = 16 with the yaml's defaults (M = S; DualPipe and DualPipeV 2S) under costs=b2f."""
    cfg = _compose(["method=pipeline", f"schedule={name}", "schedule.S=4", "schedule.N=16", "costs=b2f"])
    assert C._value(cfg.schedule.name) == name
    checks.validate(cfg)
    tl = specs.run_spec(cfg).pipeline.timeline()
    b2f = CostModel(F=1, B=2, I=1, W=1)
    entry = registry.SCHEDULES[name]
    M = entry.default("M", 4) if "M" in entry.fields else 4  # the entry's default (DualPipe(V): 2S)
    direct = {
        "pipedream": lambda: schedules.pipedream(4, 16, costs=b2f),
        "local_sgd": lambda: schedules.local_sgd(4, 16, 4, 1, costs=b2f),
        "pipemare": lambda: schedules.pipemare(4, 16, costs=b2f),
        "interleaved": lambda: schedules.interleaved(4, 16, 4, 2, costs=b2f),
        "pipedream_rr": lambda: registry.SCHEDULES["pipedream_rr"].build(4, 16, costs=b2f),  # replicas: null
    }.get(name, lambda: registry.SCHEDULES[name].build(4, 16, M, costs=b2f))()
    assert (tl.kind, tl.S, tl.N, tl.M, tl.T) == (direct.kind, 4, 16, direct.M, direct.T)
    np.testing.assert_array_equal(tl.b_time, direct.b_time)
    if registry.SCHEDULES[name].flush:
        assert tl.M == M


def test_costs_change_the_timeline_by_the_closed_forms():
    """GPipe's flush takes (M + S - 1)(tF + tB) ticks; four flushes with a barrier between them.
    PipeDream at unit cost: T = 2N + 2S - 2, and the unit cost model is the readiness timeline."""
    gpipe = {"S": 4, "N": 16, "M": 4}
    for costs, tFB in (("unit", 2), ("b2f", 3)):
        tl = specs.run_spec(
            _compose(
                [
                    "method=pipeline",
                    "schedule=gpipe",
                    f"costs={costs}",
                    *(f"schedule.{k}={v}" for k, v in gpipe.items()),
                ]
            )
        ).pipeline.timeline()
        assert tl.T == 4 * (4 + 4 - 1) * tFB
    pd = specs.run_spec(_compose(["schedule.S=4", "schedule.N=16"])).pipeline
    assert pd.name == "pipedream" and pd.costs.is_unit and pd.timeline().T == 2 * 16 + 2 * 4 - 2
    latency = specs.run_spec(_compose(["schedule.S=4", "schedule.N=16", "costs=b2f_latency"])).pipeline.timeline()
    assert latency.T == schedules.pipedream(4, 16, costs=CostModel(F=1, B=2, p2p=1)).T > 3 * (16 + 4 - 1)


def test_fixed_time_takes_whole_flushes():
    """Protocol (ii) for a flush schedule: the smallest number of flushes whose timeline reaches T."""
    p = registry.ScheduleParams(S=4, T=60, M=4)
    tl = registry.build("gpipe", p)  # one flush: 2 (M + S - 1) = 14 ticks
    assert (tl.N, tl.T) == (5 * 4, 5 * 14)
    assert registry.build("pipedream", registry.ScheduleParams(S=3, T=23)).N == 10  # 2N + 4 >= 23


BAD = [  # (overrides, text the error must contain); the defaults are S = 8, N = 400
    (["method=pipeline", "schedule=pipedream_2bw", "schedule.M=2"], "schedule.M >= schedule.S - 1"),
    (["method=pipeline", "schedule=chimera", "schedule.S=3", "schedule.N=9"], "even number of workers schedule.S"),
    (["method=pipeline", "schedule=chimera", "schedule.concat=halving"], "schedule.concat must be one of"),
    (["method=pipeline", "schedule=chimera", "schedule.concat=backward_halving"], "costs.F and costs.B must be even"),
    (["method=pipeline", "schedule=interleaved", "schedule.M=12", "schedule.N=24"], "schedule.M mod schedule.group"),
    (["method=pipeline", "schedule=interleaved", "schedule.v=0"], "schedule.v must be >= 1"),
    (["method=pipeline", "schedule=dualpipe_v", "schedule.M=4"], "schedule.M >= 2S"),
    (["method=pipeline", "schedule=gpipe", "schedule.N=401"], "schedule.N must be a whole number of flushes"),
    (["method=pipeline", "schedule=1f1b", "schedule.M=0"], "schedule.M must be >= 1"),
    (["method=pd", "schedule=gpipe"], "schedule.name='gpipe': method pd runs ['pipedream'] only"),
    (["method=localsgd", "schedule=zb_h1"], "schedule.name='zb_h1'"),
    (["schedule.name=gpipee"], "schedule.name"),
    (["method=pipeline", "schedule=gpipe", "method.t1=true"], "method.t1=True does not apply to schedule gpipe"),
    (["method=pipeline", "schedule=pipemare", "method.predict=true", "method.ema=1.5"], "method.ema must lie in"),
    (["method=pipeline", "schedule=zb_h1", "costs.B=3"], "costs.B=3 cannot be split"),
    (["costs=b2f", "costs.I=3"], "costs.B must equal I + W"),
    (["costs.F=0"], "costs.F must be >= 1"),
    (["costs.p2p=-1"], "costs.p2p must be >= 0"),
    (["costs.straggler_p=1.5", "costs.straggler_ticks=1"], "costs.straggler_p must be <= 1"),
    (["costs.FF=2"], "costs.FF"),
    (["costs.slow_ranks=[8]", "costs.slow_factor=1.5"], "costs.slow_ranks[0]=8 is not a rank of the 8-rank schedule"),
    (["costs.slow_ranks=[1]", "costs.slow_factor=0"], "costs.slow_factor must be > 0"),
    (["costs.jitter_cv_IW=-0.1"], "costs.jitter_cv_IW must be >= 0"),
]


@pytest.mark.parametrize("overrides,text", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_schedule_fields_fail_before_any_work_naming_the_field(overrides, text, tmp_path, monkeypatch):
    monkeypatch.setattr(objective_of, "build_objective", lambda *a: pytest.fail("an objective was built"))
    with pytest.raises(Exception) as info:
        train.run(_compose_raw([f"results_root={tmp_path}", *overrides]))
    chain, exc = "", info.value
    while exc is not None:  # hydra wraps omegaconf's error
        chain += f"{exc}\n"
        exc = exc.__cause__ or exc.__context__
    assert text in chain
    assert not (tmp_path / "train").exists()


def _compose_raw(overrides):
    return compose(overrides)


@pytest.mark.slow  # over 4 s on 2 cores (a figure, a subprocess or the study's fits)
def test_the_run_key_holds_what_the_run_reads():
    """Costs split runs; the method's own schedule's node holds noam, R and H, and only the
    chosen schedule's own split its runs; defaults spelt out do not; a schedule's key holds
    its own parameters beside the shared fields, and none of another schedule's."""

    def key(*overrides):
        return train.run_config(resolved(_compose(overrides)))

    assert key("costs=unit") != key("costs=b2f")
    assert key("method=pipeline", "schedule=gpipe") == key("method=pipeline", "schedule=gpipe", "schedule.M=8")
    assert key("method=pd") == key("method=pd", "schedule.R=3", "schedule.H=4") != key("method=pd", "schedule.noam=3")
    assert key("method=localsgd", "schedule.noam=3") == key("method=localsgd") != key("method=localsgd", "schedule.H=4")
    assert key("method=pipeline", "schedule=gpipe")["schedule"]["M"] == 8
    k = key("method=pipeline", "schedule=interleaved")
    assert (k["schedule"]["v"], k["schedule"]["group"], "noam" in k["schedule"]) == (2, 8, False)
    assert key("method=pipeline", "schedule=interleaved", "schedule.v=4")["schedule"]["v"] == 4
    k = key("method=pipeline", "schedule=avgpipe", "schedule.pipelines=4")["schedule"]
    assert (k["pipelines"], k["advance"], k["elastic"], k["M"]) == (4, 0, None, 8)
    assert key("method=pd")["method"]["t1"] is None and key("method=pipeline")["method"]["delta"] is None
    assert key("method=rpd")["method"]["delta"] == pd_delta(8)


OWNED = [  # a field another schedule owns: refused at compose time, naming the schedules that have it
    (
        ["schedule=gpipe", "schedule.v=4"],
        "schedule.v: schedule gpipe has no such parameter; a parameter of "
        "interleaved, looped_bfs, interleaved_zb, combined_1f1b (schedule=interleaved); its own: none",
    ),
    (
        ["schedule=interleaved", "schedule.noam=3"],
        "schedule.noam: schedule interleaved has no such parameter; "
        "a parameter of pipedream (schedule=pipedream); its own: v, group",
    ),
    (
        ["schedule.pipelines=3"],
        "schedule.pipelines: schedule of the method (schedule.name null) has no such "
        "parameter; a parameter of avgpipe (schedule=avgpipe); its own: H, R, noam",
    ),
]


@pytest.mark.parametrize("overrides,text", OWNED, ids=[" ".join(o) for o, _ in OWNED])
def test_a_field_another_schedule_owns_is_refused_in_one_line(overrides, text):
    from experiments import compose_check

    assert compose_check.check("train", ["method=pipeline", *overrides]) == text


def test_each_schedule_file_is_typed_by_its_own_parameters():
    """configs/schedule/<name>.yaml composes onto the schema derived from its entry's
    params_type: its own fields with the dataclass's defaults, typed (a string for v fails)."""
    from omegaconf import OmegaConf

    cfg = compose(["method=pipeline", "schedule=interleaved", "schedule.v=4"])
    assert OmegaConf.get_type(cfg.schedule).__name__ == "Schedule_interleaved"
    assert (cfg.schedule.v, cfg.schedule.group) == (4, None) and "noam" not in cfg.schedule
    cfg = compose(["method=pipeline", "schedule=avgpipe", "schedule.pipelines=3"])
    assert (cfg.schedule.pipelines, cfg.schedule.advance) == (3, 0)
    assert compose(["schedule=zb_h2"]).schedule.rollback_p == 0.0
    with pytest.raises(Exception, match="schedule.v"):
        compose(["method=pipeline", "schedule=interleaved", "schedule.v=abc"])


# ------------------------------------------------------------------ methods


def _params(**given) -> registry.ScheduleParams:
    """Shared fields by keyword, the rest the schedule's own."""
    shared = {f for f in registry.ScheduleParams.__dataclass_fields__ if f != "params"}
    own = {k: v for k, v in given.items() if k not in shared}
    return registry.ScheduleParams(**{k: v for k, v in given.items() if k in shared}, params=own)


def _run(method, obj, seed=0, schedule=None, options=None, **params):
    spec = registry.prepare(method, schedule, _params(S=3, **params), options or registry.MethodOptions())
    return registry.run(spec, obj, GRID, seed)


def test_pd_is_pipedream_on_its_timeline(obj):
    # T = 19: the smallest N with T = 2N + 2S - 2 >= 19 is 8, cut before B(7, 0) at tick 19
    for params, updates in (({"N": 8}, 24), ({"T": 19}, 23)):
        out = _run("pd", obj, **params)
        tl = schedules.pipedream(3, 8)
        ref = methods.pipedream(obj, tl, GRID)
        if "T" in params:
            ref = simtime.cut_to(ref, 19)
        np.testing.assert_array_equal(out.result.curve, ref.curve)
        np.testing.assert_array_equal(out.sim_time, ref.axis)
        assert out.block_update[-1] == updates and out.block_update[0] == 0
        assert out.extra["delay/max"] == delays.delay_table(tl).max() and out.extra["N"] == 8
    assert ref.axis[-1] == 19 and simtime.smallest_n_reaching(23, lambda n: schedules.pipedream(3, n)).N == 10
    naive = _run("pd", obj, N=8, noam=1)
    assert naive.extra["T"] == 2 * 3 * 8  # naive model parallelism: T = 2SN


def test_rpd_sgd_localsgd_are_their_library_calls(obj):
    tl = schedules.pipedream(3, 8)
    rpd = _run("rpd", obj, seed=1, N=8)
    ref = methods.rpd(obj, 24, GRID, pd_delta(3), seed=1)
    np.testing.assert_array_equal(rpd.result.curve, ref.curve)
    np.testing.assert_array_equal(rpd.sim_time, simtime.sim_time_at(tl.update_time, ref.axis))
    assert rpd.extra == {"N": 8, "K": 24, "T": 20, "delta": pd_delta(3)}

    sgd = _run("sgd", obj, T=19)  # protocol (ii): PD's N at T
    np.testing.assert_array_equal(sgd.result.curve, methods.sgd(obj, 8, GRID).curve)
    assert sgd.sim_time is None and sgd.extra == {"N": 8, "K": 24}

    lsgd = _run("localsgd", obj, N=8, H=2, options=registry.MethodOptions(stride=4))
    ref = methods.local_sgd(obj, schedules.local_sgd(3, 8, 3, 2), GRID)
    keep = (ref.axis % 4 == 0) | (ref.axis == ref.axis[-1])
    np.testing.assert_array_equal(lsgd.result.curve, ref.curve[:, keep])
    np.testing.assert_array_equal(lsgd.sim_time, ref.axis[keep])
    assert lsgd.extra["R"] == 3 and lsgd.extra["delay/max"] == 0.0


def test_time_axis_conversions():
    update_time = np.array([0, 0, 2, 5, 5])
    np.testing.assert_array_equal(simtime.block_updates_at(update_time, [0, 1, 3, 6]), [0, 2, 3, 5])
    np.testing.assert_array_equal(simtime.sim_time_at(update_time, [0, 1, 3, 5]), [0, 1, 3, 6])
    assert delays.table_summary(np.array([[0, 10], [2, 4]])) == pytest.approx(
        {"delay/mean": 4.0, "delay/p10": 0.6, "delay/max": 10.0}, rel=1e-15
    )


def test_pipeline_trains_a_synchronous_schedule(obj):
    """GPipe and 1F1B are the same minibatch SGD (batch M*B) at different ticks; PipeDream through
    method=pipeline is method=pd; costs move only the time axis."""
    if not hasattr(methods, "train"):
        pytest.skip("rpd.train.methods.train is not there yet")
    gpipe = _run("pipeline", obj, schedule="gpipe", N=12, M=3)
    one_f = _run("pipeline", obj, schedule="1f1b", N=12, M=3)
    for out in (gpipe, one_f):
        assert out.extra["K"] == 4 * 3 and out.block_update[-1] == 12 and out.sim_time[-1] == out.extra["T"]
        assert np.all(np.diff(out.block_update) >= 0) and np.all(np.isfinite(out.result.curve))
    np.testing.assert_allclose(gpipe.result.final, one_f.result.final, rtol=1e-12)
    chunked = _run("pipeline", obj, schedule="interleaved", N=12, M=3, v=2)  # 6 stages, 3 blocks
    np.testing.assert_allclose(chunked.result.final, gpipe.result.final, rtol=1e-12)
    assert gpipe.extra["bubble/f_total"] == pytest.approx(2 / (3 + 2))  # (S-1)/(M+S-1)
    assert np.all(gpipe.result.final < gpipe.result.curve[:, 0])

    slow = registry.run(
        registry.prepare(
            "pipeline", "gpipe", registry.ScheduleParams(S=3, N=12, M=3), costs=CostModel(F=1, B=2, p2p=1)
        ),
        obj,
        GRID,
    )
    np.testing.assert_allclose(slow.result.final, gpipe.result.final, rtol=1e-12)
    assert slow.extra["T"] > gpipe.extra["T"]

    pd, via = _run("pd", obj, N=8), _run("pipeline", obj, N=8)
    np.testing.assert_allclose(via.result.curve, pd.result.curve, rtol=1e-12)
    np.testing.assert_array_equal(via.block_update, pd.block_update)


def test_each_schedule_is_one_module_whose_entry_the_registry_collects():
    """docs/architecture.md#adding-a-schedule: a schedule's entry is defined in its own module of
    rpd.schedules.family beside its constructor and its own parameters; the registry's table
    is those entries (their semantics rule resolved to the value rpd.train hands on), and a
    bare timeline trains by the same rule as its registered schedule."""
    import sys

    from rpd.schedules import family
    from rpd.train import semantics

    assert [m.ENTRY.name for m in family.MODULES] == list(registry.SCHEDULES)
    for module in family.MODULES:
        entry = module.ENTRY
        assert registry.SCHEDULES[entry.name].semantics is semantics.rule(entry.semantics)
        assert entry.build.__module__ in (
            module.__name__,
            *(f"rpd.schedules.family.{n}" for n in ("v_memory",)),
        )
        if entry.params_type is not None:
            assert entry.params_type is getattr(module, "Params") and entry.params_type.__module__ == module.__name__
    assert "rpd.registry.catalog" not in sys.modules and not hasattr(semantics, "_BUILT_IN")
    for name, tl in (
        ("dualpipe", family.dualpipe.dualpipe(4, 8, 8)),
        ("pipedream", schedules.pipedream(3, 6)),
        ("zb_h2_pv", schedules.zb_h2(3, 6, 3, post_validation=True)),
        ("gpipe", schedules.gpipe(3, 6, 3)),
    ):
        assert semantics.of(tl) is registry.entry_of(name).semantics


def test_entries_and_variants_are_drawn_by_their_look_and_flush_entries_read_m():
    """docs/architecture.md#a-schedule-is-one-object: how a schedule or a variant is named and drawn
    is one Look (a reconstruction marked in its title, the label standing in for a missing short
    label and the name for a missing label); a flush schedule's entry reads the shared field M."""
    fd = registry.style("chimera_fd")
    assert fd.look == registry.Look("Chimera, fwd doubling", "#1B9E77", "P", short="Chimera FD", reconstruction=True)
    assert (fd.title, fd.compact, fd.colour, fd.marker) == (
        "Chimera, fwd doubling (reconstruction)",
        "Chimera FD",
        "#1B9E77",
        "P",
    )
    avg, gpipe = registry.style("avgpipe"), registry.style("gpipe")
    assert (avg.title, avg.compact, gpipe.title, gpipe.compact) == (
        "AvgPipe (reconstruction)",
        "AvgPipe",
        "GPipe",
        "GPipe",
    )
    bare = registry.ScheduleEntry("bare", schedules.gpipe)
    assert (bare.title, bare.compact, bare.colour, bare.marker) == ("bare", "bare", "0.4", "o")
    toy = flush_entry("toy", schedules.gpipe, doc="a toy", look=registry.Look("Toy", "C0", "o"))
    assert (toy.fields, toy.flush, toy.doc, toy.title) == (("M",), True, "a toy", "Toy")
    assert toy.make(2, 4, None, None).M == 2  # M's default, S
    assert all(e.flush == (e.fields == ("M",)) for e in registry.SCHEDULES.values())
