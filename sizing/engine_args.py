"""The vLLM engine arguments a plan decides: the typed `EngineArgs` and their derivation from a plan.

Only vLLM's own arguments, each named as vLLM 0.29.0 names it; the checkpoint and the served name
belong to the deployment (deployment/engine.py, which holds the one table from field to flag).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .memory import engine_max_num_seqs, engine_ranks
from .parallel import serving_args
from .profiles import get_profile


@dataclass(frozen=True)
class EngineArgs:
    """The vLLM 0.29.0 engine arguments a plan decides, each named as vLLM names it
    (`vllm/engine/arg_utils.py` `EngineArgs`): nothing else. The checkpoint and the served name are
    the deployment's (deployment/engine.py, which also holds the one table from field to flag)."""
    tensor_parallel_size: int
    data_parallel_size: int
    enable_expert_parallel: bool
    pipeline_parallel_size: int          # one stage per node: > 1 only for replicas that span nodes
    max_model_len: int                   # the served context limit (Workload.served_max_model_len)
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    kv_cache_dtype: str                  # "fp8" or "auto"
    enable_prefix_caching: bool
    quantization: str | None             # "fp8": vLLM quantizes a BF16 checkpoint at load
    # vLLM's --speculative-config, the JSON object its SpeculativeConfig takes (method,
    # num_speculative_tokens, model: vllm/config/speculative.py); None: no speculation
    speculative_config: str | None = None

    def as_dict(self) -> dict:
        """The arguments as plain data (speculative_config only when set: a plan without it keeps its JSON)."""
        out = asdict(self)
        if out["speculative_config"] is None:
            del out["speculative_config"]
        return out


def engine_args_for(plan) -> EngineArgs:
    """vLLM arguments derived from the plan (the serving component passes them as they are).

    max_num_batched_tokens is the replica model's step budget (`ReplicaModel._batched_tokens`):
    the TTFT the plan promises assumes exactly these chunks."""
    req, w = plan.request, plan.request.workload
    model = plan.replica_model.shape.model
    profile = get_profile(req.profile)
    rm = plan.replica_model
    return EngineArgs(
        **serving_args(rm.shape),
        pipeline_parallel_size=plan.nodes_per_replica,   # vLLM --pipeline-parallel-size (one stage per node)
        max_model_len=w.served_max_model_len,
        # vLLM 0.29.0's own default for the GPU class (sizing.vllm_engine): its paged KV cache
        # admits what fits and preempts the newest when blocks run out, so no tighter cap is
        # needed. The seed profile keeps the seed's 512 (memory.engine_max_num_seqs).
        max_num_seqs=engine_max_num_seqs(rm.shape, profile),
        # per engine core: under dp-ep each data-parallel rank schedules its own share
        max_num_batched_tokens=max(-(-rm.batched_tokens // engine_ranks(rm.shape)), engine_max_num_seqs(rm.shape, profile)),
        gpu_memory_utilization=profile.gpu_memory_utilization,
        kv_cache_dtype="fp8" if req.kv_dtype == "fp8" else "auto",
        # vLLM 0.29.0 caches prefixes by default; a plan that counts on it says so explicitly.
        enable_prefix_caching=w.counts_on_prefix_cache,
        # fp8 without a prequantized checkpoint: vLLM quantizes the BF16 weights at load
        quantization="fp8" if req.weights == "fp8" and "fp8" not in model.checkpoints else None,
        speculative_config=_speculative_config(plan),
    )


def _speculative_config(plan) -> str | None:
    if plan.speculative is None:
        return None
    from .speculative import speculative_config
    return speculative_config(plan.speculative)


def catalog_checkpoint(plan) -> str:
    """The catalog's checkpoint for the plan's weights (the BF16 one when no prequantized one exists)."""
    checkpoints = plan.replica_model.shape.model.checkpoints
    return checkpoints.get(plan.request.weights if plan.request.weights in checkpoints else "bf16")
