"""A model is its Hugging Face `config.json`: the architecture fields vLLM reads, and what they cost.

`parse_config(dict)` turns a config into a frozen `Architecture`; `read_config(path)` reads a
local file first (a regular file, at most `MAX_CONFIG_BYTES`). Anything missing, contradictory or
absurd raises `ConfigError` naming the field. Nothing is downloaded.

Field names and defaults follow the model classes of vLLM 0.29.0 (vllm/model_executor/models/):
- dense and GQA (`llama.py`, `qwen3.py`): hidden_size, num_hidden_layers, num_attention_heads,
  num_key_value_heads (default: the attention heads), head_dim (default hidden / heads),
  intermediate_size, vocab_size, tie_word_embeddings, max_position_embeddings, attention_bias;
- MoE: routed experts as `n_routed_experts` (deepseek_v2.py, glm4_moe.py), `num_local_experts`
  (mixtral.py, gpt_oss.py) or `num_experts` (qwen3_moe.py); `num_experts_per_tok` (gpt-oss also
  writes `experts_per_token`); `n_shared_experts`; `moe_intermediate_size` (Mixtral: the expert is
  `intermediate_size`); dense layers: `first_k_dense_replace` and `moe_layer_freq` (DeepSeek, GLM),
  `decoder_sparse_step` and `mlp_only_layers` (Qwen);
- MLA (deepseek_v2.py): kv_lora_rank, q_lora_rank (null: a full q projection), qk_rope_head_dim,
  qk_nope_head_dim, v_head_dim; the KV cache holds one latent of kv_lora_rank + qk_rope_head_dim
  per layer and token (not per head);
- sliding windows (gpt_oss.py): `layer_types` ("sliding_attention" / "full_attention") with
  `sliding_window`; a sliding layer keeps at most the window's tokens;
- `quantization_config`: `quant_method` fp8 (with `weight_block_size`), mxfp4, modelopt /
  nvfp4; `modules_to_not_convert` / `ignore` name what stays in the checkpoint's dtype.

Parameter counts leave out the multi-token-prediction layers (`num_nextn_predict_layers`): vLLM
loads them only for speculative decoding, and model cards count the main model.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from inputs import json_doc
from inputs import InputError
from inputs.files import read_regular_file
from inputs.untrusted import described

MAX_CONFIG_BYTES = 1 << 20          # a config.json is a few KB; refuse anything past 1 MiB
MAX_DIM = 1 << 20                   # no hidden size, FFN, vocab or rank in any model is near this
MAX_LAYERS = 1024
MAX_EXPERTS = 4096
SLIDING, FULL = "sliding_attention", "full_attention"
EXPERT_KEYS = ("n_routed_experts", "num_local_experts", "num_experts")
TOPK_KEYS = ("num_experts_per_tok", "experts_per_token")


class ConfigError(ValueError):
    """A config.json the sizing cannot use; `field` names the key."""

    def __init__(self, field: str, message: str):
        super().__init__(f"config.json: {field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Quantization:
    method: str                      # none | fp8 | mxfp4 | nvfp4
    weight_block: tuple[int, ...] = ()
    not_converted: tuple[str, ...] = ()

    def keeps(self, group: str) -> bool:
        """True when a tensor group stays in the checkpoint's dtype under this scheme."""
        if group in ("embed", "lm_head", "norms", "router"):
            return True              # vLLM quantizes linear layers only; the router is a plain gate
        if self.method == "mxfp4":   # gpt-oss: experts only (attention and router listed as kept)
            return group != "experts"
        names = self.not_converted
        if group == "dense_mlp":
            return any(m.endswith(".mlp") or m.endswith(".mlp.*") for m in names)
        part = {"attention": "self_attn", "experts": ".experts", "shared": "shared_expert"}[group]
        return any(part in m for m in names)


@dataclass(frozen=True)
class Linear:
    """One weight matrix a token multiplies, in every layer that has it: K inputs, N outputs.
    `experts` > 0: a routed expert's matrix, `experts` of them per layer, `topk` per token.
    `group` is the `params_by_group` key its parameters count under (the step model prices
    each Linear as a GEMM, `sizing.ops`)."""
    name: str
    group: str
    layers: int
    k: int
    n: int
    experts: int = 0
    topk: int = 0

    @property
    def params(self) -> int:
        return self.layers * self.k * self.n * max(self.experts, 1)


