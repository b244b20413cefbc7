"""The plan's two searches beside its table (experiments.plan): what fits when nothing does, one
knob changed at a time, and the TP × CP × PP × DP × M search over ``n_workers`` with
recomputation, SP, ZeRO and v (:mod:`rpd.model.search3d`); ``build_model(model node, recompute,
Parallel)`` is the plan's."""

from __future__ import annotations

import dataclasses
import enum
import sys

from omegaconf import OmegaConf

from rpd import registry
from rpd.model import search3d
from rpd.model.answer import answer, best_first, choose, describe, mfu_text, workers_of
from rpd.model.plan import plan
from rpd.model.search_bounds import least_devices
from rpd.model.workers import RR_GROUPS, replicated
from rpd.validation import check_int, required

RECOMPUTE_ORDER = ("none", "selective", "full")


# The schedules the N-workers search tries: 1F1B, interleaved (v = 2), ZB-H1 and, with one
# pipeline, the asynchronous PipeDream (docs/plan.md#n-workers).
SEARCHED = ("1f1b", "interleaved", "zb_h1", "pipedream")


def _v(x):
    return x.value if isinstance(x, enum.Enum) else x


def knobs(cfg, hw, par, names, M, D, kw, build_model) -> tuple[dict, dict]:
    """Rows of the same plan with one knob changed each (recompute, TP, ZeRO, offload, stages,
    micro-batch): ({knob: rows}, {knob: why it cannot apply}) -- a knob the model or the
    hardware refuses (more stages than layers, ...) is skipped with its reason."""
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
    out, skipped = {}, {}
    for label, (k, p, s, ms, m) in tries.items():
        try:
            model = build_model(m, k["recompute"], p)
            out[label] = plan(model, hw, names, registry.timeline, s, ms, D=D, TP=p.TP, v=cfg.pipeline.v, **k)
        except (ValueError, TypeError) as exc:  # the knob cannot apply to this model: say why, go on
            skipped[label] = str(exc)
    return out, skipped


def held_fixed(cfg, kw, space: search3d.Space, rr_skipped: list[int], n: int) -> list[str]:
    """What the n_workers search varies, and what it holds fixed, each with why."""
    ov = kw.get("overlap")
    switches = "" if ov is None else ", ".join(f"{k}={str(v).lower()}" for k, v in dataclasses.asdict(ov).items())
    lines = [
        f"searched: TP (inside a node), CP {list(space.CP)} (2·CP sequence chunks), PP, DP, v (whole layers per "
        f"chunk), recompute {list(space.recompute)}, SP {[str(x).lower() for x in space.SP]}, zero {list(space.zero)} "
        "(the config's values of these are not read)",
        "held fixed (the run's recipe, not its layout):",
        f"  model.micro_batch={cfg.model.micro_batch} (the global batch counts microbatches of this size)",
        f"  attention={_v(cfg.attention)} (a kernel, not a split"
        + ("" if _v(cfg.attention) == "flash" else ": set attention=flash to plan with it")
        + ")",
        f"  offload={str(bool(cfg.offload)).lower()} (host memory is the run's choice"
        + ("" if cfg.offload else ": set offload=true to plan with it")
        + ")",
        f"  {_v(cfg.precision)}, {_v(cfg.optimizer.name)}, gradients of {kw.get('grad_bytes') or 4} bytes, "
        f"partition={kw['how']} (the training recipe)",
        "  overlap: "
        + (switches or f"pipeline.overlap_allreduce={str(bool(kw['overlap_allreduce'])).lower()}")
        + " (Megatron's switches, the run's)",
        f"  schedules {list(SEARCHED)}; PipeDream's partitioner (1F1B-RR) at recompute={kw['recompute']}, CP=1",
    ]
    if rr_skipped:
        lines.append(
            f"  the partitioner not run at TP={','.join(map(str, rr_skipped))} ({n // min(rr_skipped)} groups > "
            f"{RR_GROUPS}: it and its 1F1B-RR timeline grow as groups²)"
        )
    return lines


def _row_line(r) -> str:
    state = r.error or (
        f"{r.tokens_per_s:,.0f} tokens/s, MFU {mfu_text(r)}, peak "
        f"{max(r.peak_bytes) / 2**30:.1f} GiB" + ("" if r.fits else " (does not fit)")
    )
    return f"  {describe(r)}: {state}"


def least_line(cfg, hw, par, kw, have: int, build_model, searched: bool = False) -> str:
    """When nothing fits: the fewest devices the static bytes need (rpd.model.search3d), and
    the knob to change. ``have``: the devices of the plan; ``searched``: the n_workers search
    (its layouts already tried)."""
    cap = kw["memory_cap"] * (1 - kw["margin"])
    cache = {}

    def models(tp):
        if tp not in cache:
            cache[tp] = build_model(cfg.model, "none", dataclasses.replace(par, TP=tp, SP=False))
        return cache[tp]

    static = {k: kw[k] for k in ("precision", "optimizer_states", "grad_bytes") if k in kw}
    m = cfg.model
    tps = search3d.tp_values(hw, hw.gpus_per_node, m.n_head, m.d_model, m.n_kv_heads)
    least = least_devices(models, hw, cap, tps, how=kw["how"], **static)
    if least is None:
        return f"no TP x PP holds the weights, gradients and optimizer state in {cap / 2**30:.1f} GiB per device: raise memory_cap"
    need = (
        f"the weights, gradients and optimizer state alone need at least {least[0]} devices "
        f"(TP={least[1]}, PP={least[2]}, one pipeline)"
    )
    if not searched:
        return need + f"; this plan has {have}"
    if least[0] > have:
        return need + f": set n_workers={least[0]} or more"
    others = [] if _v(cfg.attention) == "flash" else ["attention=flash"]
    if hw.host_bandwidth is not None and not cfg.offload:
        others.append("offload=true")
    if cfg.model.micro_batch > 1:
        others.append(f"model.micro_batch={cfg.model.micro_batch // 2}")
    return (
        need
        + f", {have} here; the activations do not fit: "
        + (f"try {' or '.join(others)}" if others else "raise memory_cap or use more devices")
    )


