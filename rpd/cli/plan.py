"""Which schedule for this model on this device (``python -m experiments.plan``, docs/plan.md): the
plan over every registered schedule.

    python -m experiments.plan model=gpt2_medium hardware=a100_80g pipeline.S=4 pipeline.M=8
    python -m experiments.plan model=gpt3_1.3b pipeline.S=8 "pipeline.M=[8,16,32,64]" optimizer=sgd
    python -m experiments.plan model=llama_7b hardware=h100_80g recompute=full out=llama.json figure=llama.png
    python -m experiments.plan pipeline.S=4 pipeline.D=2 pipeline.partition=pipedream schedules=[1f1b,zb_h1]

Prints one row per (schedule, M) -- step time, bubble (f_total and r_ideal), tokens/s, MFU,
peak bytes of the worst rank, fits, p2p and all-reduce bytes per step, max delay, weight
versions -- sorted by tokens/s among those that fit, and writes ``out`` (JSON, bytes per rank
as lists) and, with ``figure=``, step time per microbatch against peak memory with its frontier.
``pipeline.D`` data-parallel pipelines
add their gradient all-reduce to each step (``pipeline.overlap_allreduce``: during the drain);
with ``pipeline.partition=pipedream`` the command also prints PipeDream's partitioner's own
configuration for S·D workers (stages with replicas, :func:`rpd.model.partition.partition_model`)
beside the straight pipeline the schedules run. The computation is :func:`rpd.model.plan.plan`; this module only composes it with the schedule
registry (:mod:`rpd.registry`). The schema is :class:`rpd.cli.plan_config.PlanConfig` (stored as ``plan_schema``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from omegaconf import OmegaConf

from rpd import registry
from rpd.analysis import tuning
from rpd.analysis.plan_train import format_times
from rpd.cli import specs
from rpd.cli.config import _value as _v
from rpd.cli.config import node_to
from rpd.cli.objectives import build_objective
from rpd.cli.plan_config import PlanConfig
from rpd.cli.plan_search import knobs, least_line, workers_search
from rpd.cli.plan_train import train_grid, train_rows
from rpd.model import hardware as hw_lib
from rpd.model import layers
from rpd.model.answer import answer, best_first, breakdown_lines, choose, describe, knob_lines, parse_bytes
from rpd.model.overlap import Overlap
from rpd.model.partition import partition_model
from rpd.model.plan import format_table, plan, to_json
from rpd.model.profile import load_profile
from rpd.plotting.plan import frontier_figure
from rpd.train import transforms
from rpd.validation import check_choice, check_int, check_real, required


def build_model(m, recompute: str, par: layers.Parallel = layers.NO_TP) -> layers.Model:
    """The :class:`~rpd.model.layers.Model` of a model config node, per TP rank."""
    if _v(m.kind) == "profile":
        if not m.profile:
            raise ValueError("model.profile must name a JSON or CSV file when model.kind=profile")
        return load_profile(m.profile, m.tokens_per_microbatch)
    cfg = node_to(layers.GPTConfig, m)  # the node's schema is GPTConfig's fields (rpd.cli.plan_config)
    return layers.gpt_model(cfg, recompute, name=m.name, par=par)


def optimizer_states(name: str) -> int:
    """The fp32 state values per parameter that the registered optimizer ``name`` declares (its
    entry's ``state``): what rpd.model counts as its optimizer state (docs/plan.md)."""
    states = transforms.entry(name).state
    if states is None:
        raise ValueError(
            f"optimizer: {name} declares no state per parameter (OptimizerEntry.state), so the plan cannot count "
            f"its bytes; planned: {[n for n, e in transforms.OPTIMIZERS.items() if e.state is not None]}"
        )
    return states


def recipe(cfg) -> tuple[hw_lib.Hardware, layers.Parallel, dict, dict]:
    """The run's recipe from a plan-like config node (its ``hardware``, ``overlap``, ``pipeline``
    TP / SP / CP / v / partition / overlap_allreduce, ``optimizer``, ``precision``, ``recompute``,
    ``memory_cap``, ``margin``, ``zero``, ``attention``, ``offload``, ``grad_bytes``,
    ``tick_s``), checked: (hardware, Parallel, :func:`rpd.model.plan.plan_one`'s keyword
    settings, the settings the JSON records). Shared by the plan and ``experiments.time_to_loss``."""
    states = optimizer_states(_v(cfg.optimizer.name))
    # omegaconf's stub types a container as a union; a config node's is a dict
    hardware: dict = OmegaConf.to_container(cfg.hardware, resolve=True)  # type: ignore[assignment]
    overlap: dict = OmegaConf.to_container(cfg.overlap, resolve=True)  # type: ignore[assignment]
    hw = hw_lib.Hardware(**hardware)
    ov = Overlap(**overlap)
    ov = dataclasses.replace(ov, tp_comm=ov.tp_comm or bool(cfg.tp_overlap))
    par = layers.Parallel(
        TP=check_int("pipeline.TP", cfg.pipeline.TP),
        SP=bool(cfg.pipeline.SP),
        attention=cfg.attention,
        tp_overlap=ov.tp_comm,
        CP=check_int("pipeline.CP", cfg.pipeline.CP),
    )
    cap = parse_bytes(cfg.memory_cap) if cfg.memory_cap is not None else float(hw.memory_bytes)
    margin = check_real("margin", cfg.margin, allow_zero=True)
    if margin >= 1:
        raise ValueError(f"margin must be < 1, got {margin}")
    if cfg.offload and hw.host_bandwidth is None:
        raise ValueError("offload needs hardware.host_bandwidth (bytes/s between a GPU and host memory)")
    settings = {
        "overlap_allreduce": bool(cfg.pipeline.overlap_allreduce),
        "optimizer": _v(cfg.optimizer.name),
        "optimizer_states": states,
        "precision": _v(cfg.precision),
        "recompute": _v(cfg.recompute),
        "partition": _v(cfg.pipeline.partition),
        "memory_cap": cap,
        "margin": margin,
        "TP": par.TP,
        "SP": par.SP,
        "CP": par.CP,
        "overlap": dataclasses.asdict(ov),
        "v": cfg.pipeline.v,
        "zero": check_choice("zero", cfg.zero, (0, 1)),
        "attention": par.attention,
        "offload": bool(cfg.offload),
    }
    kw = dict(
        optimizer_states=states,
        precision=settings["precision"],
        memory_cap=cap,
        how=settings["partition"],
        tick_s=cfg.tick_s,
        grad_bytes=cfg.grad_bytes,
        overlap_allreduce=settings["overlap_allreduce"],
        SP=par.SP,
        zero=settings["zero"],
        recompute=settings["recompute"],
        margin=margin,
        offload=settings["offload"],
        CP=par.CP,
        # the named switches replace pipeline.overlap_allreduce once any of theirs is set
        overlap=None if ov == Overlap(tp_comm=ov.tp_comm) else ov,
    )
    return hw, par, kw, settings


def run(cfg, output_dir: str | Path | None = None) -> dict:
    """The whole command without hydra: the plan's JSON (also written to ``cfg.out``, else to
    ``<output_dir>/plan.json``: the hydra run directory, which the entry point passes)."""
    cfg = OmegaConf.merge(OmegaConf.structured(PlanConfig), cfg)
    hw, par, kw, base = recipe(cfg)
    model = build_model(cfg.model, _v(cfg.recompute), par)
    cap, margin = kw["memory_cap"], kw["margin"]
    if cfg.objective is not None:  # the training half's input, checked before any work
        train_grid(cfg)
        check_int("train.N", cfg.train.N)
        check_int("train.points", cfg.train.points)
        check_choice("train.rule", cfg.train.rule, tuning.RULES)
        if cfg.train.target is not None:
            check_real("train.target", cfg.train.target, allow_zero=True)
        try:  # the objective's own checks, before the plan's work
            build_objective(cfg.objective, cfg.pipeline.S)
        except (ValueError, TypeError) as exc:
            field = str(exc).split(" ", 1)[0]  # a message that starts with its field: name it in full
            raise type(exc)(f"objective.{exc}" if field in cfg.objective else f"objective: {exc}") from None
    names = list(registry.SCHEDULES) if cfg.schedules is None else list(cfg.schedules)
    for i, n in enumerate(names):
        if n not in registry.SCHEDULES and n not in registry.VARIANTS:
            valid = sorted(registry.SCHEDULES) + sorted(registry.VARIANTS)
            raise ValueError(f"schedules[{i}] must be one of {valid}, got {n!r}")
    # omegaconf's stub types a container as a union; a config node's is a dict
    pipeline: dict = OmegaConf.to_container(cfg.pipeline, resolve=True)  # type: ignore[assignment]
    M = pipeline["M"]
    M = [check_int("pipeline.M", M)] if not isinstance(M, list) else M
    D = check_int("pipeline.D", cfg.pipeline.D)
    noise = specs.stochastic_time(cfg.costs, check_int("pipeline.S", cfg.pipeline.S))
    if noise is not None and cfg.n_workers is not None:
        raise ValueError("costs: jitter and stragglers apply to the plan's rows, not to the n_workers search")
    settings = {"S": cfg.pipeline.S, "M": M, "D": D, **base}
    if noise is not None:  # the plan's JSON says which stochastic time its rows were timed under
        settings["costs"] = OmegaConf.to_container(cfg.costs, resolve=True)
    if cfg.n_workers is not None:  # TP x CP x PP x DP x M and the knobs for n workers: only that search
        out = workers_search(cfg, hw, par, kw, settings, build_model)
    else:
        rows = plan(
            model,
            hw,
            names,
            registry.timeline,
            cfg.pipeline.S,
            M,
            D=D,
            TP=par.TP,
            v=cfg.pipeline.v,
            stochastic=noise,
            **kw,
        )
        rows = best_first(rows)  # at equal speed the smaller peak first
        lines = answer(rows, cap, margin)
        print("\n".join(lines))
        print(
            f"{model.name}: {model.params:,} parameters per TP rank, {layer_count(model)}; {hw.name}; "
            f"TP={par.TP}{' SP' if par.SP else ''}, CP={par.CP}, S={cfg.pipeline.S}, D={D}, zero={settings['zero']}, "
            f"{settings['optimizer']}, {settings['precision']}, recompute {settings['recompute']}, "
            f"attention {par.attention}{', offload' if cfg.offload else ''}"
        )
        print(table(rows))
        out = to_json(model, hw, rows, settings)
        out["answer"] = lines
        chosen = choose(rows)[0] or choose(rows)[1]
        if chosen is not None:
            print(f"bytes per rank of the answer ({describe(chosen)}):")
            print("\n".join(breakdown_lines(chosen)))
        else:
            tried, skipped = knobs(cfg, hw, par, names, M, D, kw, build_model)
            print("what would fit (each knob alone, from rows computed with it):")
            print("\n".join(knob_lines(tried, skipped)))
            least = least_line(cfg, hw, par, kw, par.TP * par.CP * cfg.pipeline.S * D, build_model)
            print(least)
            out["knobs"] = {k: [dataclasses.asdict(r) for r in v] for k, v in tried.items()}
            out["knobs_skipped"] = skipped
            out["least_devices"] = least
        if settings["partition"] == "pipedream":
            part = partition_model(model, hw, cfg.pipeline.S * D, grad_bytes=cfg.grad_bytes or 4)
            out["partitioner"] = {
                "workers": part.workers,
                "stages": [list(x) for x in part.stages],
                "bottleneck_s": part.bottleneck,
            }
            print(
                f"PipeDream's partitioner on {cfg.pipeline.S * D} workers: {part.workers} used, (first, last, "
                f"replicas) {list(part.stages)}, {part.bottleneck * 1e3:.3f} ms per microbatch"
            )
        if cfg.objective is not None:
            out["time_to_target"] = train_rows(cfg, rows, model, hw, settings)
            print(format_times(out["time_to_target"]))
        if cfg.figure:
            points = [  # the table's units: ms per step, GiB on the worst rank
                (
                    max(required("peak_bytes", r.peak_bytes)) / 2**30,
                    required("step_time_s", r.step_time_s) * 1e3,
                    r.schedule,
                    r.M,
                    bool(r.fits),
                )
                for r in rows
                if r.error is None
            ]
            devices = par.TP * par.CP * cfg.pipeline.S * D  # every device of the plan, not the stages alone
            frontier_figure(
                points,
                cfg.figure,
                title=f"{model.name} on {devices} x {hw.name} (TP {par.TP} x CP {par.CP} x PP {cfg.pipeline.S} x DP {D})",
                cap_gib=cap / 2**30,
                margin=margin,
            )
            print(f"wrote {Path(cfg.figure).resolve()}")
    path = cfg.out
    if path is None and output_dir is not None:
        path = str(Path(output_dir) / "plan.json")
    if path:
        Path(path).write_text(json.dumps(out, indent=1))
        print(f"wrote {path}")
    return out


def layer_count(model) -> str:
    """The partition's units said as the model card counts them: ``80 blocks + embedding + head
    (82 layers to partition)`` for Llama 3 70B, whose card says 80 layers (the transformer blocks)."""
    kinds = [layer.kind for layer in model.layers]
    ends = [k for k in ("embedding", "head") if k in kinds]
    blocks = len(kinds) - len(ends)
    return f"{blocks} blocks" + "".join(f" + {k}" for k in ends) + f" ({len(kinds)} layers to partition)"


def table(rows) -> str:
    """:func:`rpd.model.plan.format_table` with each refusal's reason in full below the table
    (the table's cell holds a pointer to it)."""
    refused = [r for r in rows if r.error is not None]
    ref = {id(r): i + 1 for i, r in enumerate(refused)}
    shown = [r if r.error is None else dataclasses.replace(r, error=f"E: reason ({ref[id(r)]}) below") for r in rows]
    notes = [f"({ref[id(r)]}) {r.schedule} M={r.M}: {r.error.split(': ', 1)[-1]}" for r in refused]
    return "\n".join([format_table(shown), *notes])