@dataclass(frozen=True)
class Architecture:
    model_type: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    attention_bias: bool = False
    num_experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    moe_intermediate_size: int = 0
    moe_layers: tuple[bool, ...] = ()            # per layer: True when its MLP is the MoE
    kv_lora_rank: int = 0                        # > 0: MLA
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int = 0
    sliding_layers: tuple[bool, ...] = ()        # per layer: True when it attends to the window only
    quantization: Quantization = Quantization("none")
    dtype: str = "bfloat16"

    # -- what it is -----------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layer_count(self) -> int:
        return sum(self.moe_layers)

    @property
    def dense_layer_count(self) -> int:
        return self.num_hidden_layers - self.moe_layer_count

    # -- parameters by tensor group ---------------------------------------------------------------
    def attention_params_per_layer(self) -> int:
        h, n, kv, d = self.hidden_size, self.num_attention_heads, self.num_key_value_heads, self.head_dim
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * n * qk if self.q_lora_rank
                 else h * n * qk)
            kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            kv_b = self.kv_lora_rank * n * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv_a + kv_b + n * self.v_head_dim * h
        weights = h * n * d + 2 * h * kv * d + n * d * h
        bias = (n * d + 2 * kv * d + h + n) if self.attention_bias and self.model_type == "gpt_oss" else (
            n * d + 2 * kv * d if self.attention_bias else 0)        # gpt-oss: o_proj bias and sinks too
        qk_norm = 2 * d if self.model_type in ("qwen3", "qwen3_moe") else 0
        return weights + bias + qk_norm

    def expert_params(self) -> int:
        """One routed expert of one layer (gated MLP; gpt-oss adds its biases)."""
        h, f = self.hidden_size, self.moe_intermediate_size
        return 3 * h * f + (2 * f + h if self.model_type == "gpt_oss" else 0)

    def params_by_group(self) -> dict[str, int]:
        """Parameter counts per tensor group, the whole model (MTP layers excluded)."""
        h, layers = self.hidden_size, self.num_hidden_layers
        moe, dense = self.moe_layer_count, self.dense_layer_count
        router = h * self.num_experts + (self.num_experts if self.model_type in ("gpt_oss", "deepseek_v3", "kimi_k2", "glm4_moe")
                                         else 0)       # gate bias / e_score_correction_bias
        return {
            "embed": self.vocab_size * h,
            "lm_head": 0 if self.tie_word_embeddings else self.vocab_size * h,
            "norms": layers * 2 * h + h,
            "attention": layers * self.attention_params_per_layer(),
            "dense_mlp": dense * 3 * h * self.intermediate_size,
            "experts": moe * self.num_experts * self.expert_params(),
            "shared": moe * self.shared_experts * 3 * h * self.moe_intermediate_size,
            "router": moe * router,
        }

    def linears(self) -> tuple[Linear, ...]:
        """Every GEMM of a forward pass, per layer kind (biases, norms and the embedding lookup
        aside): what `sizing.ops` prices. Their parameters add up to `params_by_group` less those."""
        h = self.hidden_size
        out = list(self._attention_linears())
        dense, moe = self.dense_layer_count, self.moe_layer_count
        if dense:
            out += [Linear("gate_up", "dense_mlp", dense, h, 2 * self.intermediate_size),
                    Linear("down", "dense_mlp", dense, self.intermediate_size, h)]
        if moe:
            f, e, k = self.moe_intermediate_size, self.num_experts, self.experts_per_token
            out += [Linear("router", "router", moe, h, e),
                    Linear("experts_gate_up", "experts", moe, h, 2 * f, e, k),
                    Linear("experts_down", "experts", moe, f, h, e, k)]
            if self.shared_experts:
                s = self.shared_experts * f
                out += [Linear("shared_gate_up", "shared", moe, h, 2 * s), Linear("shared_down", "shared", moe, s, h)]
        out.append(Linear("lm_head", "lm_head", 1, h, self.vocab_size))
        return tuple(out)

    def _attention_linears(self) -> tuple[Linear, ...]:
        h, layers, n, kv, d = (self.hidden_size, self.num_hidden_layers, self.num_attention_heads,
                               self.num_key_value_heads, self.head_dim)
        if not self.is_mla:
            return (Linear("qkv", "attention", layers, h, (n + 2 * kv) * d), Linear("o", "attention", layers, n * d, h))
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        q = ((Linear("q_a", "attention", layers, h, self.q_lora_rank),
              Linear("q_b", "attention", layers, self.q_lora_rank, n * qk)) if self.q_lora_rank
             else (Linear("q", "attention", layers, h, n * qk),))
        # vLLM's MLA decode absorbs kv_b into the query and the output (two per-head BMMs of the
        # same size): the FLOPs and bytes per token are kv_b's either way.
        return q + (Linear("kv_a", "attention", layers, h, self.kv_lora_rank + self.qk_rope_head_dim),
                    Linear("kv_b", "attention", layers, self.kv_lora_rank, n * (self.qk_nope_head_dim + self.v_head_dim)),
                    Linear("o", "attention", layers, n * self.v_head_dim, h))

    @property
    def total_params(self) -> int:
        return sum(self.params_by_group().values())

    @property
    def active_params(self) -> int:
        """Parameters one token multiplies: all but the input embedding (a lookup) and the
        experts it is not routed to."""
        g = self.params_by_group()
        routed = self.moe_layer_count * self.experts_per_token * self.expert_params()
        return sum(g.values()) - g["embed"] - g["experts"] + routed

    # -- bytes --------------------------------------------------------------------------------------
    def bytes_by_group(self, weights: str) -> dict[str, float]:
        """Bytes per tensor group when the quantizable groups are at `weights` precision; the rest
        stay in the checkpoint's dtype (BF16), as they are stored."""
        keep = self.quantization if self.quantization.method != "none" else Quantization(weights)
        out = {}
        for group, count in self.params_by_group().items():
            stored = 2.0 if keep.keeps(group) or weights in ("bf16", "fp16") else element_bytes(weights, self)
            out[group] = count * stored
        return out

    def weight_bytes(self, weights: str) -> float:
        return sum(self.bytes_by_group(weights).values())

    def kv_bytes_per_token(self, kv_bytes: float, context: float | None = None) -> float:
        """KV-cache bytes per token of context, all layers. MLA: one latent plus its rope part per
        layer. A sliding layer keeps at most `sliding_window` tokens: at a context of c tokens its
        share per token is window / c (None: a context long enough that it vanishes, i.e. the full
        layers only... unless every layer slides)."""
        per_layer = ((self.kv_lora_rank + self.qk_rope_head_dim) if self.is_mla
                     else 2 * self.num_key_value_heads * self.head_dim) * kv_bytes
        full = sum(1 for s in self.sliding_layers if not s) if self.sliding_layers else self.num_hidden_layers
        sliding = self.num_hidden_layers - full
        if sliding == 0:
            return full * per_layer
        share = 1.0 if context is None or context <= self.sliding_window else self.sliding_window / context
        return (full + sliding * share) * per_layer

    def experts_touched(self, batch: float) -> float:
        """Expected distinct routed experts one MoE layer runs for `batch` tokens: each token picks
        k of E, so an expert stays idle with probability (1 - k/E)^B; E (1 - (1 - k/E)^B) are hit.
        (Uniform routing: real routers are skewed, which touches fewer; this is the upper bound a
        planner should use.)"""
        if not self.is_moe or batch <= 0:
            return 0.0
        e, k = self.num_experts, self.experts_per_token
        return e * (1 - (1 - k / e) ** batch)


