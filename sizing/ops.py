"""The per-operation step model (`step_model: ops`): a step is the sum of what its kernels and
collectives cost, each priced on its own shape.

A step decodes n sequences and prefills c prompt tokens; its T = n + c tokens pass every layer.
Per layer kind, on one GPU of the replica (shapes split by the layout, `sizing.parallel`):

- every GEMM of `Architecture.linears()`: max(floor, bytes / bandwidth, 2 N K (M + m_half) / peak)
  with M the tokens it sees (the LM head: only the n sampled ones);
- a routed-expert layer: the fused-MoE kernel, max(floor, touched experts' bytes / bandwidth,
  its FLOPs), the experts touched a concave function of T (`Architecture.experts_touched`): a
  decode step uses the tangent at the operating batch, a mixed step adds what its prompt tokens
  touch beyond the decode batch, exactly;
- decode attention: max(floor, each sequence's KV read / bandwidth + a per-sequence cost); prefill
  attention: max(floor, causal FLOPs / peak + a per-token cost); sliding layers see their window;
- two all-reduces per layer under TP (vLLM's custom all-reduce for decode steps, NCCL for the
  larger messages of mixed steps), the all-to-alls of `dp-ep`, the pipeline hops of a multi-node
  replica;
- norms, activations and rotary embeddings per layer: a floor per fused kernel and their
  activation traffic.

Each operation is a max of at most three affine functions of (n, c), so the step is a sum of
such maxes: convex and piecewise linear in n, which keeps the analytic model's fixed points exact
(`StepModel.decode_branches` returns its pieces). The parameters come from per-operation
measurements (`sizing/data/op_costs.json`, each entry with its source and fit error; docs/sizing-
model.md), never from end-to-end benchmarks.
"""
from __future__ import annotations

import math
from functools import lru_cache

from . import parallel
from .architecture import Architecture, Linear
from .catalog import CatalogError, bytes_per_element
from .op_costs import ACT_BYTES, MLA_PAIR_FLOPS, load_op_costs

US = 1e-6
# vLLM 0.29.0 uses its custom all-reduce up to this message size (vllm/distributed/device_communicators/
# custom_all_reduce.py: max_size = 8192 * 1024), NCCL above it.
CUSTOM_ALL_REDUCE_MAX_BYTES = 8192 * 1024
LAYER_ELEMENTWISE_KERNELS = 4   # fused add+RMSNorm twice, rotary embedding, SiLU-and-mul
ELEMENTWISE_PASSES = 8          # activation reads and writes of those kernels, per token, x hidden x 2 B


# A GPU without measured tables is priced from this one's, scaled by the datasheets (extrapolated:
# docs/sizing-model.md says which figures are).
EXTRAPOLATED_FROM = "h100-sxm"


def has_op_tables(gpu_key: str) -> bool:
    return gpu_key in load_op_costs()["gpus"]


@lru_cache(maxsize=None)
def gpu_costs(gpu_key: str) -> dict:
    """The measured operation costs of a GPU, or for a GPU without its own tables the H100's with
    every bandwidth and throughput scaled by the datasheets' ratios (floors kept: kernel launch and
    synchronisation do not scale with HBM) and links by the instance link's bandwidth."""
    table = load_op_costs()["gpus"]
    if gpu_key in table:
        return table[gpu_key]
    from .mig import split_slice_id
    sliced = split_slice_id(gpu_key)
    if sliced is not None:    # a MIG slice (sizing.mig): its GPU's table, bandwidths and throughputs at the slice's shares
        base, profile = sliced
        share = float(profile.compute_fraction)
        return _scaled(gpu_costs(base), float(profile.bandwidth_fraction), {"fp8": share, "bf16": share}, 1.0)
    from .catalog import load_catalog
    cat = load_catalog()
    if gpu_key not in cat.gpus:
        raise CatalogError(f"unknown GPU '{gpu_key}'")
    gpu, base = cat.gpus[gpu_key], cat.gpus[EXTRAPOLATED_FROM]
    link, base_link = cat.node_for_gpu(gpu_key).link, cat.node_for_gpu(EXTRAPOLATED_FROM).link
    hbm = gpu.hbm_tbps / base.hbm_tbps
    flops = {d: gpu.peak_tflops(d) / base.peak_tflops(d) for d in ("fp8", "bf16")}
    return _scaled(table[EXTRAPOLATED_FROM], hbm, flops, link.bandwidth_gbps / base_link.bandwidth_gbps)


