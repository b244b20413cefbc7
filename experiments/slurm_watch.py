"""The hydra callback of ``launcher=slurm`` (``hydra.callbacks.slurm_watch`` in
configs/launcher/slurm.yaml), for a sweep (``experiments.train -m``) and a fanned-out figure's
jobs (``experiments.figure_job -m``) alike; what it computes is :mod:`rpd.cli.slurm`.

- Before anything is submitted, the launcher's request (``hydra.launcher.cpus_per_task``,
  ``mem_gb``, ``gpus_per_node``, ``partition``) is checked against ``sinfo``: a request no node can
  meet is one line naming the field and what the largest node has, exit 2.
- While submitit waits for the array, a thread polls ``squeue`` every ``poll_s`` seconds: a
  progress line (pending / running / done) when the counts change; a task pending for a reason
  that will not clear by itself (``PartitionConfig``, a per-job QOS limit; a group limit or
  ``ReqNodeNotAvail`` after ``patience_s``) cancels the array and ends the command, exit 2; once every
  task has left the queue, one without a result (``scancel``, killed, out of time) ends it, exit 1
  (without ``sacct`` submitit would wait for it forever).

    python -m experiments.train -m launcher=slurm method=pd,rpd schedule.S=2,4
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

from hydra import compose, initialize_config_dir
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from rpd.cli import checks, fanout, slurm


def request(launcher: DictConfig) -> slurm.Request:
    """One task's request from the composed ``hydra.launcher`` node."""
    mem = launcher.get("mem_gb")
    return slurm.Request(
        cpus_per_task=int(launcher.get("cpus_per_task") or 1),
        tasks_per_node=int(launcher.get("tasks_per_node") or 1),
        mem_gb=None if mem is None else float(mem),
        gpus_per_node=int(launcher.get("gpus_per_node") or 0),
        partition=launcher.get("partition"),
    )


def check(launcher: DictConfig) -> None:
    """ValueError naming the ``hydra.launcher`` field when no node of ``sinfo`` can run a task."""
    slurm.check_request(request(launcher), slurm.parse_sinfo(slurm.run_command(slurm.SINFO)))


def check_launch(size: str, overrides: Sequence[str], config_dir: Path) -> None:
    """:func:`check` of the launcher node a ``size`` figure's jobs get (configs/launcher/slurm.yaml,
    the size's request, then ``overrides``), composed outside a hydra app (the figure script)."""
    sized = [*fanout.slurm_overrides(size, overrides), *overrides]
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        node = compose("figure_job", ["launcher=slurm", "plan=-", "unit=0", *sized], return_hydra_config=True)
    check(node.hydra.launcher)


class SlurmWatch(Callback):
    """Check the request before submitting; watch the array while submitit waits for it."""

    def __init__(self, poll_s: float = 5.0, patience_s: float = 300.0) -> None:
        self.poll_s, self.patience_s = poll_s, patience_s
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    # submitit pickles the launcher, and with it hydra's callbacks, into each job: the thread and
    # its event stay here
    def __getstate__(self) -> dict:
        return {"poll_s": self.poll_s, "patience_s": self.patience_s}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        launcher = config.hydra.launcher
        try:
            check(launcher)
        except ValueError as exc:
            checks.refuse(exc)  # one line, exit 2: nothing submitted
        folder = Path(str(launcher.submitit_folder).replace("%j", "")).resolve()
        watch = slurm.Watch(folder, echo=self._say, patience_s=self.patience_s)
        self.thread = threading.Thread(target=self._watch, args=(watch,), daemon=True, name="slurm-watch")
        self.thread.start()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()

    @staticmethod
    def _say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def _watch(self, watch: slurm.Watch) -> None:
        while not self.stop.wait(self.poll_s):
            try:
                why = watch.poll()
            except ValueError as exc:  # squeue unreachable for a moment: said, and polled again
                self._say(str(exc))
                continue
            if why is not None:
                self._say(f"error: {why.message}")
                # the main thread sits in submitit's wait for the array, which has no way to be
                # told to stop; nothing of the array is left in the queue to clean up
                os._exit(why.status)
