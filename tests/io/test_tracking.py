import numpy as np
import pytest

from rpd.io import offline_run, tracking


@pytest.fixture
def offline_env(tmp_path, monkeypatch):
    """wandb strictly offline, quiet, and writing only under tmp_path."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    yield tmp_path
    tracking.shutdown()  # stop wandb's service process


def test_noop_logger_accepts_everything():
    log = tracking.make_logger("none")
    assert isinstance(log, tracking.NoOpLogger)
    log.log_config({"a": 1})
    log.log_metrics({"loss/f": np.ones(3)}, sim_time=np.arange(3))
    log.log_summary({"gamma": 0.5})
    log.finish()
    with pytest.raises(ValueError, match="logger"):
        tracking.make_logger("tensorboard")


def test_rows_pairs_curves_with_both_axes():
    rows = tracking.rows({"loss/f": np.array([3.0, 2.0])}, sim_time=np.array([0, 1]), block_update=np.array([0, 8]))
    assert rows == [
        {"loss/f": 3.0, "sim_time": 0, "block_update": 0},
        {"loss/f": 2.0, "sim_time": 1, "block_update": 8},
    ]
    assert all(type(v) in (int, float) for row in rows for v in row.values())  # host scalars
    with pytest.raises(ValueError, match="step axis"):
        tracking.rows({"loss/f": np.ones(2)})
    with pytest.raises(ValueError, match="same length"):
        tracking.rows({"loss/f": np.ones(2)}, block_update=np.arange(3))


def test_mode_is_offline_unless_asked(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert tracking.resolve_mode(None) == "offline"
    assert tracking.resolve_mode("online") == "online"
    monkeypatch.setenv("WANDB_MODE", "online")
    assert tracking.resolve_mode(None) == "online"
    with pytest.raises(ValueError, match="mode"):
        tracking.resolve_mode("cloud")


def test_offline_run_is_written_and_read_back(offline_env):
    log = tracking.WandbLogger(
        project="rpd-test",
        experiment="E1",
        method="rpd",
        S=8,
        config={"objective": {"d": 512}, "gamma": 0.25},
        dir=offline_env / "runs",
    )
    f_gap = np.array([1.0, 0.5, 0.25])
    log.log_metrics({"loss/f_minus_fstar": f_gap}, sim_time=np.arange(3), block_update=np.array([0, 8, 16]))
    log.log_summary({"tuning/gamma_log2": -2})
    run_dir = log.run_dir
    log.finish()
    assert run_dir.name.startswith("offline-run-") and run_dir.is_relative_to(offline_env)
    back = offline_run.read_offline_run(run_dir)
    assert back.group == "E1" and back.tags == ("rpd", "S8")
    assert back.config["objective"] == {"d": 512} and back.config["gamma"] == 0.25
    assert back.config["meta"] == {"experiment": "E1", "method": "rpd", "S": 8}
    assert [r["loss/f_minus_fstar"] for r in back.history] == f_gap.tolist()
    assert [(r["sim_time"], r["block_update"]) for r in back.history] == [(0, 0), (1, 8), (2, 16)]
    assert back.summary["tuning/gamma_log2"] == -2


def test_wandb_failure_becomes_a_warning(offline_env, monkeypatch):
    import wandb

    def broken_init(**kw):
        raise RuntimeError("no service")

    monkeypatch.setattr(wandb, "init", broken_init)
    with pytest.warns(RuntimeWarning, match="wandb init failed.*no service"):
        log = tracking.WandbLogger(project="p", experiment="E", method="pd", S=2)
    log.log_metrics({"loss/f": np.ones(2)}, sim_time=np.arange(2))  # silently disabled
    log.log_summary({"x": 1})
    log.finish()
    assert log.run_dir is None


def test_failure_while_logging_disables_the_logger(offline_env):
    log = tracking.WandbLogger(project="p", experiment="E", method="pd", S=2, dir=offline_env / "runs")

    def broken_log(*a, **kw):
        raise OSError("disk full")

    log._run.log = broken_log
    with pytest.warns(RuntimeWarning, match="wandb log failed.*disk full"):
        log.log_metrics({"loss/f": np.ones(2)}, sim_time=np.arange(2))
    log.finish()  # no-op now, no exception


def test_finish_waits_for_a_complete_log(offline_env):
    """wandb.finish may return before the .wandb log is flushed; finish() waits for 'exit'."""
    log = tracking.WandbLogger(project="p", experiment="E", method="pd", S=2, dir=offline_env / "runs")
    log.log_metrics({"loss/f": np.ones(2)}, sim_time=np.arange(2))
    run_dir = log.run_dir
    log.finish()
    assert offline_run.wait_until_complete(run_dir, timeout=0.0)  # already complete on return
    (wandb_log,) = run_dir.glob("run-*.wandb")
    truncated = offline_env / "truncated" / "run-x.wandb"
    truncated.parent.mkdir()
    truncated.write_bytes(wandb_log.read_bytes()[:200])  # header and the first records only
    assert not offline_run.wait_until_complete(truncated.parent, timeout=0.1)


def test_disabled_run_finishes_without_waiting(offline_env):
    log = tracking.WandbLogger(project="p", experiment="E", method="pd", S=2, mode="disabled", dir=offline_env / "runs")
    log.log_metrics({"loss/f": np.ones(2)}, sim_time=np.arange(2))
    log.finish(timeout=60.0)  # a RuntimeWarning (an error under pytest) if it waited for a log