def _scaled(node, hbm: float, flops: dict, link: float, dtype: str = "bf16"):
    """A copy of an op table with bandwidths and throughputs scaled (dtype: the GEMM family)."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            sub = key if key in flops else dtype
            if key == "bw_tbps":
                out[key] = value * hbm
            elif key == "tflops":
                out[key] = value * flops[dtype]
            elif key == "bw_gbps":
                out[key] = value * link
            else:
                out[key] = _scaled(value, hbm, flops, link, sub)
        return out
    return node


# -- pieces -------------------------------------------------------------------------------------
# A term is (needs, pieces): pieces are (alpha, beta per decode, gamma per prompt token), the term
# costs the largest; `needs` says when it runs: "n" (there are decodes), "c" (there is a prompt
# chunk), "c0" (a decode-only step), "" (always).

# The GEMM fits cover N, K >= this (scripts/derive_op_costs.py GEMM_FIT_MIN_DIM); a smaller GEMM
# (a router, MLA's down-projections) floors at the fastest time its kernel was measured at.
GEMM_FIT_MIN_DIM = 4096


def _gemm_pieces(p: dict, m_per_n: float, m_per_c: float, k: float, n: float, w_bytes: float, count: float):
    bw, peak = p["bw_tbps"] * 1e12, p["tflops"] * 1e12
    floor = p["floor_us"] if min(k, n) >= GEMM_FIT_MIN_DIM else p.get("min_us", p["floor_us"])
    flops = 2 * n * k
    mem_a, mem_b = count * n * k * w_bytes / bw, count * (k + n) * ACT_BYTES / bw
    comp_a, comp_b = count * flops * p["m_half"] / peak, count * flops / peak
    return ((count * floor * US, 0.0, 0.0),
            (mem_a, mem_b * m_per_n, mem_b * m_per_c),
            (comp_a, comp_b * m_per_n, comp_b * m_per_c))


def _gemm_dtype(gpu_ops: dict, bytes_per_param: float, block: bool = False, op: str = "gemm") -> str:
    """The kernel family that runs a weight of this many bytes: FP8 (block-scaled for a checkpoint
    with `weight_block_size`, vLLM's DeepGEMM/Cutlass block kernels; per-tensor otherwise) and FP4 on
    the tensor cores that have them; anything else (BF16, or INT4/FP4 dequantized) as BF16."""
    table = gpu_ops[op]
    if bytes_per_param < 0.75:          # 4-bit: FP4 tensor cores where there are, else dequantized (W4A16)
        return "fp4" if "fp4" in table else "bf16"
    if bytes_per_param < 1.5 and "fp8" in table:
        # The per-tensor FP8 MoE rows are FlashInfer's ModelOpt kernel (0.55 TB/s on Hopper), not
        # the fused-MoE kernels vLLM runs for FP8 experts: those are the block-scaled family's.
        return "fp8_block" if (block or op == "moe") and "fp8_block" in table else "fp8"
    return "bf16"


def _moe_dtype(arch: Architecture, gpu_ops: dict, bytes_per_param: float) -> str:
    """The fused-MoE kernel family of a model's experts. MXFP4 experts (gpt-oss) run the kernel vLLM's
    MXFP4 oracle selects, measured as AIConfigurator's `w4a16_mxfp4` rows: OAI Triton matmul_ogs
    (`OAITritonMxfp4ExpertsMonolithic`) on Hopper, FlashInfer TRT-LLM MXFP4 x BF16 on Blackwell
    (vllm/model_executor/layers/fused_moe/oracle/mxfp4.py `_get_priority_backends`); never the BF16
    Triton kernel's tile cost at 4-bit bytes."""
    if arch.quantization.method == "mxfp4" and bytes_per_param < 0.75 and "mxfp4" in gpu_ops["moe"]:
        return "mxfp4"
    return _gemm_dtype(gpu_ops, bytes_per_param, bool(arch.quantization.weight_block), "moe")


def gemm_params(gpu_ops: dict, dtype: str) -> dict:
    """A GEMM family's fitted parameters. The block-scaled FP8 rows never run under 55 us on Hopper
    (153 us on B200) whatever the shape: time outside the kernel inside the collector's timing
    (docs/sizing-model.md), which vLLM's CUDA graphs do not pay. Its floor is the per-tensor FP8
    GEMM's; its bandwidth and throughput are its own."""
    p = gpu_ops["gemm"][dtype]
    if dtype == "fp8_block":
        p = {**p, "floor_us": gpu_ops["gemm"]["fp8"]["floor_us"], "min_us": gpu_ops["gemm"]["fp8"]["min_us"]}
    return p


def split_linear(lin: Linear, layout: str, tp: int) -> tuple[float, float, float, float]:
    """(K, N, tokens share, experts) one GPU sees of a Linear: column-parallel layers split N,
    row-parallel ones K (vLLM's QKV/gate_up/q_b/kv_b/lm_head and o/down); the router and MLA's
    q_a/kv_a are replicated. `dp-ep`: attention and dense layers unsplit, each rank its 1/N of the
    tokens; experts whole, 1/N of them per GPU (`tp-ep` alike, every token seen)."""
    k, n = float(lin.k), float(lin.n)
    if lin.experts:
        if layout in ("dp-ep", "tp-ep"):
            return k, n, 1.0, lin.experts / tp
        return (k, n / tp, 1.0, float(lin.experts)) if lin.name.endswith("gate_up") else (k / tp, n, 1.0, float(lin.experts))
    if layout == "dp-ep":
        return k, n, 1.0 / tp, 0.0
    if lin.name in ("router", "q_a", "kv_a"):
        return k, n, 1.0, 0.0
    if lin.name in ("o", "down", "shared_down"):
        return k / tp, n, 1.0, 0.0
    return k, n / tp, 1.0, 0.0


def gemm_terms(arch: Architecture, gpu_ops: dict, weights: str, layout: str, tp: int) -> list:
    """Every dense GEMM of the forward pass (routed experts apart: `moe_terms`)."""
    by_bytes, by_params = arch.bytes_by_group(weights), arch.params_by_group()
    block = bool(arch.quantization.weight_block)
    terms, merged = [], {}
    for lin in arch.linears():
        if lin.experts or (lin.group == "attention" and uses_mla_module(arch, gpu_ops)):
            continue
        w = by_bytes[lin.group] / by_params[lin.group] if by_params[lin.group] else 2.0
        k, n, share, _ = split_linear(lin, layout, tp)
        dtype = _gemm_dtype(gpu_ops, w, block)
        m_per_c = 0.0 if lin.name == "lm_head" else share    # logits of the sampled tokens only
        floor, mem, comp = _gemm_pieces(gemm_params(gpu_ops, dtype), share, m_per_c, k, n, w, lin.layers)
        if mem[0] < floor[0]:            # its floor binds at small M: priced on its own
            terms.append(("", (floor, mem, comp)))
            continue
        # Never at its floor: GEMMs of one dtype cross from bandwidth to compute at the same M (the
        # weight bytes and the FLOPs both scale with N K), so their sum is one max, exactly but for
        # the activation bytes.
        key = (dtype, m_per_c)
        prev = merged.get(key, ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0)))
        merged[key] = (tuple(x + y for x, y in zip(prev[0], mem)), tuple(x + y for x, y in zip(prev[1], comp)))
    return terms + [("", pieces) for pieces in merged.values()]


