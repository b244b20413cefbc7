"""A schedule is one object: a toy schedule written and registered in this file alone (its order,
its constructor, one :class:`~rpd.registry.ScheduleEntry`, one yaml written at test time) is
timed, sized, trained from the CLI, planned, tabled in a sweep and drawn in E9's figure, with no
other file of rpd edited (docs/architecture.md#adding-a-schedule).

The toy: GPipe with the backward split into I and W, and one parameter of its own, ``w_last``:
each W right after its I (False) or every W of the flush after the last I (True)."""

from __future__ import annotations

import dataclasses
import textwrap

import numpy as np
import pytest
from hydra_helpers import TINY_LINEAR, compose, config_dir, registered, run_registered, sweep_losses

from experiments import compose_check, schemas
from rpd import registry
from rpd.cli import checks, specs
from rpd.model import hardware, layers
from rpd.model.plan import plan
from rpd.schedules import Timeline
from rpd.schedules.machinery import memory
from rpd.schedules.machinery.build import timed
from rpd.schedules.machinery.costs import CostModel
from rpd.schedules.machinery.ir import BWD_I, BWD_W, FWD, concat, ops, shift_mb
from rpd.studies import schedule_table

NAME = "toy_split_gpipe"


# ------------------------------------------------------------------ the toy's module


@dataclasses.dataclass(frozen=True)
class ToyParams:
    w_last: bool = False  # every W of the flush after its last I


def toy_order(S: int, M: int, w_last: bool) -> list:
    """One flush: all forwards, then each microbatch's I (and W right after it, or all W last)."""
    order = []
    for r in range(S):
        rows = [(FWD, r, j) for j in range(M)]
        for j in range(M):
            rows.append((BWD_I, r, j))
            if not w_last:
                rows.append((BWD_W, r, j))
        if w_last:
            rows += [(BWD_W, r, j) for j in range(M)]
        order.append(ops(rows))
    return order


