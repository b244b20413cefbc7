"""Experiment tracking behind a tiny interface: a no-op logger (tests, default) and wandb.

wandb is an optional extra (``pip install -e '.[wandb]'``), imported only when a wandb logger is
made; without it that fails at once with the install line (:func:`require_wandb`).

Curves are logged from host arrays after a run, never from inside ``jit``. Every row carries
both step axes, ``sim_time`` (simulated wall-clock time step) and ``block_update`` (global
iteration k), and metric keys are '/'-namespaced ("loss/f_minus_fstar"), so a dashboard can
plot any metric against either axis, grouped by the ``meta.method`` config key.

wandb runs offline unless the user asks for online (``mode="online"`` or ``WANDB_MODE``), so
nothing needs a network. Offline runs land in ``<dir>/wandb/offline-run-*``; upload them later
with ``wandb sync <dir>/wandb/offline-run-*``. An online run whose server does not answer within
``init_timeout`` seconds falls back to offline with a ``RuntimeWarning`` (it never holds a sweep).
A wandb exception never kills a run: it becomes a ``RuntimeWarning`` and the logger goes quiet.

Besides curves and scalars a run can hold images (:meth:`WandbLogger.log_image`), tables
(:meth:`WandbLogger.log_table`) and file artifacts (:meth:`WandbLogger.log_artifact`). An
offline run is read back by :mod:`rpd.io.offline_run`.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Mapping, Protocol

import numpy as np

from rpd.io import offline_run
from rpd.io.store import to_jsonable
from rpd.validation import check_choice

AXES = ("sim_time", "block_update")
INSTALL_WANDB = "pip install -e '.[wandb]'"


class Logger(Protocol):
    def log_config(self, config: Mapping) -> None: ...

    def log_metrics(self, metrics: Mapping[str, Any], *, sim_time=None, block_update=None) -> None: ...

    def log_summary(self, summary: Mapping) -> None: ...

    def finish(self) -> None: ...


class NoOpLogger:
    """Accepts everything, does nothing."""

    def log_config(self, config: Mapping) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, Any], *, sim_time=None, block_update=None) -> None:
        pass

    def log_summary(self, summary: Mapping) -> None:
        pass

    def finish(self) -> None:
        pass


def rows(metrics: Mapping[str, Any], sim_time=None, block_update=None) -> list[dict]:
    """Turn curves {name: [n]} plus step axes [n] into n dict rows (host floats)."""
    axes = {k: v for k, v in zip(AXES, (sim_time, block_update)) if v is not None}
    if not axes:
        raise ValueError("log_metrics needs at least one step axis: sim_time or block_update")
    cols = {k: np.asarray(v).reshape(-1) for k, v in {**metrics, **axes}.items()}
    n = {k: c.shape[0] for k, c in cols.items()}
    if len(set(n.values())) != 1:
        raise ValueError(f"every curve and axis must have the same length, got {n}")
    return [{k: c[i].item() for k, c in cols.items()} for i in range(next(iter(n.values())))]


def require_wandb():
    """The ``wandb`` module, or a ModuleNotFoundError saying how to install the optional extra.

    Called before any work, so ``logger=wandb`` without wandb fails at once, not after a run."""
    try:
        import wandb
    except ImportError as exc:
        raise ModuleNotFoundError(
            f"logger=wandb needs wandb, an optional extra: {INSTALL_WANDB}", name="wandb"
        ) from exc
    return wandb


MODES = ("offline", "online", "disabled")


def resolve_mode(mode: str | None, name: str = "mode") -> str:
    """Explicit mode, else $WANDB_MODE, else "offline"; the error names ``name``."""
    mode = mode or os.environ.get("WANDB_MODE") or "offline"
    return check_choice(name, mode, MODES)


INIT_TIMEOUT = 30.0  # seconds an online run waits for its server before going offline


# Where wandb stages, caches and downloads artifacts, below the run's directory ``dir``
# (``<dir>/wandb/<sub>``) instead of the user's ~/.local/share/wandb and ~/.cache/wandb.
ARTIFACT_ENV = {"WANDB_DATA_DIR": "data", "WANDB_CACHE_DIR": "cache", "WANDB_ARTIFACT_DIR": "artifacts"}
_SET_HERE: dict[str, str] = {}  # the values this module set (a later run moves them; the user's stay)


def stage_in(dir) -> dict[str, str]:
    """Point wandb's artifact staging, cache and download directories (:data:`ARTIFACT_ENV`,
    read by wandb from the environment) into ``<dir>/wandb/``; a variable the user set is left
    as it is. Returns the variables and their values now."""
    for var, sub in ARTIFACT_ENV.items():
        if var in os.environ and _SET_HERE.get(var) != os.environ[var]:
            continue  # the user's own
        os.environ[var] = _SET_HERE[var] = str(Path(dir).resolve() / "wandb" / sub)
    return {var: os.environ[var] for var in ARTIFACT_ENV}


class WandbLogger:
    """One wandb run: group = experiment, tags = (method, "S<S>", *tags), config = resolved
    config plus ``meta = {experiment, method, S, **meta}`` (the keys the dashboard groups and
    filters on: every swept variable, see ``rpd.cli.wandb_log.sweep_meta``).

    ``mode="online"`` waits at most ``init_timeout`` seconds for the server, then logs offline
    (a ``RuntimeWarning`` says so and how to sync)."""

    def __init__(
        self,
        *,
        project: str,
        experiment: str,
        method: str | None = None,
        S: int | None = None,
        config: Mapping | None = None,
        mode: str | None = None,
        entity: str | None = None,
        dir: str | os.PathLike | None = None,
        name: str | None = None,
        tags: tuple[str, ...] = (),
        meta: Mapping | None = None,
        init_timeout: float = INIT_TIMEOUT,
        job_type: str | None = None,
    ):
        require_wandb()  # outside the guard: a missing package is an error, not a warning
        if not (isinstance(init_timeout, (int, float)) and init_timeout > 0):
            raise ValueError(f"logger.init_timeout must be a positive number of seconds, got {init_timeout!r}")
        self._run: Any = None  # the wandb Run (wandb is imported where used); None: tracking off
        self._defined: set[str] = set()
        self.init_timeout = float(init_timeout)
        self.fell_back_offline = False
        self.project = project
        base: dict[str, Any] = {"experiment": experiment}
        if method is not None:
            base["method"] = method
        if S is not None:
            base["S"] = int(S)
        meta = {**base, **to_jsonable(meta or {})}
        own = [t for t in (method, None if S is None else f"S{int(S)}") if t is not None]
        run_tags = list(dict.fromkeys([*own, *tags]))  # unique, in order
        self._guard(
            "init",
            self._init,
            project=project,
            entity=entity,
            group=experiment,
            name=name,
            tags=run_tags,
            mode=resolve_mode(mode),
            job_type=job_type,
            dir=None if dir is None else str(dir),
            config={**to_jsonable(config or {}), "meta": meta},
        )

    def _init(self, dir, mode, **kw):
        import wandb

        if dir is not None:
            Path(dir).mkdir(parents=True, exist_ok=True)
            stage_in(dir)  # artifacts staged in the run's directory, not the user's home

        def init(mode):
            settings = wandb.Settings(
                console="off",
                x_disable_stats=True,
                disable_git=True,
                save_code=False,
                silent=True,
                init_timeout=self.init_timeout,
            )
            return wandb.init(dir=dir, settings=settings, mode=mode, **kw)

        try:
            self._run = init(mode)
        except Exception as exc:
            if mode != "online":
                raise
            where = f"{dir or '.'}/wandb/offline-run-*"
            warnings.warn(
                f"wandb online init failed ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}); logging this run "
                f"offline instead: upload it later with `wandb sync {where}`",
                RuntimeWarning,
                stacklevel=4,
            )
            self.fell_back_offline = True
            self._run = init("offline")
        for axis in AXES:
            self._run.define_metric(axis, hidden=False)

    def _guard(self, what: str, fn, *args, **kw) -> None:
        if what != "init" and self._run is None:
            return
        try:
            fn(*args, **kw)
        except Exception as exc:  # tracking must never kill a run
            warnings.warn(f"wandb {what} failed, tracking disabled for this run: {exc!r}", RuntimeWarning, stacklevel=3)
            self._run = None

    @property
    def run_dir(self) -> Path | None:
        """The run's local directory (``.../wandb/offline-run-*`` offline)."""
        return None if self._run is None else Path(self._run.dir).parent

    @property
    def id(self) -> str | None:
        """The wandb run id (None when tracking is off or init failed)."""
        return None if self._run is None else self._run.id

    @property
    def mode(self) -> str | None:
        """ "offline" / "online" / "disabled" as the run actually runs (None without a run)."""
        return None if self._run is None else self._run.settings.mode

    def log_image(self, key: str, image) -> None:
        """An image: a path (PNG, ...), a matplotlib figure or an array; shown as ``key``."""
        import wandb

        def log():
            img = wandb.Image(str(image) if isinstance(image, (str, os.PathLike)) else image)
            self._run.log({key: img})

        self._guard("image", log)

    def log_table(self, key: str, rows: list[Mapping]) -> None:
        """Rows of dicts as a ``wandb.Table`` (columns in first-seen order; values that are not
        scalars become JSON text)."""
        import wandb

        cols: list[str] = []
        for r in rows:
            cols += [str(k) for k in r if str(k) not in cols]

        def cell(v):
            v = to_jsonable(v, key)
            return json.dumps(v) if isinstance(v, (list, dict)) else v

        data = [[cell(r.get(c)) for c in cols] for r in rows]

        def log() -> None:
            # wandb's stub asks list[str | int] (invariant) where a list of names will do
            self._run.log({key: wandb.Table(columns=cols, data=data)})  # type: ignore[arg-type]

        self._guard("table", log)

    def log_artifact(self, name: str, type: str, paths, metadata: Mapping | None = None) -> None:
        """Files as a wandb artifact ``name`` of ``type`` (names: letters, digits, '-', '_', '.')."""
        import wandb

        def log():
            art = wandb.Artifact(name, type=type, metadata=to_jsonable(metadata or {}))
            for p in paths:
                art.add_file(str(p))
            self._run.log_artifact(art)

        self._guard("artifact", log)

    def log_config(self, config: Mapping) -> None:
        self._guard("config", lambda: self._run.config.update(to_jsonable(config), allow_val_change=True))

    def log_metrics(self, metrics: Mapping[str, Any], *, sim_time=None, block_update=None) -> None:
        """Log curves {name: [n]} row by row; the x axis defaults to sim_time when given."""
        table = rows(metrics, sim_time, block_update)
        step_metric = "sim_time" if sim_time is not None else "block_update"

        def log():
            for key in metrics:
                if key not in self._defined:
                    self._run.define_metric(key, step_metric=step_metric)
                    self._defined.add(key)
            for row in table:
                self._run.log(row)

        self._guard("log", log)

    def log_summary(self, summary: Mapping) -> None:
        self._guard("summary", lambda: self._run.summary.update(to_jsonable(summary)))

    def finish(self, timeout: float = 30.0) -> None:
        """Finish the run and wait (up to ``timeout`` s) until its transaction log is complete.

        ``wandb.finish`` can return before wandb's service has flushed the run's ``.wandb``
        file, so a reader (``read_offline_run``, ``wandb sync``) right after could see a
        truncated log; we wait for its closing "exit" record instead."""
        run_dir = self.run_dir
        # Only a run that writes a log (offline / online, not "disabled") has one to wait for.
        has_log = run_dir is not None and any(run_dir.glob("run-*.wandb"))
        self._guard("finish", self._run.finish if self._run else None)
        self._run = None
        if has_log and run_dir is not None and not offline_run.wait_until_complete(run_dir, timeout):
            warnings.warn(
                f"wandb run log in {run_dir} still incomplete after {timeout} s", RuntimeWarning, stacklevel=2
            )


def make_logger(kind: str = "none", **kwargs) -> Logger:
    """``kind`` "none" -> NoOpLogger; "wandb" -> WandbLogger(**kwargs)."""
    check_choice("logger", kind, {"none", "wandb"})
    return NoOpLogger() if kind == "none" else WandbLogger(**kwargs)


def shutdown() -> None:
    """Stop wandb's background service process (at the end of a process or a test); a no-op
    when wandb was never imported (or is not installed)."""
    wandb = sys.modules.get("wandb")
    if wandb is None:
        return
    try:
        wandb.teardown()
    except Exception as exc:
        warnings.warn(f"wandb teardown failed: {exc!r}", RuntimeWarning, stacklevel=2)
