"""The hydra configs and the training entry point (experiments.config, experiments.train)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hydra_helpers import CONFIGS, ROOT, TINY_LINEAR, TINY_LM, multirun, resolved
from hydra_helpers import compose as _compose

from rpd import registry, studies
from rpd.cli import checks, train
from rpd.cli import config as C
from rpd.cli import figure as F
from rpd.cli import objectives as objective_of
from rpd.cli.plan_config import PlanConfig
from rpd.io import store, sweeps
from rpd.model import layers
from rpd.studies import delay_law

EXPERIMENTS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))
PAPER = {
    "e1_pd_vs_rpd",
    "e2_delay_law",
    "e3_nesterov",
    "e4_logistic",
    "e5_nanochat",
    "e6_scaling",
    "e7_schedules",
    "e8_delta",
    "staleness_scaling",
}


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("The quick brown fox jumps over the lazy dog. " * 40)
    return path


def test_every_paper_figure_has_an_experiment_config():
    assert PAPER <= set(EXPERIMENTS)
    for name in EXPERIMENTS:
        head = (CONFIGS / "experiment" / f"{name}.yaml").read_text().splitlines()
        assert head[0] == "# @package _global_"
        comment = "\n".join(line for line in head if line.startswith("#"))
        assert "python -m experiments." in comment and "runtime" in comment.lower()


@pytest.mark.slow
@pytest.mark.parametrize(
    "experiment",
    [  # the LM case compiles a transformer: ~30 s
        pytest.param(e, marks=pytest.mark.slow) if e == "e5_nanochat" else e for e in EXPERIMENTS
    ],
)
def test_experiment_composes_and_runs(experiment, tmp_path, text_file):
    """Each experiment composes for both entry points; its train cell, shrunk, runs end to end
    (no-op logger) and its curves start at f(x0) - f* and go down at the chosen gamma."""
    fig = _compose([f"experiment={experiment}"], "figure")
    assert fig.study.name == experiment
    assert experiment in studies.REGISTRY

    base = _compose([f"experiment={experiment}"])
    lm = C._value(base.objective.name) == "nanochat"
    tiny = TINY_LM + [f"objective.text_path={text_file}"] if lm else list(TINY_LINEAR)
    if C._value(base.objective.name) == "mlp_chain":  # its own fields: n, width, batch_size (no d)
        tiny = [o for o in tiny if not o.startswith("objective.d=")] + ["objective.width=4"]
    if not lm and base.schedule.T is not None:
        tiny.append("schedule.T=30")
    cfg = _compose([f"experiment={experiment}", f"results_root={tmp_path}", "logger=none", *tiny])
    assert cfg.experiment_name == experiment
    out = train.run(cfg)
    assert out.status == "ok", out.error
    metric = out.summary["metric"]
    curve = out.curves[metric]  # [seeds, G, P]
    assert curve.shape[:2] == (len(cfg.method.seeds), len(checks.gammas(cfg.method)))
    assert curve.shape[2] == out.curves["axis/block_update"].shape[0]
    i = out.summary["tuning/index"]
    assert i is not None and np.isfinite(out.summary["tuning/gamma_log2"] or 0)
    mean = curve.mean(axis=0)[i]
    assert np.isclose(mean[0], out.summary["f0"]) and mean[-1] < mean[0]
    assert np.all(np.diff(out.curves["axis/block_update"]) >= 0)
    assert store.load_run(out.path).status == "ok"


@pytest.mark.slow
def test_rpd_with_pipedreams_plan_reproduces_pd(tmp_path):
    """Known answer: RPD driven by PD's block order, batch order and delay table is PD."""
    common = [f"results_root={tmp_path}", *TINY_LINEAR, "schedule.N=12"]
    pd = train.run(_compose(["method=pd", *common]))
    rpd = train.run(
        _compose(["method=rpd", "method.delays=pd", "method.block_order=pd", "method.batch_order=pd", *common])
    )
    np.testing.assert_allclose(rpd.summary["final"], pd.summary["final"], rtol=1e-10)
    assert rpd.summary["K"] == pd.summary["K"] == 12 * 3
    for key in ("delay/mean", "delay/p10", "delay/max"):
        assert rpd.summary[key] == pd.summary[key]