def toy(S: int, N: int, M: int, costs: CostModel | None = None, w_last: bool = False) -> Timeline:
    if N % M:
        raise ValueError(f"N must be a whole number of flushes of M microbatches, got N={N}, M={M}")
    one = toy_order(S, M, bool(w_last))
    order = concat([shift_mb(one, q * M) for q in range(N // M)])
    return timed(NAME, order, S=S, N=N, M=M, costs=costs, split=True, barrier_every=M, sync=True)


ENTRY = registry.ScheduleEntry(
    NAME,
    toy,
    ("M",),
    flush=True,
    split_backward=True,
    params_type=ToyParams,
    look=registry.Look("Toy split GPipe", "#17BECF", "h"),
    source=registry.Source("this test"),
)

YAML = textwrap.dedent(
    f"""\
    defaults:
      - /schedule_schema@_here_: {NAME}  # typed by ToyParams: schedule.w_last
      - _self_
    name: {NAME}
    S: 4
    N: 16
    M: null
    T: null
    w_last: true
    """
)


def register() -> None:
    registry.register_schedule(ENTRY)


toy_registered = registered(register, registry.SCHEDULES, NAME)


toy_configs = config_dir("schedule", NAME, YAML)


# ------------------------------------------------------------------ the tests


def test_toy_is_timed_and_sized(toy_registered):
    """S = 2, M = 2, unit costs, worked by hand: F at ticks 0, 1 (rank 0) and 1, 2 (rank 1);
    rank 1's backward starts at 3; the flush ends at tick 8 either way; GPipe holds M
    microbatches on every rank, until W with ``w_last``."""
    for w_last, b_time in ((False, [[5, 4], [7, 6]]), (True, [[6, 5], [7, 6]])):
        tl = registry.build(NAME, registry.ScheduleParams(S=2, N=2, M=2, params=(("w_last", w_last),)))
        assert tl.T == 8 and tl.synchronous and tl.split
        np.testing.assert_array_equal(tl.f_time, [[0, 1], [1, 2]])
        np.testing.assert_array_equal(tl.b_time, b_time)
        np.testing.assert_array_equal(memory.peak_activations(tl), [2, 2])
        np.testing.assert_array_equal(memory.weight_versions(tl), [1, 1])


def test_toy_parameters_are_checked_by_name(toy_registered):
    with pytest.raises(TypeError, match=r"^schedule\.lag: schedule toy_split_gpipe has no such parameter"):
        registry.check_schedule(NAME, registry.ScheduleParams(S=2, N=4, M=2, params={"lag": 1}), prefix="schedule.")
    with pytest.raises(TypeError, match=r"^schedule\.w_last must be a bool, got 1$"):
        registry.check_schedule(NAME, registry.ScheduleParams(S=2, N=4, M=2, params={"w_last": 1}), prefix="schedule.")
    resolved = registry.resolve(NAME, registry.ScheduleParams(S=2, N=4))
    assert resolved.M == 2 and resolved.params == (("w_last", False),)


def test_toy_parameters_come_from_its_own_config_file(toy_registered, toy_configs):
    """The toy's yaml is typed by ToyParams (its schema derived from the entry, stored when
    experiments.schemas registers the schemas): ``w_last: true`` there and
    ``schedule.w_last=false`` on the command line reach its constructor; another schedule's
    ``schedule.w_last`` is refused naming the toy."""
    schemas.register()  # the schemas again, the toy's included (it registered after experiments.schemas)
    search = f"hydra.searchpath=[file://{toy_configs}]"
    tiny = [o for o in TINY_LINEAR if not o.startswith("schedule.")]
    base = [search, "method=pipeline", f"schedule={NAME}", "schedule.S=2", "schedule.N=2", *tiny]
    for extra, w_last, b_time in (([], True, [[6, 5], [7, 6]]), (["schedule.w_last=false"], False, [[5, 4], [7, 6]])):
        cfg = checks.typed(compose([*base, *extra]))
        pipeline = specs.run_spec(cfg).pipeline
        assert pipeline.params.params == (("w_last", w_last),)
        np.testing.assert_array_equal(pipeline.timeline(None).b_time, b_time)
    refused = compose_check.check("train", [search, "method=pipeline", "schedule=gpipe", "schedule.w_last=true"])
    assert refused.startswith(f"schedule.w_last: schedule gpipe has no such parameter; a parameter of {NAME}")


def test_toy_is_planned_and_drawn(toy_registered, tmp_path):
    model = layers.preset("gpt2_small")
    rows = plan(model, hardware.preset("a100_80g_flat"), ["gpipe", NAME], registry.timeline, 2, 4)
    by = {r.schedule: r for r in rows}
    assert by[NAME].error is None and by[NAME].synchronous
    # the same work as GPipe, and an upstream I never waits for a downstream W: no slower
    assert 0 < by[NAME].step_time_s <= by["gpipe"].step_time_s

    cfg = schedule_table.Config(S_values=(4,), M_factors=(1, 4), p2p=(0,), schedules=("gpipe", NAME))
    out = schedule_table.run(cfg)
    toy_rows = [r for r in out.table if r["schedule"] == NAME and r["status"] == "ok"]
    gpipe = [r for r in out.table if r["schedule"] == "gpipe" and r["status"] == "ok"]
    assert len(toy_rows) == 4
    for t, g in zip(toy_rows, gpipe):  # every forward before any backward: GPipe's M in flight
        assert (t["S"], t["M"], t["costs"]) == (g["S"], g["M"], g["costs"])
        assert t["act_max"] == g["act_max"] == t["M"] and t["T"] <= g["T"]
    schedule_table.figure(out, tmp_path / "e9.png")
    assert (tmp_path / "e9.png").stat().st_size > 10_000


@pytest.mark.slow
def test_toy_trains_from_the_cli_and_is_tabled_in_a_sweep(toy_configs, tmp_path):
    """``python -m experiments.train -m schedule=<toy>`` run by a script that registers it first: trains
    (a synchronous schedule: minibatch SGD, the same iterates as GPipe on the same
    microbatches), and ``python -m rpd.io.sweeps ls`` tables both jobs."""
    tiny = [o for o in TINY_LINEAR if not o.startswith("schedule.")]
    args = [
        "-m",
        "method=pipeline",
        f"schedule={NAME},gpipe",
        "schedule.S=2",
        "schedule.N=8",
        "schedule.M=2",
        "compare=equal_n",  # after the same N microbatches: the same iterates (at one T they differ)
        *tiny,
    ]
    proc = run_registered(__file__, args, tmp_path, toy_configs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    losses = sweep_losses(tmp_path / "multirun", "schedule", (NAME, "gpipe"))
    assert losses[NAME] == pytest.approx(losses["gpipe"], rel=1e-12)
