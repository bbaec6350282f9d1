"""A model is its Hugging Face `config.json`: the architecture fields vLLM reads, and what they cost.

`parse_config(dict)` (sizing.config_parse) turns a config into a frozen `Architecture`; `read_config(path)` reads a
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
from dataclasses import dataclass


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
    method: str                      # none | fp8 | mxfp4 | nvfp4 | int4 (compressed-tensors W4A16)
    weight_block: tuple[int, ...] = ()
    not_converted: tuple[str, ...] = ()
    group_size: int = 0              # int4: elements per BF16 scale

    def keeps(self, group: str) -> bool:
        """True when a tensor group stays in the checkpoint's dtype under this scheme."""
        if group in ("embed", "lm_head", "norms", "router"):
            return True              # vLLM quantizes linear layers only; the router is a plain gate
        if self.method == "mxfp4":   # gpt-oss: experts only (attention and router listed as kept)
            return group != "experts"
        if group == "indexer":       # deepseek_v2.py:700-706: wk_weights_proj is built with quant_config=None
            return True
        names = self.not_converted
        if self.method == "int4":    # compressed-tensors `ignore`: names and "re:" patterns
            probe = {"attention": "model.layers.0.self_attn.q_a_proj", "dense_mlp": "model.layers.0.mlp.gate_proj",
                     "experts": "model.layers.9.mlp.experts.0.gate_proj",
                     "shared": "model.layers.9.mlp.shared_experts.gate_proj"}.get(group)
            return probe is None or any(_ignored(probe, m) for m in names)
        if group == "dense_mlp":
            return any(m.endswith(".mlp") or m.endswith(".mlp.*") for m in names)
        part = {"attention": "self_attn", "experts": ".experts", "shared": "shared_expert", "mamba": "mixer.in_proj",
                "linear_attention": "linear_attn", "latent": "latent_proj"}[group]
        return any(part in m for m in names)


