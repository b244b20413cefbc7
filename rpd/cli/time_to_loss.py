"""Hours to a loss per method on n workers over sites (``python -m experiments.time_to_loss``,
docs/time_to_loss.md): hours_m(L) = κ_m · tokens_sync(L) / throughput_m.

    python -m experiments.time_to_loss model=llama3_8b hardware=h100_80g n_workers=256 \\
        hardware.sites=2 hardware.site_bandwidth=100e9 target_loss=2.3 \\
        "methods=[1f1b,pipedream_2bw,diloco,streaming_diloco]" diloco.M=2 diloco.H=30

Per method: the throughput half from the plan (a schedule: its fastest layout that fits on
``n_workers``, :func:`rpd.model.search3d.search` as ``experiments.plan n_workers=`` runs it, on
the hardware with its sites; ``diloco`` / ``streaming_diloco``: M replicas each running 1F1B
on n / M workers with a global batch of B / M, its layout searched the same way inside its
site, plus the outer exchange, :mod:`rpd.model.outer_exchange`); the convergence half from
:mod:`rpd.analysis.scale` (κ with its source; a method no source covers gets no hours, never an
invented κ). ``target_loss=``: tokens and hours to it; ``tokens=``: hours for that budget and
the loss each method is predicted to reach. The figure sweeps the site link over
``bandwidths`` (Gbit/s) with everything else fixed.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from omegaconf import OmegaConf

from rpd import registry
from rpd.analysis import scale
from rpd.cli.config import _value as _v
from rpd.cli.plan import build_model, recipe
from rpd.cli.plan_search import search_inputs
from rpd.cli.time_to_loss_config import TimeToLossConfig
from rpd.io.atomic import atomic_write
from rpd.io.provenance import git_state
from rpd.model import layers, outer_exchange, search3d
from rpd.model.answer import choose, describe, workers_of
from rpd.model.hardware import Hardware
from rpd.model.plan import Row
from rpd.plotting.time_to_loss import OUTER_LABELS, hours_figure
from rpd.validation import check_choice, check_int, check_real, required

OUTER = ("diloco", "streaming_diloco")
INNER = ("1f1b",)  # the schedule each DiLoCo replica runs (the synchronous reference)


def check(cfg) -> dict:
    """Every value check before any work: one-line errors naming the field."""
    n = check_int("n_workers", cfg.n_workers)
    B = check_int("pipeline.global_batch", cfg.pipeline.global_batch or n)
    methods = list(cfg.methods)
    if not methods:
        raise ValueError("methods must name at least one method")
    valid = sorted(registry.SCHEDULES) + sorted(registry.VARIANTS) + list(OUTER)
    for i, m in enumerate(methods):
        if m not in valid:
            raise ValueError(f"methods[{i}] must be one of {valid}, got {m!r}")
    if len(set(methods)) != len(methods):
        raise ValueError(f"methods must not repeat a method, got {methods}")
    d = cfg.diloco
    M, H = check_int("diloco.M", d.M), check_int("diloco.H", d.H)
    P, tau = check_int("diloco.P", d.P), check_int("diloco.tau", d.tau, minimum=0)
    check_real("diloco.value_bytes", d.value_bytes)
    if any(m in OUTER for m in methods):
        if n % M or B % M:
            raise ValueError(f"diloco.M={M} must divide n_workers={n} and pipeline.global_batch={B}")
        if H % P:
            raise ValueError(f"diloco.P={P} must divide diloco.H={H} (the fragments in turn, H / P steps apart)")
    law = scale.get_law(check_choice("law", cfg.law, tuple(scale.LAWS)))
    if (cfg.target_loss is None) == (cfg.tokens is None):
        raise ValueError("give exactly one of target_loss (hours to it) and tokens (the loss on that budget)")
    if cfg.tokens is not None:
        check_real("tokens", float(cfg.tokens))
    for i, g in enumerate(cfg.bandwidths or []):
        if check_real(f"bandwidths[{i}]", float(g)) * 1e9 < 1e6:
            raise ValueError(f"bandwidths[{i}] is in Gbit/s and must be >= 0.001, got {g}")
    return dict(n=n, B=B, methods=methods, M=M, H=H, P=P, tau=tau, law=law)


def kappa_settings(method: str, row, a: dict, optimizer: str) -> tuple[str, dict]:
    """The method's name and settings as :mod:`rpd.analysis.scale` knows them: DiLoCo's M, H
    (and P, τ); PipeDream's and PipeMare's S (their delay grows with it); 2BW's delay is 1 at
    any S; a synchronous schedule is the law's own run (``synchronous``)."""
    if method == "diloco":
        return method, dict(M=a["M"], H=a["H"], optimizer=optimizer)
    if method == "streaming_diloco":
        return method, dict(M=a["M"], H=a["H"], P=a["P"], tau=a["tau"], optimizer=optimizer)
    if registry.searched([method])[0].synchronous:
        return ("1f1b" if method == "1f1b" else "synchronous"), dict(optimizer=optimizer)
    if method in ("pipedream", "pipemare") and row is not None:
        return method, dict(S=row.S, optimizer=optimizer)
    return method, dict(optimizer=optimizer)