BAD = [
    (["schedule.S=0"], "schedule.S"),
    (["schedule.N=0"], "schedule.N"),
    (["method.gamma_lo=0", "method.gamma_hi=-1"], "method.gamma_hi"),
    (["method.gammas=[0.5,-0.25]"], "method.gammas[1]"),
    (["method.gammas=[0.0]"], "method.gammas[0]"),
    (["method=localsgd", "schedule.H=0"], "schedule.H"),
    (["method=localsgd", "schedule.R=0"], "schedule.R"),
    (["method=rpd", "method.delta=-1"], "method.delta"),
    (["objective.name=foo"], "objective.name"),
    (["objective=nanochat", "schedule.S=2"], "schedule.S must be >= 3"),
    (["objective=nesterov_quadratic", "objective.n=100", "objective.d=512"], "objective.n must be >= objective.d"),
    (["objective.n=30", "objective.batch_size=4"], "objective.n must be a multiple"),
    (["schedule.SS=3"], "schedule.SS"),
    (["method.gama_lo=3"], "method.gama_lo"),
    (["schedule.S=four"], "schedule.S"),
    (["method.seeds=[-1]"], "method.seeds[0]"),
    (["schedule.name=gpipee"], "schedule.name"),
    (["method=pipeline", "schedule=pipedream_2bw", "schedule.M=2"], "schedule.M"),
    (["method=pipeline", "schedule=interleaved", "schedule.v=0"], "schedule.v"),
    (["method=pd", "schedule=gpipe"], "schedule.name"),
    (["costs.F=0"], "costs.F"),
    (["costs.p2p=one"], "costs.p2p"),
    (["+method.gama_hi=3"], "unknown config key method.gama_hi: nearest: method.gamma_hi, method.gamma_lo,"),
    (["+schedule.SS=4"], "unknown config key schedule.SS: nearest: schedule.S; valid keys in schedule are D, H,"),
    (
        ["+foo=1"],
        "unknown config key foo: nearest: force; valid keys at the top level are T_rule, compare, compare_T, costs,",
    ),
    (["+costs.F2=1"], "unknown config key costs.F2"),
    (["method.gamma_hi=2000"], "method.gamma_hi must be <= 1023 (2^method.gamma_hi must be a finite float64)"),
    (["method.gamma_lo=-2000"], "method.gamma_lo must be >= -1074"),
    (["logger.mode=offlin"], "logger.mode must be one of ['disabled', 'offline', 'online'], got 'offlin'"),
]


