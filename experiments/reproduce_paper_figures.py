"""Regenerate every paper figure (docs/science.md#the-papers-experiments: E1-E8 and the S^4 figure) into paper_figures/
(paper size, ``--size full``) or paper_figures/quick/ (the quick default).

    python -m experiments.reproduce_paper_figures                 # quick: all figures, <= 10 min on 2 cores
    python -m experiments.reproduce_paper_figures --size full     # the paper's sizes
    python -m experiments.reproduce_paper_figures --only e1,e3    # some figures (tag or full name)
    python -m experiments.reproduce_paper_figures --force         # recompute stored studies too
    python -m experiments.reproduce_paper_figures --jobs 1        # one figure at a time, in this process

Each figure is ``experiments.figure`` on ``configs/experiment/<name>.yaml``: the study runs (or
its complete stored output under ``results/figures/`` is reused), is saved with ``rpd.io.store``,
and the PNG and the numbers (``<name>.json``) are drawn from the saved output, never from wandb.
The figures are made in ``--jobs`` worker processes at once, the most expensive first
(default: at the quick size ``$RPD_WORKERS`` or the cores, at most 4; at full size 1, as
paper-size studies hold several GB each); a figure's numbers do not depend on it. One progress bar runs over
the figures (with ``--jobs 1``, also one over each study's units of work). At the end a
table gives, per figure, the paper's message and the numbers behind it (the study's table), and
``paper_figures/MANIFEST.json`` records figure -> png, numbers, size, config, runtime, the XLA
programs its study compiled or loaded from the persistent cache (``programs``), commit,
and the provenance of the run that made it (``rpd.io.provenance``: package versions, XLA flags,
devices, git commit).
A failing figure is reported and the others go on; the exit code is 1 if any figure failed or
its study is not in the repository ("missing").
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, Sequence

from tqdm.auto import tqdm

from experiments import schemas, slurm_watch
from rpd.cli import checks, spread
from rpd.cli import config as C
from rpd.cli import figure as F
from rpd.cli.fanout import LAUNCHERS as FANOUT_LAUNCHERS
from rpd.cli.figure_list import COLD_CPU_S, FIGURES
from rpd.cli.manifest import Report, write_manifest
from rpd.cli.report import summary_text
from rpd.io.provenance import git_commit, provenance
from rpd.runtime import compile_cache
from rpd.runtime.concurrency import default_workers
from rpd.runtime.interrupt import run_main
from rpd.validation import check_int

schemas.register_studies()  # figure_config composes configs/figure.yaml: study.<field>= typed

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


def select(only: str | None, names: Sequence[str] = tuple(FIGURES)) -> list[str]:
    """Figures matching ``--only`` ("e1,e3" or full names), in the paper's order; None: all.
    A given ``--only`` that names no figure ("", ",") is an error, never "all" or "none"."""
    if only is None:
        return list(names)
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    if not wanted:
        raise SystemExit(
            f"--only {only!r} names no figure; choose from {list(names)} "
            f"or their tags ({', '.join(n.split('_')[0] for n in names)})"
        )
    chosen, unknown = [], []
    for w in wanted:
        hits = [n for n in names if n == w or n.split("_")[0] == w]
        (chosen.extend(hits) if hits else unknown.append(w))
    if unknown:
        raise SystemExit(
            f"--only: unknown figure(s) {unknown}; choose from {list(names)} "
            f"or their tags ({', '.join(n.split('_')[0] for n in names)})"
        )
    return [n for n in names if n in chosen]


def figure_config(
    name: str, size: str, *, force: bool, results_root: str, out_dir: str, config_dir: Path = CONFIG_DIR, fanout=False
):
    """The composed ``FigureConfig`` of ``configs/experiment/<name>.yaml`` (or, for a study
    without an experiment file, the schema with ``study.name = name``)."""
    given = dict(size=size, force=force, results_root=results_root, out_dir=out_dir, fanout=fanout)
    overrides = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in given.items()]
    if (config_dir / "experiment" / f"{name}.yaml").exists():
        from hydra import compose, initialize_config_dir

        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            return compose("figure", overrides=[f"experiment={name}", *overrides])
    return checks.typed({"study": {"name": name}, **given}, C.FigureConfig)


def _make(
    name: str,
    size: str,
    *,
    force: bool,
    results_root: str,
    out_dir: str,
    config_dir: Path,
    commit: str | None,
    on_step=None,
    on_start=None,
    file=None,
    launch: dict | None = None,
) -> Report:
    """One figure, its failure reported rather than raised (``launch``: its units as jobs, rpd.cli.fanout)."""
    t0 = time.perf_counter()
    try:
        cfg = figure_config(
            name, size, force=force, results_root=results_root, out_dir=out_dir, config_dir=config_dir,
            fanout=launch is not None,
        )  # fmt: skip
        out = F.make_figure(cfg, on_step=on_step, on_start=on_start, git_commit=commit, **(launch or {}))
        return Report(name, "reused" if out.cached else "ok", out, None, time.perf_counter() - t0)
    except F.StudyNotAvailable as err:
        return Report(name, "missing", None, str(err), time.perf_counter() - t0)
    except Exception as err:  # report it, go on with the other figures
        tqdm.write(f"{name} FAILED:\n{traceback.format_exc()}", file=file)
        return Report(name, "failed", None, f"{type(err).__name__}: {err}", time.perf_counter() - t0)


def _announce(rep: Report, file=None) -> None:
    """One line as a figure ends: ``e3_nesterov: ok (4.2 s)``, with the error if it failed."""
    tqdm.write(f"{rep.name}: {rep.status} ({rep.wall_s:.1f} s)" + (f" - {rep.error}" if rep.error else ""), file=file)


def default_jobs(size: str = "quick") -> int:
    """Figures made at once by default: quick, the cores this process may use (at most 4);
    full, 1 (a paper-size study holds several GB: E5's runs 5.6 GB each; ask for more with
    ``--jobs``)."""
    return default_workers() if size == "quick" else 1


def _worker_init(jax_cache: str | None, threads: int) -> None:
    """A figure worker process: the parent's persistent cache, its share of the cores for
    ``rpd.runtime.concurrency``, and Ctrl-C left to the parent (which ends the workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault("RPD_WORKERS", str(threads))
    if jax_cache:
        compile_cache.use(jax_cache)


def _terminate(pool) -> None:
    """End a process pool's workers now (they ignore Ctrl-C). Python 3.14 has
    ``terminate_workers``; before it, the pool's own process table."""
    if hasattr(pool, "terminate_workers"):
        pool.terminate_workers()
        return
    for proc in list((pool._processes or {}).values()):
        proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


_DIED = "BrokenProcessPool"  # how a figure's report reads when its worker process died


def _reproduce_in_processes(names: Sequence[str], jobs: int, file=None, make=_make, **kw) -> list[Report]:
    """Every figure in its own task of a pool of ``jobs`` fresh (spawned) processes, the most
    expensive started first; reports come back in the order of ``names``. A worker that dies (a
    signal, out of memory) breaks the pool and fails every figure still in it; those are made
    again, each in a process of its own, so only a figure that dies again is reported failed."""
    done = _pool_pass(names, jobs, file, make, quiet_deaths=True, **kw)
    lost = [n for n in names if done[n].status == "failed" and (done[n].error or "").startswith(_DIED)]
    if lost:
        tqdm.write(f"a figure worker died; making {', '.join(lost)} again, one process each", file=file)
        for name in lost:
            done.update(_pool_pass([name], 1, file, make, **kw))
    return [done[n] for n in names]


def _config(name: str, kw: dict):
    keys = ("size", "force", "results_root", "out_dir", "config_dir")
    return figure_config(name, **{k: kw[k] for k in keys})


def _pool_pass(names: Sequence[str], jobs: int, file, make, quiet_deaths: bool = False, **kw) -> dict[str, Report]:
    """One pool of ``jobs`` workers making ``names``: their reports by name (``quiet_deaths``:
    figures lost with a dead worker are not announced, since they will be made again). A
    splitting study's units are tasks of their own (``rpd.cli.spread``), so no worker holds E10
    alone; this process assembles it once they are stored. Figures and units are queued longest
    first by their measured cold cost (``spread.longest_first``, ``figure_list.COLD_CPU_S``)."""
    cache = compile_cache.active()
    threads = max(1, default_workers() // jobs)
    spreading = jobs > 1 and kw.get("launch") is None  # the units as tasks, unless they go to a launcher
    pool = ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_worker_init,
        initargs=(str(cache) if cache else None, threads),
    )
    done: dict[str, Report] = {}
    left: dict[str, int] = {}  # a spread figure's units not finished
    died: dict[str, str] = {}
    t0 = time.time()
    outer = tqdm(total=len(names), desc=f"figures ({jobs} processes)", unit="fig", file=file, dynamic_ncols=True)

    def finish(name: str, rep: Report) -> None:
        done[name] = rep
        outer.update(1)
        if not (quiet_deaths and (rep.error or "").startswith(_DIED)):
            _announce(rep, file)

    try:
        futures = {}
        plans = spread.plans(names, lambda m: _config(m, kw)) if spreading else {}
        for n, sp in plans.items():
            left[n] = len(sp.todo)
            if not sp.todo:  # every unit stored already
                finish(n, spread.report(n, _config(n, kw), kw["commit"], t0))
        # longest first over the figures and the spread figures' units, by their measured cost
        for n, i in spread.longest_first(names, plans, COLD_CPU_S):
            if i is None:
                futures[pool.submit(make, n, file=None, **kw)] = n
            else:
                futures[pool.submit(spread.run_unit, str(plans[n].plan), i, kw["force"])] = n
        pending = set(futures)
        while pending:
            # short waits: the bar names the figures being made, and Ctrl-C is seen at once
            finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            # the pool marks a few queued tasks running too; the oldest `jobs` are the ones at work
            running = [n for f, n in futures.items() if f in pending and f.running()][:jobs]
            outer.set_postfix_str(", ".join(dict.fromkeys(running)), refresh=False)
            for fut in finished:
                name = futures[fut]
                try:
                    rep = fut.result()
                except Exception as err:  # the worker process itself died (killed, out of memory)
                    rep = Report(name, "failed", None, f"{type(err).__name__}: {err}", float("nan"))
                    died.setdefault(name, rep.error or _DIED)
                if name in left:  # a unit: the figure ends with its last one
                    left[name] -= 1
                    if left[name] == 0:
                        finish(name, spread.report(name, _config(name, kw), kw["commit"], t0, died.get(name)))
                else:
                    finish(name, rep)
    except BaseException:  # Ctrl-C (or a failure here): end the workers now; finished runs stay stored
        _terminate(pool)
        raise
    else:
        pool.shutdown()
    finally:
        outer.close()
    return done


def reproduce(
    names: Sequence[str],
    size: str = "quick",
    *,
    force: bool = False,
    results_root: str = "results",
    out_dir: str = "paper_figures",
    config_dir: Path = CONFIG_DIR,
    messages: dict | None = None,
    file=None,
    jobs: int = 1,
    launch: dict | None = None,
) -> list[Report]:
    """Make every figure in ``names``; never stops at a failure. Returns one report each and
    writes ``<out_dir>/MANIFEST.json``. ``jobs > 1`` makes the figures in that many worker
    processes at once (each figure's numbers do not depend on it; the per-study progress bars
    are then replaced by one line per finished figure)."""
    messages = {**FIGURES, **(messages or {})}
    commit, before = git_commit(), provenance()  # the tree as the work starts: its outputs dirty it
    kw: dict[str, Any] = dict(
        size=size, force=force, results_root=results_root, out_dir=out_dir, config_dir=config_dir, commit=commit
    )
    kw |= {"launch": launch}
    jobs = min(check_int("jobs", jobs), len(names))
    if jobs > 1:
        reports = _reproduce_in_processes(names, jobs, file=file, **kw)
    else:
        reports = []
        outer = tqdm(names, desc="figures", unit="fig", file=file, dynamic_ncols=True)
        for name in outer:
            outer.set_postfix_str(name)
            inner: list[tqdm] = []

            def on_start(total, _name=name):
                inner.append(
                    tqdm(total=total, desc=f"  {_name}", unit="step", leave=False, file=file, dynamic_ncols=True)
                )

            def on_step(msg, done, total):
                if inner:
                    inner[0].set_postfix_str(msg[:40])
                    inner[0].update(1)

            try:
                rep = _make(name, on_step=on_step, on_start=on_start, file=file, **kw)
            finally:
                for bar in inner:
                    bar.close()
            _announce(rep, file)
            reports.append(rep)
        outer.close()
    try:
        write_manifest(Path(out_dir), reports, size, commit, before)
    except OSError as err:  # e.g. a read-only working directory: the figures' summary still prints
        print(f"warning: MANIFEST.json not written to {out_dir}: {err}", file=sys.stderr)
    print(summary_text(reports, messages), file=file or sys.stdout)
    return reports


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m experiments.reproduce_paper_figures", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--size",
        choices=["quick", "full"],
        default="quick",
        help="quick: laptop-sized (the default); full: the paper's sizes",
    )
    ap.add_argument("--only", default=None, help="comma-separated figures, e.g. e1,e3 or e6_scaling")
    ap.add_argument("--force", action="store_true", help="recompute even if a stored output exists")
    ap.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="figures made at once, each in its own process (default: quick, $RPD_WORKERS "
        "or the cores, at most 4; full, 1, since paper-size studies hold several GB each; 1: one after "
        "another in this process, with per-study progress bars)",
    )
    ap.add_argument("--fanout", action="store_true", help="each study's units as jobs on --launcher (docs/running.md)")
    ap.add_argument("--launcher", choices=FANOUT_LAUNCHERS, default="local", help="with --fanout (default: local)")
    ap.add_argument("--launcher-override", action="append", default=[], help="hydra.launcher.FIELD=VALUE (repeatable)")
    ap.add_argument("--results", default="results", help="results store root (default: results)")
    ap.add_argument(
        "--out",
        default=None,
        help="where PNGs, numbers and MANIFEST.json go (default: paper_figures/ for full, "
        "paper_figures/quick/ for quick, so a quick run never overwrites the paper-size "
        "figures)",
    )
    args = ap.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        ap.error(f"--jobs must be >= 1, got {args.jobs}")
    if any(not o.startswith("hydra.launcher.") for o in args.launcher_override):
        ap.error(f"--launcher-override must set hydra.launcher.<field>, got {args.launcher_override}")
    if args.fanout and args.launcher == "slurm":  # a request no node meets: one line, before any figure
        try:
            slurm_watch.check_launch(args.size, args.launcher_override, CONFIG_DIR)
        except ValueError as exc:
            checks.refuse(exc)
    out = args.out or ("paper_figures" if args.size == "full" else "paper_figures/quick")
    compile_cache.enable()  # ~/.cache/rpd/jax ($RPD_CACHE, $RPD_JAX_CACHE); RPD_JAX_CACHE=0: off
    reports = reproduce(
        select(args.only),
        args.size,
        force=args.force,
        results_root=args.results,
        out_dir=out,
        jobs=default_jobs(args.size) if args.jobs is None else args.jobs,
        launch={"launcher": args.launcher, "launcher_overrides": args.launcher_override} if args.fanout else None,
    )
    return 1 if any(r.status in ("failed", "missing") for r in reports) else 0


if __name__ == "__main__":
    sys.exit(run_main(main))  # Ctrl-C: a clean message and exit 130
