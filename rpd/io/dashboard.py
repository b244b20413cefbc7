"""The project's wandb workspace as code (optional extra ``wandb-workspaces``).

    python -m rpd.io.dashboard --project rpd [--entity ME] [--S 2 4 8 16] [--save]

builds one overview view (all runs, grouped by every swept variable: method, schedule, S, H, δ,
N, T) and one view per S ("rpd <S> stages": runs tagged "S<S>", grouped by the others):
wandb workspaces have no per-panel facets, so faceting by S is a view per S. Grouping by every
swept variable keeps e.g. LocalSGD at H = 2, 5, 30 apart (one group each) instead of averaging
them. The keys are ``meta.*`` config keys, written by ``rpd.cli.wandb_log``. Each view has
the panels

- Objective: f − f* against sim_time (log y), and against block_update;
- Delays: the delay statistics (mean, p10, max) logged by delay-driven runs;
- Step size: the chosen γ (log2) per run, grouped by method.

Building needs no network. ``--save`` uploads the views and needs an online wandb login;
without it the command only prints what it built. Metric names match ``rpd.io.tracking``'s
conventions and can be overridden on the command line.
"""

from __future__ import annotations

import argparse
import os
import warnings
from typing import NamedTuple, Sequence

# The swept variables runs are grouped by (``meta.<key>``, see rpd.cli.wandb_log.sweep_meta).
GROUP_BY = ("method", "schedule", "S", "H", "delta", "N", "T")


class Metrics(NamedTuple):
    """The logged keys the panels read."""

    f_gap: str = "loss/f_minus_fstar"
    delays: tuple[str, ...] = ("delay/mean", "delay/p10", "delay/max")
    gamma_log2: str = "tuning/gamma_log2"


def _import():
    """(workspaces, reports) modules; silences only their own pydantic-v1 deprecation noise."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"wandb_workspaces\.")
        import wandb_workspaces.reports.v2 as wr
        import wandb_workspaces.workspaces as ws
    return ws, wr


def _f_gap_plot(wr, metrics: Metrics, against: str, x: str, title_x: str):
    """f − f* (log y) against the axis ``x``."""
    return wr.LinePlot(
        title=f"f - f* vs {against}", x=x, y=[metrics.f_gap], log_y=True, title_x=title_x, title_y="f(x) - f*"
    )


def _sections(metrics: Metrics):
    ws, wr = _import()

    objective = ws.Section(
        name="Objective",
        is_open=True,
        panels=[
            _f_gap_plot(wr, metrics, "simulated time", "sim_time", "time step (simulated wall-clock time)"),
            _f_gap_plot(wr, metrics, "block updates", "block_update", "block update k"),
        ],
    )
    delays = ws.Section(
        name="Delays", is_open=True, panels=[wr.BarPlot(title=f"{key} by run", metrics=[key]) for key in metrics.delays]
    )
    step = ws.Section(
        name="Step size",
        is_open=True,
        panels=[
            wr.BarPlot(title="chosen step size (log2 gamma)", metrics=[metrics.gamma_log2]),
            wr.ScalarChart(
                title="chosen log2 gamma (mean over runs)", metric=metrics.gamma_log2, groupby_aggfunc="mean"
            ),
        ],
    )
    return [objective, delays, step]


def build_views(entity: str, project: str, S_values: Sequence[int] = (), metrics: Metrics = Metrics()) -> list:
    """An overview ``ws.Workspace`` plus one per S (runs tagged "S<S>"). Needs no network."""
    ws, _ = _import()
    by = [ws.Config(f"meta.{k}") for k in GROUP_BY]  # meta is set by WandbLogger
    others = [ws.Config(f"meta.{k}") for k in GROUP_BY if k != "S"]

    def view(name, runset):
        return ws.Workspace(
            entity=entity,
            project=project,
            name=name,
            sections=_sections(metrics),
            runset_settings=runset,
            settings=ws.WorkspaceSettings(x_axis="sim_time", max_runs=100),
        )

    # names avoid '=' (wandb rejects math symbols in view names; tags with '=' mis-parse)
    views = [view("rpd overview", ws.RunsetSettings(groupby=by))]
    for s in S_values:
        tag_filter = ws.And(ws.Tags().isin([f"S{int(s)}"]))
        views.append(view(f"rpd {int(s)} stages", ws.RunsetSettings(groupby=others, filters=tag_filter)))
    return views


def describe(views) -> str:
    lines = []
    for v in views:
        lines.append(f"view {v.name!r} ({v.entity}/{v.project})")
        for sec in v.sections:
            lines.append(f"  {sec.name}: " + ", ".join(p.title or type(p).__name__ for p in sec.panels))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list:
    p = argparse.ArgumentParser(prog="python -m rpd.io.dashboard", description=__doc__.split("\n")[0])
    p.add_argument("--project", required=True)
    p.add_argument(
        "--entity",
        default=os.environ.get("WANDB_ENTITY"),
        help="wandb entity (default $WANDB_ENTITY; needed with --save)",
    )
    p.add_argument("--S", type=int, nargs="*", default=[2, 4, 8, 16, 32, 64, 128], help="one view per S")
    p.add_argument("--f-gap", default=Metrics().f_gap)
    p.add_argument("--gamma-log2", default=Metrics().gamma_log2)
    p.add_argument("--save", action="store_true", help="upload the views (online only)")
    args = p.parse_args(argv)
    try:
        _import()
    except ImportError:
        p.error("needs the optional extra: pip install -e '.[wandb-workspaces]'")
    if args.save:
        if os.environ.get("WANDB_MODE", "online") in ("offline", "disabled"):
            p.error("--save needs wandb online: unset WANDB_MODE=offline and `wandb login`")
        if not args.entity:
            p.error("--save needs --entity (or $WANDB_ENTITY)")
    metrics = Metrics(f_gap=args.f_gap, gamma_log2=args.gamma_log2)
    views = build_views(args.entity or "offline", args.project, args.S, metrics)
    print(describe(views))
    if args.save:
        for v in views:
            v.save()
    else:
        print("built only (pass --save, online, to upload)")
    return views


if __name__ == "__main__":
    main()