def moe_terms(arch: Architecture, gpu_ops: dict, weights: str, layout: str, tp: int, n_op: float) -> list:
    """The fused-MoE kernel of every routed-expert layer, in the fitted form
    max(floor, touched x expert bytes / bw, expert FLOPs x (pairs + touched x m_half) / peak):
    (floor, s per touched expert read, s per touched expert computed, s per token, local experts,
    1 - k/E, and the touched experts' tangent a + b n at `n_op`)."""
    if not arch.is_moe:
        return []
    e, k, layers = arch.num_experts, arch.experts_per_token, arch.moe_layer_count
    by_bytes, by_params = arch.bytes_by_group(weights), arch.params_by_group()
    w = by_bytes["experts"] / by_params["experts"]
    p = gpu_ops["moe"][_moe_dtype(arch, gpu_ops, w)]
    split = layout in ("dp-ep", "tp-ep")
    e_local, f_local = (e / tp, float(arch.moe_intermediate_size)) if split else (float(e), arch.moe_intermediate_size / tp)
    pairs_per_token = k / tp if split else float(k)            # token-expert pairs a GPU computes
    expert_flops = 2 * 3 * arch.hidden_size * f_local          # gate_up and down, per pair
    bw, peak = p["bw_tbps"] * 1e12, p["tflops"] * 1e12
    read = layers * 3 * arch.hidden_size * f_local * w / bw    # s to read one local expert in every layer
    compute = layers * expert_flops * p["m_half"] / peak       # s per touched expert, the kernel's tiles
    per_token = layers * expert_flops * pairs_per_token / peak
    miss = 1 - k / e
    n0 = max(n_op, 1.0)
    touched = e_local * (1 - miss ** n0)
    slope = e_local * miss ** n0 * -math.log(miss) if miss > 0 else 0.0   # d touched / d n at n0
    return [(layers * p["floor_us"] * US, read, compute, per_token, e_local, miss, touched - slope * n0, slope)]


