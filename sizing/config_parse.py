"""Parsing a config.json into an `Architecture` (sizing.architecture): the fields vLLM 0.29.0 reads
per model type, and ConfigError naming any field the sizing does not read. docs/models.md lists
what each architecture kind reads and refuses, with the vLLM source lines."""
from __future__ import annotations

import os

from inputs import json_doc
from inputs import InputError
from inputs.files import read_regular_file
from inputs.untrusted import described

from .architecture import (EXPERT_KEYS, FULL, MAX_CONFIG_BYTES, MAX_DIM, MAX_EXPERTS, MAX_LAYERS, SLIDING, TOPK_KEYS,
                           Architecture, ConfigError, Quantization)


# -- parsing --------------------------------------------------------------------------------------
def read_config(path: str | os.PathLike) -> Architecture:
    """Read and parse a local config.json: a regular file of at most MAX_CONFIG_BYTES."""
    try:        # the shared reader: stat before open, O_NONBLOCK, a bounded read, long names refused
        raw = read_regular_file(path, MAX_CONFIG_BYTES, "config.json")
    except InputError as exc:
        raise ConfigError("path", str(exc)) from None
    try:
        data = json_doc.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError("(file)", f"not valid JSON: {str(exc)[:120]}") from None
    return parse_config(data)


# Model types whose every sizing-relevant field is read (vLLM 0.29.0 model file in docs/models.md);
# any other is refused rather than sized as if it were one of these.
KNOWN_MODEL_TYPES = ("llama", "qwen3", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3", "kimi_k2", "glm4_moe",
                     "minimax_m2", "deepseek_v32", "glm_moe_dsa", "nemotron_h", "qwen3_next", "qwen3_5_text",
                     "qwen3_5_moe_text")
# Multimodal wrappers whose `text_config` is the language model sized (the vision tower is not).
WRAPPERS = {"kimi_k25": ("deepseek_v3", "kimi_k2"), "qwen3_5": ("qwen3_5_text",), "qwen3_5_moe": ("qwen3_5_moe_text",)}
DSA_TYPES = ("deepseek_v32", "glm_moe_dsa")
GDN_TYPES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
LINEAR = "linear_attention"
NEMOTRON_PATTERN = {"M": ("mamba2", "none"), "*": ("attention", "none"), "-": ("none", "dense"), "E": ("none", "moe")}
# Fields that change the architecture, read only by some model types: on any other they would be
# misread (e.g. `index_topk` on a model vLLM builds without an indexer), so they are refused.
ARCH_FIELDS = {
    "index_topk": DSA_TYPES, "index_n_heads": DSA_TYPES, "index_head_dim": DSA_TYPES,
    "hybrid_override_pattern": ("nemotron_h",), "moe_latent_size": ("nemotron_h",), "mamba_num_heads": ("nemotron_h",),
    "ssm_state_size": ("nemotron_h",),
    "linear_num_key_heads": GDN_TYPES, "linear_num_value_heads": GDN_TYPES, "linear_key_head_dim": GDN_TYPES,
    "linear_value_head_dim": GDN_TYPES, "shared_expert_intermediate_size": GDN_TYPES,
    "moe_shared_expert_intermediate_size": ("nemotron_h",), "shared_intermediate_size": ("minimax_m2",),
}


