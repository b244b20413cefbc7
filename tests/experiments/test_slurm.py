"""launcher=slurm (rpd.cli.slurm, experiments.slurm_watch; docs/running.md#a-slurm-cluster-on-one-machine):
a request checked against ``sinfo`` and the pending reasons of ``squeue``, on outputs written by
hand from SLURM's manuals; in the slow suite, a real one-node SLURM on this host
(benchmarks/local_slurm.sh): a request no node meets and a task that will never start each end
in one line, exit 2, nothing queued; E3 fanned out with one task cancelled by SLURM is listed,
refused, resubmitted alone and then equals the in-process figure; a sweep stores every run and a
rerun reuses them."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir

from experiments import reproduce_paper_figures as R
from experiments import slurm_watch
from rpd.cli import fanout as D
from rpd.cli import figure as F
from rpd.cli import slurm as S
from rpd.io import store
from tests.hydra_helpers import CONFIGS, ROOT, TINY_LINEAR

# sinfo -h -N -o '%N|%P|%c|%m|%G|%t' of a cluster with a default CPU partition of two nodes, one
# of them drained, and a GPU partition of one node with 4 A100s (memory in MB)
SINFO = """\
cpu01|cpu*|32|128000|(null)|idle
cpu02|cpu*|64|64000|(null)|drain
gpu01|gpu|16|512000|gpu:a100:4(S:0-1)|mix
"""


def test_a_request_no_node_can_meet_names_the_field_and_the_largest_node():
    nodes = S.parse_sinfo(SINFO)
    assert [(n.name, n.partition, n.default, n.cpus, n.mem_mb, n.gpus) for n in nodes] == [
        ("cpu01", "cpu", True, 32, 128000, 0),
        ("cpu02", "cpu", True, 64, 64000, 0),
        ("gpu01", "gpu", False, 16, 512000, 4),
    ]

    def refusal(**kw) -> str:
        with pytest.raises(ValueError) as err:
            S.check_request(S.Request(**kw), nodes)
        return str(err.value)

    # fits: 64 CPUs on the drained node (SLURM queues for it), 4 GPUs with 400 GB on gpu01
    S.check_request(S.Request(cpus_per_task=64, mem_gb=16), nodes)
    S.check_request(S.Request(cpus_per_task=8, mem_gb=400, gpus_per_node=4, partition="gpu"), nodes)
    assert refusal(cpus_per_task=65) == (
        "hydra.launcher.cpus_per_task=65: the largest node of partition cpu (the default) has 64 CPUs"
    )
    assert refusal(cpus_per_task=9, tasks_per_node=8) == (
        "hydra.launcher.cpus_per_task x tasks_per_node=72: the largest node of partition cpu (the default) has 64 CPUs"
    )
    # 128000 MB = 125 GB: 126 GB is more than any node of cpu has
    assert (
        refusal(mem_gb=126)
        == "hydra.launcher.mem_gb=126: the largest node of partition cpu (the default) has 125 GB of memory"
    )
    assert (
        refusal(gpus_per_node=1)
        == "hydra.launcher.gpus_per_node=1: the largest node of partition cpu (the default) has 0 GPUs"
    )
    assert (
        refusal(gpus_per_node=8, partition="gpu")
        == "hydra.launcher.gpus_per_node=8: the largest node of partition gpu has 4 GPUs"
    )
    assert refusal(partition="a100") == "hydra.launcher.partition=a100: no such partition (sinfo lists cpu, gpu)"
    # 64 CPUs (cpu02) and 100 GB (cpu01) each fit a node, both together none
    assert refusal(cpus_per_task=64, mem_gb=100) == (
        "hydra.launcher: no node of partition cpu (the default) has 64 CPUs, 100 GB and 0 GPUs together"
    )
    no_default = S.parse_sinfo("gpu01|gpu|16|512000|gpu:4|idle\n")
    with pytest.raises(
        ValueError, match=r"^hydra.launcher.partition: this cluster has no default partition, set one of gpu$"
    ):
        S.check_request(S.Request(), no_default)


def test_pending_reasons_that_never_clear_are_stuck_the_others_wait():
    for reason in ("PartitionConfig", "PartitionTimeLimit", "JobHeldAdmin", "QOSMinCpuNotSatisfied"):
        assert S.stuck(reason, pending_s=0, patience_s=300), reason
    for reason in ("QOSMaxCpuPerJobLimit", "AssocMaxWallDurationPerJobLimit", "QOSMaxGRESPerJob"):
        assert S.stuck(reason, 0, 300), reason
    # a group's limit clears when the group's other jobs end, a node reserved for maintenance
    # when it ends: stuck only after the patience
    for reason in ("AssocGrpCpuLimit", "QOSGrpGRES", "ReqNodeNotAvail, UnavailableNodes:cpu[01-02]"):
        assert not S.stuck(reason, 299, 300) and S.stuck(reason, 300, 300), reason
    # waiting its turn, or on the user's own jobs (per-user limits): never stuck
    for reason in ("Priority", "Resources", "None", "BeginTime", "Dependency", "Reservation", "QOSMaxJobsPerUserLimit"):
        assert not S.stuck(reason, 10**6, 300), reason


def _submitted(folder: Path, tasks: dict[str, bool]) -> None:
    """submitit's folders of an array 7 of len(tasks) tasks; True: the task wrote its result."""
    (folder / "7").mkdir(parents=True)  # the array's own folder, holding its script: no task
    for task, done in tasks.items():
        (folder / task).mkdir()
        if done:
            (folder / task / f"{task}_0_result.pkl").write_bytes(b"")


