"""rpd.model.layers / profile / hardware: the published parameter counts and formulas
(docs/plan.md#the-model-rpdmodellayers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rpd.model import hardware, layers
from rpd.model.profile import load_profile
from rpd.objectives.nanochat import stage_sizes

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize(
    "name, params",
    [
        ("gpt2_small", 124_439_808),  # HF gpt2, tied embeddings ("124M")
        ("gpt2_medium", 354_823_168),  # HF gpt2-medium, tied ("355M")
        ("gpt3_1.3b", 1_315_723_264),  # GPT-3 XL, tied ("1.3B")
        ("llama_7b", 6_738_415_616),  # LLaMA-7B, untied head ("6.7B", HF count)
    ],
)
def test_presets_have_the_published_parameter_counts(name, params):
    assert layers.preset(name).params == params


def test_gpt3_xl_rounds_to_the_papers_1_3b():
    assert round(layers.preset("gpt3_1.3b").params / 1e8) == 13


def test_block_follows_korthikanti_and_the_zero_bubble_split():
    cfg = layers.GPTConfig(n_layer=2, d_model=1024, n_head=16, seq=2048, vocab=50257, micro_batch=2)
    s, b, h, a = 2048, 2, 1024, 16
    x = layers.block_layer(cfg, 0)
    assert x.params == 12 * h * h + 13 * h
    assert x.act_bytes == s * b * h * 34 + 5 * a * s * s * b  # sbh(34 + 5as/h)
    assert x.act_w_bytes == 32 * s * b * h
    assert x.flops_fwd == 24 * b * s * h * h + 4 * b * s * s * h
    assert x.flops_i == 24 * b * s * h * h + 8 * b * s * s * h and x.flops_w == 24 * b * s * h * h
    assert x.model_flops == 3 * x.flops_fwd
    assert layers.block_layer(cfg, 0, "selective").act_bytes == 34 * s * b * h
    full = layers.block_layer(cfg, 0, "full")
    assert full.act_bytes == 2 * s * b * h and full.flops_recompute == x.flops_fwd


def test_model_flops_equal_korthikanti_appendix_a():
    cfg = layers.PRESETS["gpt2_medium"]
    assert layers.gpt_model(cfg).model_flops == pytest.approx(layers.model_flops_per_microbatch(cfg), rel=1e-12)


def test_tied_head_holds_the_embedding_but_counts_once():
    m = layers.preset("gpt2_small")
    head = m.layers[-1]
    assert head.tied_params == 50257 * 768 and head.params == 2 * 768
    untied = layers.gpt_model(layers.GPTConfig(12, 768, 12, 1024, 50257, tied=False))
    assert untied.params - m.params == 50257 * 768


def test_nanochat_layers_are_rpds_stage_sizes():
    m = layers.nanochat_model(S=5, vocab_size=65, seq_len=32, width=64, heads=4)
    assert tuple(x.params for x in m.layers) == stage_sizes(5, 65, 32, 64)


def test_mlp_chain_layers():
    m = layers.mlp_model(S=3, width=16, batch_size=8)
    assert [x.params for x in m.layers] == [16 * 16 + 16] * 3
    assert m.layers[0].flops_fwd == 2 * 8 * 16 * 16


@pytest.mark.parametrize("name", sorted(layers.PRESETS))
def test_model_configs_match_the_presets(name):
    node = OmegaConf.to_container(OmegaConf.load(CONFIGS / "model" / f"{name}.yaml"))
    fields = {k: v for k, v in node.items() if k not in ("name", "kind")}
    assert layers.GPTConfig(**fields) == layers.PRESETS[name]


@pytest.mark.parametrize("name", sorted(hardware.PRESETS))
def test_hardware_configs_match_the_presets(name):
    node = OmegaConf.to_container(OmegaConf.load(CONFIGS / "hardware" / f"{name}.yaml"))
    assert hardware.Hardware(**node) == hardware.PRESETS[name]


def test_ring_allreduce_moves_two_d_minus_one_over_d():
    assert hardware.Hardware.ring_bytes(100.0, 4) == 150.0
    assert hardware.Hardware.ring_bytes(100.0, 1) == 0.0


def test_profile_json_and_csv(tmp_path):
    rows = [
        {"name": "emb", "params": 10, "fwd_s": 1e-3, "act_bytes": 4, "out_bytes": 8, "kind": "embedding"},
        {
            "name": "l0",
            "params": 20,
            "fwd_s": 2e-3,
            "i_s": 2e-3,
            "w_s": 1e-3,
            "act_bytes": 40,
            "act_w_bytes": 10,
            "out_bytes": 8,
        },
    ]
    js = tmp_path / "p.json"
    js.write_text(json.dumps({"name": "mine", "tokens_per_microbatch": 512, "layers": rows}))
    m = load_profile(js)
    assert (m.name, m.params, m.tokens_per_microbatch) == ("mine", 30, 512)
    assert (m.layers[1].time_i, m.layers[1].time_w, m.layers[0].time_i) == (2e-3, 1e-3, 1e-3)
    csv = tmp_path / "p.csv"
    csv.write_text("name,params,fwd_s,bwd_s,act_bytes,out_bytes\nl0,5,1e-3,4e-3,7,3\n")
    m = load_profile(csv, tokens_per_microbatch=8)
    assert m.layers[0].time_i == m.layers[0].time_w == 2e-3 and m.layers[0].act_bytes == 7


def test_bad_input_names_the_field(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("name,params,fwd_s\nl0,5,-1\n")
    with pytest.raises(ValueError, match=r"layers\[0\]\.fwd_s"):
        load_profile(bad)
    with pytest.raises(TypeError, match="n_layer"):
        layers.GPTConfig(n_layer=1.5, d_model=8, n_head=2, seq=4, vocab=10)
    with pytest.raises(ValueError, match="hardware.efficiency"):
        hardware.Hardware("x", 1e12, 2**30, 1e9, 1e9, efficiency=1.5)
    with pytest.raises(ValueError, match="recompute"):
        layers.preset("gpt2_small", recompute="some")
