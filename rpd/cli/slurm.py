"""What a SLURM cluster can run, checked before submitting, and an array watched while it waits
(``launcher=slurm``; docs/running.md#figures-on-a-cluster-fan-out).

- :func:`check_request` refuses a launcher request (CPUs, memory, GPUs per node, partition) that
  no node of ``sinfo``'s listing can meet, in one line naming the ``hydra.launcher`` field and what
  the largest node has: SLURM itself would leave such a job pending forever (``PartitionConfig``)
  or refuse the array after the plan was written.
- :func:`stuck` tells which of ``squeue``'s pending reasons will not clear by themselves;
  :class:`Watch` polls ``squeue`` for an array's tasks, prints a progress line (pending / running
  / done) when it changes, on a stuck task cancels the array and says why, and says a task that
  left the queue without its result; :func:`wait_gone` waits until a launch's tasks left it.

Plain values in, plain values out: the commands' texts are parsed here (tests write them by
hand), the hydra side (reading ``hydra.launcher``, running the watch beside submitit's wait) is
``experiments.slurm_watch``. References: SLURM's ``sinfo(1)`` and ``squeue(1)`` manuals (output
formats ``%c %m %G %P %t``; ``squeue`` "JOB REASON CODES"), submitit's ``slurm.py`` (``mem_gb``
becomes ``--mem=<n>GB``, SLURM's GB being 1024 MB; an array task's id is ``<array>_<index>``).
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

FIELD = "hydra.launcher"  # where a user sets the request (configs/launcher/slurm.yaml)
SINFO = ["sinfo", "-h", "-N", "-o", "%N|%P|%c|%m|%G|%t"]  # one line per (node, partition)
SQUEUE = ["squeue", "-h", "-r", "-o", "%i|%T|%r"]  # -r: one line per array task, pending ones too


@dataclasses.dataclass(frozen=True)
class Node:
    name: str
    partition: str  # without sinfo's "*" mark of the default partition
    default: bool  # the partition a job without --partition goes to
    cpus: int
    mem_mb: int
    gpus: int  # GPUs in its gres (gpu:4, gpu:a100:4(S:0-1)); 0 for "(null)"
    state: str  # idle, mix, alloc, down*, drain, ...


@dataclasses.dataclass(frozen=True)
class Request:
    """One task's request as submitit makes it: ``cpus_per_task`` × ``tasks_per_node`` CPUs,
    ``mem_gb`` GB per node (None: SLURM's default), ``gpus_per_node`` GPUs, in ``partition``
    (None: the cluster's default)."""

    cpus_per_task: int = 1
    tasks_per_node: int = 1
    mem_gb: float | None = None
    gpus_per_node: int = 0
    partition: str | None = None


def _gpus(gres: str) -> int:
    n = 0
    for item in gres.split(","):  # gpu:4, gpu:a100:2(S:0-1), (null)
        parts = re.sub(r"\(.*?\)", "", item).split(":")
        if parts[0] == "gpu" and len(parts) > 1 and parts[-1].isdigit():
            n += int(parts[-1])
    return n


def parse_sinfo(text: str) -> list[Node]:
    """Nodes from ``sinfo -h -N -o '%N|%P|%c|%m|%G|%t'`` (:data:`SINFO`)."""
    nodes = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, part, cpus, mem, gres, state = line.strip().split("|")
        default = part.endswith("*")
        mem_mb = int(mem.rstrip("+")) if mem.rstrip("+").isdigit() else 0
        nodes.append(Node(name, part.rstrip("*"), default, int(cpus.rstrip("+")), mem_mb, _gpus(gres), state))
    return nodes


# a node in these states takes no job until an administrator acts (sinfo's "NODE STATE CODES")
UNUSABLE = ("down", "drain", "drng", "fail", "maint", "futr", "inval")


def _gb(mb: int) -> str:
    return f"{mb / 1024:.3g} GB"


def check_request(req: Request, nodes: Sequence[Node]) -> None:
    """Raise ValueError, naming the ``hydra.launcher`` field and what the largest node of the
    partition has, when no node of ``nodes`` can run one task of ``req``: a node runs it when
    cpus_per_task · tasks_per_node <= its CPUs, mem_gb · 1024 <= its memory in MB and
    gpus_per_node <= its GPUs. Nodes down or drained count, as SLURM queues for them."""
    if not nodes:
        raise ValueError(f"{FIELD}: sinfo lists no node on this cluster")
    names = sorted({n.partition for n in nodes})
    if req.partition is not None:
        part = [n for n in nodes if n.partition == req.partition]
        if not part:
            raise ValueError(f"{FIELD}.partition={req.partition}: no such partition (sinfo lists {', '.join(names)})")
        where = f"partition {req.partition}"
    else:
        part = [n for n in nodes if n.default]
        if not part:
            raise ValueError(f"{FIELD}.partition: this cluster has no default partition, set one of {', '.join(names)}")
        where = f"partition {part[0].partition} (the default)"
    cpus = req.cpus_per_task * req.tasks_per_node
    mem_mb = None if req.mem_gb is None else round(req.mem_gb * 1024)
    largest = max(n.cpus for n in part)
    if cpus > largest:
        field = "cpus_per_task" if req.tasks_per_node == 1 else "cpus_per_task x tasks_per_node"
        raise ValueError(f"{FIELD}.{field}={cpus}: the largest node of {where} has {largest} CPUs")
    if mem_mb is not None and mem_mb > max(n.mem_mb for n in part):
        most = max(n.mem_mb for n in part)
        raise ValueError(f"{FIELD}.mem_gb={req.mem_gb:g}: the largest node of {where} has {_gb(most)} of memory")
    if req.gpus_per_node > max(n.gpus for n in part):
        most = max(n.gpus for n in part)
        raise ValueError(f"{FIELD}.gpus_per_node={req.gpus_per_node}: the largest node of {where} has {most} GPUs")
    fits = [n for n in part if cpus <= n.cpus and (mem_mb or 0) <= n.mem_mb and req.gpus_per_node <= n.gpus]
    if not fits:  # each alone fits some node, all three together none
        raise ValueError(
            f"{FIELD}: no node of {where} has {cpus} CPUs, {_gb(mem_mb or 0)} and {req.gpus_per_node} GPUs together"
        )


# Pending reasons that will not clear by themselves (squeue(1), "JOB REASON CODES"): the job asks
# for more than the partition, its account or its QOS ever allows, or waits on an administrator.
NEVER = frozenset(
    {
        "PartitionConfig",
        "PartitionNodeLimit",
        "PartitionTimeLimit",
        "PartitionDown",
        "PartitionInactive",
        "BadConstraints",
        "InvalidAccount",
        "InvalidQOS",
        "DependencyNeverSatisfied",
        "JobHeldAdmin",
        "JobHeldUser",
    }
)
# A per-job limit ("QOSMaxCpuPerJobLimit", "AssocMaxWallDurationPerJobLimit", "QOSMaxGRESPerJob")
# or a QOS's minimum ("QOSMinCpuNotSatisfied") never clears. A group's limit ("AssocGrpCpuLimit")
# is reached by the group's jobs together and clears when they end; a node the job needs
# ("ReqNodeNotAvail") may be down for good or reserved for a maintenance that ends: these are said
# to be stuck only after ``patience_s`` of pending for them.
_PER_JOB = re.compile(r"^(Assoc|QOS)(Max\w*Per(Job|Node)\w*|Min\w*)$")
_LATER = re.compile(r"^((Assoc|QOS)Grp\w*|ReqNodeNotAvail)$")


def stuck(reason: str, pending_s: float, patience_s: float) -> bool:
    """True when a task pending for ``reason`` (squeue's ``%r``) ``pending_s`` seconds will not
    start by itself: a reason of :data:`NEVER` or a per-job limit at once; a group limit
    (``AssocGrpCpuLimit``, ...) or ``ReqNodeNotAvail`` after ``patience_s``."""
    reason = reason.split(",")[0].strip().strip("()")  # "ReqNodeNotAvail, UnavailableNodes:n1"
    if reason in NEVER or _PER_JOB.match(reason):
        return True
    return bool(_LATER.match(reason)) and pending_s >= patience_s


@dataclasses.dataclass(frozen=True)
class Task:
    job_id: str  # <array>_<index>, or <id> for a single job
    state: str  # PENDING, RUNNING, COMPLETING, ...
    reason: str


def parse_squeue(text: str) -> list[Task]:
    """Tasks from ``squeue -h -r -o '%i|%T|%r'`` (:data:`SQUEUE`)."""
    return [Task(*line.strip().split("|", 2)) for line in text.splitlines() if line.strip()]


def progress(tasks: Sequence[Task], total: int) -> str:
    """``pending / running / done`` of ``total`` tasks, done being those squeue no longer lists."""
    pending = sum(t.state == "PENDING" for t in tasks)
    running = len(tasks) - pending
    return f"{pending} pending, {running} running, {total - len(tasks)} done of {total}"


def run_command(cmd: Sequence[str]) -> str:
    """A SLURM command's stdout; ValueError with its message when it fails or is not installed."""
    try:
        out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise ValueError(f"launcher=slurm: {cmd[0]} not found (not a SLURM login node?)") from None
    except subprocess.TimeoutExpired:
        raise ValueError(f"launcher=slurm: {cmd[0]} gave no answer in 60 s (is slurmctld up?)") from None
    if out.returncode:
        said = (out.stderr.strip().splitlines() or ["no message"])[-1]
        raise ValueError(f"launcher=slurm: {cmd[0]} failed: {said}")
    return out.stdout


# submitit's layout of a launch's folder (hydra.launcher.submitit_folder without its "%j"):
# <job id>/ per job, <array id>_<index>/ per array task, <array id>/ for the array's script only;
# a task's result is <task>/<task>_<rank>_result.pkl, written before the task leaves the queue.
_TASK = re.compile(r"^\d+(_\d+)?$")


def submitted(folder: Path) -> list[str]:
    """The job ids submitit has submitted so far into ``folder`` (its per-job folders)."""
    if not folder.is_dir():
        return []
    names = {p.name for p in folder.iterdir() if p.is_dir() and _TASK.match(p.name)}
    arrays = {n.split("_")[0] for n in names if "_" in n}
    return sorted(n for n in names if n not in arrays)


def has_result(folder: Path, job_id: str) -> bool:
    """Whether the task ``job_id`` of ``folder`` wrote its result (it ran to its end)."""
    return any((folder / job_id).glob(f"{job_id}_*_result.pkl"))


@dataclasses.dataclass(frozen=True)
class Verdict:
    status: int  # the exit status the waiting command should end with: 2 refused, 1 a task lost
    message: str


class Watch:
    """One poll of the submitted tasks at a time (:meth:`poll`): a progress line when the counts
    change; a task :func:`stuck` cancels every watched array and ends the wait (status 2); once
    every task has left the queue, those without a result (cancelled, killed, out of time or
    memory) end it too (status 1), for without SLURM's accounting (``sacct``) submitit cannot
    tell such a task from a running one and would wait for it forever. A task is out of the queue
    without a result once ``grace_s`` has passed since it left."""

    def __init__(
        self,
        folder: Path,
        *,
        run: Callable[[Sequence[str]], str] = run_command,
        echo: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
        patience_s: float = 300.0,
        grace_s: float = 15.0,
    ):
        self.folder, self.run, self.echo, self.clock = folder, run, echo, clock
        self.patience_s, self.grace_s = patience_s, grace_s
        self.since: dict[tuple[str, str], float] = {}  # (task, reason) -> when first seen pending for it
        self.last = ""
        self.gone: dict[str, float] = {}  # task -> when first seen out of the queue without a result
        self.lost: set[str] = set()  # tasks said to have left the queue without a result

    def poll(self) -> Verdict | None:
        """Poll ``squeue`` once; the verdict that ends the wait, or None to wait on."""
        ids = submitted(self.folder)
        if not ids:
            return None
        arrays = sorted({i.split("_")[0] for i in ids})
        listed = {t.job_id: t for t in parse_squeue(self.run([*SQUEUE, "-j", ",".join(arrays)]))}
        tasks = [listed[i] for i in ids if i in listed]
        line = progress(tasks, len(ids))
        if line != self.last:
            self.echo(f"slurm: job {','.join(arrays)}: {line}")
            self.last = line
        now = self.clock()
        for t in tasks:
            if t.state != "PENDING":
                continue
            first = self.since.setdefault((t.job_id, t.reason), now)
            if stuck(t.reason, now - first, self.patience_s):
                self.run(["scancel", *arrays])
                why = f"pending for a reason that will not clear by itself: {t.reason}"
                return Verdict(2, f"slurm: task {t.job_id} is {why}; cancelled job {','.join(arrays)}")
        # a result written on a compute node may show here a little later (a shared file system's
        # caches): a task is lost once out of the queue without it for grace_s, as submitit itself
        # waits 15 s for a result file once a job has ended (core.py, _results_timeout_s)
        for i in ids:
            if i not in listed and not has_result(self.folder, i):
                self.gone.setdefault(i, now)
        gone = [i for i, t in sorted(self.gone.items()) if now - t >= self.grace_s and not has_result(self.folder, i)]
        for i in sorted(set(gone) - self.lost):
            self.echo(f"slurm: task {i} left the queue without a result (logs: {self.folder / i})")
        self.lost |= set(gone)
        if gone and not tasks:
            return Verdict(1, f"slurm: {len(gone)} of {len(ids)} tasks ended without a result: {', '.join(gone)}")
        return None


def wait_gone(
    folder: Path,
    *,
    run: Callable[[Sequence[str]], str] = run_command,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = 5.0,
) -> None:
    """Return once no task submitted into ``folder`` is in the queue: a launch that ended early
    (one task lost, submitit gave up) leaves the others running, and their units are not to be
    resubmitted while they run."""
    ids = set(submitted(folder))
    arrays = sorted({i.split("_")[0] for i in ids})
    while arrays and ids & {t.job_id for t in parse_squeue(run([*SQUEUE, "-j", ",".join(arrays)]))}:
        sleep(poll_s)
