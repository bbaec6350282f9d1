"""What vLLM 0.29.0 decides on its own at start-up, as the plan must assume it.

Read in the vllm 0.29.0 wheel (PyPI, vllm-0.29.0-cp38-abi3-manylinux_2_28_x86_64.whl):

- `vllm/engine/arg_utils.py` `EngineArgs.get_batch_defaults`: with no flag, an OpenAI API server
  takes max_num_batched_tokens 16384 / max_num_seqs 1024 on GPUs of 160 GiB or more (B200),
  8192 / 1024 on GPUs of 70 GiB or more that are not A100s (H100, H200), else 2048 / 256.
- `vllm/v1/worker/utils.py` `request_memory`: the engine may use ceil(total_memory x
  gpu_memory_utilization), total_memory being what the CUDA driver reports (GiB: an "80 GB" H100
  reports 79.11 GiB), not the datasheet's decimal gigabytes.
- `vllm/v1/worker/gpu_worker.py` `Worker.determine_available_memory`: the KV cache gets that
  less the weights, the non-torch memory (NCCL, cuBLAS, CUDA context), the activation peak of a
  max_num_batched_tokens profile run and, with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (default
  1, `vllm/envs.py`), the CUDA-graph estimate. docs/sizing-model.md has the derivation.
- `vllm/config/cache.py` `CacheConfig.DEFAULT_BLOCK_SIZE = 16`; `vllm/v1/core/kv_cache_utils.py`
  `check_enough_kv_cache_memory`: start-up fails unless the KV cache, less the one null block the
  BlockPool holds back, holds one request of max_model_len tokens.
- `vllm/config/cache.py` `enable_prefix_caching: bool = True`, and `EngineArgs` leaves it on for
  every model that supports it (`_set_default_chunked_prefill_and_prefix_caching_args`).
"""
from __future__ import annotations

GIB = 2**30
BLOCK_TOKENS = 16          # CacheConfig.DEFAULT_BLOCK_SIZE
NULL_BLOCKS = 1            # the BlockPool's null block, never given to a request
PREFIX_CACHING_DEFAULT = True

# What torch.cuda / vLLM report as total_memory, in GiB, read in vLLM start-up logs
# ("the current vLLM instance can use total_gpu_memory (X GiB) x gpu_memory_utilization"):
# H100 SXM 80 GB 79.11 (also 79.10-79.33 with other drivers), H200 139.81, A100 40 GB 39.49,
# L40S 44.39. A GPU without a logged figure falls back to its datasheet gigabytes.
REPORTED_MEMORY_GIB = {"h100-sxm": 79.11, "h200": 139.81, "a100-40gb": 39.49, "l40s": 44.39}


def reported_memory_bytes(gpu) -> float:
    """The total memory vLLM sees on one GPU."""
    gib = REPORTED_MEMORY_GIB.get(gpu.id)
    return gib * GIB if gib else gpu.memory_gb * 1e9


def batch_defaults(gpu) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) an OpenAI API server picks when not told."""
    memory = reported_memory_bytes(gpu)
    if memory >= 160 * GIB:
        return 16384, 1024
    if memory >= 70 * GIB and not gpu.id.startswith("a100"):
        return 8192, 1024
    return 2048, 256


def blocks_for(tokens: float, block: int = BLOCK_TOKENS) -> int:
    """Blocks a sequence of `tokens` holds: vLLM allocates whole blocks as it grows."""
    return -(-int(tokens) // block) if tokens > 0 else 0



# MLA models on Blackwell: vLLM's FlashInfer MLA backend runs only on compute capability 10 and takes
# KV blocks of 32 or 64 tokens (vllm/v1/attention/backends/mla/flashinfer_mla.py,
# `FlashInferMLABackend.get_supported_kernel_block_sizes` and `supports_compute_capability`, read at
# vllm-project/vllm 002d68ef, the stored snapshot, not the v0.29.0 tag), so the engine allocates
# 32-token blocks there, not CacheConfig.DEFAULT_BLOCK_SIZE's 16: whole-block rounding and the
# one-request start-up check use it.
BLACKWELL_MLA_BLOCK_TOKENS = 32
BLACKWELL_GPUS = ("b200",)


def kv_block_tokens(shape, default: int) -> int:
    """Tokens per KV block the engine allocates for this model on this GPU."""
    # A MIG slice (`b200/mig-<profile>`, sizing.mig) runs the same kernels as its GPU.
    if shape.model.is_mla and shape.instance.gpu.id.partition("/")[0] in BLACKWELL_GPUS:
        return BLACKWELL_MLA_BLOCK_TOKENS
    return default