# The MLA modules were measured on DeepSeek-V3's attention block (AIConfigurator's `mla` tables):
# a model whose MLA has other dimensions is priced by its GEMMs and the generic decode attention.
DEEPSEEK_MLA = {"hidden_size": 7168, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                "v_head_dim": 128, "q_lora_rank": 1536}


def uses_mla_module(arch: Architecture, gpu_ops: dict) -> bool:
    """True when a measured MLA module prices this model's whole attention block."""
    return (arch.is_mla and "mla_decode" in gpu_ops
            and all(getattr(arch, key) == value for key, value in DEEPSEEK_MLA.items()))


def mla_module_terms(arch: Architecture, gpu_ops: dict, shape, workload) -> list:
    """DeepSeek-V3's MLA block per layer (projections, latent attention, output), decode and
    prefill, as measured: fixed + per head + the latent cache's bytes + per (sequence, head)."""
    layout = parallel.layout_of(shape)
    heads = arch.num_attention_heads / (1 if layout == "dp-ep" else shape.tp)
    share = 1.0 / shape.tp if layout == "dp-ep" else 1.0        # a DP rank's share of the sequences
    kv = "fp8" if shape.kv_dtype == "fp8" else "bf16"
    dec, pre = gpu_ops["mla_decode"][f"module_{kv}_kv"], gpu_ops["mla_prefill"][f"module_{kv}_kv"]
    layers = arch.mixer_count("attention")
    ctx, s_in = workload.decode_context_tokens, workload.prompt_attention_tokens
    seen = arch.attended_tokens(ctx)
    latent = seen * (arch.kv_lora_rank + arch.qk_rope_head_dim) * bytes_per_element(shape.kv_dtype)
    indexer = ctx * arch.indexer_bytes_per_token() / layers     # DSA: its key cache read in full
    per_seq = (latent + indexer) / (dec["bw_tbps"] * 1e12) + heads * dec["per_head_seq_us"] * US
    decode = ("n", ((layers * (dec["fixed_us"] + heads * dec["per_head_us"]) * US, layers * per_seq * share, 0.0),))
    per_token = (heads * pre["per_head_token_us"] * US
                 + heads * MLA_PAIR_FLOPS * (arch.attended_tokens(s_in) + 1) / 2 / (pre["tflops"] * 1e12))
    prefill = ("c", ((layers * (pre["fixed_us"] + heads * pre["per_head_us"]) * US, 0.0, layers * per_token * share),))
    return [decode, prefill]