@pytest.mark.parametrize("overrides,field", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_values_fail_before_any_work_naming_the_field(overrides, field, tmp_path):
    with pytest.raises(Exception) as info:
        train.run(_compose([f"results_root={tmp_path}", *overrides]))
    text, exc = "", info.value
    while exc is not None:  # hydra wraps omegaconf's error; the field is in the chain
        text += f"{exc}\n"
        exc = exc.__cause__ or exc.__context__
    assert field in text
    assert not (tmp_path / "train").exists()  # nothing was computed or stored


def test_added_keys_are_checked_against_the_schemas():
    """``+`` adds a key hydra does not check; check_keys closes every group but study.overrides
    (the study's own Config checks those)."""
    checks.check_keys(_compose(["+study.overrides.N=100", "+study.overrides.anything=1"]))
    with pytest.raises(
        ValueError,
        match=r"unknown config key logger.mode2: nearest: logger.mode; valid keys in logger are dir, "
        r"entity, init_timeout, kind, mode, project, tags$",
    ):
        checks.typed(_compose(["+logger.mode2=online"]))
    with pytest.raises(ValueError, match="unknown config key study.name2"):
        checks.typed({"study": {"name2": "e1"}}, C.FigureConfig)
    with pytest.raises(ValueError, match="unknown config key size"):  # a figure key, not a train key
        checks.typed({"size": "quick"}, C.TrainConfig)


def test_rerun_skips_complete_runs_and_force_recomputes(tmp_path, monkeypatch):
    cfg = _compose([f"results_root={tmp_path}", *TINY_LINEAR])
    first = train.run(cfg)
    assert not first.skipped and first.status == "ok"
    marker = first.path / store.MARKER
    stamp = marker.stat().st_mtime_ns

    calls = []
    monkeypatch.setattr(train, "train", lambda c: calls.append(c) or (_ for _ in ()).throw(AssertionError))
    again = train.run(
        _compose(
            [
                f"results_root={tmp_path}",
                *TINY_LINEAR,
                "logger.project=other",
                "schedule.H=7",
                "experiment_name=elsewhere",
            ]
        )
    )
    assert again.skipped and again.path == first.path and not calls  # PD ignores H; logger is not a key
    np.testing.assert_array_equal(again.curves["loss/f_minus_fstar"], first.curves["loss/f_minus_fstar"])
    assert marker.stat().st_mtime_ns == stamp
    monkeypatch.undo()

    forced = train.run(_compose([f"results_root={tmp_path}", *TINY_LINEAR, "force=true"]))
    assert not forced.skipped and forced.path == first.path
    other = train.run(_compose([f"results_root={tmp_path}", *TINY_LINEAR, "schedule.N=9"]))
    assert other.path != first.path


@pytest.mark.slow
def test_pipeline_run_with_costs_is_its_own_run(tmp_path):
    """method=pipeline schedule=gpipe costs=b2f: curves against ticks of the b2f timeline (GPipe's
    flush: (M + S - 1)(tF + tB) ticks); the same cell at unit costs is another run with the same
    per-update numbers, and a rerun of either is skipped."""
    common = [f"results_root={tmp_path}", *TINY_LINEAR, "method=pipeline", "schedule=gpipe", "schedule.M=4"]
    b2f = train.run(_compose([*common, "costs=b2f"]))
    assert b2f.status == "ok", b2f.error
    S, M, N = 3, 4, 8
    assert b2f.summary["schedule"] == "gpipe" and b2f.summary["T"] == (N // M) * (M + S - 1) * 3
    assert b2f.curves["axis/sim_time"][-1] == b2f.summary["T"]
    assert b2f.curves["axis/block_update"][-1] == b2f.summary["K"] == (N // M) * S
    assert b2f.summary["bubble/f_total"] == pytest.approx((S - 1) / (M + S - 1))
    unit = train.run(_compose([*common, "costs=unit"]))
    assert unit.path != b2f.path and unit.summary["T"] == (N // M) * (M + S - 1) * 2
    np.testing.assert_allclose(unit.summary["final"], b2f.summary["final"], rtol=1e-12)
    assert train.run(_compose([*common, "costs=b2f"])).skipped


def test_failed_run_is_recorded_and_rerun(tmp_path, monkeypatch):
    def boom(o, S):
        raise RuntimeError("objective exploded")

    monkeypatch.setattr(objective_of, "build_objective", boom)
    cfg = _compose([f"results_root={tmp_path}", *TINY_LINEAR])
    out = train.run(cfg)
    assert out.status == "failed" and "objective exploded" in out.error
    saved = store.load_run(out.path)
    assert saved.status == "failed" and saved.error == "RuntimeError: objective exploded"
    assert saved.config == train.run_config(resolved(cfg))
    monkeypatch.undo()
    again = train.run(cfg)  # failed runs are not skipped
    assert not again.skipped and again.status == "ok"


def test_diverging_gamma_is_recorded_not_raised(tmp_path):
    out = train.run(_compose([f"results_root={tmp_path}", *TINY_LINEAR, "method.gammas=[0.03125,1.0e+60]"]))
    assert out.status == "ok"
    assert out.summary["diverged"] == [False, True] and out.summary["tuning/gamma"] == 0.03125
    every = train.run(_compose([f"results_root={tmp_path}", *TINY_LINEAR, "method.gammas=[1.0e+60]"]))
    assert every.status == "diverged" and every.summary["tuning/index"] is None
    assert store.load_run(every.path).status == "diverged"


SMALL = ["objective.n=200", "objective.d=32", "objective.batch_size=10", "schedule.N=20", "schedule.S=4"]


def test_finite_blowups_are_diverged_and_never_chosen(tmp_path):
    """Issue 13: PD at 2^8..2^10 ends at 1e102..1e126, finite; all three are diverged (the old
    rule chose 2^8 by its tail mean). On 2^-4..2^10 the runs from 2^1 on pass 1e6 x f0."""
    blown = train.run(_compose([f"results_root={tmp_path}", *SMALL, "method.gamma_lo=8", "method.gamma_hi=10"]))
    s = blown.summary
    assert blown.status == "diverged" and store.load_run(blown.path).status == "diverged"
    assert s["tuning/index"] is None and s["tuning/rule"] == "all_diverged" and s["n_diverged"] == 3
    assert np.isfinite(s["final"]).all() and min(s["final"]) > 1e100  # finite, and diverged
    mixed = train.run(_compose([f"results_root={tmp_path}", *SMALL, "method.gamma_lo=-4", "method.gamma_hi=10"]))
    s = mixed.summary
    assert s["diverged"] == [False] * 5 + [True] * 10 and s["n_diverged"] == 10
    assert s["tuning/gamma_log2"] == -3 and s["final/selected"] < s["f0"]
    assert max(s["final"][:5]) < 1e6 * s["f0"] < min(s["final"][5:])


@pytest.mark.slow
def test_wandb_offline_run_has_group_tags_and_both_axes(tmp_path):
    from rpd.io import offline_run, tracking

    out = train.run(
        _compose(
            [
                f"results_root={tmp_path}",
                *TINY_LINEAR,
                "logger=wandb",
                "logger.mode=offline",
                f"logger.dir={tmp_path}",
                "method=localsgd",
                "schedule.H=2",
                "experiment_name=e3_nesterov",
            ]
        )
    )
    assert out.status == "ok"
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    back = offline_run.read_offline_run(run_dir)
    assert back.group == "e3_nesterov" and set(back.tags) >= {"localsgd", "S3"}
    rows = [r for r in back.history if "loss/f_minus_fstar" in r]
    assert len(rows) == out.curves["axis/sim_time"].size
    assert [r["sim_time"] for r in rows] == out.curves["axis/sim_time"].tolist()
    assert [r["block_update"] for r in rows] == out.curves["axis/block_update"].tolist()
    assert back.summary["tuning/gamma_log2"] == out.summary["tuning/gamma_log2"]
    tracking.shutdown()


@pytest.mark.slow
def test_multirun_goes_on_after_a_failed_job(tmp_path, text_file):
    """A sweep through hydra's CLI: the job whose text cannot be decoded (a file that is there, so
    no input check refuses it; it fails when the LM reads it) is recorded as failed, the other job
    completes, the sweep ends with its table and counts and exits 1; each job's directory links its
    stored run (rpd.io.sweeps.load_sweep reads the links)."""
    missing = tmp_path / "missing.txt"  # the undecodable one (a missing file is refused before any work)
    missing.write_bytes(b"caf\xe9 \xff\xfe not utf-8")
    args = ["objective=nanochat", f"objective.text_path={text_file},{missing}", *TINY_LM]
    proc = multirun(args, tmp_path, results=tmp_path, HYDRA_FULL_ERROR="1")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "2 jobs, 1 done, 0 skipped (already stored), 1 failed" in proc.stdout
    assert "1 of 2 jobs failed" in proc.stderr
    runs = {r.config["objective"]["text_path"]: r for r in store.iter_runs(tmp_path / "train")}
    assert runs[str(text_file)].status == "ok"
    assert runs[str(missing)].status == "failed" and "utf-8" in runs[str(missing)].error
    sweep = sweeps.load_sweep(tmp_path / "multirun")
    assert list(sweep["status"]) == ["ok", "failed"] and "utf-8" in sweep["error"][1]
    assert [store.load_run(p).path for p in sweep["result"]] == [runs[str(text_file)].path, runs[str(missing)].path]
    assert (tmp_path / "multirun" / "0" / "result").resolve() == runs[str(text_file)].path.resolve()


def test_lm_results_are_keyed_by_their_text(tmp_path, text_file):
    """Issue 13: a run on an edited text must not be returned for the original (and back)."""
    import hashlib

    cfg = _compose(["objective=nanochat", f"objective.text_path={text_file}", *TINY_LM])
    key = train.run_config(resolved(cfg))
    assert key["objective"]["text_sha256"] == hashlib.sha256(text_file.read_bytes()).hexdigest()
    original = text_file.read_text()
    text_file.write_text(original.replace("fox", "cat"))
    assert store.run_dir(tmp_path, train.run_config(resolved(cfg))) != store.run_dir(tmp_path, key)
    text_file.write_text(original)
    assert train.run_config(resolved(cfg)) == key
    assert "text_sha256" not in train.run_config(resolved(_compose(TINY_LINEAR)))["objective"]

    e5 = F.resolve("e5_nanochat")
    e5_cfg = F.study_config(e5, "quick", {"text_path": str(text_file)})
    assert e5.corpus_identity(e5_cfg) == key["objective"]["text_sha256"]
    assert F.study_key("e5_nanochat", "quick", e5_cfg, "abc")["corpus_sha256"] == "abc"
    e10 = F.resolve("e10_frontier")
    assert e10.corpus_identity(F.study_config(e10, "quick", {"objectives": ["logistic_regression"]})) is None
    assert F.resolve("e3_nesterov").corpus_identity is None  # no text, key unchanged


def test_delay_law_range_is_checked_before_work():
    with pytest.raises(ValueError, match=r"^S_max must be >= S_min, got S_min=10, S_max=3$"):
        delay_law.run(delay_law.Config(S_min=10, S_max=3))
    with pytest.raises(ValueError, match=r"^S_min must be >= 1, got 0$"):
        delay_law.run(delay_law.Config(S_min=0))


def _read_only_copy(src, dst):
    """``dst``: a read-only bind mount of ``src`` (skips where mounts are not allowed)."""
    dst.mkdir()
    for cmd in (["mount", "--bind", str(src), str(dst)], ["mount", "-o", "remount,ro,bind", str(dst)]):
        if subprocess.run(cmd, capture_output=True).returncode != 0:
            subprocess.run(["umount", str(dst)], capture_output=True)
            pytest.skip("no bind mounts here")


def test_a_read_only_store_is_reused_and_a_missing_run_refused(tmp_path):
    """Issue 34, item 3: a complete store on a read-only mount is reused (no lock); a config it
    does not hold is refused in one line naming results_root."""
    first = train.run(_compose([f"results_root={tmp_path / 'rw'}", *TINY_LINEAR]))
    assert first.status == "ok"
    ro = tmp_path / "ro"
    _read_only_copy(tmp_path / "rw", ro)
    try:
        again = train.run(_compose([f"results_root={ro}", *TINY_LINEAR]))
        assert again.skipped and again.summary == first.summary
        with pytest.raises(ValueError, match=r"^results_root=.* is read-only and holds no complete run"):
            train.run(_compose([f"results_root={ro}", *TINY_LINEAR, "schedule.N=9"]))
    finally:
        subprocess.run(["umount", str(ro)], capture_output=True)


@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_2(tmp_path):
    """Issue 34, item 1/2: no traceback above the message; exit status 2."""
    (tmp_path / "file").write_text("x")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.train",
            *TINY_LINEAR,
            f"results_root={tmp_path / 'file' / 'sub'}",
            f"hydra.run.dir={tmp_path / 'job'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RPD_DEBUG": ""},
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"error: results_root={tmp_path / 'file' / 'sub'} cannot be a results store: {tmp_path / 'file'} is not a directory"
    ]


@pytest.mark.slow
def test_mlp_chain_and_a_users_objective_from_the_command_line(tmp_path, monkeypatch):
    """Issue 26, item 7: every registered objective by name, and a user's factory by import
    path, called with S, the objective.* keys it names and objective.options."""
    mlp = train.run(
        _compose(
            [
                "objective=mlp_chain",
                "objective.n=32",
                "objective.width=6",
                "objective.batch_size=8",
                "schedule.S=3",
                "schedule.N=8",
                "method.gammas=[0.0625]",
                f"results_root={tmp_path}",
            ]
        )
    )
    assert mlp.status == "ok" and mlp.summary["objective"] == "mlp_chain"
    assert train.run_config(resolved(_compose(["objective=mlp_chain"])))["objective"]["d"] is None

    (tmp_path / "user_objective.py").write_text(
        "from rpd import objectives\n"
        "calls = []\n"
        "def make(S, n, d, batch_size, seed, scale=1.0):\n"
        "    calls.append(dict(S=S, n=n, d=d, batch_size=batch_size, seed=seed, scale=scale))\n"
        "    return objectives.random_quadratic(n, d, S, batch_size, seed=seed)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import user_objective

    cfg = _compose(
        [
            *TINY_LINEAR,
            "objective._target_=user_objective.make",
            "+objective.options.scale=2.5",
            f"results_root={tmp_path}",
        ]
    )
    out = train.run(cfg)
    assert out.status == "ok"
    assert user_objective.calls == [dict(S=3, n=32, d=12, batch_size=4, seed=0, scale=2.5)]
    # the same numbers as rpd's own random quadratic: the factory returned exactly that
    own = train.run(_compose([*TINY_LINEAR, f"results_root={tmp_path / 'own'}"]))
    np.testing.assert_array_equal(out.curves["loss/f_minus_fstar"], own.curves["loss/f_minus_fstar"])
    with pytest.raises(ValueError, match=r"^objective._target_=no_such_module.make cannot be imported"):
        checks.validate(checks.typed(_compose([*TINY_LINEAR, "objective._target_=no_such_module.make"])))


def test_schedule_chart_prints_what_it_draws(tmp_path):
    """``python -m experiments.schedule``: the Gantt chart of any registered schedule, and its
    makespan, bubbles and peaks, which are the timeline's."""
    from rpd.cli import chart as schedule

    cfg = _compose(
        [
            "schedule=zb_h1",
            "schedule.S=4",
            "schedule.M=8",
            "schedule.N=8",
            "costs=b2f_latency",
            f"out={tmp_path / 'zb_h1.png'}",
        ],
        "chart",
    )
    numbers = schedule.chart(cfg)
    assert (tmp_path / "zb_h1.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "zb_h1.pdf").exists()
    assert numbers["schedule"] == "zb_h1" and numbers["makespan"] > 0
    assert 0 < numbers["bubble_total"] < 1 and len(numbers["peak_activations"]) == 4
    assert numbers["peak_activations"][0] == 4  # ZB-H1 keeps 1F1B's S - r in flight (until I)


def test_a_node_builds_the_library_dataclass_its_schema_is_derived_from():
    """``config.node_to``: the plan's model node (its schema GPTConfig's fields) builds GPT-2
    small's GPTConfig, the preset of rpd.model.layers; a train config's schedule node builds the
    registry's ScheduleParams, with the fields given (cut, params) taken as given."""
    model = checks.typed(_compose(["model=gpt2_small"], "plan"), PlanConfig).model
    assert C.node_to(layers.GPTConfig, model) == layers.PRESETS["gpt2_small"]
    s = checks.typed(_compose(["schedule=gpipe", "schedule.M=4", "schedule.D=2", "schedule.S=3"])).schedule
    p = C.node_to(registry.ScheduleParams, s, cut="end", params={})
    assert p == registry.ScheduleParams(S=3, N=400, M=4, D=2, overlap_allreduce=False, local_steps=1, cut="end")
