"""What the tests share to compose hydra configs and run the entry points: the repository root,
its configs/, one compose call, tiny train configs (and E12's), and the plumbing of the toy-entry tests (a
registering fixture, a config folder, the entry point run after ``register()``, a sweep's table)."""

import contextlib
import logging
import os
import runpy
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose as _hydra_compose
from hydra import initialize_config_dir

import experiments.schemas  # noqa: F401  (the schemas in hydra's ConfigStore, as the entry points store them)

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"

TINY_LINEAR = [
    "objective.n=32",
    "objective.d=12",
    "objective.batch_size=4",
    "schedule.S=3",
    "schedule.N=8",
    "method.gamma_lo=-5",
    "method.gamma_hi=-4",
    "method.seeds=[0]",
]
TINY_LM = [
    "schedule.S=3",
    "schedule.T=24",
    "schedule.R=3",
    "schedule.H=2",
    "objective.batch_size=2",
    "objective.seq_len=8",
    "objective.width=8",
    "objective.heads=2",
    "objective.heldout_batches=1",
    "method.gamma_lo=-3",
    "method.gamma_hi=-3",
    "method.stride=4",
]

# E12 (rpd.studies.optimizers) on one small quadratic at S = 4 stages, N = 24 microbatches, H = 2
TINY_E12 = dict(
    objectives=("nesterov_quadratic",),
    H=(2,),
    diloco=False,
    S={"nesterov_quadratic": 4},
    N={"nesterov_quadratic": 24},
    n=40,
    d=16,
    max_shifts=1,
    points=6,
)


def compose(overrides, name: str = "train"):
    """The config ``name`` (configs/<name>.yaml) with hydra ``overrides``, as the entry point sees it."""
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return _hydra_compose(name, overrides=list(overrides))


def resolved(cfg):
    """The :class:`rpd.cli.specs.TrainSpec` that ``rpd.cli.train.run`` resolves ``cfg`` (a composed
    config or a plain dict) into, taken where the job begins: nothing is stored or trained."""
    from unittest import mock

    from rpd.cli import train

    with mock.patch.object(train, "_job", lambda ts, job: ts):
        return train.run(cfg)


def registered(register, table: dict, name: str):
    """A fixture that calls the test file's ``register()`` for one test and takes ``name`` out of
    ``table`` (the registry it went into) after it."""

    @pytest.fixture
    def fixture():
        register()
        yield
        del table[name]

    return fixture


def config_dir(group: str, name: str, yaml: str):
    """A fixture: a config folder for ``hydra.searchpath`` under the test's ``tmp_path`` holding
    one yaml, ``<group>/<name>.yaml``."""

    @pytest.fixture
    def fixture(tmp_path: Path) -> Path:
        (tmp_path / "cfg" / group).mkdir(parents=True)
        (tmp_path / "cfg" / group / f"{name}.yaml").write_text(yaml)
        return tmp_path / "cfg"

    return fixture


def run_as_main(module: str, args: list[str], monkeypatch) -> object:
    """``python -m <module> <args>`` in this process, as ``python -m`` runs it (runpy, ``__main__``;
    tests/experiments/refusing_commands.py runs the slow suite's the same way): its exit status, 0
    when it returns. For a command refused before hydra starts its job
    (:mod:`experiments.compose_check`) or in its job: a fresh interpreter costs ~4 s of imports,
    this none. A job configures logging (``hydra.job_logging``: a handler on the root logger bound to
    the test's captured stderr, the root's level, existing loggers disabled); pytest closes that stream
    after the test, and the next record anywhere in the process failed with "I/O operation on closed
    file" (under xdist the worker lost its stderr), so the loggers are put back as they were
    (:func:`_logging_kept`). The Ctrl-C routing the entry point installs is undone after."""
    monkeypatch.setattr(sys, "argv", [module, *args])
    monkeypatch.delitem(sys.modules, module, raising=False)  # run afresh as __main__
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # rpd.runtime.interrupt.install sets it
    sigint = signal.getsignal(signal.SIGINT)
    try:
        with _logging_kept():
            runpy.run_module(module, run_name="__main__")
    except SystemExit as exc:
        return exc.code
    finally:
        signal.signal(signal.SIGINT, sigint)
    return 0