def parse_config(data: object) -> Architecture:
    """The architecture of a config.json's contents (a dict); ConfigError names the bad field."""
    if not isinstance(data, dict):
        raise ConfigError("(top level)", "expected a JSON object")
    quant = data.get("quantization_config")
    if isinstance(data.get("text_config"), dict):      # multimodal wrappers keep the LM inside
        outer = _str(data, "model_type")
        inner = data["text_config"]
        inner_type = inner.get("model_type")
        if outer not in WRAPPERS:
            raise ConfigError("model_type", f"{described(outer)} wraps a text model the sizing does not know; "
                                            f"it reads {', '.join(WRAPPERS)} wrappers and {', '.join(KNOWN_MODEL_TYPES)}")
        if inner_type not in WRAPPERS[outer]:
            raise ConfigError("text_config.model_type", f"{described(inner_type)} inside {outer}; expected "
                                                        f"{' or '.join(WRAPPERS[outer])}")
        if quant is not None and inner.get("quantization_config") is not None:
            raise ConfigError("quantization_config", "given both at the top level and inside text_config")
        # the checkpoint's quantization sits at either level (Kimi-K2.5: inside text_config)
        data = {**inner, "quantization_config": quant if quant is not None else inner.get("quantization_config")}
    model_type = _str(data, "model_type")
    if model_type not in KNOWN_MODEL_TYPES:
        raise ConfigError("model_type", f"{described(model_type)} is not a model type the sizing reads "
                                        f"({', '.join(KNOWN_MODEL_TYPES)}; see docs/models.md)")
    for key, types in ARCH_FIELDS.items():
        if data.get(key) not in (None, 0) and model_type not in types:
            raise ConfigError(key, f"changes the architecture of a {model_type} model in a way the sizing "
                                   f"does not read (it reads {key} for {', '.join(types)} only)")
    hidden = _int(data, "hidden_size")
    layers = _int(data, "num_hidden_layers", hi=MAX_LAYERS)
    heads = _int(data, "num_attention_heads")
    kv_heads = _int(data, "num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise ConfigError("num_key_value_heads", f"{kv_heads} does not divide num_attention_heads {heads}")
    head_dim = _int(data, "head_dim", default=hidden // heads if hidden % heads == 0 else None)
    experts, topk = _experts(data)
    base = dict(
        model_type=model_type, hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        # Qwen3.5 MoE has no dense layer and no intermediate_size (qwen3_5.py:166-180)
        intermediate_size=_int(data, "intermediate_size", default=0 if model_type == "qwen3_5_moe_text" else None,
                               lo=0 if model_type == "qwen3_5_moe_text" else 1),
        vocab_size=_int(data, "vocab_size"),
        tie_word_embeddings=_bool(data, "tie_word_embeddings", False),
        max_position_embeddings=_int(data, "max_position_embeddings", hi=1 << 24),
        attention_bias=_bool(data, "attention_bias", False), dtype=_dtype(data),
        quantization=_quantization(data.get("quantization_config")),
    )
    if model_type == "nemotron_h":
        return Architecture(**base, **_nemotron_h(data, layers, experts, topk))
    fields = {**_moe(data, layers, experts, topk), **_mla(data, heads), **_layer_types(data, layers, model_type),
              **_dsa(data, model_type), **_per_type(data, model_type, layers)}
    return Architecture(**base, **fields)


def _per_type(data: dict, model_type: str, layers: int) -> dict:
    """What a model type adds to the common fields (vLLM 0.29.0 model files, docs/models.md)."""
    out: dict = {}
    if model_type in ("qwen3", "qwen3_moe") or model_type in GDN_TYPES:
        out["qk_norm"] = "head"          # qwen3.py / qwen3_next.py:358-359: q_norm, k_norm over head_dim
    if model_type == "minimax_m2":       # minimax_m2.py: q_norm / k_norm over all heads (qk_norm_type per_layer)
        if data.get("use_qk_norm", True):
            if data.get("qk_norm_type", "per_layer") != "per_layer":
                raise ConfigError("qk_norm_type", f"{described(data.get('qk_norm_type'))}; the sizing reads per_layer")
            out["qk_norm"] = "layer"
        out["router_bias"] = _bool(data, "use_routing_bias", False)       # minimax_m2.py:84-88
        shared = _int(data, "shared_intermediate_size", default=0, lo=0)
        if shared:
            raise ConfigError("shared_intermediate_size", f"{shared}: MiniMax-M2's vLLM model has no shared expert")
    if model_type in DSA_TYPES:
        out["router_bias"] = True        # deepseek_v2.py: e_score_correction_bias (noaux_tc)
    if model_type in GDN_TYPES:
        out["attn_output_gate"] = _bool(data, "attn_output_gate", True)     # qwen3_next.py:304
        if data.get("num_experts") or data.get("shared_expert_intermediate_size"):
            out["shared_intermediate_size"] = _int(data, "shared_expert_intermediate_size", default=0, lo=0)
            if out["shared_intermediate_size"]:
                out["shared_experts"] = 1        # qwen3_next.py:149-209: one shared expert and its gate
                out["shared_expert_gate"] = True
        out["mamba_ssm_dtype"] = _ssm_dtype(data, "mamba_ssm_dtype", "bfloat16" if data.get("dtype",
                                            data.get("torch_dtype")) != "float32" else "float32")
    return out


def _layer_types(data: dict, layers: int, model_type: str) -> dict:
    types = data.get("layer_types")
    if types is None:
        if model_type in GDN_TYPES:
            raise ConfigError("layer_types", f"missing: a {model_type} model names each layer's attention kind")
        if data.get("sliding_window") is not None and data.get("use_sliding_window", True) is not False \
                and model_type not in ("gpt_oss",):
            raise ConfigError("sliding_window", "a window on every layer, which the sizing does not read "
                                                "(it reads windows per layer from layer_types)")
        return {}
    if not isinstance(types, list) or len(types) != layers:
        raise ConfigError("layer_types", f"expected a list of {layers} entries (one per layer), "
                                         f"got {len(types) if isinstance(types, list) else type(types).__name__}")
    known = (SLIDING, FULL, LINEAR) if model_type in GDN_TYPES else (SLIDING, FULL)
    bad = [t for t in types if t not in known]
    if bad:
        raise ConfigError("layer_types", f"an unknown layer type ({described(bad[0])}); expected {' or '.join(known)}")
    mixers = tuple({SLIDING: "sliding", FULL: "attention", LINEAR: "linear"}[t] for t in types)
    out: dict = {"layer_mixers": mixers}
    if "sliding" in mixers:
        out.update(sliding_window=_int(data, "sliding_window"), sliding_layers=tuple(m == "sliding" for m in mixers))
    if "linear" in mixers:
        out.update(linear_num_key_heads=_int(data, "linear_num_key_heads"),
                   linear_num_value_heads=_int(data, "linear_num_value_heads"),
                   linear_key_head_dim=_int(data, "linear_key_head_dim"),
                   linear_value_head_dim=_int(data, "linear_value_head_dim"),
                   linear_conv_kernel=_int(data, "linear_conv_kernel_dim", hi=64))
        if out["linear_num_value_heads"] % out["linear_num_key_heads"]:
            raise ConfigError("linear_num_value_heads", "not a multiple of linear_num_key_heads")
    interval = data.get("full_attention_interval")
    if interval is not None:
        every = _int(data, "full_attention_interval", hi=layers)
        if mixers != tuple("attention" if (i + 1) % every == 0 else "linear" for i in range(layers)):
            raise ConfigError("full_attention_interval", f"{every} contradicts layer_types")
    return out


def _dsa(data: dict, model_type: str) -> dict:
    if model_type not in DSA_TYPES:
        return {}
    if data.get("kv_lora_rank") in (None, 0) or not data.get("q_lora_rank"):
        raise ConfigError("kv_lora_rank", f"a {model_type} model is MLA with a q_lora_rank (the indexer reads it)")
    for key, default in (("index_topk_freq", 1), ("index_topk_pattern", None)):
        if data.get(key, default) not in (default, None) and not (key == "index_topk_freq" and data.get(key) == 1):
            raise ConfigError(key, "indexer layers that reuse another layer's top-k (IndexCache, deepseek_v2.py:"
                                   "1130-1146): not read by the sizing")
    return {"index_n_heads": _int(data, "index_n_heads"), "index_head_dim": _int(data, "index_head_dim", lo=128),
            "index_topk": _int(data, "index_topk", hi=1 << 24)}


def _nemotron_h(data: dict, layers: int, experts: int, topk: int) -> dict:
    """Nemotron-H (vLLM 0.29.0 nemotron_h.py): one mixer per layer from hybrid_override_pattern
    (M Mamba2, * attention, - MLP, E MoE; nemotron_h.py:525-530); one RMSNorm per layer; MLPs and
    experts are up + down with relu2 (nemotron_h.py:86-122)."""
    pattern = data.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or len(pattern) != layers:
        raise ConfigError("hybrid_override_pattern", f"expected a string of {layers} characters (one per layer)")
    bad = [c for c in pattern if c not in NEMOTRON_PATTERN]
    if bad:
        raise ConfigError("hybrid_override_pattern", f"an unknown layer kind ({described(bad[0])}); expected M, *, - or E")
    if data.get("sliding_window") is not None:
        raise ConfigError("sliding_window", "a window on the attention layers, which the sizing does not read")
    mixers = tuple(NEMOTRON_PATTERN[c][0] for c in pattern)
    ffn = tuple(NEMOTRON_PATTERN[c][1] for c in pattern)
    if _str(data, "mlp_hidden_act") != "relu2" or data.get("mamba_hidden_act", "silu") != "silu":
        raise ConfigError("mlp_hidden_act", "the sizing reads relu2 MLPs (up and down, no gate)")
    for key in ("mlp_bias", "use_bias"):
        if _bool(data, key, False):
            raise ConfigError(key, "biases on the projections, which the sizing does not count")
    out: dict = {"layer_mixers": mixers, "ffn_layers": ffn, "moe_layers": tuple(f == "moe" for f in ffn),
                 "gated_mlp": False, "layer_norms": 1}
    if "mamba2" in mixers:      # nemotron_h.py:362-378 -> MambaMixer2
        out.update(mamba_num_heads=_int(data, "mamba_num_heads"), mamba_head_dim=_int(data, "mamba_head_dim"),
                   mamba_n_groups=_int(data, "n_groups"), ssm_state_size=_int(data, "ssm_state_size"),
                   mamba_conv_kernel=_int(data, "conv_kernel", hi=64),
                   mamba_ssm_dtype=_ssm_dtype(data, "mamba_ssm_cache_dtype", "float32"))   # config.py:661-680
        if out["mamba_num_heads"] % out["mamba_n_groups"]:
            raise ConfigError("n_groups", "does not divide mamba_num_heads")
        # (`expand` is not read: vLLM sizes the mixer as mamba_num_heads x mamba_head_dim, nemotron_h.py:371)
    if "moe" in ffn:
        if not experts:
            raise ConfigError("n_routed_experts", "missing: hybrid_override_pattern has MoE layers (E)")
        out.update(num_experts=experts, experts_per_token=topk, moe_intermediate_size=_int(data, "moe_intermediate_size"),
                   shared_experts=_int(data, "n_shared_experts", default=0, lo=0, hi=64), router_bias=True,
                   shared_intermediate_size=_int(data, "moe_shared_expert_intermediate_size", default=0, lo=0),
                   moe_latent_size=_int(data, "moe_latent_size", default=0, lo=0))
        if out["shared_experts"] and not out["shared_intermediate_size"]:
            raise ConfigError("moe_shared_expert_intermediate_size", "missing: n_shared_experts needs it")
    elif experts:
        raise ConfigError("n_routed_experts", "given, but hybrid_override_pattern has no MoE layer (E)")
    return out


def _ssm_dtype(data: dict, key: str, default: str) -> str:
    v = data.get(key, default) or default
    if v not in ("float32", "bfloat16", "float16"):
        raise ConfigError(key, f"{described(v)}; expected float32, bfloat16 or float16")
    return v


def _experts(data: dict) -> tuple[int, int]:
    given = [k for k in EXPERT_KEYS if data.get(k) is not None and data.get(k) is not False and data.get(k) != 0]
    if not given:
        return 0, 0
    experts = _int(data, given[0], hi=MAX_EXPERTS)
    for k in given[1:]:
        if _int(data, k, hi=MAX_EXPERTS) != experts:
            raise ConfigError(k, f"{data[k]!r} contradicts {given[0]} {experts}")
    topk_keys = [k for k in TOPK_KEYS if data.get(k) is not None]
    if not topk_keys:
        raise ConfigError("num_experts_per_tok", f"missing: {given[0]} is {experts}, so the router's top-k is needed")
    topk = _int(data, topk_keys[0], hi=experts)
    for k in topk_keys[1:]:
        if _int(data, k, hi=experts) != topk:
            raise ConfigError(k, f"{data[k]!r} contradicts {topk_keys[0]} {topk}")
    return experts, topk


def _moe(data: dict, layers: int, experts: int, topk: int) -> dict:
    if not experts:
        return {"moe_layers": (False,) * layers}
    if data.get("moe_intermediate_size") is not None:
        expert_ffn = _int(data, "moe_intermediate_size")
    else:                         # Mixtral and gpt-oss: each expert is intermediate_size wide
        expert_ffn = _int(data, "intermediate_size")
    first_dense = _int(data, "first_k_dense_replace", default=0, lo=0, hi=layers)
    freq = _int(data, "moe_layer_freq", default=1) if not isinstance(data.get("moe_layer_freq"), list) else 1
    step = _int(data, "decoder_sparse_step", default=1, hi=layers)
    only = data.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers
                                             for i in only):
        raise ConfigError("mlp_only_layers", f"expected a list of layer indices below {layers}")
    moe = tuple(i >= first_dense and (i - first_dense) % freq == 0 and (i + 1) % step == 0 and i not in only
                for i in range(layers))
    if not any(moe):
        raise ConfigError("first_k_dense_replace", f"leaves no MoE layer among {layers} although there are "
                                                   f"{experts} experts")
    shared = _int(data, "n_shared_experts", default=0, lo=0, hi=64)
    return {"num_experts": experts, "experts_per_token": topk, "shared_experts": shared,
            "moe_intermediate_size": expert_ffn, "moe_layers": moe}


def _mla(data: dict, heads: int) -> dict:
    if data.get("kv_lora_rank") in (None, 0):
        return {}
    return {"kv_lora_rank": _int(data, "kv_lora_rank"), "q_lora_rank": _int(data, "q_lora_rank", default=0, lo=0),
            "qk_rope_head_dim": _int(data, "qk_rope_head_dim"), "qk_nope_head_dim": _int(data, "qk_nope_head_dim"),
            "v_head_dim": _int(data, "v_head_dim")}


def _quantization(q: object) -> Quantization:
    if q is None:
        return Quantization("none")
    if not isinstance(q, dict):
        raise ConfigError("quantization_config", "expected an object")
    method = q.get("quant_method")
    algo = str(q.get("quant_algo", "")).lower()
    if method == "fp8":
        block = q.get("weight_block_size") or ()
        if block and not (isinstance(block, list) and len(block) == 2
                          and all(isinstance(b, int) and not isinstance(b, bool) and 0 < b <= 4096 for b in block)):
            raise ConfigError("quantization_config.weight_block_size", f"expected two positive sizes, got {described(block)}")
        return Quantization("fp8", tuple(block), _names(q, "modules_to_not_convert"))
    if method == "mxfp4":
        return Quantization("mxfp4", (), _names(q, "modules_to_not_convert"))
    if method == "modelopt" and "fp4" in algo or method == "nvfp4":
        return Quantization("nvfp4", (), _names(q, "ignore") + _names(q, "exclude_modules"))
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    raise ConfigError("quantization_config.quant_method",
                      f"{described(method)}, not one the sizing knows (fp8, mxfp4, nvfp4 / modelopt FP4, "
                      "compressed-tensors INT4)")


def _compressed_tensors(q: dict) -> Quantization:
    """compressed-tensors W4A16 (vLLM 0.29.0 compressed_tensors/schemes/compressed_tensors_wNa16.py):
    one config group of symmetric INT4 weights in groups, no activation quantization, on Linear
    layers; `ignore` names (or "re:" patterns) what stays BF16. Anything else is refused."""
    field = "quantization_config.config_groups"
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        raise ConfigError(field, "expected one config group (the sizing reads a single INT4 weight scheme)")
    g = next(iter(groups.values()))
    w = g.get("weights") if isinstance(g, dict) else None
    if not isinstance(w, dict):
        raise ConfigError(field, "expected a group with a weights scheme")
    if g.get("targets") != ["Linear"]:
        raise ConfigError(f"{field}.targets", "the sizing reads groups that target Linear layers only")
    if g.get("input_activations") is not None or g.get("output_activations") is not None:
        raise ConfigError(f"{field}.input_activations", "activation quantization (W4A8 / W8A8) is not read")
    if w.get("num_bits") != 4 or w.get("type") != "int" or w.get("symmetric") is not True:
        raise ConfigError(f"{field}.weights", "the sizing reads symmetric INT4 weights only (num_bits 4, type int)")
    if w.get("strategy") != "group":
        raise ConfigError(f"{field}.weights.strategy", f"{described(w.get('strategy'))}; the sizing reads group")
    size = _int(w, "group_size", hi=1 << 16)
    names = _names(q, "ignore")
    import re
    for n in names:
        if len(n) > 200:
            raise ConfigError("quantization_config.ignore", "an entry over 200 characters")
        if n.startswith("re:"):
            try:
                re.compile(n[3:])
            except re.error:
                raise ConfigError("quantization_config.ignore", f"an entry that is not a regular expression "
                                                                f"({described(n)})") from None
    return Quantization("int4", (), names, size)


def _names(q: dict, key: str) -> tuple[str, ...]:
    v = q.get(key) or []
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise ConfigError(f"quantization_config.{key}", "expected a list of module names")
    return tuple(v)


def _dtype(data: dict) -> str:
    v = data.get("torch_dtype", data.get("dtype", "bfloat16")) or "bfloat16"
    if v not in ("bfloat16", "float16", "float32"):
        raise ConfigError("torch_dtype", f"{described(v)}; expected bfloat16, float16 or float32")
    return v


def _int(data: dict, key: str, default: int | None = None, lo: int = 1, hi: int = MAX_DIM) -> int:
    v = data.get(key)
    if v is None:
        if default is None:
            raise ConfigError(key, "missing (the sizing needs it)")
        return default
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(key, f"expected an integer, got {described(v)}")
    if not lo <= v <= hi:
        raise ConfigError(key, f"{v if abs(v) < 10**12 else 'a number of over 12 digits'} is out of range ({lo} to {hi:,})")
    return v


def _bool(data: dict, key: str, default: bool) -> bool:
    v = data.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ConfigError(key, f"expected true or false, got {described(v)}")
    return v


def _str(data: dict, key: str) -> str:
    v = data.get(key)
    if not isinstance(v, str) or not v or len(v) > 64:
        raise ConfigError(key, "missing or not a short string")
    return v