def attention_terms(arch: Architecture, gpu_ops: dict, shape, workload) -> list:
    """Decode attention (each sequence reads its KV at the workload's decode context) and causal
    prefill attention (each prompt token against the mean context a prompt token sees), for the
    attention and sliding layers; Mamba2 and linear-attention layers update a recurrent state."""
    if uses_mla_module(arch, gpu_ops):
        return mla_module_terms(arch, gpu_ops, shape, workload)
    dp = parallel.layout_of(shape) == "dp-ep"
    tp, share = (1, 1.0 / shape.tp) if dp else (shape.tp, 1.0)   # a DP rank: whole heads, its share of the sequences
    ctx, s_in = workload.decode_context_tokens, workload.prompt_attention_tokens
    kv_b = bytes_per_element(shape.kv_dtype)
    key = "fp8_kv" if shape.kv_dtype == "fp8" else "bf16_kv"
    dec = gpu_ops["attention_decode"][key]
    if arch.is_mla:
        per_tok_layer = (arch.kv_lora_rank + arch.qk_rope_head_dim) * kv_b
    else:
        per_tok_layer = 2 * max(1.0, arch.num_key_value_heads / tp) * arch.head_dim * kv_b
    full, sliding = arch.mixer_count("attention"), arch.mixer_count("sliding")
    window = arch.sliding_window or ctx
    seen = full * arch.attended_tokens(ctx) + sliding * min(ctx, window)     # layer-tokens of KV a decode reads
    bw = dec["bw_tbps"] * 1e12
    layers = full + sliding
    decode = ("n", ((layers * dec["floor_us"] * US, 0.0, 0.0),
                    (0.0, share * (seen * per_tok_layer / bw + layers * dec["per_seq_us"] * US), 0.0)))
    pre = gpu_ops["attention_prefill"]["bf16"]
    width = parallel.attention_width(shape.model) / tp
    half = s_in / 2                                                  # the mean context a prompt token sees
    pairs = full * arch.attended_tokens(half) + sliding * min(half, window)
    flops = 4 * pairs * width                                        # QK and PV, 2 FLOPs each, per prompt token
    prefill = ("c", ((layers * pre["floor_us"] * US, 0.0, 0.0),
                     (0.0, 0.0, share * (flops / (pre["tflops"] * 1e12) + layers * pre["per_token_us"] * US))))
    return [decode, prefill] + recurrent_terms(arch, gpu_ops, shape.tp if not dp else 1, share)


def recurrent_terms(arch: Architecture, gpu_ops: dict, tp: int, share: float) -> list:
    """Mamba2 and gated-delta-net layers: a decode step reads and writes each sequence's state (its
    share on this GPU, heads split by TP); a prompt token streams its layer input once more. No
    per-operation table covers these kernels: they are priced at the decode attention kernel's
    floor and bandwidth (extrapolated, docs/sizing-model.md)."""
    kinds = [(m, arch.mixer_count(m)) for m in ("mamba2", "linear") if arch.mixer_count(m)]
    if not kinds:
        return []
    dec = gpu_ops["attention_decode"]["bf16_kv"]
    bw = dec["bw_tbps"] * 1e12
    layers = sum(count for _, count in kinds)
    state = sum(count * arch.state_bytes_per_layer(m) for m, count in kinds) / tp
    per_token = layers * arch.hidden_size * ACT_BYTES / bw
    return [("", ((layers * dec["floor_us"] * US, 0.0, 0.0), (0.0, share * 2 * state / bw, share * per_token)))]


def _collective_pieces(p: dict, calls: float, bytes_per_token: float, per_c: bool):
    bw = p["bw_gbps"] * 1e9
    b = calls * bytes_per_token / bw
    return ((calls * p["floor_us"] * US, 0.0, 0.0), (calls * p["latency_us"] * US, b, b if per_c else 0.0))


