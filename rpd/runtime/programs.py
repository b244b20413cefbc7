"""Compiled programs stored under what they compute, so a new process loads them without tracing.

JAX's persistent compilation cache (``rpd.runtime.compile_cache``) keys an executable on the lowered
module: a process must trace and lower every program before it can look it up, which is most of
what a second run of a figure spends (≈ 50 ms a program, hundreds of programs). rpd knows what
its programs compute before tracing them: the core and LocalSGD programs are built from an
objective's :attr:`~rpd.objectives.base.Objective.program_id` and static options. A
:class:`Program` keeps, per argument signature (the pytree structure, shapes, dtypes and weak
types of the arguments), one executable: in memory, and, when the store is on, on disk under a
hash of

- the program's name (e.g. the core's options and the objective's ``program_id``),
- the argument signature,
- the environment that decides what tracing and compiling produce: rpd's own source (a hash of
  every module in the package but the command line's, ``rpd.cli``), the versions of jax and
  jaxlib, the backend, its devices, ``XLA_FLAGS``, and JAX's configuration that affects tracing.

A stored executable is the one XLA built in an earlier process, so its results are bitwise
those of a fresh compile. The store is on wherever the persistent cache is
(:func:`rpd.runtime.compile_cache.use` / ``enable``): ``<cache dir>/rpd/``. Like JAX's cache it is
trusted input (loading an executable runs code); keep it where only you can write.

jaxlib 0.10.2 serializes a CPU executable that JAX loaded from its own persistent cache without
its kernels: loaded again, it fails on its first run with ``Function <kernel> not found``. The
store compiles each program under a module name of its own (``rpd_<key>``: JAX's cache keys on
the module, so another program with the same HLO is never served in its place) and does not
store an executable that still came from JAX's cache; and it waits for a loaded executable's
first run: one that fails that way is compiled again and stored anew (``COUNTS["broken"]``).
A broken entry costs a compile, never a result.

jaxlib fills the function table of its CPU LAPACK kernels (eigh, QR, ...) from SciPy the first
time a process lowers a linear-algebra op. An executable loaded from the store calls them
without lowering anything, so in a process that has not lowered one yet it jumps to a null
address: a segfault, not an error the first-run check could catch (E17's rotated Adam, a warm
cache). :func:`_load` therefore lowers one small eigh and QR for the CPU first, once per process.

Objective functions are named by the builders that make them: :func:`named_builder` memoizes a
builder (like ``functools.cache``) and names every object it returns by the builder's qualified
name and arguments, so ``Objective.program_id`` can describe them in words that mean the same in
every process. An objective whose functions were not made by a named builder has no
``program_id``; its programs are then cached in memory and by JAX's persistent cache only.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import re
import threading
import time
from pathlib import Path
from typing import Callable

import jax

# object id -> (object, stable name). Named objects are held by the builders' caches (and
# here), so an id is never reused for another object.
_NAMES: dict[int, tuple[object, str]] = {}
SUBDIR = "rpd"  # the store's directory inside the persistent cache's
_STORE: dict[str, Path | None] = {"dir": None}
# Executables loaded from the store and seconds spent loading them, for compile_cache.count_programs;
# stored executables that could not run (compiled again).
COUNTS = {"loaded": 0, "seconds": 0.0, "broken": 0}


def named_builder(builder: Callable) -> Callable:
    """Memoize ``builder`` on its (hashable) arguments, like ``functools.cache``, and name every
    object it returns (a tuple, or one object) ``module.qualname(args)[i]``: see :func:`name_of`."""
    cached = functools.cache(builder)

    @functools.wraps(builder)
    def build(*args):
        out = cached(*args)
        base = f"{builder.__module__}.{builder.__qualname__}{args!r}"
        for i, obj in enumerate(out if isinstance(out, tuple) else (out,)):
            _NAMES.setdefault(id(obj), (obj, f"{base}[{i}]"))
        return out

    for name in ("cache_info", "cache_clear"):  # functools.cache's two methods, on the wrapper too
        setattr(build, name, getattr(cached, name))
    return build


def name_of(obj) -> str | None:
    """The stable name :func:`named_builder` gave ``obj`` (``"None"`` for None), or None when it
    has none."""
    if obj is None:
        return "None"
    entry = _NAMES.get(id(obj))
    return entry[1] if entry is not None and entry[0] is obj else None


def use_store(path: str | os.PathLike | None) -> Path | None:
    """Store executables under ``path`` (created if absent); None turns the store off."""
    if path is None:
        _STORE["dir"] = None
        return None
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    _STORE["dir"] = path
    return path


def store_dir() -> Path | None:
    return _STORE["dir"]


# Left out of the source hash: the command line's library (rpd.cli), as experiments/ was before it
# moved there: a change to a config schema or a command does not recompile or recompute.
NOT_HASHED = ("cli",)


@functools.cache
def source_hash() -> str:
    """sha256 of every module of the rpd package (path and contents) but those under
    :data:`NOT_HASHED`: programs and results change with them."""
    return tree_hash(Path(__file__).resolve().parents[1])  # rpd/


def tree_hash(root: Path) -> str:
    """sha256 of the modules under ``root`` (path and contents), :data:`NOT_HASHED` left out."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in NOT_HASHED:
            continue
        h.update(str(rel).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def environment() -> str:
    """What besides a program's name and arguments decides its executable (see the module doc)."""
    import jaxlib
    from jax._src import config

    devices = jax.devices()
    # JAX's tracing configuration; a few entries are objects, whose repr carries an address
    trace_config = re.sub(r" at 0x[0-9a-f]+", "", repr(config.trace_context()))
    return repr(
        (
            source_hash(),
            jax.__version__,
            jaxlib.__version__,
            devices[0].platform,
            getattr(devices[0].client, "platform_version", ""),
            tuple(d.device_kind for d in devices),
            os.environ.get("XLA_FLAGS", ""),
            trace_config,
        )
    )


def signature(args: tuple, kwargs: dict) -> tuple:
    """The arguments as an executable sees them: the pytree structure, and per leaf its type
    (``jax.typeof``: shape, dtype, weak type) and, for an array committed to devices, its
    sharding."""
    leaves, treedef = jax.tree.flatten((args, kwargs))
    return (str(treedef),) + tuple(
        (str(jax.typeof(x)), repr(x.sharding) if getattr(x, "committed", False) else None) for x in leaves
    )


_HITS: dict[int, int] = {}  # thread id -> JAX persistent-cache hits seen on that thread


def _count_hit(event: str, **_kw) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        tid = threading.get_ident()
        _HITS[tid] = _HITS.get(tid, 0) + 1


@functools.cache
def _listen() -> None:
    jax.monitoring.register_event_listener(_count_hit)


class Program:
    """``jax.jit(fun)`` named by what it computes (``name``, or None when it has no stable name):
    calls compile once per argument :func:`signature` and keep the executable, loading it from
    the store (or saving it there) when the store is on and the program has a name. ``lower``
    and :attr:`jitted` are the plain ``jax.jit(fun)``'s."""

    __slots__ = ("_exes", "_fun", "_lock", "jitted", "name")

    def __init__(self, fun: Callable, name: str | None):
        self._fun, self.name = fun, name
        self.jitted = jax.jit(fun)
        self._exes: dict = {}
        self._lock = threading.Lock()

    def __call__(self, *args, **kwargs):
        if self.name is None or _STORE["dir"] is None:
            return self.jitted(*args, **kwargs)
        sig = signature(args, kwargs)
        exe = self._exes.get(sig)
        if exe is not None:
            return exe(*args, **kwargs)
        with self._lock:
            if sig not in self._exes:
                path = _STORE["dir"] / (
                    hashlib.sha256(repr((self.name, sig, environment())).encode()).hexdigest() + ".exe"
                )
                exe = _load(path)
                if exe is not None:
                    # Its first run is waited for: a stored executable can lack a kernel (below)
                    try:
                        out = jax.block_until_ready(exe(*args, **kwargs))
                    except jax.errors.JaxRuntimeError as err:
                        if "not found" not in str(err):
                            raise
                        COUNTS["loaded"] -= 1
                        COUNTS["broken"] += 1
                        path.unlink(missing_ok=True)
                    else:
                        self._exes[sig] = exe
                        return out
                self._exes[sig] = self._compile(path, args, kwargs)
        return self._exes[sig](*args, **kwargs)

    def lower(self, *args, **kwargs):
        return self.jitted.lower(*args, **kwargs)

    def _cache_size(self) -> int:
        return self.jitted._cache_size() + len(self._exes)  # type: ignore[attr-defined]  # jax's jit object: _cache_size is not in its type hints

    def _compile(self, path: Path, args: tuple, kwargs: dict):
        """Compile for these arguments and store the executable at ``path``."""
        from jax.experimental import serialize_executable

        # An executable JAX loaded from its persistent cache serializes without its kernels
        # (loaded again, it fails with "Function ... not found" when run; jaxlib 0.10.2 on CPU).
        # The program is compiled under a name of its own (the module name is part of JAX's
        # cache key: programs with equal HLO but other rpd names never meet there), and one
        # that still came from JAX's cache (its store entry was lost) is not stored.
        _listen()
        fun = self._fun

        def named(*a, **k):
            return fun(*a, **k)

        named.__name__ = named.__qualname__ = "rpd_" + path.stem[:16]
        tid = threading.get_ident()
        hits = _HITS.get(tid, 0)
        exe = jax.jit(named).lower(*args, **kwargs).compile()
        if _HITS.get(tid, 0) != hits:
            return exe  # from JAX's cache: kept in memory only
        try:  # the devices it runs on, in order (deserializing defaults to all of them)
            device_ids = [d.id for d in exe._executable.xla_executable.local_devices()]  # type: ignore[attr-defined]  # jax: xla_executable is untyped
            blob = pickle.dumps((serialize_executable.serialize(exe), device_ids))
        except (AttributeError, ValueError, NotImplementedError):  # not serializable: kept in memory only
            return exe
        tmp = path.with_suffix(f".{os.getpid()}.{tid}.tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, path)  # atomic: a reader sees the whole file or none
        return exe


@functools.cache
def _prepare_kernels() -> None:
    """Fill jaxlib's CPU LAPACK function table (module doc) by lowering, not compiling, a 2 × 2
    eigh and QR for the CPU: once per process, before the first stored executable runs."""
    import jax.numpy as jnp
    import numpy as np

    x = np.eye(2, dtype=np.float32)
    jax.jit(lambda a: (jnp.linalg.eigh(a), jnp.linalg.qr(a))).trace(x).lower(lowering_platforms=("cpu",))


def _load(path: Path):
    """The executable stored at ``path``, or None (absent, or unreadable: a partial copy,
    another jaxlib)."""
    from jax.experimental import serialize_executable

    if not path.exists():
        return None
    _prepare_kernels()
    t0 = time.perf_counter()
    try:
        (payload, in_tree, out_tree), device_ids = pickle.loads(path.read_bytes())
        by_id = {d.id: d for d in jax.devices()}
        exe = serialize_executable.deserialize_and_load(
            payload, in_tree, out_tree, execution_devices=[by_id[i] for i in device_ids]
        )
    except Exception:
        return None
    COUNTS["loaded"] += 1
    COUNTS["seconds"] += time.perf_counter() - t0
    return exe
