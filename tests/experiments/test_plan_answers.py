"""The plan's answers complete (docs/plan.md#the-answer): ties broken by memory, one MFU format, refusal reasons in
full, a knob that cannot apply skipped with its reason, the fewest devices when nothing fits,
counts that match what is listed, one configuration one answer, and a unitless memory_cap below
1 MiB refused."""

from __future__ import annotations

import json
import re

import pytest
from hydra_helpers import ROOT, compose, run_as_main

from rpd import registry
from rpd.cli import plan as entry
from rpd.cli.plan_search import knobs
from rpd.model import hardware, search_bounds
from rpd.model.answer import answer, choose, parse_bytes
from rpd.model.layers import GPTConfig, Parallel, gpt_model
from rpd.model.plan import plan
from rpd.model.stages import partition

FLAT = hardware.preset("a100_80g_flat")


def test_a_bare_memory_cap_below_one_mib_is_refused_with_the_units(tmp_path, monkeypatch, capsys):
    assert parse_bytes(2**20) == 2**20 and parse_bytes("512kB") == 512e3 and parse_bytes("1GiB") == 2**30
    with pytest.raises(ValueError, match=r"memory_cap=1 without a unit is 1 bytes, below 1 MiB: .*GiB"):
        parse_bytes(1)
    monkeypatch.setenv("RPD_DEBUG", "")
    monkeypatch.chdir(ROOT)
    # `python -m experiments.plan` in this process (a fresh interpreter is ~4 s of imports); hydra's
    # run folder in tmp_path: nothing written into the checkout
    code = run_as_main("experiments.plan", ["memory_cap=1", f"hydra.run.dir={tmp_path}/run"], monkeypatch)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("error: memory_cap=1 without a unit") and "KiB, MiB, GiB" in line


def test_at_equal_speed_the_smaller_peak_is_the_answer():
    """gpt2_medium, S = 4, M = 8 on the flat A100: GPipe and 1F1B take the same step, 1F1B holds
    4.8 GiB against GPipe's 9.0 (docs/plan.md's sample)."""
    m = gpt_model(GPTConfig(n_layer=24, d_model=1024, n_head=16, seq=1024, vocab=50257))
    rows = plan(m, FLAT, ["gpipe", "1f1b"], registry.timeline, 4, 8)
    gpipe, one = sorted(rows, key=lambda r: r.schedule != "gpipe")
    assert gpipe.tokens_per_s == one.tokens_per_s and max(gpipe.peak_bytes) > max(one.peak_bytes)
    assert choose(rows) == (one, one)
    assert answer(rows, 80 * 2**30, 0.05)[0].startswith("use: 1f1b ")
    assert f"MFU {one.mfu:.3f}," in answer(rows, 80 * 2**30, 0.05)[0]  # the table's format, a fraction


def test_the_plan_prints_refusals_in_full_and_ties_in_memory_order(capsys, tmp_path):
    overrides = [
        "hardware=a100_80g_flat",
        "pipeline.S=8",
        "schedules=[gpipe,1f1b,dualpipe_v]",
        f"out={tmp_path}/p.json",
    ]
    entry.run(compose(overrides, "plan"))
    text = capsys.readouterr().out
    assert "dualpipe_v needs M >= 2S microbatches (torch ScheduleDualPipeV), got M=8, S=8" in text
    table = [x.split()[0] for x in text.splitlines() if x.split() and x.split()[0] in ("gpipe", "1f1b")]
    assert table == ["1f1b", "gpipe"]


def test_a_knob_that_cannot_apply_is_skipped_with_its_reason():
    """S = 3 with v = 2 on six blocks: doubling S asks for 12 stages of 8 layers."""
    cfg = compose(
        [
            "model.n_layer=6",
            "model.d_model=256",
            "model.n_head=4",
            "model.seq=128",
            "model.vocab=1000",
            "pipeline.S=3",
            "pipeline.v=2",
            "pipeline.M=6",
        ],
        "plan",
    )
    kw = dict(
        optimizer_states=2,
        precision="bf16_mixed",
        memory_cap=2**20,
        how="even",
        tick_s=None,
        grad_bytes=None,
        overlap_allreduce=False,
        SP=False,
        zero=0,
        recompute="none",
        margin=0.05,
        offload=False,
        CP=1,
        overlap=None,
    )
    tried, skipped = knobs(cfg, FLAT, Parallel(), ["interleaved"], [6], 1, kw, entry.build_model)
    assert skipped == {"pipeline.S=6": "stages=12 exceeds the model's 8 layers"}
    assert "recompute=full" in tried


def test_least_devices_is_the_fewest_whose_static_bytes_fit():
    cfg = GPTConfig(n_layer=32, d_model=4096, n_head=32, seq=2048, vocab=32000)
    models = {t: gpt_model(cfg, par=Parallel(TP=t)) for t in (1, 2, 4, 8)}
    cap = 30 * 2**30
    n, TP, PP = search_bounds.least_devices(models.__getitem__, hardware.preset("a100_80g"), cap, [1, 2, 4, 8])
    static = lambda t, p: search_bounds.stage_params(models[t], partition(models[t], p)).max() * 18  # noqa: E731
    assert TP * PP == n and static(TP, PP) <= cap
    assert all(static(t, p) > cap for t in models for p in range(1, 33) if t * p < n)


