"""Hydra composition mistakes are one line naming the group or key and the nearest valid
choices, exit status 2, and leave no run or sweep folder (experiments.compose_check)."""

import os
import subprocess
import sys

import pytest
from hydra_helpers import ROOT, run_as_main

from experiments import compose_check


@pytest.mark.parametrize(
    "argv, line",
    [
        (["schedule=zbh1"], "schedule=zbh1: no such schedule; nearest: zb_h1, zb_h2, zb_v (configs/schedule/)"),
        (
            ["objective=random_quadatic"],
            "objective=random_quadatic: no such objective; nearest: random_quadratic, nesterov_quadratic "
            "(configs/objective/)",
        ),
        (
            ["-m", "method=pd", "schedule=gpipe,1fb1,zb_h1"],
            "schedule=1fb1: no such schedule; nearest: 1f1b (configs/schedule/)",
        ),
    ],
)
def test_a_missing_choice_names_its_group_and_the_nearest_choices(argv, line):
    assert compose_check.check("train", argv) == line


def test_an_unknown_key_names_the_nearest_keys_and_never_suggests_adding_it():
    msg = compose_check.check("train", ["schedule=zb_h1", "schedule.SS=4"])
    assert msg.startswith("schedule.SS: no such key in schedule; nearest: schedule.S; keys: D, M, N, S, T, cut,")
    assert "+schedule.SS" not in msg and "\n" not in msg
    assert compose_check.check("train", ["method.gama_hi=3"]).startswith(
        "method.gama_hi: no such key in method; nearest: method.gamma_hi, method.gamma_lo"
    )
    assert compose_check.check("train", ["schedule.S=abc"]) == (
        "schedule.S=abc: Value 'abc' of type 'str' could not be converted to Integer"
    )


def test_a_key_one_level_down_is_named_where_it_lives():
    """docs/plan.md wrote ``partition=pipedream`` (it is ``pipeline.partition``); the hint searched
    the top level only and offered ``precision, attention, margin``."""
    assert compose_check.check("plan", ["partition=pipedream"]) == (
        "partition: no such key at the top level; it is pipeline.partition"
    )
    assert compose_check.check("plan", ["partitio=pipedream"]).startswith(
        "partitio: no such key at the top level; nearest: pipeline.partition; keys: attention,"
    )
    assert compose_check.check("train", ["gama_hi=3"]).startswith(
        "gama_hi: no such key at the top level; nearest: method.gamma_hi, method.gamma_lo, method.gammas;"
    )


def test_a_config_hydra_composes_passes_untouched():
    assert compose_check.check("train", ["-m", "method=pd,rpd", "schedule.S=2,4", "schedule=1f1b"]) is None
    assert compose_check.check("train", ["--help"]) is None
    assert compose_check.check("chart", ["schedule=zb_h1", "schedule.S=4"]) is None
    assert compose_check.nearest("zbh1", ["zb_h1", "gpipe"]) == ["zb_h1"]


def test_the_wrapper_prints_one_line_and_exits_2_before_main(monkeypatch, capsys):
    called = []
    wrapped = compose_check.one_line(lambda: called.append(1), "train")
    monkeypatch.setattr(sys, "argv", ["experiments.train", "schedule=zbh1"])
    with pytest.raises(SystemExit) as exit_:
        wrapped()
    assert exit_.value.code == 2 and called == []
    err = capsys.readouterr().err
    assert err == "error: schedule=zbh1: no such schedule; nearest: zb_h1, zb_h2, zb_v (configs/schedule/)\n"


