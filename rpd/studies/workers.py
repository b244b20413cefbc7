"""E15: a fixed number of workers, pipeline × data parallelism × replication
(docs/plan.md#a-fixed-number-of-workers-rpdmodelworkers).

For each model (``gpt3_1.3b``, ``gpt2_medium``: their stage profiles from :mod:`rpd.model.layers`)
and each worker count n (8..64), every configuration of :func:`rpd.model.workers.configurations`
(pure DP, pure PP, even S × D splits, PipeDream's partitioner's stages and replicas) is timed as a
PipeDream 1F1B-RR timeline under the stages' own costs and sized per device (Adam, bf16 mixed,
weight stashing). Tokens/s and peak bytes per device are the figure; the seeds' three claims get a
verdict computed from the numbers:

1. **"Pipeline inside a node, data parallelism across nodes."** For n >= 2 nodes of ``node``
   GPUs: the even S = ``node`` pipeline inside each node (p2p over NVLink, the all-reduce of
   its D = n / node replicas over InfiniBand) against the transpose, S = n / node stages across
   nodes (p2p over InfiniBand) with D = ``node`` replicas inside a node (all-reduce over NVLink),
   stages balanced by time (``placement_partition``), timed two ways: as PipeDream's asynchronous 1F1B-RR (a replicated stage all-reduces its
   weights every r microbatches) and as synchronous 1F1B with D pipelines (one gradient
   all-reduce per step of ``global_batch`` microbatches, :func:`rpd.model.plan.plan_one`); and
   PipeDream's hierarchical partitioner on [(node, NVLink), (n / node, IB)]: does its top level
   replicate one stage across nodes? Holds if pipeline-inside is the faster in every cell both
   ways, fails if in none, depends otherwise (the verdict says which way each goes).
2. **"The partitioning rarely exceeds 16 workers."** Read as: PipeDream's partitioner's pipeline
   (its stages) is at most 16 deep; the workers it uses are reported too. Holds if at most a
   quarter of the cells exceed 16 stages.
3. **"Weight stashing is infeasible at 10× the workers."** PipeDream's partitioner at
   ``stash_factor``·n workers (it does not look at memory): peak bytes per device with its weight
   stashes (stage g's replica keeps up to (W_{>=g} − 1) // r_g + 1 versions) against the device's
   memory. Holds if none of those configurations fits.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from rpd import registry
from rpd.model.hardware import preset as hardware_preset
from rpd.model.layers import preset as model_preset
from rpd.model.partition import model_inputs, pipedream_hierarchical
from rpd.model.plan import plan_one
from rpd.model.stages import partition
from rpd.model.workers import configurations, evaluate, pipedream_config
from rpd.plotting.workers import workers_figure
from rpd.results import StudyOutput


@dataclasses.dataclass(frozen=True)
class Config:
    models: tuple[str, ...] = ("gpt3_1.3b", "gpt2_medium")
    hardware: str = "a100_80g_flat"  # the first plan's flat A100 (rpd.model.hardware)
    workers: tuple[int, ...] = (8, 16, 32, 64)
    node: int = 8  # GPUs per node
    nvlink_bandwidth: float = 300e9  # bytes/s inside a node (A100 NVLink 3, one direction)
    ib_bandwidth: float = 25e9  # bytes/s across nodes (200 Gb/s HDR per GPU)
    stash_factor: int = 10
    global_batch: int = 256  # microbatches per step of the synchronous placement comparison
    placement_partition: str = "time"  # stages of the placement comparison (even leaves the head's stage slow)


QUICK: dict = dict(models=("gpt2_medium",), workers=(8, 16))


def _row(model_name: str, n: int, c) -> dict:
    d = dataclasses.asdict(c)
    d.update(model=model_name, n=n, S=c.S, peak_gib=c.peak_bytes / 2**30)
    return d


def placement_claim(cfg: Config, models: dict, hw) -> tuple[dict, list[dict]]:
    rows, agree = [], []
    fast = dataclasses.replace(hw, p2p_bandwidth=cfg.nvlink_bandwidth, allreduce_bandwidth=cfg.ib_bandwidth)
    slow = dataclasses.replace(hw, p2p_bandwidth=cfg.ib_bandwidth, allreduce_bandwidth=cfg.nvlink_bandwidth)
    for name, model in models.items():
        for n in cfg.workers:
            nodes = n // cfg.node
            if nodes < 2 or n % cfg.node:
                continue
            how = cfg.placement_partition
            inside = evaluate(model, fast, partition(model, cfg.node, how, fast), (nodes,) * cfg.node, "PP in node")
            across = evaluate(model, slow, partition(model, nodes, how, slow), (cfg.node,) * nodes, "DP in node")
            sync_in = plan_one(
                model, fast, "1f1b", registry.timeline, cfg.node, cfg.global_batch // nodes, D=nodes, how=how
            )
            sync_across = plan_one(
                model, slow, "1f1b", registry.timeline, nodes, cfg.global_batch // cfg.node, D=cfg.node, how=how
            )
            levels = [(cfg.node, cfg.nvlink_bandwidth), (nodes, cfg.ib_bandwidth)]
            hier = pipedream_hierarchical(*model_inputs(model, hw), levels)
            top_dp = len(hier.stages) == 1 and hier.stages[0][2] > 1 and len(hier.inner[0].stages) > 1
            agree.append(top_dp)
            rows.append(
                dict(
                    claim="placement",
                    model=name,
                    n=n,
                    pp_in_node_tokens_per_s=inside.tokens_per_s,
                    dp_in_node_tokens_per_s=across.tokens_per_s,
                    pp_in_node_peak_gib=inside.peak_bytes / 2**30,
                    dp_in_node_peak_gib=across.peak_bytes / 2**30,
                    sync_pp_in_node_tokens_per_s=sync_in.tokens_per_s,
                    sync_dp_in_node_tokens_per_s=sync_across.tokens_per_s,
                    hierarchical_top=[list(s) for s in hier.stages],
                    hierarchical_inner=[[list(s) for s in p.stages] for p in hier.inner],
                    hierarchical_pp_in_dp_across=top_dp,
                )
            )
    if not rows:
        return dict(
            claim="pipeline inside a node, data parallelism across nodes", holds=None, verdict="no multi-node cell"
        ), rows

    def tally(prefix):
        ratio = [r[f"{prefix}pp_in_node_tokens_per_s"] / r[f"{prefix}dp_in_node_tokens_per_s"] for r in rows]
        return sum(x > 1 for x in ratio), f"{min(ratio):.2f}x to {max(ratio):.2f}x"

    (sync_wins, sync_ratio), (async_wins, async_ratio) = tally("sync_"), tally("")
    both = sync_wins + async_wins + sum(agree)
    holds = True if both == 3 * len(rows) else (False if both == 0 else None)
    verdict = (
        f"pipeline inside the node (NVLink {cfg.nvlink_bandwidth / 1e9:.0f} GB/s) and data parallelism across "
        f"(IB {cfg.ib_bandwidth / 1e9:.0f} GB/s) against the transpose: synchronous 1F1B with D pipelines "
        f"(one all-reduce per step of {cfg.global_batch} microbatches) is faster in {sync_wins} of {len(rows)} "
        f"multi-node cells ({sync_ratio} the transpose's tokens/s); PipeDream's asynchronous replication "
        f"(weights all-reduced every r microbatches) in {async_wins} of {len(rows)} ({async_ratio}); PipeDream's "
        f"hierarchical partitioner puts a pipeline in the node and replicates it across nodes in "
        f"{sum(agree)} of {len(agree)}"
    )
    return dict(claim="pipeline inside a node, data parallelism across nodes", holds=holds, verdict=verdict), rows


def depth_claim(table: list[dict]) -> dict:
    pd = [r for r in table if r["name"] == "pipedream"]
    deep = [r for r in pd if r["S"] > 16]
    holds = len(deep) <= len(pd) / 4
    cells = ", ".join(f"{r['model']} n={r['n']}: {r['S']} stages / {r['workers']} workers" for r in pd)
    verdict = f"the partitioner's pipeline is deeper than 16 stages in {len(deep)} of {len(pd)} cells ({cells})"
    return dict(claim="the partitioning rarely exceeds 16 workers", holds=holds, verdict=verdict)


def stash_claim(cfg: Config, models: dict, hw) -> tuple[dict, list[dict]]:
    rows = []
    for name, model in models.items():
        for n in cfg.workers:
            c = pipedream_config(model, hw, cfg.stash_factor * n)
            rows.append(dict(_row(name, cfg.stash_factor * n, c), claim="stashing", base_n=n))
    fits = [r for r in rows if r["fits"]]
    holds = not fits
    verdict = (
        f"at {cfg.stash_factor}x the workers the partitioner's "
        f"configuration fits in {len(fits)} of {len(rows)} cells; "
        + "; ".join(
            f"{r['model']} {r['n']} workers: {r['S']} stages, {r['stash_versions']} versions, {r['peak_gib']:.1f} GiB"
            for r in rows
        )
    )
    return dict(
        claim=f"weight stashing infeasible at {cfg.stash_factor}x the workers", holds=holds, verdict=verdict
    ), rows


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> StudyOutput:
    hw = hardware_preset(cfg.hardware)
    models = {name: model_preset(name) for name in cfg.models}
    table = []
    for name, model in models.items():
        for n in cfg.workers:
            table += [dict(_row(name, n, c), claim="configurations") for c in configurations(model, hw, n)]
            if progress is not None:
                progress(f"{name} on {n} workers")
    place, place_rows = placement_claim(cfg, models, hw)
    depth = depth_claim(table)
    stash, stash_rows = stash_claim(cfg, models, hw)
    best: dict[str, dict] = {}
    for r in table:
        key = f"{r['model']} n={r['n']}"
        if r["fits"] and (key not in best or r["tokens_per_s"] > best[key]["tokens_per_s"]):
            best[key] = dict(name=r["name"], replicas=list(r["replicas"]), tokens_per_s=r["tokens_per_s"])
    summary = dict(
        models=list(cfg.models),
        hardware=cfg.hardware,
        workers=list(cfg.workers),
        best=best,
        claims=[place, depth, stash],
    )
    return StudyOutput(arrays={}, summary=summary, table=table + place_rows + stash_rows)


def figure(out: StudyOutput, path) -> None:
    workers_figure(out.summary, out.table, path)