@contextlib.contextmanager
def _logging_kept():
    """The block sees logging as a fresh interpreter does, and the process gets its own back after.

    Hydra's job configures logging with ``logging.config.dictConfig``, which first shuts down every
    handler alive in the process (``logging._handlerList``), not only the root's: pytest's and absl's
    too. absl's handler closes its stream when that is no longer ``sys.stderr``, and its stream was
    the stderr pytest captured into when absl was imported, so pytest's own capture file was closed
    under it ("I/O operation on closed file" at the session's end, "lost sys.stderr" under xdist):
    the handlers alive before the block are hidden from that shutdown and put back after. Every
    logger's handlers, level, propagation and disabled flag are restored; handlers the block added
    (the job's stream and file handlers) are closed."""
    manager = logging.Logger.manager

    def loggers():
        return [logging.getLogger()] + [lg for lg in manager.loggerDict.values() if isinstance(lg, logging.Logger)]

    kept = {id(lg): (lg.handlers[:], lg.level, lg.propagate, lg.disabled) for lg in loggers()}
    alive, named = logging._handlerList[:], dict(logging._handlers)  # type: ignore[attr-defined]
    del logging._handlerList[:]  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for lg in loggers():
            handlers, level, propagate, disabled = kept.get(id(lg), ([], logging.NOTSET, True, False))
            for handler in lg.handlers:
                if handler not in handlers:
                    handler.close()
            lg.handlers[:] = handlers
            lg.setLevel(level)
            lg.propagate, lg.disabled = propagate, disabled
        logging._handlerList[:0] = alive  # type: ignore[attr-defined]
        logging._handlers.update(named)  # type: ignore[attr-defined]


def _env() -> dict[str, str]:
    return dict(os.environ, WANDB_MODE="disabled", PYTHONPATH=str(ROOT))


def run_registered(
    test_file: str, args: list[str], tmp_path: Path, configs: Path | None = None, module: str = "experiments.train"
) -> subprocess.CompletedProcess:
    """``python -m <module> <args>`` in a fresh interpreter, run by a script that imports the test
    file ``test_file`` (its ``__file__``) and calls its ``register()`` first; results, sweeps and
    hydra's outputs go under ``tmp_path``, ``configs`` joins hydra's search path."""
    here = Path(test_file).resolve()
    script = (
        f"import sys; sys.path[:0] = [{str(here.parent)!r}, {str(here.parent.parent)!r}]; "
        f"import {here.stem} as t; t.register(); "
        # the test file may import the module itself: run it afresh as __main__
        f"sys.modules.pop({module!r}, None); "
        f"import runpy; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    train = [f"results_root={tmp_path / 'results'}", f"hydra.sweep.dir={tmp_path / 'multirun'}"]
    cmd = [
        sys.executable,
        "-c",
        script,
        *args,
        *([f"hydra.searchpath=[file://{configs}]"] if configs is not None else []),
        *(train if module == "experiments.train" else []),
        f"hydra.run.dir={tmp_path / 'outputs'}",
    ]
    return subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)


def sweep_losses(multirun: Path, column: str, names: tuple[str, ...]) -> dict[str, float]:
    """``python -m rpd.io.sweeps ls <multirun> --columns <column>,final_best``: the final loss of the
    one row that names each of ``names`` (a row naming several counts for the first)."""
    ls = subprocess.run(
        [sys.executable, "-m", "rpd.io.sweeps", "ls", str(multirun), "--columns", f"{column},final_best"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ls.returncode == 0, ls.stderr[-3000:]
    lines = [x for x in ls.stdout.splitlines() if any(n in x for n in names)]
    assert len(lines) == len(names), ls.stdout
    losses = {next(n for n in names if n in x): float(x.split()[-1]) for x in lines}
    assert sorted(losses) == sorted(names), ls.stdout
    return losses


def multirun(
    args: list[str], tmp: Path, results: Path | None = None, cwd: Path = ROOT, **env: str
) -> subprocess.CompletedProcess:
    """``python -m experiments.train -m <args>`` run in ``cwd``: the runs stored under ``results``
    (default ``tmp/results``), the sweep's folder ``tmp/multirun``; wandb off, ``env`` added."""
    cmd = [
        sys.executable,
        "-m",
        "experiments.train",
        "-m",
        *args,
        f"results_root={tmp / 'results' if results is None else results}",
        f"hydra.sweep.dir={tmp / 'multirun'}",
    ]
    full_env = dict(os.environ, WANDB_MODE="disabled", **env)
    return subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=300)


def multirun_fixture(args: list[str], in_tmp: bool = False, **env: str):
    """A module's fixture: :func:`multirun` of ``args`` once, in a fresh folder (run there with
    ``in_tmp``, else in the repository), checked to exit 0; gives (the folder, the process)."""

    @pytest.fixture(scope="module")
    def fixture(tmp_path_factory):
        tmp = tmp_path_factory.mktemp("sweep")
        proc = multirun(args, tmp, cwd=tmp if in_tmp else ROOT, **env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return tmp, proc

    return fixture
