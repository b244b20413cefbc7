"""One paper figure (``python -m experiments.figure``, docs/running.md): run its study, save the
output, draw the figure from what was saved.

``study.<field>=`` sets a field of the study's ``Config`` (typed: the study's schema is the config
group ``study/<name>/fields``, see :func:`study_schemas`); overriding the train cell's nodes
(``schedule.S=8``) is an error naming the study field to set instead (:func:`check_not_ignored`).

The study (``rpd.studies``) is computed once per
(name, size, study config, code) and stored with ``rpd.io.store`` under
``<results_root>/figures/<name>/<hash>``; a complete stored output is reused unless
``force=true``. The PNG ``<out_dir>/<name>.png`` and the numbers ``<out_dir>/<name>.json``
(summary, table rows, size, config, runtime, XLA programs compiled or loaded while computing)
are always drawn from the stored copy.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from rpd import studies
from rpd.cli import checks, fanout
from rpd.cli import config as C
from rpd.cli.job import NONE, Job
from rpd.cli.manifest import FigureOutcome, Report, write_manifest
from rpd.cli.tables import column_order, format_table  # noqa: F401  (re-exported)
from rpd.cli.wandb_log import log_figure
from rpd.io import store
from rpd.io.atomic import atomic_write
from rpd.io.provenance import code_identity, git_commit, provenance
from rpd.io.tracking import require_wandb
from rpd.results import StudyOutput
from rpd.runtime import compile_cache
from rpd.studies import make_config
from rpd.validation import check_int, qualify


class StudyNotAvailable(ImportError):
    """The study's module is not in the repository (yet)."""


def resolve(name: str) -> SimpleNamespace:
    """The protocol pieces of a study: ``Config``, ``QUICK``, ``run``, ``figure``, ``n_steps``,
    and optionally ``console(table, summary) -> str``, printed in place of the generic table, and
    ``numbers(summary, table) -> dict``, top-level keys added to the figure's JSON (E18's ``fits``, ``rows``).

    A module that serves several figures names the extra ones by the figure's tag (the part of
    the name before the first '_', e.g. "e8"): ``E8Config``, ``E8_QUICK``, ``run_e8``,
    ``figure_e8`` (a module holding several studies); missing tagged pieces fall back to the
    module's plain ``Config`` / ``QUICK`` / ``run`` / ``figure``. A module whose figures share
    one ``Config`` with presets provides ``config_for(name, size, **overrides)`` instead
    (``rpd.studies.pd_vs_localsgd`` for E3/E4). A study that reads a text corpus provides
    ``corpus_identity(cfg)`` (its SHA-256, or None when this config reads none). Raises
    :class:`StudyNotAvailable` when the module does not exist yet."""

    path = studies.REGISTRY.get(name)
    if path is None:
        raise ValueError(f"study.name must be one of {sorted(studies.REGISTRY)}, got {name!r}")
    try:
        mod = importlib.import_module(path)
    except ModuleNotFoundError as err:
        if err.name and (path == err.name or path.startswith(err.name + ".")):
            raise StudyNotAvailable(f"{name}: module {path} is not in the repository") from None
        raise
    tag = name.split("_")[0]
    up = tag.upper()

    def pick(*names):
        for n in names:
            if hasattr(mod, n):
                return getattr(mod, n)
        return None

    ns = SimpleNamespace(
        module=mod,
        Config=pick(f"{up}Config", "Config"),
        QUICK=pick(f"{up}_QUICK", "QUICK") or {},
        run=pick(f"run_{tag}", "run"),
        figure=pick(f"figure_{tag}", "figure"),
        n_steps=pick(f"n_steps_{tag}", "n_steps"),
        config_for=pick("config_for"),
        corpus_identity=pick("corpus_identity"),
        console=pick("console"),  # console(table, summary) -> str: the study's own printed table
        numbers=pick("numbers"),  # numbers(summary, table) -> dict: extra top-level keys of the JSON
        name=name,
    )
    missing = [k for k in ("Config", "run", "figure") if getattr(ns, k) is None]
    if missing:
        raise StudyNotAvailable(f"{name}: module {path} has no {missing} (study protocol)")
    return ns


OVERRIDES = "study.overrides."