def search_inputs(cfg, par, kw, build_model):
    """What :func:`rpd.model.search3d.search` needs of a plan-like config: (the models per
    :class:`~rpd.model.search3d.Variant`, built once each; the space; the model's shape; the
    plan's other settings for it)."""
    cache = {}

    def models(x: search3d.Variant):
        if x not in cache:
            p = dataclasses.replace(par, TP=x.TP, SP=x.SP, CP=x.CP)
            cache[x] = build_model(cfg.model, x.recompute, p)
        return cache[x]

    m = cfg.model
    if _v(m.kind) == "gpt":
        space = search3d.Space()
        shape = search3d.Shape(m.n_layer, m.n_head, m.n_kv_heads or m.n_head, m.d_model, m.seq)
    else:  # a measured profile: its layers are as measured, TP / CP / SP / recompute not modelled
        space = search3d.Space(recompute=(kw["recompute"],), SP=(False,), CP=(1,))
        blocks = sum(1 for x in models(search3d.Variant(1, 1, False, kw["recompute"])).layers if x.kind == "block")
        shape = search3d.Shape(blocks, m.n_head, m.n_kv_heads or m.n_head, m.d_model, m.seq)
    k = {key: v for key, v in kw.items() if key not in ("memory_cap", "SP", "zero", "recompute", "CP")}
    return models, space, shape, k


def workers_search(cfg, hw, par, kw, settings, build_model) -> dict:
    """The TP x CP x PP x DP x M search over ``n_workers`` with recomputation, SP, ZeRO and v
    (rpd.model.search3d): its answer and rows; its progress on stderr."""
    n = check_int("n_workers", cfg.n_workers)
    B = check_int("pipeline.global_batch", cfg.pipeline.global_batch or n)
    models, space, shape, k = search_inputs(cfg, par, kw, build_model)
    searched = registry.searched(SEARCHED)
    say = lambda message: print(f"plan: {message}", file=sys.stderr, flush=True)  # noqa: E731
    found = search3d.search(
        models, hw, registry.timeline, n, B, kw["memory_cap"], searched, shape, space, progress=say, **k
    )
    fastest = choose(found.rows)[1]
    # PipeDream's partitioner places no sites: not run on more than one
    tps = search3d.tp_values(hw, n, shape.heads, shape.hidden, shape.kv_heads) if hw.sites == 1 else []
    say(f"PipeDream's partitioner (1F1B-RR) for TP in {tps}")
    extra, dropped, rr_skipped = replicated(
        lambda t: models(search3d.Variant(t, 1, False, kw["recompute"])),
        hw,
        n,
        kw["memory_cap"],
        tps,
        best=0.0 if fastest is None else required("tokens_per_s", fastest.tokens_per_s),
        straight=any(not s.synchronous for s in searched),
        **dict(k, recompute=kw["recompute"]),
    )
    rows = best_first(found.rows + extra)
    lines = answer(rows, kw["memory_cap"], kw["margin"])
    sync, fastest = choose(rows)
    for best in [sync] + ([fastest] if fastest is not sync else []):
        if best is None:
            continue
        lines.append(f"{describe(best).split(' with ')[0]} uses {workers_of(best)} of {n} workers")
    if fastest is None:
        lines.append(least_line(cfg, hw, par, kw, n, build_model, searched=True))
    print("\n".join(lines))
    print("\n".join(held_fixed(cfg, kw, space, rr_skipped, n)))
    fit = sum(1 for r in rows if r.error is None and r.fits)
    print(
        f"{n} workers, a global batch of {B} microbatches: {found.candidates} configurations; "
        f"{found.over_cap} over the cap on bytes before timing and {found.bounded} bounded below the best "
        f"(not timed); {found.timed} timed, + {len(extra)} of PipeDream's partitioner (1F1B-RR, {dropped} not "
        f"timed); {fit} of these {len(rows)} fit"
    )
    shown = rows[:12]
    if shown:
        print(f"the {len(shown)} fastest of the {len(rows)}" + (", those that fit first:" if fit else ":"))
    for r in shown:
        print(_row_line(r))
    return dict(
        settings=dict(settings, n_workers=n, global_batch=B),
        answer=lines,
        timed=found.timed,
        counts=dict(candidates=found.candidates, over_cap=found.over_cap, bounded=found.bounded, timed=found.timed),
        rows=[dataclasses.asdict(r) for r in rows],
    )
