"""Hydra composition mistakes in one line, before hydra creates a run or sweep folder.

``one_line(main, config_name)`` wraps an entry point's ``@hydra.main`` function: it composes the
command line's config first (hydra's compose API, every value of each swept override in turn)
and, when hydra cannot compose it, prints one line naming the group or key and the nearest valid
choices (:mod:`difflib`) and exits with status 2, like every other refusal
(:func:`rpd.cli.checks.refuse`):

    error: schedule=zbh1: no such schedule; nearest: zb_h1, zb_h2, zb_v (configs/schedule/)
    error: schedule.SS: no such key in schedule; nearest: S (keys: D, H, M, N, R, S, T, ...)

Nothing is written: the check runs before hydra's own composition, so a refused command leaves
no ``outputs/`` or ``multirun/`` folder. ``RPD_DEBUG=1`` skips the check (hydra's own report).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import io
import os
import sys
import typing
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra._internal.utils import get_args_parser
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from experiments import schemas  # the schemas the configs compose onto, in hydra's ConfigStore
from rpd.cli import checks, config, objective_config, optimizer_config, schedule_config
from rpd.validation import nearest

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _combinations(overrides: list[str]) -> list[list[str]]:
    """The override lists to compose: each sweep at its first value, then every other value of
    each sweep with the rest at their first (1 + the extra values, not the whole product)."""
    parser = OverridesParser.create()
    parsed = []
    for text in overrides:
        try:
            parsed += parser.parse_overrides([text])
        except OverrideParseException as exc:
            raise ValueError(f"{text}: {str(exc).splitlines()[0]}") from None
    values: list[list[str | None]] = []  # None: a sweep with no listed values (left out)
    for text, o in zip(overrides, parsed):
        if o.is_sweep_override():
            try:
                items: list[str | None] = [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
            except Exception:  # interval(...) and other sweeps with no listed values: not checked
                items = []
            values.append(items or [None])
        else:
            values.append([text])
    base = [v[0] for v in values]
    runs: list[list[str | None]] = [base]
    for i, items in enumerate(values):
        for v in items[1:]:
            runs.append(base[:i] + [v] + base[i + 1 :])
    return [[o for o in r if o is not None] for r in runs]


def _paths(kind, depth: int = 2) -> list[str]:
    """The dotted keys inside the dataclass ``kind``'s dataclass fields, ``depth`` levels down
    (``pipeline.partition`` of the plan's schema): where a misplaced key lives."""
    if depth == 0:
        return []
    try:
        hints = typing.get_type_hints(kind)
    except Exception:  # a forward reference the schema's module cannot resolve: no hint
        return []
    out = []
    for f in dataclasses.fields(kind):
        sub = hints.get(f.name)
        if isinstance(sub, type) and dataclasses.is_dataclass(sub):
            out += [f"{f.name}.{g.name}" for g in dataclasses.fields(sub)]
            out += [f"{f.name}.{p}" for p in _paths(sub, depth - 1) if p.count(".") >= 1]
    return sorted(set(out))


def _closest(leaf: str, keys: list[str], n: int = 3) -> list[str]:
    """The ``keys`` whose last part is closest to ``leaf`` (difflib's ratio, best first), so a
    key one level down competes with the top level's on its own name."""
    score = {k: difflib.SequenceMatcher(None, leaf.lower(), k.rpartition(".")[2].lower()).ratio() for k in keys}
    best = sorted((k for k in keys if score[k] >= 0.6), key=lambda k: (-score[k], k.count("."), k))
    return best[:n] or nearest(leaf, [k for k in keys if "." not in k])


def message(exc: BaseException, overrides: list[str]) -> str:
    """One line for a composition error of ``overrides``."""
    if isinstance(exc, MissingConfigException) and exc.options is not None:
        group, _, name = str(exc.missing_cfg_file).rpartition("/")
        near = nearest(name, exc.options)
        hint = f"nearest: {', '.join(near)}" if near else f"choices: {', '.join(exc.options)}"
        return f"{group}={name}: no such {group}; {hint} (configs/{group}/)"
    cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else exc
    key = getattr(cause, "full_key", None)
    kind = getattr(cause, "object_type", None)
    first = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
    if key and type(cause).__name__ in ("ConfigAttributeError", "ConfigKeyError") and dataclasses.is_dataclass(kind):
        if (owners := optimizer_config.compose_hint(key, kind)) is not None:  # the optimizers that take it
            return owners
        if (owners := schedule_config.compose_hint(key, kind)) is not None:  # the schedules that have it
            return owners
        if (owners := objective_config.compose_hint(key, kind)) is not None:  # the objectives that have it
            return owners
        parent, _, leaf = key.rpartition(".")
        fields = sorted(f.name for f in dataclasses.fields(kind))
        paths = _paths(kind)
        deeper = [p for p in paths if p.rpartition(".")[2] == leaf]  # the key one level down
        near = _closest(leaf, fields + paths)
        where = f"in {parent}" if parent else "at the top level"
        if deeper:
            return f"{key}: no such key {where}; it is {' or '.join(f'{parent}.{p}' if parent else p for p in deeper)}"
        hint = f"nearest: {', '.join(f'{parent}.{k}' if parent else k for k in near)}; " if near else ""
        return f"{key}: no such key {where}; {hint}keys: {', '.join(fields)}"
    if key:
        given = next((o for o in overrides if o.lstrip("+~").split("=", 1)[0] == key), key)
        return config.cost_hint(given) or f"{given}: {first}"
    return first


def _parse(argv: list[str]):
    """hydra's own parser on ``argv``, silent: a usage error is hydra's to print, once."""
    with contextlib.redirect_stderr(io.StringIO()):
        return get_args_parser().parse_args(argv)


MULTIRUN = ("-m", "--multirun")


def flags_first(argv: list[str]) -> list[str]:
    """``-m`` / ``--multirun`` moved before the overrides: ``experiments.train schedule.S=2 -m
    schedule.N=10`` means a multirun (hydra's parser takes the overrides as one run of words, so a
    flag between them was a usage error, printed three times)."""
    flags = [a for a in argv if a in MULTIRUN]
    return flags + [a for a in argv if a not in MULTIRUN] if flags else argv


def check(config_name: str, argv: list[str], required: dict[str, str] | None = None) -> str | None:
    """None when hydra composes ``config_name`` with the command line ``argv`` (every value of
    each sweep) and every key of ``required`` has a value; else the one-line message (for a
    required key left missing, its value in ``required``). Help, ``--cfg`` and other config
    directories are left to hydra."""
    try:
        args = _parse(argv)
    except SystemExit:  # hydra's own parser reports its usage errors
        return None
    if args.help or args.hydra_help or args.cfg or args.info or args.shell_completion:
        return None
    if args.config_path or args.config_dir:
        return None
    name = args.config_name or config_name
    try:
        runs = _combinations(list(args.overrides))
    except ValueError as exc:  # an override hydra's grammar cannot parse
        return str(exc)
    for overrides in runs:
        try:
            with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
                cfg = compose(name, overrides=overrides)
        except (HydraException, OmegaConfBaseException) as exc:
            return message(exc, overrides)
        added = [o for o in overrides if o.startswith("+")]
        if added and name == "train":  # hydra adds a +key the schema lacks; the run would refuse it later
            try:
                checks.typed(cfg)
            except (ValueError, TypeError) as exc:
                return str(exc).splitlines()[0]
        for key, text in (required or {}).items():
            parent, _, leaf = key.rpartition(".")
            node = OmegaConf.select(cfg, parent) if parent else cfg
            if node is None or OmegaConf.is_missing(node, leaf):
                return text
    return None


def staged(argv: list[str]) -> list[str]:
    """A multirun's ``group.key=value`` as ``++group.key=value`` where the config group is swept
    (``-m optimizer=adam,adamw optimizer.b2=0.95``): hydra composes a sweep's base config with
    the group's default option, whose schema may lack a key that every swept option has (each
    option is typed by its own schema). :func:`check` composed every job with the override as
    written first, so ``++`` adds no key a job's schema lacks."""
    try:
        args = _parse(argv)
        parsed = OverridesParser.create().parse_overrides(list(args.overrides))
    except (SystemExit, OverrideParseException):
        return argv
    if not args.multirun:
        return argv
    swept = {o.get_key_element() for o in parsed if o.is_sweep_override() and (CONFIGS / o.get_key_element()).is_dir()}
    keep = {
        text
        for text, o in zip(args.overrides, parsed)
        if not o.is_sweep_override()
        and not text.startswith(("+", "~"))
        and text.split(".", 1)[0] in swept
        and "." in text.split("=", 1)[0]
    }
    return [f"++{a}" if a in keep else a for a in argv]


def one_line(main, config_name: str, required: dict[str, str] | None = None):
    """``main`` (an ``@hydra.main`` function) behind :func:`check` of ``sys.argv``: a
    composition error, or a key of ``required`` left without a value, is one line on stderr
    and exit status 2, before hydra writes anything."""

    @functools.wraps(main)
    def wrapped(*a, **kw):
        schemas.register()  # the schemas again: a schedule registered after experiments.schemas was imported
        if not a and not kw:
            sys.argv[1:] = flags_first(sys.argv[1:])
        if not a and not kw and os.environ.get("RPD_DEBUG", "").strip() in ("", "0"):
            error = check(config_name, sys.argv[1:], required)
            if error is not None:
                print(f"error: {error}", file=sys.stderr, flush=True)
                raise SystemExit(2)
        if not a and not kw:
            sys.argv[1:] = staged(sys.argv[1:])  # a swept group's keys: the sweep's base config may lack them
        return main(*a, **kw)

    return wrapped