# fields that are sizes (a stage count, microbatches, examples, dimensions, ...): at least 1
_SIZE = re.compile(r"(^|_)(S|N|n|d|K|H|R|M|T|D|batch_size|width|heads|seq_len)$")


def check_overrides(study: SimpleNamespace, overrides: dict) -> None:
    """Each override names a field of the study's ``Config`` and has its default's kind: a bool,
    an integer, a number, a string, or a non-empty list where the default is non-empty. Errors
    name ``study.overrides.<field>``; the value checks are the study's own (see :func:`compute`)."""
    fields = {f.name: f for f in dataclasses.fields(study.Config)}
    for key, value in overrides.items():
        name = OVERRIDES + key
        if key not in fields:
            raise ValueError(f"unknown config key {name}: {study.name}'s fields are {', '.join(sorted(fields))}")
        f = fields[key]
        if f.default is not dataclasses.MISSING:
            default = f.default
        else:
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if default is None or value is None:
            continue
        if isinstance(default, (bool, str)) or isinstance(value, bool):
            ok = type(value) is type(default)
        elif isinstance(default, int):
            ok = isinstance(value, int)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float))
        elif isinstance(default, (tuple, list)):
            ok = isinstance(value, (tuple, list))
            if ok and default and not value:
                raise ValueError(f"{name} must not be empty (default {list(default)})")
        else:
            ok = True
        if not ok:
            raise TypeError(f"{name} must be like its default {default!r}, got {value!r}")
        if _SIZE.search(key) and isinstance(default, int) and default >= 1 and isinstance(value, int):
            check_int(f"study.{key}", value)  # a size (S, N, n, d, ...): refused before the study starts


def study_config(study: SimpleNamespace, size: str, overrides: dict | None = None):
    """The study's ``Config`` at ``size`` with ``overrides`` (checked, :func:`check_overrides`;
    lists become tuples, as the frozen Configs declare)."""

    check_overrides(study, overrides or {})
    over = {k: tuple(v) if isinstance(v, list) else v for k, v in (overrides or {}).items()}
    if study.config_for is not None:
        return study.config_for(study.name, size, **over)
    return make_config(study.Config, size, quick=study.QUICK, **over)


def study_key(name: str, size: str, cfg, corpus_sha256: str | None = None) -> dict:
    """What identifies a stored study output (its store key and config.json): the study, its size
    and config, and the code that computes it (:func:`rpd.io.provenance.code_identity`, as a train
    run's key), so a change to rpd recomputes instead of drawing an old output; a study on a text
    corpus is keyed by the text's SHA-256 too."""
    key = {"study": name, "size": size, "config": dataclasses.asdict(cfg), "code": code_identity()}
    if corpus_sha256 is not None:
        key["corpus_sha256"] = corpus_sha256
    return key


class _Counter:
    """The study's ``progress(message)`` callback: counts units of work, forwards them."""

    def __init__(self, total: int | None, on_step: Callable[[str, int, int | None], None] | None):
        self.done, self.total, self.on_step = 0, total, on_step

    def __call__(self, message: Any = "") -> None:
        self.done += 1
        if self.on_step is not None:
            self.on_step(str(message), self.done, self.total)


def target(name: str, size: str, overrides: dict | None, results_root: str | Path):
    """(study, its Config, its store key, its run directory) of figure ``name``."""
    study = resolve(name)
    cfg = study_config(study, size, overrides)
    key = study_key(name, size, cfg, study.corpus_identity(cfg) if study.corpus_identity else None)
    return study, cfg, key, store.run_dir(Path(results_root) / "figures" / name, key)


