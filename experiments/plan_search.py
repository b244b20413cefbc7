"""The plan's two searches beside its table (experiments.plan): what fits when nothing does, one
knob changed at a time, and the TP × PP × DP × M search over ``n_workers``
(:mod:`rpd.model.search3d`); ``build_model(model node, recompute, Parallel)`` is the plan's."""

from __future__ import annotations

import dataclasses
import enum

from omegaconf import OmegaConf

from rpd import registry
from rpd.model import search3d
from rpd.model.answer import answer, choose, describe, workers_of
from rpd.model.plan import plan
from rpd.validation import check_int

RECOMPUTE_ORDER = ("none", "selective", "full")


# The schedules the N-workers search tries: 1F1B, interleaved (v = 2), ZB-H1 and, with one
# pipeline, the asynchronous PipeDream (docs/plan.md#n-workers).
SEARCHED = ("1f1b", "interleaved", "zb_h1", "pipedream")


def _v(x):
    return x.value if isinstance(x, enum.Enum) else x


def knobs(cfg, hw, par, names, M, D, kw, build_model) -> dict:
    """Rows of the same plan with one knob changed each (recompute, TP, ZeRO, offload, stages,
    micro-batch)."""
    S, rec, mb = cfg.pipeline.S, kw["recompute"], cfg.model.micro_batch
    blocks = cfg.model.n_layer if _v(cfg.model.kind) == "gpt" else 0
    tries = {}
    for r in ("selective", "full"):
        if RECOMPUTE_ORDER.index(r) > RECOMPUTE_ORDER.index(rec):
            tries[f"recompute={r}"] = (dict(kw, recompute=r), par, S, M, cfg.model)
    t = 2 * par.TP
    if hw.gpus_per_node % t == 0 and cfg.model.n_head % t == 0:
        tries[f"pipeline.TP={t} pipeline.SP=true ({t} GPUs per stage)"] = (
            dict(kw, SP=True),
            dataclasses.replace(par, TP=t, SP=True),
            S,
            M,
            cfg.model,
        )
    if D > 1 and not kw["zero"]:
        tries["zero=1"] = (dict(kw, zero=1), par, S, M, cfg.model)
    if hw.host_bandwidth is not None and not kw["offload"]:
        tries["offload=true"] = (dict(kw, offload=True), par, S, M, cfg.model)
    if 2 * S <= blocks:
        tries[f"pipeline.S={2 * S}"] = (kw, par, 2 * S, M, cfg.model)
    if mb > 1:
        smaller = OmegaConf.merge(cfg.model, {"micro_batch": mb // 2})
        tries[f"model.micro_batch={mb // 2} (M x 2)"] = (kw, par, S, [2 * m for m in M], smaller)
    out = {}
    for label, (k, p, s, ms, m) in tries.items():
        model = build_model(m, k["recompute"], p)
        out[label] = plan(model, hw, names, registry.timeline, s, ms, D=D, TP=p.TP, v=cfg.pipeline.v, **k)
    return out


def workers_search(cfg, hw, par, kw, settings, build_model) -> dict:
    """The TP x PP x DP x M search over ``n_workers`` (rpd.model.search3d): its answer and rows."""
    n = check_int("n_workers", cfg.n_workers)
    B = check_int("pipeline.global_batch", cfg.pipeline.global_batch or n)
    cache = {}

    def models(tp):
        if tp not in cache:
            cache[tp] = build_model(cfg.model, kw["recompute"], dataclasses.replace(par, TP=tp, SP=par.SP and tp > 1))
        return cache[tp]

    k = {key: v for key, v in kw.items() if key not in ("memory_cap", "SP")}
    shape = (cfg.model.n_head, cfg.model.d_model)
    rows, timed = search3d.search(
        models, hw, registry.timeline, n, B, kw["memory_cap"], registry.searched(SEARCHED), shape=shape, **k
    )
    rows = search3d.best_first(
        rows + search3d.replicated(models, hw, n, kw["memory_cap"], *shape, **k)
    )  # + the partitioner's 1F1B-RR
    lines = answer(rows, kw["memory_cap"], kw["margin"])
    sync, fastest = choose(rows)
    for best in [sync] + ([fastest] if fastest is not sync else []):
        if best is None:
            continue
        lines.append(f"{describe(best).split(' with ')[0]} uses {workers_of(best)} of {n} workers")
    print("\n".join(lines))
    print(f"{n} workers, a global batch of {B} microbatches: {timed} configurations timed, fastest first:")
    for r in rows[:12]:
        state = r.error or (
            f"{r.tokens_per_s:,.0f} tokens/s, MFU {'n/a' if r.mfu is None else f'{r.mfu:.1%}'}, peak "
            f"{max(r.peak_bytes) / 2**30:.1f} GiB" + ("" if r.fits else " (does not fit)")
        )
        print(f"  {describe(r)}: {state}")
    return dict(
        settings=dict(settings, n_workers=n, global_batch=B),
        answer=lines,
        timed=timed,
        rows=[dataclasses.asdict(r) for r in rows],
    )