def test_the_watch_says_progress_cancels_a_stuck_array_and_ends_on_a_lost_task(tmp_path):
    folder = tmp_path / ".submitit"
    _submitted(folder, {"7_0": False, "7_1": False, "7_2": False})
    squeue = {"text": "7_0|RUNNING|None\n7_1|PENDING|Resources\n7_2|PENDING|Priority\n"}
    ran, said, now = [], [], [0.0]

    def run(cmd):
        ran.append(list(cmd))
        return squeue["text"] if cmd[0] == "squeue" else ""

    watch = S.Watch(folder, run=run, echo=said.append, clock=lambda: now[0], patience_s=60)
    assert watch.poll() is None and watch.poll() is None
    assert said == ["slurm: job 7: 2 pending, 1 running, 0 done of 3"]  # said once, as it did not change
    assert ran[0] == [*S.SQUEUE, "-j", "7"]
    squeue["text"] = "7_1|PENDING|AssocGrpCpuLimit\n7_2|RUNNING|None\n"
    (folder / "7_0" / "7_0_0_result.pkl").write_bytes(b"")
    assert watch.poll() is None and said[-1] == "slurm: job 7: 1 pending, 1 running, 1 done of 3"
    now[0] = 60.0  # pending for a group limit for the whole patience
    verdict = watch.poll()
    assert verdict == S.Verdict(
        2, "slurm: task 7_1 is pending for a reason that will not clear by itself: AssocGrpCpuLimit; cancelled job 7"
    )
    assert ran[-1] == ["scancel", "7"]

    # a task that leaves the queue without its result (scancel, killed, out of time): said when
    # seen; the wait ends once no task is left in the queue
    lost = tmp_path / "lost"
    _submitted(lost, {"7_0": True, "7_1": False, "7_2": False})
    squeue["text"] = "7_2|RUNNING|None\n"
    said.clear()
    now[0] = 0.0
    watch = S.Watch(lost, run=run, echo=said.append, clock=lambda: now[0], grace_s=15)
    assert watch.poll() is None and len(said) == 1  # 7_1's result may yet show (a shared file system)
    now[0] = 15.0
    assert watch.poll() is None
    assert said[1] == f"slurm: task 7_1 left the queue without a result (logs: {lost / '7_1'})"
    squeue["text"] = ""  # 7_2 ran to its end
    (lost / "7_2" / "7_2_0_result.pkl").write_bytes(b"")
    assert watch.poll() == S.Verdict(1, "slurm: 1 of 3 tasks ended without a result: 7_1")
    # a result that shows late, within the grace: all ran to their end, submitit's to collect
    late = tmp_path / "late"
    _submitted(late, {"7_0": True, "7_1": False, "7_2": True})
    watch = S.Watch(late, run=run, echo=said.append, clock=lambda: now[0], grace_s=15)
    assert watch.poll() is None
    (late / "7_1" / "7_1_0_result.pkl").write_bytes(b"")
    now[0] = 60.0
    assert watch.poll() is None


