"""The per-operation cost forms, evaluated from `data/op_costs.json` (fitted by
scripts/derive_op_costs.py to NVIDIA AIConfigurator's vLLM silicon tables; docs/sizing-model.md,
"Per-operation cost tables").

Every function returns microseconds on one GPU for one call of the operation at the shape it is
given (per-GPU shapes: heads, experts and intermediate sizes already split by the layout). At a
fixed shape each is a max of at most three affine functions of the token count (m, batch, tokens,
bytes), which `sizing.ops` relies on. Units in the table: us, TB/s, TFLOP/s, GB/s.
"""
from __future__ import annotations

import json
from functools import lru_cache

from inputs.files import read_text

from .catalog import DATA_DIR, CatalogError

MAX_OP_COSTS_BYTES = 1_000_000
ACT_BYTES = 2.0                      # BF16 activations in and out of every GEMM
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "fp4": 0.5, "mxfp4": 0.5 + 1 / 32}  # MXFP4: + E8M0 per 32
KV_BYTES = {"bf16": 2.0, "fp8": 1.0}
MLA_KV_WIDTH = 512 + 64              # DeepSeek-V3 latent cache per token: kv_lora_rank + rope dims
MLA_PAIR_FLOPS = 2 * (192 + 128)     # MLA prefill per (query, key) pair per head: QK at 192, PV at 128
PER_US_TERA, PER_US_GIGA = 1e6, 1e3  # TB/s and TFLOP/s in units per microsecond; GB/s likewise


def _int_keys(pairs: list) -> dict:
    """JSON keys are strings: a GPU count ("8") reads back as the integer it is."""
    return {int(k) if k.isdigit() else k: v for k, v in pairs}


@lru_cache(maxsize=1)
def load_op_costs() -> dict:
    path = DATA_DIR / "op_costs.json"
    return json.loads(read_text(path, MAX_OP_COSTS_BYTES, "op cost table"), object_pairs_hook=_int_keys)


def entry(gpu: str, op: str, *variant) -> dict:
    """The fitted parameters of one (gpu, op, variant...) entry; CatalogError names what is missing."""
    gpus = load_op_costs()["gpus"]
    if gpu not in gpus:
        raise CatalogError(f"no op cost table for GPU '{gpu}'; tables for: {', '.join(gpus)}")
    node, path = gpus[gpu], [gpu]
    for key in (op, *variant):
        if not isinstance(node, dict) or key not in node:
            known = ", ".join(str(k) for k in node) if isinstance(node, dict) else ""
            raise CatalogError(f"no op cost entry '{key}' under {'/'.join(path)}; known: {known}")
        node, path = node[key], path + [str(key)]
    return node


def gemm_us(gpu: str, dtype: str, m: float, n: float, k: float) -> float:
    """max(floor, weight + activation bytes / bandwidth, 2 N K (M + m_half) / throughput)."""
    p = entry(gpu, "gemm", dtype)
    moved = n * k * WEIGHT_BYTES[dtype] + m * (k + n) * ACT_BYTES
    return max(p["floor_us"], moved / (p["bw_tbps"] * PER_US_TERA),
               2 * n * k * (m + p["m_half"]) / (p["tflops"] * PER_US_TERA))


def attention_decode_us(gpu: str, kv_dtype: str, batch: float, seq: float, kv_heads: float, head_dim: float) -> float:
    """One token per sequence against `seq` cached tokens: max(floor, KV bytes / bw + per sequence)."""
    p = entry(gpu, "attention_decode", f"{kv_dtype}_kv")
    kv = batch * seq * 2 * kv_heads * head_dim * KV_BYTES[kv_dtype]
    return max(p["floor_us"], kv / (p["bw_tbps"] * PER_US_TERA) + batch * p["per_seq_us"])


def attention_prefill_us(gpu: str, kv_dtype: str, batch: float, seq: float, heads: float, head_dim: float) -> float:
    """Causal: 4 h d FLOPs per (query, key at or before it) pair, s(s+1)/2 pairs a sequence."""
    p = entry(gpu, "attention_prefill", "bf16" if kv_dtype == "bf16" else f"{kv_dtype}_kv")
    flops = batch * 4 * heads * head_dim * seq * (seq + 1) / 2
    return max(p["floor_us"], flops / (p["tflops"] * PER_US_TERA) + batch * seq * p["per_token_us"])


def mla_decode_us(gpu: str, kv_dtype: str, batch: float, seq: float, heads: float) -> float:
    """The whole MLA attention block of a layer (projections included): fixed + per head +
    latent-cache bytes / bw + per (sequence, head)."""
    p = entry(gpu, "mla_decode", f"module_{kv_dtype}_kv")
    latent = batch * seq * MLA_KV_WIDTH * KV_BYTES[kv_dtype]
    return (p["fixed_us"] + heads * p["per_head_us"] + latent / (p["bw_tbps"] * PER_US_TERA)
            + batch * heads * p["per_head_seq_us"])


def mla_prefill_us(gpu: str, kv_dtype: str, batch: float, seq: float, heads: float) -> float:
    """The whole MLA block of a layer over causal prompts: fixed + per head + per (token, head) + FLOPs."""
    p = entry(gpu, "mla_prefill", f"module_{kv_dtype}_kv")
    flops = batch * heads * MLA_PAIR_FLOPS * seq * (seq + 1) / 2
    return (p["fixed_us"] + heads * p["per_head_us"] + batch * seq * heads * p["per_head_token_us"]
            + flops / (p["tflops"] * PER_US_TERA))


def moe_us(gpu: str, dtype: str, tokens: float, hidden: float, inter: float, topk: float, experts: float,
           tp: int = 1, ep: int = 1) -> float:
    """Fused MoE of one layer: max(floor, touched local experts' weights / bw, their FLOPs), the
    experts touched under uniform routing, the token-expert pairs this GPU computes T k / ep."""
    p = entry(gpu, "moe", dtype)
    touched = experts / ep * (1 - (1 - topk / experts) ** tokens)
    f_local, pairs = inter / tp, tokens * topk / ep
    return max(p["floor_us"], touched * 3 * hidden * f_local * WEIGHT_BYTES[dtype] / (p["bw_tbps"] * PER_US_TERA),
               2 * 3 * hidden * f_local * (pairs + touched * p["m_half"]) / (p["tflops"] * PER_US_TERA))


def collective_us(gpu: str, op: str, impl: str, gpus: int, nbytes: float) -> float:
    """max(floor, latency + bytes / bandwidth) of one call (`nbytes`: the message, BF16)."""
    p = entry(gpu, op, impl, gpus)
    return max(p["floor_us"], p["latency_us"] + nbytes / (p["bw_gbps"] * PER_US_GIGA))