def test_multirun_after_an_override_is_a_multirun(monkeypatch, capsys):
    """``experiments.train schedule.S=2 -m schedule.N=10``: hydra's parser takes the overrides as one
    run of words, so the flag between them was a usage error printed three times; now the flag goes
    first, and a real usage error is printed once, by hydra."""
    assert compose_check.flags_first(["schedule.S=2", "-m", "schedule.N=10"]) == ["-m", "schedule.S=2", "schedule.N=10"]
    assert compose_check.flags_first(["schedule.S=2"]) == ["schedule.S=2"]
    seen = []
    wrapped = compose_check.one_line(lambda: seen.append(list(sys.argv[1:])), "train")
    monkeypatch.setattr(sys, "argv", ["experiments.train", "schedule.S=2", "--multirun", "schedule.N=10"])
    wrapped()
    assert seen == [["--multirun", "schedule.S=2", "schedule.N=10"]]
    assert compose_check.check("train", ["schedule.S=2", "--no-such-flag"]) is None  # hydra's to report
    assert capsys.readouterr().err == ""


def test_a_plus_prefixed_typo_is_refused_before_main(monkeypatch, capsys):
    """``+method.gama_hi=3``: hydra composes it (``+`` adds a key), so the run refused it only after
    hydra had made its run folder. Now before main, in one line; a ``+`` key the schema
    has room for (a user objective's ``options``) still passes."""
    called = []
    wrapped = compose_check.one_line(lambda: called.append(1), "train")
    monkeypatch.setattr(sys, "argv", ["experiments.train", "+method.gama_hi=3"])
    with pytest.raises(SystemExit) as exit_:
        wrapped()
    assert exit_.value.code == 2 and called == []
    err = capsys.readouterr().err
    assert (
        err.startswith("error: unknown config key method.gama_hi: nearest: method.gamma_hi,") and err.count("\n") == 1
    )
    assert compose_check.check("train", ["objective._target_=mymodule.make", "+objective.options.scale=2.0"]) is None


@pytest.mark.slow
def test_a_bad_sweep_leaves_no_folder(tmp_path):
    """The issue's 59-line multirun: one line, exit 2, no multirun/ (nor outputs/) folder."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("RPD_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.train", "-m", "schedule=gpipe,1fb1,zb_h1", f"results_root={tmp_path}/r"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr == "error: schedule=1fb1: no such schedule; nearest: 1f1b (configs/schedule/)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_cost_that_is_no_integer_is_refused_with_the_unit_hint():
    """Costs are whole numbers of ticks of costs.unit: 1.5 wants a finer unit, 1e12 (a float
    to OmegaConf) is written as an integer, 1e30 overflows the timer's int64 ticks. Before:
    OmegaConf's "Value '1.5' of type 'float' could not be converted to Integer"."""
    assert compose_check.check("train", ["costs.F=1.5"]) == (
        "costs.F=1.5: costs are whole numbers of ticks of costs.unit (tick, ns, us, ms, s): "
        "pick a finer costs.unit for a fraction (1.5 ms is costs.unit=us costs.F=1500)"
    )
    assert compose_check.check("train", ["-m", "costs=b2f", "costs.p2p=1,0.5"]).startswith(
        "costs.p2p=0.5: costs are whole numbers of ticks of costs.unit"
    )
    assert "write it as one, 1000000000000; pick a finer costs.unit" in compose_check.check("train", ["costs.F=1e12"])
    assert compose_check.check("train", ["costs.B=1e30"]) == (
        "costs.B=1e30: too large for the timer's 64-bit ticks: pick a coarser costs.unit (tick, ns, us, ms, s)"
    )
    assert "could not be converted to Integer" in compose_check.check("train", ["costs.seed=1.5"])  # no time


def test_a_fractional_cost_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    """``python -m experiments.train costs.F=1.5`` (run in this process, from ``tmp_path``)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RPD_DEBUG", raising=False)  # RPD_DEBUG=1 leaves the check to hydra
    code = run_as_main("experiments.train", ["costs.F=1.5", f"results_root={tmp_path}"], monkeypatch)
    out, err = capsys.readouterr()
    assert (
        code == 2
        and out == ""
        and err.strip().splitlines()
        == [
            "error: costs.F=1.5: costs are whole numbers of ticks of costs.unit (tick, ns, us, ms, s): "
            "pick a finer costs.unit for a fraction (1.5 ms is costs.unit=us costs.F=1500)"
        ]
    )
    assert not (tmp_path / "outputs").exists()