def test_a_failed_launch_returns_once_its_tasks_left_the_queue(tmp_path):
    folder = tmp_path / ".submitit"
    _submitted(folder, {"7_0": False, "7_1": True})
    listings = iter(["7_0|RUNNING|None\n8_0|RUNNING|None\n", "8_0|RUNNING|None\n"])  # 8: someone else's
    slept = []
    S.wait_gone(folder, run=lambda cmd: next(listings), sleep=slept.append, poll_s=5)
    assert slept == [5]
    S.wait_gone(tmp_path / "nothing", run=lambda cmd: pytest.fail("nothing submitted, nothing to ask"))


def test_a_slurm_command_that_fails_or_is_missing_is_one_line():
    with pytest.raises(ValueError, match=r"^launcher=slurm: no-such-sinfo not found \(not a SLURM login node\?\)$"):
        S.run_command(["no-such-sinfo"])
    with pytest.raises(ValueError, match=r"failed: sinfo: fatal: no config$"):
        S.run_command([sys.executable, "-c", "import sys; sys.exit('starting\\nsinfo: fatal: no config')"])


def test_a_figures_jobs_ask_for_their_sizes_request_unless_set():
    assert D.slurm_overrides("quick") == ["hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=4"]
    assert D.slurm_overrides("full", ["hydra.launcher.mem_gb=32"]) == ["hydra.launcher.cpus_per_task=4"]


def test_the_callback_reads_the_launcher_node_and_travels_to_the_jobs():
    """The request as the composed launcher=slurm node has it; submitit pickles hydra's callbacks
    into each job, so the watch's thread must not travel with it."""
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = hydra_compose("train", ["launcher=slurm", "hydra.launcher.partition=cpu"], return_hydra_config=True)
    node = cfg.hydra.launcher
    assert slurm_watch.request(node) == S.Request(cpus_per_task=1, tasks_per_node=1, mem_gb=4.0, partition="cpu")
    cb = slurm_watch.SlurmWatch(poll_s=1, patience_s=7)
    cb.thread = threading.Thread(target=cb.stop.wait)
    back = pickle.loads(pickle.dumps(cb))
    assert (back.poll_s, back.patience_s, back.thread) == (1, 7, None)


def test_the_figure_script_refuses_a_request_no_node_meets_before_any_figure(monkeypatch, capsys):
    """reproduce_paper_figures --fanout --launcher slurm: the jobs' launcher node (slurm.yaml, the
    size's request, the --launcher-override lines) checked against sinfo first."""
    asked = []
    monkeypatch.setattr(S, "run_command", lambda cmd: asked.append(cmd) or SINFO)
    monkeypatch.setattr(R, "reproduce", lambda *a, **kw: pytest.fail("no figure is made after a refusal"))
    with pytest.raises(SystemExit) as exit_:
        R.main(
            ["--size", "full", "--fanout", "--launcher", "slurm", "--launcher-override", "hydra.launcher.mem_gb=200"]
        )
    assert exit_.value.code == 2 and asked == [S.SINFO]
    said = "error: hydra.launcher.mem_gb=200: the largest node of partition cpu (the default) has 125 GB of memory\n"
    assert capsys.readouterr().err == said
    slurm_watch.check_launch("full", [], CONFIGS)  # 4 CPUs and 16 GB: cpu01 has them
    over = ["--launcher-override", "hydra.launcher.partition=gpu"]
    with pytest.raises(SystemExit):  # full: 4 CPUs and 16 GB per job, which gpu01 has
        R.main(
            [
                "--size",
                "full",
                "--fanout",
                "--launcher",
                "slurm",
                *over,
                "--launcher-override",
                "hydra.launcher.cpus_per_task=17",
            ]
        )
    assert capsys.readouterr().err.startswith(
        "error: hydra.launcher.cpus_per_task=17: the largest node of partition gpu has 16"
    )