def _ignored(name: str, pattern: str) -> bool:
    """compressed-tensors' `ignore` entry: a module name, or "re:" and a regular expression."""
    import re
    if pattern.startswith("re:"):
        return re.fullmatch(pattern[3:], name) is not None or re.match(pattern[3:], name) is not None
    return name == pattern or name.endswith("." + pattern)


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
    # -- hybrid and sparse layers (empty / 0: every layer attention + MLP, as before) --------------
    layer_mixers: tuple[str, ...] = ()           # per layer: attention | sliding | mamba2 | linear | none
    ffn_layers: tuple[str, ...] = ()             # per layer: dense | moe | none
    gated_mlp: bool = True                       # False: up + down only (Nemotron-H's relu2 MLP)
    shared_intermediate_size: int = 0            # one shared expert's width (0: moe_intermediate_size)
    shared_expert_gate: bool = False             # Qwen3-Next / 3.5: a 1-wide sigmoid gate on the shared expert
    moe_latent_size: int = 0                     # > 0: LatentMoE (experts run at this width)
    router_bias: bool = False                    # e_score_correction_bias
    attn_output_gate: bool = False               # Qwen3-Next / 3.5: q_proj doubled (a gate per head)
    qk_norm: str = ""                            # "" | head (per head_dim) | layer (over all heads)
    layer_norms: int = 2                         # RMSNorms per decoder layer
    mamba_num_heads: int = 0
    mamba_head_dim: int = 0
    mamba_n_groups: int = 0
    ssm_state_size: int = 0
    mamba_conv_kernel: int = 0
    mamba_ssm_dtype: str = "float32"             # the recurrent (temporal) state's dtype
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0
    index_n_heads: int = 0                       # > 0: DSA (DeepSeek-V3.2 sparse attention's indexer)
    index_head_dim: int = 0
    index_topk: int = 0

    def __post_init__(self):
        layers = self.num_hidden_layers
        if not self.layer_mixers:
            slides = self.sliding_layers or (False,) * layers
            object.__setattr__(self, "layer_mixers", tuple("sliding" if s else "attention" for s in slides))
        if not self.ffn_layers:
            moe = self.moe_layers or (False,) * layers
            object.__setattr__(self, "ffn_layers", tuple("moe" if m else "dense" for m in moe))
        if not self.moe_layers:
            object.__setattr__(self, "moe_layers", tuple(f == "moe" for f in self.ffn_layers))

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
        return sum(1 for f in self.ffn_layers if f == "dense")

    def mixer_count(self, *kinds: str) -> int:
        return sum(1 for m in self.layer_mixers if m in kinds)

    @property
    def attention_layer_count(self) -> int:
        """Layers with softmax attention (full or sliding): the ones with a KV cache."""
        return self.mixer_count("attention", "sliding")

    @property
    def is_hybrid(self) -> bool:
        return self.mixer_count("mamba2", "linear") > 0

    @property
    def is_dsa(self) -> bool:
        return self.index_topk > 0

    @property
    def mamba_intermediate(self) -> int:
        return self.mamba_num_heads * self.mamba_head_dim

    def _mamba_conv_dim(self) -> int:
        return self.mamba_intermediate + 2 * self.mamba_n_groups * self.ssm_state_size

    def _gdn_dims(self) -> tuple[int, int]:
        return self.linear_num_key_heads * self.linear_key_head_dim, self.linear_num_value_heads * self.linear_value_head_dim

    def state_bytes_per_layer(self, mixer: str) -> float:
        """Recurrent state bytes one sequence holds in one layer of `mixer` (TP 1), as vLLM 0.29.0
        keeps it (mamba_utils.py MambaStateShapeCalculator / MambaStateDtypeCalculator): a conv
        state of (kernel - 1) x conv_dim in the model dtype and a temporal state (Mamba2: heads x
        head_dim x state_size; GDN: value heads x value dim x key dim) in `mamba_ssm_dtype`
        (Nemotron-H default float32, config.py:661; Qwen3.5 `mamba_ssm_dtype`, config.py:811).
        0 for attention kinds (their cache is per token)."""
        act = 4.0 if self.dtype == "float32" else 2.0
        ssm = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}[self.mamba_ssm_dtype]
        if mixer == "mamba2":
            conv = (self.mamba_conv_kernel - 1) * self._mamba_conv_dim()
            return conv * act + self.mamba_num_heads * self.mamba_head_dim * self.ssm_state_size * ssm
        if mixer == "linear":
            k, v = self._gdn_dims()
            conv = (self.linear_conv_kernel - 1) * (2 * k + v)
            return conv * act + self.linear_num_value_heads * self.linear_value_head_dim * self.linear_key_head_dim * ssm
        if mixer in ("attention", "sliding", "none"):
            return 0.0
        raise ValueError(f"unknown mixer {mixer!r}")

    def state_bytes_per_sequence(self) -> float:
        """Recurrent state of one running sequence, all layers (0 for a model without any)."""
        return sum(self.state_bytes_per_layer(m) * self.mixer_count(m) for m in ("mamba2", "linear"))

    def indexer_bytes_per_token(self) -> float:
        """The DSA indexer's key cache, all layers, per token: index_head_dim FP8 bytes plus one FP32
        scale per 128 (vLLM 0.29.0 vllm/models/deepseek_v32/attention.py:93; deepseek_v2.py:715-722:
        uint8 of head_dim + head_dim // 128 * 4), whatever the KV dtype."""
        if not self.is_dsa:
            return 0.0
        return self.mixer_count("attention") * (self.index_head_dim + self.index_head_dim // 128 * 4)

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
        weights = h * n * d * (2 if self.attn_output_gate else 1) + 2 * h * kv * d + n * d * h
        bias = (n * d + 2 * kv * d + h + n) if self.attention_bias and self.model_type == "gpt_oss" else (
            n * d + 2 * kv * d if self.attention_bias else 0)        # gpt-oss: o_proj bias and sinks too
        qk_norm = {"head": 2 * d, "layer": (n + kv) * d}.get(self.qk_norm, 0)
        return weights + bias + qk_norm

    def mamba_params_per_layer(self) -> int:
        """MambaMixer2 (mamba_mixer2.py:316-490): in_proj h -> intermediate + conv_dim + heads,
        conv1d (kernel x conv_dim, + bias), A, D, dt_bias, the gated norm, out_proj."""
        h, i, heads = self.hidden_size, self.mamba_intermediate, self.mamba_num_heads
        conv = self._mamba_conv_dim()
        return h * (i + conv + heads) + conv * (self.mamba_conv_kernel + 1) + 3 * heads + i + i * h

    def gdn_params_per_layer(self) -> int:
        """Gated DeltaNet (qwen_gdn_linear_attn.py:385-490): in_proj_qkvz h -> 2k + 2v, in_proj_ba
        h -> 2 value heads, conv1d kernel x (2k + v), A_log, dt_bias, norm (value head dim), out_proj."""
        h, hv = self.hidden_size, self.linear_num_value_heads
        k, v = self._gdn_dims()
        return (h * (2 * k + 2 * v) + h * 2 * hv + self.linear_conv_kernel * (2 * k + v) + 2 * hv
                + self.linear_value_head_dim + v * h)

    def indexer_params_per_layer(self) -> int:
        """DSA indexer (deepseek_v2.py:691-708): wq_b q_lora_rank -> heads x dim, wk_weights_proj
        h -> dim + heads, k_norm (a LayerNorm: weight and bias)."""
        if not self.is_dsa:
            return 0
        nh, d = self.index_n_heads, self.index_head_dim
        return self.q_lora_rank * nh * d + self.hidden_size * (d + nh) + 2 * d

    def expert_params(self) -> int:
        """One routed expert of one layer (gated MLP; gpt-oss adds its biases)."""
        h, f = self.moe_latent_size or self.hidden_size, self.moe_intermediate_size
        return (3 if self.gated_mlp else 2) * h * f + (2 * f + h if self.model_type == "gpt_oss" else 0)

    @property
    def shared_width(self) -> int:
        return self.shared_experts * (self.shared_intermediate_size or self.moe_intermediate_size)

    def params_by_group(self) -> dict[str, int]:
        """Parameter counts per tensor group, the whole model (MTP layers excluded)."""
        h, layers = self.hidden_size, self.num_hidden_layers
        moe, dense = self.moe_layer_count, self.dense_layer_count
        mlp = 3 if self.gated_mlp else 2
        router = h * self.num_experts + (self.num_experts if self.router_bias or self.model_type in (
            "gpt_oss", "deepseek_v3", "kimi_k2", "glm4_moe") else 0)       # gate bias / e_score_correction_bias
        attention = self.mixer_count("attention", "sliding")
        groups = {
            "embed": self.vocab_size * h,
            "lm_head": 0 if self.tie_word_embeddings else self.vocab_size * h,
            "norms": layers * self.layer_norms * h + h,
            "attention": attention * self.attention_params_per_layer(),
            "dense_mlp": dense * mlp * h * self.intermediate_size,
            "experts": moe * self.num_experts * self.expert_params(),
            "shared": moe * (mlp * h * self.shared_width + (h if self.shared_expert_gate else 0)),
            "router": moe * router,
        }
        if self.mixer_count("mamba2"):
            groups["mamba"] = self.mixer_count("mamba2") * self.mamba_params_per_layer()
        if self.mixer_count("linear"):
            groups["linear_attention"] = self.mixer_count("linear") * self.gdn_params_per_layer()
        if self.is_dsa:
            groups["indexer"] = attention * self.indexer_params_per_layer()
        if self.moe_latent_size:
            groups["latent"] = moe * 2 * h * self.moe_latent_size
        return groups

    def linears(self) -> tuple[Linear, ...]:
        """Every GEMM of a forward pass, per layer kind (biases, norms and the embedding lookup
        aside): what `sizing.ops` prices. Their parameters add up to `params_by_group` less those."""
        h = self.hidden_size
        out = list(self._attention_linears()) + list(self._recurrent_linears())
        dense, moe = self.dense_layer_count, self.moe_layer_count
        up = 2 if self.gated_mlp else 1          # gated: gate and up fused; Nemotron-H: up only
        if dense:
            out += [Linear("gate_up" if self.gated_mlp else "up", "dense_mlp", dense, h, up * self.intermediate_size),
                    Linear("down", "dense_mlp", dense, self.intermediate_size, h)]
        if moe:
            f, e, k = self.moe_intermediate_size, self.num_experts, self.experts_per_token
            x = self.moe_latent_size or h
            out.append(Linear("router", "router", moe, h, e))
            if self.moe_latent_size:     # nemotron_h.py:185-201: fc1/fc2_latent_proj around the routed experts
                out.append(Linear("latent_down", "latent", moe, h, x))
            out += [Linear("experts_gate_up" if self.gated_mlp else "experts_up", "experts", moe, x, up * f, e, k),
                    Linear("experts_down", "experts", moe, f, x, e, k)]
            if self.moe_latent_size:
                out.append(Linear("latent_up", "latent", moe, x, h))
            if self.shared_experts:
                s = self.shared_width
                out += [Linear("shared_gate_up" if self.gated_mlp else "shared_up", "shared", moe, h, up * s),
                        Linear("shared_down", "shared", moe, s, h)]
                if self.shared_expert_gate:
                    out.append(Linear("shared_gate", "shared", moe, h, 1))
        out.append(Linear("lm_head", "lm_head", 1, h, self.vocab_size))
        return tuple(out)

    def _recurrent_linears(self) -> tuple[Linear, ...]:
        h, out = self.hidden_size, []
        if m := self.mixer_count("mamba2"):
            conv, i = self._mamba_conv_dim(), self.mamba_intermediate
            out += [Linear("mamba_in", "mamba", m, h, i + conv + self.mamba_num_heads),
                    Linear("mamba_out", "mamba", m, i, h)]
        if g := self.mixer_count("linear"):
            k, v = self._gdn_dims()
            out += [Linear("gdn_in_qkvz", "linear_attention", g, h, 2 * k + 2 * v),
                    Linear("gdn_in_ba", "linear_attention", g, h, 2 * self.linear_num_value_heads),
                    Linear("gdn_out", "linear_attention", g, v, h)]
        return tuple(out)

    def _attention_linears(self) -> tuple[Linear, ...]:
        h, layers, n, kv, d = (self.hidden_size, self.attention_layer_count, self.num_attention_heads,
                               self.num_key_value_heads, self.head_dim)
        if not layers:
            return ()
        if not self.is_mla:
            q = n * d * (2 if self.attn_output_gate else 1)
            return (Linear("qkv", "attention", layers, h, q + 2 * kv * d), Linear("o", "attention", layers, n * d, h))
        indexer = ((Linear("indexer_wq_b", "indexer", layers, self.q_lora_rank, self.index_n_heads * self.index_head_dim),
                    Linear("indexer_wk_weights", "indexer", layers, h, self.index_head_dim + self.index_n_heads))
                   if self.is_dsa else ())
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        q = ((Linear("q_a", "attention", layers, h, self.q_lora_rank),
              Linear("q_b", "attention", layers, self.q_lora_rank, n * qk)) if self.q_lora_rank
             else (Linear("q", "attention", layers, h, n * qk),))
        # vLLM's MLA decode absorbs kv_b into the query and the output (two per-head BMMs of the
        # same size): the FLOPs and bytes per token are kv_b's either way.
        return q + (Linear("kv_a", "attention", layers, h, self.kv_lora_rank + self.qk_rope_head_dim),
                    Linear("kv_b", "attention", layers, self.kv_lora_rank, n * (self.qk_nope_head_dim + self.v_head_dim)),
                    Linear("o", "attention", layers, n * self.v_head_dim, h)) + indexer

    @property
    def total_params(self) -> int:
        return sum(self.params_by_group().values())

    @property
    def active_params(self) -> int:
        """Parameters one token multiplies: all but the input embedding (a lookup) and the
        experts it is not routed to."""
        g = self.params_by_group()
        routed = self.moe_layer_count * self.experts_per_token * self.expert_params()
        # (a DSA indexer and a Mamba / GDN mixer run for every token: counted whole)
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
        full, sliding = self.mixer_count("attention"), self.mixer_count("sliding")
        if sliding == 0:
            return full * per_layer + self.indexer_bytes_per_token()
        share = 1.0 if context is None or context <= self.sliding_window else self.sliding_window / context
        return (full + sliding * share) * per_layer + self.indexer_bytes_per_token()

    def attended_tokens(self, context: float) -> float:
        """Tokens a decode step's full-attention layers read per sequence at `context`: all of
        them, or with DSA the indexer's top-k (vLLM 0.29.0 deepseek_v2.py:685 `topk_tokens`)."""
        return min(context, self.index_topk) if self.is_dsa else context

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
    scale per 128 x 128 block; MXFP4 one E8M0 byte per 32 elements; NVFP4 one FP8 byte per 16;
    INT4 (compressed-tensors pack-quantized, symmetric) one scale in the model dtype (BF16) per
    group (compressed_tensors_wNa16.py:152,174-179)."""
    if weights == "int4":
        group = arch.quantization.group_size if arch and arch.quantization.group_size else 128
        return 0.5 + 2.0 / group
    if weights == "fp8":
        block = arch.quantization.weight_block if arch and arch.quantization.weight_block else ()
        return 1.0 + (4.0 / math.prod(block) if block else 0.0)
    if weights == "fp4":
        mx = arch is not None and arch.quantization.method == "mxfp4"
        return 0.5 + (1 / 32 if mx else 1 / 16)
    return 2.0

