"""JAX's persistent compilation cache, on by default for the figure script and sweeps.

Compiled programs are keyed by what they compute (``Objective.program_key``: shapes, dtypes,
static options; the numbers are arguments), so their XLA executables can be reused across
processes: ``enable()`` points JAX's persistent cache at the user's cache directory,
``$RPD_CACHE/jax`` (default ``~/.cache/rpd/jax``; never the source tree or a results store,
which may be read-only), and caches every program, however small or quick to compile.
A second ``reproduce_paper_figures`` / ``experiments.figure`` / ``experiments.train`` process
(a hydra sweep's next job, a re-run with ``--force``) then loads its programs from disk
instead of compiling them. JAX's cache is keyed on the lowered module, so that process still
traces and lowers every program; the core's and LocalSGD's programs, which rpd can name before
tracing, are also stored in ``<cache>/rpd`` (:mod:`rpd.runtime.programs`) and loaded without tracing.

The environment variable ``RPD_JAX_CACHE`` overrides this: ``0`` (or ``off``,
``false``, ``no``) turns the cache off, a path puts it there instead. Library calls
(``import rpd``, notebooks, tests) never turn it on by themselves; call :func:`enable`.
The cache is trusted input (JAX loads executables from it): keep it in a directory only you
can write to.
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from pathlib import Path

from rpd.runtime import programs

ENV = "RPD_JAX_CACHE"
USER_CACHE_ENV = "RPD_CACHE"  # rpd's cache directory (the corpus too), default ~/.cache/rpd
SUBDIR = "jax"
_OFF = ("0", "off", "false", "no")
_ON = ("", "1", "on", "true", "yes")


def user_cache_dir() -> Path:
    """rpd's cache directory: ``$RPD_CACHE`` if set, else ``~/.cache/rpd``."""
    return Path(os.environ.get(USER_CACHE_ENV) or "~/.cache/rpd").expanduser()


def cache_dir() -> Path | None:
    """Where :func:`enable` puts the cache (``<user cache>/jax``, or ``$RPD_JAX_CACHE``), or None
    when the environment turns it off."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in _OFF:
        return None
    if value.lower() in _ON:
        return user_cache_dir() / SUBDIR
    return Path(value).expanduser()


def enable() -> Path | None:
    """Turn JAX's persistent compilation cache on (see the module doc); returns its directory,
    or None if ``RPD_JAX_CACHE`` turns it off or the directory cannot be made (a warning: the
    run goes on, compiling). Every program is cached (no minimum compile time or size). Call it
    before the first compilation."""
    path = cache_dir()
    if path is None:
        return None
    try:
        return use(path)
    except OSError as err:
        warnings.warn(
            f"JAX's compilation cache is off: cannot use {path} ({err.strerror or err}); "
            f"set {ENV}=<dir> or {USER_CACHE_ENV}=<dir>",
            RuntimeWarning,
            stacklevel=2,
        )
        return None


def use(path: str | os.PathLike) -> Path:
    """Put JAX's persistent cache at ``path`` (created if absent), caching every program, and
    rpd's executable store (:mod:`rpd.runtime.programs`) in its subdirectory ``rpd``."""
    import jax

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path.resolve()))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    programs.use_store(path / programs.SUBDIR)
    return path


def active() -> Path | None:
    """The persistent cache's directory in this process (set by :func:`enable` / :func:`use`,
    or by JAX's own configuration), or None; worker processes pass it on to their children."""
    import jax

    value = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]  # jax's Config types no option attributes
    return Path(value) if value else None


# Programs compiled and loaded, counted from JAX's monitoring events: every XLA program goes
# through one backend compile event; those served by the persistent cache also raise a hit.
_COUNTS = {"events": 0, "hits": 0, "seconds": 0.0}
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_HIT_EVENT = "/jax/compilation_cache/cache_hits"
# Every stage of building a program, timed: tracing to a jaxpr and lowering it to StableHLO (paid
# even when the program then comes from the persistent cache, whose key is the lowered module),
# then XLA's compile or the cache's load.
_STAGE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    _COMPILE_EVENT,
)


@functools.cache
def _listen() -> None:
    """Register the two listeners, once per process."""
    import jax

    def on_duration(event: str, duration_secs: float, **_kw: str | int) -> None:
        if event == _COMPILE_EVENT:
            _COUNTS["events"] += 1
        if event in _STAGE_EVENTS:
            _COUNTS["seconds"] += duration_secs

    def on_event(event, **_kw):
        if event == _HIT_EVENT:
            _COUNTS["hits"] += 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)


@contextlib.contextmanager
def count_programs():
    """``with count_programs() as n:`` -- on exit ``n`` holds the XLA programs this process
    built inside the block: ``compiled`` (by XLA) and ``from_cache`` (loaded from the persistent
    cache or rpd's executable store), and ``seconds``, the time spent building them (tracing,
    lowering, XLA compilation or loading). Programs already in memory (JAX's or rpd's in-process
    caches) count neither. Counts are process-wide, so work on other threads during the block
    counts too."""
    _listen()
    events, hits, seconds = _COUNTS["events"], _COUNTS["hits"], _COUNTS["seconds"]
    stored, stored_s = programs.COUNTS["loaded"], programs.COUNTS["seconds"]
    out: dict = {}
    try:
        yield out
    finally:
        loaded = _COUNTS["hits"] - hits
        from_store = programs.COUNTS["loaded"] - stored
        out.update(
            compiled=_COUNTS["events"] - events - loaded,
            from_cache=loaded + from_store,
            seconds=round(_COUNTS["seconds"] - seconds + programs.COUNTS["seconds"] - stored_s, 3),
        )