def all_reduce_terms(arch: Architecture, gpu_ops: dict, tp: int, mixed_tokens: float) -> list:
    """Two all-reduces per layer of each token's BF16 activations: vLLM's custom all-reduce for a
    decode step's small messages; a mixed step of `mixed_tokens` tokens on whichever vLLM picks."""
    if tp <= 1:
        return []
    table = gpu_ops["all_reduce"]
    calls, per_token = 2 * arch.num_hidden_layers, arch.hidden_size * ACT_BYTES
    custom, nccl = table["custom"][tp], table["nccl"][tp]
    mixed = custom if mixed_tokens * per_token <= CUSTOM_ALL_REDUCE_MAX_BYTES else nccl
    return [("c0", _collective_pieces(custom, calls, per_token, False)),
            ("c", _collective_pieces(mixed, calls, per_token, True))]


def elementwise_terms(arch: Architecture, gpu_ops: dict, share: float) -> list:
    """Norms, rotary embedding, activation per layer: fused kernels with a floor each, and their
    activation traffic (every GPU holds the whole hidden vector between layers)."""
    p = gpu_ops["elementwise"]
    layers = arch.num_hidden_layers
    per_token = share * layers * ELEMENTWISE_PASSES * arch.hidden_size * ACT_BYTES / (p["bw_tbps"] * 1e12)
    return [("", ((layers * LAYER_ELEMENTWISE_KERNELS * p["floor_us"] * US, 0.0, 0.0), (0.0, per_token, per_token)))]


_LEGACY: dict[tuple, Architecture] = {}


def arch_of(model) -> Architecture:
    """The model's architecture; a legacy catalog entry (figures, no config.json) is a Llama (made
    once per entry: the shape terms are cached by architecture)."""
    if model.arch is not None:
        return model.arch
    key = (model.id, model.layers, model.hidden, model.heads, model.kv_heads, model.head_dim, model.ffn, model.vocab)
    if key not in _LEGACY:
        _LEGACY[key] = _legacy_llama(model)
    return _LEGACY[key]


def _legacy_llama(model) -> Architecture:
    return Architecture(model_type="llama", hidden_size=model.hidden, num_hidden_layers=model.layers,
                        num_attention_heads=model.heads, num_key_value_heads=model.kv_heads,
                        head_dim=model.head_dim, intermediate_size=model.ffn, vocab_size=model.vocab,
                        tie_word_embeddings=False, max_position_embeddings=1 << 17,
                        moe_layers=(False,) * model.layers)


# A mixed step's size for picking its all-reduce: vLLM's default token budget for large GPUs
# (vllm/engine/arg_utils.py at v0.29.0: 8192 for H100/H200-class usage contexts, 2048 otherwise):
# the chunks that set TTFT are of this order.
MIXED_STEP_TOKENS = 2048


@lru_cache(maxsize=4096)
def _shape_terms(arch: Architecture, gpu_key: str, weights: str, layout: str, tp: int) -> tuple:
    """The terms that depend on the shape alone (GEMMs, all-reduces, elementwise): a sweep
    builds them once per shape, not once per workload."""
    gpu_ops = gpu_costs(gpu_key)
    share = 1.0 / tp if layout == "dp-ep" else 1.0
    terms = gemm_terms(arch, gpu_ops, weights, layout, tp)
    if layout != "dp-ep":
        terms += all_reduce_terms(arch, gpu_ops, tp, MIXED_STEP_TOKENS)
    return tuple(terms + elementwise_terms(arch, gpu_ops, share))


def build_ops_step(shape, workload, profile, n_op: float, extra: list):
    """The operations of one replica's step: (fixed s, s per token, terms, MoE terms) for
    `sizing.step.StepModel` (`extra`: affine (fixed, per token) terms from the links: pipeline
    hops, all-to-alls)."""
    arch, gpu_ops = arch_of(shape.model), gpu_costs(shape.instance.gpu.id)
    layout, tp = parallel.layout_of(shape), shape.tp
    terms = list(_shape_terms(arch, shape.instance.gpu.id, shape.weights, layout, tp))
    terms += attention_terms(arch, gpu_ops, shape, workload)
    fixed, per_token = sum(a for a, _ in extra), sum(b for _, b in extra)   # always on: the core line
    moe = moe_terms(arch, gpu_ops, shape.weights, layout, tp, n_op)
    return fixed, per_token, tuple(terms), tuple(moe)