def compute(
    name: str,
    size: str = "quick",
    overrides: dict | None = None,
    *,
    results_root: str | Path = "results",
    force: bool = False,
    on_step: Callable[[str, int, int | None], None] | None = None,
    on_start: Callable[[int | None], None] | None = None,
) -> tuple[Path, bool]:
    """Run study ``name`` unless a complete output is stored; returns (run dir, reused).
    A failing study is stored with status "failed" and re-raised."""

    study, cfg, key, path = target(name, size, overrides, results_root)
    # one writer per key: a second process waits, then reuses the first one's output
    with store.run_lock(path, wait_message=f"{name}: waiting, another process is computing {path}"):
        if not force and store.should_skip(path, key):
            return path, True
        total = study.n_steps(cfg) if study.n_steps is not None else None
        if on_start is not None:
            on_start(total)
        t0 = time.perf_counter()
        try:
            with compile_cache.count_programs() as programs:
                out = study.run(cfg, progress=_Counter(total, on_step))
        except Exception as exc:
            named = qualify(str(exc), {k: k for k in overrides or {}}, OVERRIDES)
            if named != str(exc) and isinstance(exc, (ValueError, TypeError)):
                # an overridden field's own check: name the field as the user typed it
                failure = type(exc)(named)
                store.save_failure(path, key, failure)
                raise failure from exc
            store.save_failure(path, key, exc)
            raise
        runtime = time.perf_counter() - t0
        store.save_run(
            path,
            key,
            curves=out.arrays,
            summary={"summary": out.summary, "table": out.table, "runtime_s": runtime, "programs": programs},
        )
        return path, False


def draw(
    name: str, path: Path, out_dir: str | Path = "paper_figures", *, cached: bool = False, git_commit: str | None = None
) -> FigureOutcome:
    """Draw figure ``name`` and write its numbers from the stored output at ``path``."""

    run = store.load_run(path)
    if run.status != "ok":
        raise RuntimeError(f"{name}: stored output at {path} has status {run.status}: {run.error}")
    out = StudyOutput(arrays=run.curves, summary=run.summary["summary"], table=run.summary["table"])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png, numbers = out_dir / f"{name}.png", out_dir / f"{name}.json"
    resolve(name).figure(out, png)
    runtime = float(run.summary.get("runtime_s", float("nan")))
    programs = run.summary.get("programs")  # XLA programs compiled / loaded while computing
    record = {
        "figure": name,
        "size": run.config["size"],
        "config": run.config["config"],
        "runtime_s": runtime,
        "programs": programs,
        "results": str(path),
        "git_commit": git_commit,
        "summary": out.summary,
        "table": out.table,
    }
    extra = resolve(name).numbers
    if extra is not None:  # a study's own top-level keys, for readers of its JSON (never the standard ones)
        record = {**extra(out.summary, out.table), **record}
    atomic_write(numbers, json.dumps(store.to_jsonable(record), indent=1, sort_keys=True, allow_nan=False).encode())
    return FigureOutcome(
        name,
        png,
        numbers,
        run.config["size"],
        run.config["config"],
        runtime,
        cached,
        out.table,
        out.summary,
        path,
        programs,
    )


def make_figure(
    cfg,
    *,
    on_step=None,
    on_start=None,
    git_commit: str | None = None,
    launcher: str = "local",
    launcher_overrides=(),
    force_units: bool | None = None,
) -> FigureOutcome:
    """The whole job of ``experiments.figure`` for a composed ``FigureConfig``; with ``fanout``
    its units run as jobs on ``launcher`` (``rpd.cli.fanout``; ``force_units``: its argument)."""
    if isinstance(cfg, DictConfig) and OmegaConf.is_missing(cfg.study, "name"):
        raise ValueError(f"experiment: experiments.figure needs experiment=<name>, one of {', '.join(experiments())}")
    cfg = checks.typed(cfg, C.FigureConfig)
    name, size = cfg.study.name, C._value(cfg.size)
    overrides = C.study_fields(cfg.study)
    if cfg.fanout:
        path, cached = fanout.compute(
            *target(name, size, overrides, cfg.results_root), size=size, overrides=overrides,
            results_root=cfg.results_root, force=cfg.force, launcher=launcher, launcher_overrides=launcher_overrides,
            force_units=force_units,
        )  # fmt: skip
    else:
        path, cached = compute(
            name, size, overrides, results_root=cfg.results_root, force=cfg.force, on_step=on_step, on_start=on_start
        )
    out_dir = cfg.out_dir or ("paper_figures" if size == "full" else "paper_figures/quick")
    return draw(name, path, out_dir, cached=cached, git_commit=git_commit)


# The train cell's nodes: an experiment file sets them for ``experiments.train``; the figure
# computes its study's own Config (``study.*``) and reads none of them.
TRAIN_NODES = ("objective", "method", "schedule", "costs")


def experiments() -> list[str]:
    return sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "configs" / "experiment").glob("*.yaml"))