def _counts(text: str) -> dict[str, int]:
    m = re.search(
        r"(\d+) configurations; (\d+) over the cap on bytes before timing and (\d+) bounded below the best "
        r"\(not timed\); (\d+) timed, \+ (\d+) of PipeDream's partitioner \(1F1B-RR, \d+ not timed\); "
        r"(\d+) of these (\d+) fit",
        text,
    )
    assert m, text
    keys = ("candidates", "over_cap", "bounded", "timed", "replicated", "fit", "rows")
    return dict(zip(keys, map(int, m.groups())))


def test_n_workers_counts_match_the_rows_and_each_configuration_is_listed_once(tmp_path, capsys):
    out = tmp_path / "p.json"
    entry.run(compose(["model=gpt2_small", "n_workers=4", f"out={out}"], "plan"))
    text = capsys.readouterr().out
    c = _counts(text)
    rows = json.loads(out.read_text())["rows"]
    assert c["candidates"] == c["over_cap"] + c["bounded"] + c["timed"]
    assert c["rows"] == len(rows) == c["timed"] + c["replicated"]
    assert c["fit"] == sum(r["fits"] and r["error"] is None for r in rows)
    listed = [x for x in text.splitlines() if x.startswith("  ") and "tokens/s" in x]
    assert len(listed) == min(12, len(rows))
    # PipeDream on 4 stages of one worker is one configuration: the partitioner's (1,1,1,1) is dropped
    same = [r for r in rows if r["replicas"] and set(r["replicas"]) == {1} and len(r["replicas"]) * r["TP"] == 4]
    assert same == []
    assert "held fixed" in text and "attention=standard" in text


def test_nothing_fits_names_the_fewest_devices_and_no_rows(tmp_path, capsys):
    out = tmp_path / "p.json"
    entry.run(compose(["model=llama_7b", "n_workers=2", "memory_cap=30GiB", f"out={out}"], "plan"))
    text = capsys.readouterr().out
    assert text.startswith("nothing fits in 30.0 GiB per device with a 5% margin\n")
    need = re.search(r"need at least (\d+) devices \(TP=(\d+), PP=(\d+), one pipeline\): set n_workers=(\d+)", text)
    assert need and int(need[1]) == int(need[2]) * int(need[3]) == int(need[4]) > 2
    c = _counts(text)
    assert c["timed"] == 0 and c["rows"] == 0 and c["over_cap"] == c["candidates"]
    assert "fastest of" not in text


def test_the_search_hints_only_at_knobs_not_already_set():
    """The n_workers search's 'held fixed' lines said "set attention=flash" and "set offload=true"
    when both were set: a hint names a knob only where the config has not set it."""
    from omegaconf import OmegaConf

    from rpd.cli.plan_search import held_fixed
    from rpd.model.search3d import Space

    kw = {"overlap": None, "grad_bytes": 4, "how": "even", "overlap_allreduce": False, "recompute": "none"}
    for attention, offload in (("flash", True), ("standard", False)):
        cfg = OmegaConf.create(
            {"model": {"micro_batch": 1}, "attention": attention, "offload": offload, "precision": "bf16_mixed"}
            | {"optimizer": {"name": "adam"}}
        )
        text = "\n".join(held_fixed(cfg, kw, Space(), [], 8))
        assert (f"attention={attention} (a kernel, not a split" in text) and (f"offload={str(offload).lower()}" in text)
        assert ("set attention=flash" in text) == (attention != "flash")
        assert ("set offload=true" in text) == (not offload)


def test_the_frontier_title_counts_every_device(tmp_path, monkeypatch):
    """TP 2 x PP 2 x DP 2 is 8 GPUs; the title said "2 x a100_80g" (the stages alone)."""
    titles = []
    monkeypatch.setattr(entry, "frontier_figure", lambda points, path, title="", **kw: titles.append(title))
    overrides = ["model=gpt2_small", "pipeline.S=2", "pipeline.D=2", "pipeline.TP=2", "schedules=[1f1b]"]
    entry.run(compose(overrides + [f"out={tmp_path}/p.json", f"figure={tmp_path}/f.png"], "plan"))
    assert titles == ["gpt2_small on 8 x a100_80g (TP 2 x CP 1 x PP 2 x DP 2)"]


def test_the_layer_count_says_what_the_two_extra_stages_are():
    """Llama 3 70B has 80 layers on its card (Grattafiori et al. 2024, Table 3); the plan said "82
    layers": the embedding and the head are layers of the partition too."""
    from rpd.cli.plan import layer_count

    cfg = GPTConfig(n_layer=80, d_model=8192, n_head=64, seq=8192, vocab=128256, ffn=28672, n_kv_heads=8)
    assert layer_count(gpt_model(cfg, "none")) == "80 blocks + embedding + head (82 layers to partition)"