class Searcher:
    """The plan's n-workers search, once per (hardware, workers, batch, schedules)."""

    def __init__(self, cfg, kw: dict, par: layers.Parallel) -> None:
        self.models, self.space, self.shape, self.k = search_inputs(cfg, par, kw, build_model)
        self.cap = float(kw["memory_cap"])
        self.cache: dict[tuple, Row | None] = {}

    def fastest(self, hw: Hardware, n: int, B: int, names: tuple[str, ...]) -> Row | None:
        """The fastest row that fits of schedules ``names`` on ``n`` workers and B microbatches."""
        key = (hw, n, B, names)
        if key not in self.cache:
            found = search3d.search(
                self.models, hw, registry.timeline, n, B, self.cap, registry.searched(names), self.shape, self.space,
                **self.k,
            )  # fmt: skip
            self.cache[key] = choose(found.rows)[1]
        return self.cache[key]


def throughput(method: str, hw: Hardware, a: dict, search: Searcher, N: float, value_bytes: float) -> dict:
    """The throughput half of one method on ``hw`` (module docstring)."""
    n, B = a["n"], a["B"]
    if method not in OUTER:
        row = search.fastest(hw, n, B, (method,))
        if row is None:
            return dict(error=f"no layout of {method} on {n} workers fits", row=None)
        return dict(
            layout=describe(row),
            workers=workers_of(row),
            tokens_per_s=required("tokens_per_s", row.tokens_per_s),
            step_s=required("step_time_s", row.step_time_s),
            exposed_s=0.0,
            site_bytes_per_step=row.site_bytes_per_step,
            row=row,
        )
    M = a["M"]
    inner_hw = outer_exchange.replica_hardware(hw, M)
    inner = search.fastest(inner_hw, n // M, B // M, INNER)
    if inner is None:
        return dict(error=f"no layout of {INNER[0]} on {n // M} workers (one replica) fits", row=None)
    P, tau = (a["P"], a["tau"]) if method == "streaming_diloco" else (1, 0)
    t_inner = required("step_time_s", inner.step_time_s)
    out = outer_exchange.outer_step(hw, t_inner, N, M, n // M, a["H"], value_bytes, P, tau)
    tokens_per_step = required("tokens_per_s", inner.tokens_per_s) * t_inner * M
    return dict(
        layout=f"M={M} x ({describe(inner)}), H={a['H']}" + (f", P={P}, tau={tau}" if P > 1 or tau else ""),
        workers=M * workers_of(inner),
        tokens_per_s=tokens_per_step / out.step_s,
        step_s=out.step_s,
        exposed_s=out.exposed_s,
        site_bytes_per_step=out.site_bytes_per_step + inner.site_bytes_per_step * M,
        row=inner,
    )


def convergence(method: str, row, a: dict, N: float, cfg) -> dict:
    """κ, its source and the tokens (target_loss) or the predicted loss (tokens), from
    :mod:`rpd.analysis.scale`; no source: ``kappa`` None and the reason as its source, no
    tokens to the target (no hours) and no loss at a budget (its hours stand: they need no κ)."""
    name, settings = kappa_settings(method, row, a, _v(cfg.optimizer.name))
    law = a["law"]
    try:
        if cfg.target_loss is not None:
            rec = scale.tokens_to_loss(name, N, float(cfg.target_loss), law=law, **settings)
            loss = float(cfg.target_loss)
            return dict(kappa=rec.kappa, kappa_source=rec.source, tokens=rec.D, loss=loss, **_trend(rec, None, loss))
        D = float(cfg.tokens)
        rec = scale.effective_tokens(name, N, D, law=law, **settings)
        # L(N, D / kappa)
        return dict(kappa=rec.kappa, kappa_source=rec.source, tokens=D, loss=rec.loss, **_trend(rec, D, rec.loss_trend))
    except ValueError as exc:  # no source covers this method here: say so; no tokens to L, no loss at D
        budget = None if cfg.tokens is None else float(cfg.tokens)  # a budget's hours need no kappa
        return dict(kappa=None, kappa_source=f"no source: {exc}", tokens=budget, loss=None, **_trend(None, None, None))


def _trend(rec, budget: float | None, loss: float | None) -> dict:
    """The range rule's other end (docs/scale.md#beyond-the-trained-sizes-the-range-rule): κ read on
    the trend, its tokens to the target (or the budget) and its loss; all None inside the guard."""
    if rec is None or rec.kappa_trend is None:
        return dict(kappa_trend=None, tokens_trend=None, loss_trend=None)
    return dict(
        kappa_trend=rec.kappa_trend,
        tokens_trend=rec.tokens_trend if budget is None else budget,
        loss_trend=loss,
    )


def method_row(method, hw, a, search, N, cfg) -> dict:
    """One row of the table and the JSON: layout, tokens/s, κ with its source, tokens, hours,
    bytes over each site link per step (module docstring)."""
    t = throughput(method, hw, a, search, N, float(cfg.diloco.value_bytes))
    row = t.pop("row")
    c = convergence(method, row, a, N, cfg) if "error" not in t else dict(kappa=None, kappa_source=None)
    hours = hours_trend = None
    if c.get("tokens") is not None and "tokens_per_s" in t:
        hours = c["tokens"] / t["tokens_per_s"] / 3600.0
    if c.get("tokens_trend") is not None and "tokens_per_s" in t:
        hours_trend = c["tokens_trend"] / t["tokens_per_s"] / 3600.0
    return dict(method=method, **t, **c, hours=hours, hours_trend=hours_trend)


def _span(a: float | None, b: float | None, fmt) -> str:
    """``fmt(a)``, or the range ``lo..hi`` of a and b where b (the trend's reading) is given."""
    if a is None:
        return "n/a"
    if b is None:
        return fmt(a)
    lo, hi = sorted((a, b))
    return f"{fmt(lo)}..{fmt(hi)}"


def _hours(h: float) -> str:
    return f"{h:,.1f}" if h >= 10 else f"{h:.3g}"


def format_rows(rows: list[dict], target: str) -> str:
    """The table: one line per method, κ's source below it."""
    head = (
        f"{'method':<17} {'tokens/s':>11} {'step s':>8} {'site GB/step':>12} {'kappa':>13} {'tokens':>17} {target:>7}"
        f" {'hours':>17}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['method']:<17} refused: {r['error']}")
            continue
        k = _span(r["kappa"], r.get("kappa_trend"), lambda v: f"{v:.4g}")
        tok = _span(r["tokens"], r.get("tokens_trend"), lambda v: f"{v:.3g}")
        lt = r.get("loss_trend")
        loss = _span(r["loss"], None if lt == r["loss"] else lt, lambda v: f"{v:.4f}")  # to a target: one loss
        hours = _span(r["hours"], r.get("hours_trend"), _hours)
        lines.append(
            f"{r['method']:<17} {r['tokens_per_s']:>11,.0f} {r['step_s']:>8.3f} {r['site_bytes_per_step'] / 1e9:>12.3f} "
            f"{k:>13} {tok:>17} {loss:>7} {hours:>17}"
        )
        lines.append(f"  layout: {r['layout']} ({r['workers']} workers)")
        lines.append(f"  kappa: {r['kappa_source']}")
    return "\n".join(lines)


def run(cfg, output_dir: str | Path | None = None) -> dict:
    """The whole command without hydra: its JSON (written to ``cfg.out``, else to
    ``<output_dir>/time_to_loss.json``), the figure to ``cfg.figure`` or the run directory."""
    cfg = OmegaConf.merge(OmegaConf.structured(TimeToLossConfig), cfg)
    hw, par, kw, settings = recipe(cfg)
    a = check(cfg)
    N = float(build_model(cfg.model, "none", layers.NO_TP).params)
    if cfg.target_loss is not None:
        a["law"].tokens(N, float(cfg.target_loss))  # below the law's floor: refused before the searches
    for m in a["methods"]:
        if m in OUTER:
            outer_exchange.replica_hardware(hw, a["M"])  # M and the sites, checked before the searches
    out_path = cfg.out or (str(Path(output_dir) / "time_to_loss.json") if output_dir is not None else None)
    fig_path = cfg.figure or (str(Path(output_dir) / "time_to_loss.png") if output_dir is not None else None)
    search = Searcher(cfg, kw, par)
    say = lambda message: print(f"time_to_loss: {message}", file=sys.stderr, flush=True)  # noqa: E731
    rows = []
    for m in a["methods"]:
        say(f"{m} on {a['n']} workers")
        rows.append(method_row(m, hw, a, search, N, cfg))
    site = (
        "one site"
        if hw.sites == 1
        else f"{hw.sites} sites at {required('site_bandwidth', hw.site_bandwidth) / 1e9:g} Gbit/s"
    )
    goal = f"target loss {cfg.target_loss}" if cfg.target_loss is not None else f"{float(cfg.tokens):.3g} tokens"
    print(
        f"{cfg.model.name} ({N:.4g} parameters) on {a['n']} x {hw.name}, {site}, a global batch of {a['B']} "
        f"microbatches of {build_model(cfg.model, 'none', layers.NO_TP).tokens_per_microbatch} tokens; "
        f"{goal}; law: {a['law'].source}; {_v(cfg.optimizer.name)}"
    )
    print(format_rows(rows, "loss"))
    commit, dirty = git_state()
    run_settings = dict(settings, n_workers=a["n"], global_batch=a["B"], N=N, methods=a["methods"], law=a["law"].source)
    run_settings.update(
        diloco=OmegaConf.to_container(cfg.diloco), target_loss=cfg.target_loss, tokens=cfg.tokens,
        hardware=dataclasses.asdict(hw),
    )  # fmt: skip
    # the tree the numbers came from
    result: dict = dict(settings=run_settings, rows=rows, code=dict(git_commit=commit, dirty=dirty))
    gbits = [float(g) for g in cfg.bandwidths or []]
    if gbits and hw.sites > 1 and fig_path:
        sweep: dict[str, list] = {m: [] for m in a["methods"]}
        trend: dict[str, list] = {m: [] for m in a["methods"]}  # the range rule's other end (None: no range)
        for g in gbits:
            say(f"the site link at {g:g} Gbit/s")
            h = dataclasses.replace(hw, site_bandwidth=g * 1e9)
            for m in a["methods"]:
                got = method_row(m, h, a, search, N, cfg)
                sweep[m].append(got["hours"])
                trend[m].append(got["hours_trend"])
        result["sweep"] = dict(gbits=gbits, hours=sweep, hours_trend=trend)
        title = f"{cfg.model.name} on {a['n']} x {hw.name} over {hw.sites} sites: hours to {goal}"
        hours_figure(gbits, sweep, fig_path, title=title, labels=OUTER_LABELS, trend=trend)
        print(f"wrote {fig_path}")
    elif gbits and hw.sites == 1:
        print("hardware.sites=1: no site link to sweep, no figure")
    if out_path:
        atomic_write(out_path, json.dumps(result, indent=1).encode())
        print(f"wrote {out_path}")
    return result
