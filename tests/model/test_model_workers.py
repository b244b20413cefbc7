"""A fixed number of workers (rpd.model.workers): every configuration is a 1F1B-RR timeline."""

from __future__ import annotations

import json

import pytest
from hydra_helpers import compose
from toy_hardware import toy_hardware

from rpd.cli import plan as entry
from rpd.model import hardware
from rpd.model.layers import Layer, Model
from rpd.model.workers import configurations, evaluate, even_config, pipedream_config, replicated

# 1 TFLOP/s, p2p free, all-reduce 1 GB/s with no latency
HW = toy_hardware()
# four one-layer "blocks": F = I = W = 1 ms, the third's 3 ms each (3, 3, 9, 3 ms per microbatch)
TOY = Model(
    "toy",
    tuple(
        Layer(f"b{i}", params=1000, flops_fwd=f, flops_i=f, flops_w=f, out_bytes=8, kind="block")
        for i, f in enumerate([1e9, 1e9, 3e9, 1e9])
    ),
    100,
)


def test_a_straight_pipeline_runs_at_its_slowest_stage():
    c = evaluate(TOY, HW, ((0, 1), (1, 2), (2, 3), (3, 4)), (1, 1, 1, 1), optimizer_states=0)
    assert c.time_per_microbatch_s == pytest.approx(9e-3, rel=1e-9)
    assert c.tokens_per_s == pytest.approx(100 / 9e-3) and c.stash_versions == 4  # S - 0 on stage 0


def test_replicating_the_slow_stage_three_times_balances_it():
    """Stage 2 on 3 workers: 9 ms / 3 = 3 ms per microbatch, the others' 3 ms; its all-reduce of
    1000 values × 4 B, 2·(2/3) of it at 1 GB/s, is 5.3 µs per 3 microbatches, hidden."""
    c = evaluate(TOY, HW, ((0, 1), (1, 2), (2, 3), (3, 4)), (1, 1, 3, 1), optimizer_states=0)
    assert c.workers == 6 and c.time_per_microbatch_s == pytest.approx(3e-3, rel=1e-3)
    assert c.allreduce_bytes == pytest.approx(4000 * 2 * 2 / 3)


def test_the_partitioner_finds_that_configuration_and_the_timeline_confirms_its_bottleneck():
    """Links this fast make the all-reduce free to the partitioner: 6 workers of the whole model,
    18 ms / 6; the timeline (all-reduce 27 µs per 6 microbatches, hidden) agrees."""
    c = pipedream_config(TOY, HW, 6, optimizer_states=0)
    assert c.replicas == (6,) and c.predicted_s == pytest.approx(3e-3, rel=1e-6)
    assert c.time_per_microbatch_s == pytest.approx(c.predicted_s, rel=1e-3)


def test_pure_dp_and_pure_pp():
    dp = even_config(TOY, HW, 4, 1, optimizer_states=0)
    assert dp.name == "pure DP" and dp.replicas == (4,) and dp.stash_versions == 1
    assert dp.allreduce_bytes == pytest.approx(4 * 4000 * 2 * 3 / 4)
    pp = even_config(TOY, HW, 4, 4, optimizer_states=0)
    assert pp.name == "pure PP" and pp.replicas == (1, 1, 1, 1)
    # pure DP: each worker does 18 ms per microbatch, 4 at a time; the all-reduce (24 µs) is hidden
    assert dp.time_per_microbatch_s == pytest.approx(18e-3 / 4, rel=1e-3)
    cs = configurations(TOY, HW, 4, optimizer_states=0)
    assert [c.name for c in cs][0] in ("pure DP", "pipedream")
    tps = [c.tokens_per_s for c in cs]
    assert tps == sorted(tps, reverse=True) and {"pure DP", "pure PP", "even S=2 x D=2", "pipedream"} == {
        c.name for c in cs
    }


def test_the_plan_command_chooses_for_n_workers(tmp_path, capsys):
    """n_workers prints only its search (TP x PP x DP x M), a synchronous answer first and how many
    workers it uses; every row it timed uses at most n workers."""
    out = tmp_path / "plan.json"
    entry.run(compose(["model=gpt2_small", "n_workers=8", f"out={out}"], "plan"))
    text = capsys.readouterr().out
    first = text.splitlines()[0]
    assert first.startswith("use: ") and "of 8 workers" in text and "f_total" not in text
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert all(r["TP"] * (sum(r["replicas"]) if r["replicas"] else r["CP"] * r["S"] * r["D"]) <= 8 for r in rows)
    # PipeDream's partitioner's replicated stages are candidates too, as asynchronous rows, timed
    # unless bounded below the best row (here the synchronous answer: data parallelism)
    model = entry.build_model(compose(["model=gpt2_small"], "plan").model, "none")
    a100 = hardware.preset("a100_80g")
    rr, dropped, skipped = replicated(lambda t: model, a100, 8, 80 * 2**30, [1], margin=0.05)
    c = pipedream_config(model, a100, 8, memory_cap=80 * 2**30 * 0.95)
    (one,) = rr
    assert (dropped, skipped, one.schedule, one.synchronous) == (0, [], "pipedream_rr", False)
    assert (one.replicas, one.tokens_per_s, one.fits) == (c.replicas, c.tokens_per_s, c.fits)
    # its bound is above its tokens/s: a best equal to them still times it, a best far above does not
    assert replicated(lambda t: model, a100, 8, 80 * 2**30, [1], best=one.tokens_per_s, margin=0.05)[0] == [one]
    assert replicated(lambda t: model, a100, 8, 80 * 2**30, [1], best=1e12, margin=0.05)[:2] == ([], 1)
    best = max((r for r in rows if r["fits"] and r["synchronous"]), key=lambda r: r["tokens_per_s"])
    assert f"{best['schedule']}" in first and f"TP={best['TP']}" in first and f"S={best['S']}" in first


def test_pipedreams_runtime_warmup_starves_the_replicated_stage():
    """The same configuration under PipeDream's runtime default depth: 6 ms, not 3."""
    c = evaluate(TOY, HW, ((0, 1), (1, 2), (2, 3), (3, 4)), (1, 1, 3, 1), optimizer_states=0, depth="runtime")
    assert c.time_per_microbatch_s == pytest.approx(6e-3, rel=1e-3)