# ---- a real one-node SLURM on this host (benchmarks/local_slurm.sh), in the slow suite ----

NUMBERS = ("figure", "size", "config", "summary", "table")  # a figure JSON's numbers (not its timings)
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch")


def _no_slurm() -> str | None:
    missing = [exe for exe in DAEMONS if shutil.which(exe) is None]
    if missing:
        return f"no SLURM here ({', '.join(missing)} not found): apt-get install -y slurm-wlm munge, as root"
    if os.geteuid() != 0:
        return "a local SLURM needs root (slurmd runs each job as its user)"
    return None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One node, this host's CPUs and memory, partitions ``local`` (default) and ``short`` (jobs
    of at most a minute); its daemons stopped after the module's tests."""
    why = _no_slurm()
    if why:
        pytest.skip(why)
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")  # the slurm extra
    state = tmp_path_factory.mktemp("slurm")
    script = ROOT / "benchmarks" / "local_slurm.sh"
    env = {**os.environ, "RPD_SLURM_DIR": str(state), "RPD_SLURM_PORT": "16837"}  # not a user's 16817
    started = subprocess.run([str(script), "start"], env=env, capture_output=True, text=True, timeout=120)
    try:
        if started.returncode:
            pytest.fail(f"local_slurm.sh start: {started.stderr}")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("SLURM_CONF", str(state / "slurm.conf"))
            yield state
    finally:
        subprocess.run([str(script), "stop"], env=env, check=True, timeout=60)