def element_bytes(weights: str, arch: Architecture | None = None) -> float:
    """Bytes per weight element at a precision, block scales included: FP8 block-wise adds one FP32
    scale per 128 x 128 block; MXFP4 one E8M0 byte per 32 elements; NVFP4 one FP8 byte per 16."""
    if weights == "fp8":
        block = arch.quantization.weight_block if arch and arch.quantization.weight_block else ()
        return 1.0 + (4.0 / math.prod(block) if block else 0.0)
    if weights == "fp4":
        mx = arch is not None and arch.quantization.method == "mxfp4"
        return 0.5 + (1 / 32 if mx else 1 / 16)
    return 2.0


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


def parse_config(data: object) -> Architecture:
    """The architecture of a config.json's contents (a dict); ConfigError names the bad field."""
    if not isinstance(data, dict):
        raise ConfigError("(top level)", "expected a JSON object")
    if isinstance(data.get("text_config"), dict):      # multimodal wrappers keep the LM inside
        data = {**data["text_config"], "quantization_config": data.get("quantization_config")}
    model_type = _str(data, "model_type")
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
        intermediate_size=_int(data, "intermediate_size"), vocab_size=_int(data, "vocab_size"),
        tie_word_embeddings=_bool(data, "tie_word_embeddings", False),
        max_position_embeddings=_int(data, "max_position_embeddings", hi=1 << 24),
        attention_bias=_bool(data, "attention_bias", False), dtype=_dtype(data),
        quantization=_quantization(data.get("quantization_config")),
    )
    return Architecture(**base, **_moe(data, layers, experts, topk), **_mla(data, heads),
                        **_sliding(data, layers))


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


def _sliding(data: dict, layers: int) -> dict:
    types = data.get("layer_types")
    if types is None:
        return {}
    if not isinstance(types, list) or len(types) != layers:
        raise ConfigError("layer_types", f"expected a list of {layers} entries (one per layer), "
                                         f"got {len(types) if isinstance(types, list) else type(types).__name__}")
    bad = [t for t in types if t not in (SLIDING, FULL)]
    if bad:
        raise ConfigError("layer_types", f"an unknown layer type ({described(bad[0])}); expected {SLIDING} or {FULL}")
    sliding = tuple(t == SLIDING for t in types)
    if not any(sliding):
        return {}
    return {"sliding_window": _int(data, "sliding_window"), "sliding_layers": sliding}


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
    raise ConfigError("quantization_config.quant_method",
                      f"{described(method)}, not one the sizing knows (fp8, mxfp4, nvfp4 / modelopt FP4)")


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
