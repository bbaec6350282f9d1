"""The held-out check (scripts/heldout_configs.py) over the configs shipped in the catalog, which
are AIConfigurator's files copied unedited: each parses within 3% of its card or name, none is
misread; and an architecture field on a model type that does not read it is refused by name."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from sizing.architecture import ConfigError
from sizing.catalog import MODELS_DIR
from sizing.config_parse import parse_config

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("heldout_configs", ROOT / "scripts/heldout_configs.py")
heldout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(heldout)


def _shipped() -> dict[str, float]:
    import yaml
    index = yaml.safe_load((MODELS_DIR / "index.yaml").read_text())["models"]
    return {e["config"]: e["card"]["total_b"] for e in index.values()}


@pytest.mark.parametrize("name,card_b", sorted(_shipped().items()))
def test_every_shipped_config_parses_within_3_percent_of_its_card(name, card_b):
    path = MODELS_DIR / name
    kind, detail = heldout.judge(path, {heldout._stem(name): card_b})
    assert kind == "planned" and "card" in detail, detail


LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 4, "num_attention_heads": 32,
         "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 8192}


@pytest.mark.parametrize("extra,field", [
    ({"model_type": "deepseek_v4"}, "model_type"),
    ({"index_topk": 2048}, "index_topk"),                          # DSA fields on a model without an indexer
    ({"hybrid_override_pattern": "M*-E"}, "hybrid_override_pattern"),
    ({"linear_num_key_heads": 16}, "linear_num_key_heads"),
    ({"layer_types": ["linear_attention"] * 4}, "layer_types"),     # linear attention on llama
    ({"sliding_window": 4096}, "sliding_window"),                   # a window on every layer: not read
    ({"quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"g": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "group",
                                           "group_size": 32}}}}}, "quantization_config.config_groups.weights"),
])
def test_fields_the_sizing_does_not_read_are_refused_by_name(extra, field):
    with pytest.raises(ConfigError) as exc:
        parse_config({**LLAMA, **extra})
    assert exc.value.field == field


def test_nemotron_h_layers_and_state():
    import json
    a = parse_config(json.loads((MODELS_DIR / "nemotron-3-nano-30b-a3b.json").read_text()))
    assert (a.mixer_count("mamba2"), a.mixer_count("attention"), a.mixer_count("none")) == (23, 6, 23)
    assert (a.ffn_layers.count("moe"), a.dense_layer_count) == (23, 0)
    # KV of the 6 attention layers only: 2 KV heads x 128 x K,V x 2 B
    assert a.kv_bytes_per_token(2) == 6 * 2 * 128 * 2 * 2
    # Mamba2 state: conv (4 - 1) x (64 x 64 + 2 x 8 x 128) BF16 + 64 x 64 x 128 FP32, per layer
    assert a.state_bytes_per_layer("mamba2") == 3 * (4096 + 2048) * 2 + 64 * 64 * 128 * 4
    assert a.state_bytes_per_layer("attention") == 0


def test_dsa_indexer_cache_and_top_k():
    import json
    a = parse_config(json.loads((MODELS_DIR / "deepseek-v3.2.json").read_text()))
    assert (a.index_n_heads, a.index_head_dim, a.index_topk) == (64, 128, 2048)
    assert a.indexer_bytes_per_token() == 61 * (128 + 4)      # FP8 keys + one FP32 scale per 128
    assert a.kv_bytes_per_token(1) == 61 * (512 + 64) + 61 * 132
    assert a.attended_tokens(100_000) == 2048 and a.attended_tokens(1000) == 1000


def test_int4_inside_text_config_and_the_default_precision():
    from sizing.catalog import default_weights, load_catalog
    cat = load_catalog()
    kimi = cat.model("kimi-k2.5")
    assert (kimi.arch.quantization.method, kimi.arch.quantization.group_size) == ("int4", 32)
    by = kimi.arch.bytes_by_group("int4")
    assert by["experts"] == pytest.approx(kimi.arch.params_by_group()["experts"] * (0.5 + 2 / 32))
    assert by["attention"] == 2 * kimi.arch.params_by_group()["attention"]     # ignore: re:.*self_attn.*
    assert [default_weights(cat.model(k)) for k in ("gpt-oss-120b", "deepseek-r1", "kimi-k2.5", "llama-3.3-70b")] == [
        "fp4", "fp8", "int4", "fp8"]