def _command(module: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", module, *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=400)


SMALL = {"N": 40, "H": [2]}  # E3 as two units, PD and LocalSGD H=2, on fewer steps


def _e3(root: Path, *overrides: str) -> subprocess.CompletedProcess:
    where = [f"results_root={root / 'results'}", f"out_dir={root / 'out'}", f"hydra.run.dir={root / 'run'}"]
    small = [f"study.{k}={json.dumps(v)}" for k, v in SMALL.items()]
    args = ["experiment=e3_nesterov", "fanout=true", "launcher=slurm", *small, *where, *overrides]
    return _command("experiments.figure", *args)


def _queued() -> str:
    return subprocess.run(["squeue", "-h"], capture_output=True, text=True, check=True).stdout


@pytest.mark.slow  # two refusals: about 40 s on 2 cores
def test_a_request_no_node_meets_and_a_task_that_never_starts_end_in_one_line(cluster, tmp_path):
    cpus = len(os.sched_getaffinity(0))  # the node's CPUs (nproc)
    said = _e3(tmp_path, f"hydra.launcher.cpus_per_task={cpus + 1}")
    assert said.returncode == 2, said.stderr
    assert said.stderr.splitlines() == [
        f"error: hydra.launcher.cpus_per_task={cpus + 1}: the largest node of partition local (the default) has {cpus} CPUs"
    ]
    assert not tmp_path.joinpath("results").exists()  # refused before the plan was written
    # partition short takes jobs of at most 1 minute, these ask for 120: SLURM keeps them pending
    # for PartitionTimeLimit, which no waiting clears
    said = _e3(tmp_path, "hydra.launcher.partition=short")
    assert said.returncode == 2, said.stderr
    errors = [line for line in said.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 2 and errors[1] == "error: e3_nesterov: launcher=slurm refused the launch (the line above)"
    assert re.fullmatch(
        r"error: slurm: task \d+_\d is pending for a reason that will not clear by itself: "
        r"PartitionTimeLimit; cancelled job \d+",
        errors[0],
    ), errors
    assert re.search(r"slurm: job \d+: 2 pending, 0 running, 0 done of 2", said.stderr)
    assert _queued() == ""


def _cancel_first_running(cancelled: list, stop: threading.Event) -> None:
    while not stop.is_set() and not cancelled:
        running = subprocess.run(["squeue", "-h", "-r", "-t", "RUNNING", "-o", "%i"], capture_output=True, text=True)
        if running.stdout.split():
            task = running.stdout.split()[0]
            subprocess.run(["scancel", task], check=True)
            cancelled.append(task)
        time.sleep(0.1)


@pytest.mark.slow  # the in-process figure and two launches: about 2 minutes on 2 cores
def test_e3_on_slurm_with_a_task_cancelled_is_refused_resubmitted_alone_and_equals_in_process(cluster, tmp_path):
    cfg = R.figure_config(
        "e3_nesterov", "quick", force=False, results_root=str(tmp_path / "ref"), out_dir=str(tmp_path / "ref_out")
    )
    cfg.study.update(SMALL)
    ref = {k: v for k, v in json.loads(F.make_figure(cfg).numbers.read_text()).items() if k in NUMBERS}
    cancelled: list[str] = []
    stop = threading.Event()
    killer = threading.Thread(target=_cancel_first_running, args=(cancelled, stop), daemon=True)
    killer.start()
    said = _e3(tmp_path)
    stop.set()
    killer.join()
    (task,) = cancelled
    assert said.returncode == 1, said.stderr
    assert f"slurm: task {task} left the queue without a result" in said.stderr
    assert "e3_nesterov: 1 of 2 jobs did not finish" in said.stderr
    assert not (tmp_path / "out" / "e3_nesterov.json").exists() and _queued() == ""
    said = _e3(tmp_path)
    assert said.returncode == 0, said.stderr
    assert "e3_nesterov: 1 of 2 jobs on launcher=slurm (1 stored)" in said.stdout
    assert "resubmitting" in said.stdout and re.search(r"slurm: job \d+: .* of 1\n", said.stderr)
    fanned = json.loads((tmp_path / "out" / "e3_nesterov.json").read_text())
    assert {k: v for k, v in fanned.items() if k in NUMBERS} == ref


@pytest.mark.slow  # two sweeps of two tiny jobs: about a minute on 2 cores
def test_a_sweep_on_slurm_stores_every_run_and_a_rerun_reuses_them(cluster, tmp_path):
    def sweep(name: str) -> subprocess.CompletedProcess:
        where = [f"results_root={tmp_path / 'results'}", f"hydra.sweep.dir={tmp_path / name}"]
        fast = "hydra.callbacks.slurm_watch.poll_s=1"
        return _command("experiments.train", "-m", "launcher=slurm", "method=pd,rpd", fast, *where, *TINY_LINEAR)

    first = sweep("first")
    assert first.returncode == 0, first.stderr
    assert f"sweep {tmp_path / 'first'}: 2 jobs, 2 done, 0 skipped (already stored), 0 failed" in first.stdout
    runs = sorted(p.parent for p in (tmp_path / "results" / "train").glob(f"*/{store.MARKER}"))
    assert len(runs) == 2
    again = sweep("again")
    assert again.returncode == 0, again.stderr
    assert f"sweep {tmp_path / 'again'}: 2 jobs, 0 done, 2 skipped (already stored), 0 failed" in again.stdout
    assert sorted(p.parent for p in (tmp_path / "results" / "train").glob(f"*/{store.MARKER}")) == runs