def _override(text: str) -> tuple[str, str | None, str | None]:
    """A command-line override's key (or group), its ``@package`` and its value as written
    (``+schedule.S=8`` -> ``schedule.S``, None, ``8``), as hydra's override grammar reads them."""
    key, eq, value = text.partition("=")
    key, at, package = key.lstrip("+~").partition("@")
    return key, (package if at else None), (value if eq else None)


def check_not_ignored(task_overrides, study_name: str) -> None:
    """Refuse a command-line override that the figure would silently ignore: a field or a
    choice of the train cell's nodes (:data:`TRAIN_NODES`). The error names it and says what to
    write instead: ``study.<field>=...`` where the study has a field of that name, else its
    fields. Runs before any work."""
    study = resolve(study_name)
    fields = sorted(f.name for f in dataclasses.fields(study.Config))
    for text in map(str, task_overrides):
        key, package, value = _override(text)
        head, _, rest = key.partition(".")
        if head not in TRAIN_NODES or package:
            continue
        leaf = rest.rsplit(".", 1)[-1] if rest else None
        where = (
            f"{study_name} computes its study's own Config at the chosen size, not the "
            f"train cell's {head} node (that node is what experiments.train runs)"
        )
        if leaf in fields:
            hint = f"write study.{leaf}={'...' if value is None else value}"
        elif not rest:
            hint = f"the study fixes its {head}s itself; its fields are {', '.join(fields)} (study.<field>=...)"
        else:
            hint = f"{study_name}'s fields are {', '.join(fields)} (study.<field>=...)"
        raise ValueError(f"{text} would be ignored by experiments.figure: {where}; {hint}")


def run_and_report(cfg: DictConfig, job: Job = NONE) -> None:
    """Make one figure, printing progress, where it was written and its table. ``job``: the
    hydra job it runs in (its overrides are checked, its launcher runs a fan-out)."""
    if job.in_hydra and not OmegaConf.is_missing(cfg.study, "name"):
        check_not_ignored(job.task_overrides, cfg.study.name)

    wandb = C._value(cfg.logger.kind) == "wandb"
    if wandb:  # a missing optional extra fails before the work
        require_wandb()

    commit, before = git_commit(), provenance()  # the tree as the work starts: its outputs dirty it
    t0 = time.perf_counter()
    launch = fanout.launcher_of(job) if cfg.fanout else {}  # the launcher's name and hydra.launcher.* overrides
    out = make_figure(
        cfg, on_step=lambda msg, done, total: print(f"  [{done}/{total or '?'}] {msg}"), git_commit=commit, **launch
    )
    try:  # the figure joins the others in <out_dir>/MANIFEST.json, with its config and provenance
        write_manifest(
            out.png.parent,
            [Report(out.name, "reused" if out.cached else "ok", out, None, time.perf_counter() - t0)],
            out.size,
            commit,
            before,
        )
    except OSError as err:
        print(f"warning: MANIFEST.json not written to {out.png.parent}: {err}", file=sys.stderr)
    print(f"{out.name} ({out.size}{', reused' if out.cached else ''}, {out.runtime_s:.1f} s): {out.png}, {out.numbers}")
    console = resolve(out.name).console
    print(console(out.table, out.summary) if console is not None else format_table(out.table))
    if wandb:  # the figure, its table and numbers (rpd.cli.wandb_log), from the stored output
        try:
            rid = log_figure(cfg, out, job)
            print(f"wandb run {rid}" if rid else "wandb: nothing logged (see the warning above)")
        except Exception as exc:  # tracking never fails a figure that is drawn
            print(f"warning: logging the figure to wandb failed: {exc!r}", file=sys.stderr)


def study_schemas() -> list[tuple[str, str, type, str]]:
    """Every study's typed schema as (group, name, node, package) for hydra's ConfigStore
    (``experiments.schemas``), group ``study/<name>``, name ``fields`` (configs/figure.yaml picks
    ``study: ${experiment}/fields``): ``study.<field>=`` is then checked at compose time. A study
    whose module is not in the repository is left out (its figure fails naming it)."""
    out = []
    for name in sorted(studies.REGISTRY):
        try:
            study = resolve(name)
        except StudyNotAvailable:
            continue
        out.append((f"study/{name}", "fields", C.study_schema(name, study.Config), "study"))
    return out
