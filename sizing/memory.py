"""A replica's shape and its memory: weights, activation peak, CUDA graphs and the KV cache.

`Shape`: a model at some precision on some GPUs of one node type, in a layout, over one or more
nodes. `memory(shape, workload, profile)` is its per-replica memory as vLLM 0.29.0 accounts it at
start-up (or the seed's way, under the seed profile): the KV cache in tokens and the running
sequences it holds, capped by the engine's max_num_seqs (`engine_max_num_seqs`). The step budget's
bounds (`CHUNK_MIN` .. `CHUNK_MAX`) live here because the activation peak depends on it.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import parallel
from .catalog import Instance, Model
from .profiles import Profile
from .vllm_engine import BLOCK_TOKENS, NULL_BLOCKS, batch_defaults, blocks_for, kv_block_tokens, reported_memory_bytes
from .workload import Workload

GB = 1e9
CHUNK_MIN, CHUNK_MAX, CHUNK_ALIGN = 512, 8192, 256   # max_num_batched_tokens' chunk: bounds and step


@dataclass(frozen=True)
class Shape:
    """What a replica is: a model at some precision on `tp` GPUs of one node type, split by
    `layout` (`sizing.parallel`: tp, dp-ep for data-parallel attention with expert parallelism, or
    tp-ep for TP attention with expert parallelism;
    `tp` is the node's share of the replica's GPUs either way), or on `nodes` such nodes: TP within
    each node, pipeline stages across them (vLLM's multi-node layout: `--tensor-parallel-size`
    GPUs per node, `--pipeline-parallel-size` nodes)."""
    model: Model
    instance: Instance
    tp: int
    weights: str = "fp8"
    kv_dtype: str = "bf16"
    layout: str = "tp"
    nodes: int = 1

    @property
    def gpus(self) -> int:
        """GPUs one replica holds: tp on each of its nodes."""
        return self.tp * self.nodes


@dataclass(frozen=True)
class Memory:
    """Per replica, as vLLM accounts it at start-up (`kv_accounting: vllm`), or the seed's way."""
    weights_gb: float
    weights_per_gpu_gb: float
    usable_per_gpu_gb: float       # gpu_memory_utilization x HBM - overheads, per GPU
    activation_gb: float           # per GPU: the peak of a max_num_batched_tokens step
    cuda_graph_gb: float           # per GPU
    kv_budget_gb: float
    kv_bytes_per_token: float
    kv_cache_tokens: int           # vLLM's "GPU KV cache size: N tokens"
    max_model_len: int
    max_seqs_kv: int               # running sequences the KV cache holds at saturation (see memory())
    max_seqs: int                  # that, capped by the engine's max_num_seqs
    total_gb: float

    @property
    def max_concurrency(self) -> float:
        """vLLM's "Maximum concurrency for max_model_len tokens per request"."""
        return self.kv_cache_tokens / self.max_model_len if self.max_model_len else 0.0


def activation_gb(model: Model, tp: int, batched_tokens: int, max_seqs: int) -> float:
    """Per GPU, the activation peak of a step of `batched_tokens` tokens as vLLM's start-up
    profiling run sees it: the MLP's gate/up output and the residual stream (BF16) plus the
    sampler's FP32 logits for max_num_seqs sequences."""
    tokens = batched_tokens * (2 * 2 * model.ffn / tp + 4 * model.hidden)
    logits = max_seqs * model.vocab * 4 / tp
    return (tokens + logits) / GB


def memory(shape: Shape, workload: Workload, profile: Profile, batched_tokens: int | None = None) -> Memory:
    """The replica's memory; `batched_tokens` (max_num_batched_tokens) sets the activation peak
    (default: the smallest chunk beside the profile's max_num_seqs).

    `kv_accounting: vllm` follows vLLM 0.29.0 (`sizing.vllm_engine`): gpu_memory_utilization x the
    memory the driver reports, less weights, activation peak, CUDA graphs and runtime memory, in
    blocks of 16 tokens, one held back; a running sequence holds the blocks of the tokens it has
    so far, so at saturation the batch is the blocks over a sequence's average resident blocks.
    `fixed` (the seed) reserves each sequence's whole mean request."""
    m, gpu, tp = shape.model, shape.instance.gpu, shape.tp
    batched_tokens = batched_tokens or CHUNK_MIN + profile.max_num_seqs
    w = parallel.replica_weight_bytes(shape)
    # KV bytes per token at the mean request's context (sliding-window layers hold at most their window)
    kv_tok = parallel.kv_bytes_per_token(shape, workload.input_tokens + workload.output_tokens)
    vllm = profile.kv_accounting == "vllm"
    per_engine = engine_max_num_seqs(shape, profile)
    seqs_cap = per_engine * engine_ranks(shape)
    act = activation_gb(m, tp, batched_tokens, per_engine) if vllm else 0.0
    graphs = profile.cuda_graph_gb if vllm else 0.0
    total_gb = reported_memory_bytes(gpu) / GB if vllm else gpu.memory_gb
    usable = total_gb * profile.gpu_memory_utilization - profile.runtime_overhead_gb - act - graphs
    budget = shape.gpus * usable * GB - w      # weights and KV spread over every stage's GPUs
    # Hybrid models (Mamba2 / GDN layers): each running sequence also holds one recurrent state per
    # such layer, whatever its length (state_bytes_per_sequence). vLLM 0.29.0 pages both in one pool:
    # the attention block is widened until a page holds one layer's state (platforms/interface.py
    # update_block_size_for_backend, 904-931) and a sequence takes one page per recurrent layer
    # (mamba_block_size = max_model_len without prefix caching, models/config.py:656-657). Here the
    # state is counted at its own size per sequence slot (the page padding is not modelled).
    state_seq = state_bytes_per_sequence(shape)
    if vllm:
        block = kv_block_tokens(shape, profile.block_tokens)
        per_seq = (resident_blocks(workload, block) if profile.kv_reservation == "grow"
                   else blocks_for(workload.input_tokens + workload.output_tokens, block))
        if state_seq:
            seqs = max(0, int((budget - NULL_BLOCKS * block * kv_tok) // (per_seq * block * kv_tok + state_seq))
                       ) if budget > 0 else 0
            # the tokens the cache holds for one sequence (its state aside): what the start-up check reads
            blocks = max(0, int((budget - state_seq) // (block * kv_tok))) if budget > state_seq else 0
        else:
            blocks = max(0, int(budget // (block * kv_tok))) if budget > 0 else 0
            seqs = int(max(0, blocks - NULL_BLOCKS) // per_seq)
        kv_cache_tokens = blocks * block
    else:
        per = (workload.input_tokens + workload.output_tokens) * kv_tok + state_seq
        seqs = max(0, int(budget // per)) if budget > 0 else 0
        kv_cache_tokens = max(0, int((budget - state_seq) // kv_tok)) if budget > state_seq else 0
    return Memory(
        weights_gb=w / GB, weights_per_gpu_gb=w / shape.gpus / GB, usable_per_gpu_gb=usable, activation_gb=act,
        cuda_graph_gb=graphs, kv_budget_gb=max(budget, 0) / GB, kv_bytes_per_token=kv_tok,
        kv_cache_tokens=kv_cache_tokens, max_model_len=workload.served_max_model_len,
        max_seqs_kv=seqs, max_seqs=min(seqs, seqs_cap), total_gb=shape.gpus * gpu.memory_gb,
    )


def state_bytes_per_sequence(shape: Shape) -> float:
    """Recurrent state one running sequence holds in the replica (Mamba2 / GDN layers, all of
    them; 0 for attention-only models). The state is split over TP ranks (heads and conv channels
    are sharded, mamba_utils.py mamba2_state_shape / gated_delta_net_state_shape), so the
    replica holds one copy; under dp-ep each sequence's state sits on its own rank: also one."""
    a = shape.model.arch
    return a.state_bytes_per_sequence() if a is not None else 0.0


def engine_max_num_seqs(shape: Shape, profile: Profile) -> int:
    """The engine's cap on running sequences: vLLM 0.29.0's default for the GPU class under vLLM
    accounting (the plan sets no other, `sizing.vllm_engine.batch_defaults`); the seed's figure
    under the seed profile."""
    return batch_defaults(shape.instance.gpu)[1] if profile.kv_accounting == "vllm" else profile.max_num_seqs


def engine_ranks(shape: Shape) -> int:
    """Schedulers in one replica: under `dp-ep` every data-parallel rank is its own engine-core
    process (DPEngineCoreProc, an EngineCore) whose __init__ builds its own Scheduler from the one
    scheduler_config, so max_num_seqs and max_num_batched_tokens hold per rank (vllm-project/vllm
    vllm/v1/engine/core.py, EngineCore.__init__ "Setup scheduler"; read at commit 00080ee, the
    stored snapshot, not at the v0.29.0 tag); else one."""
    return shape.tp if getattr(shape, "layout", "tp") == "dp-ep" else 1


def resident_blocks(workload: Workload, block: int = BLOCK_TOKENS) -> float:
    """Blocks a running sequence holds on average over its life: its context averaged over its
    decode steps, plus half a block (the last block is partly filled), less the blocks of a
    prefix found in the cache: those are shared, held once for all the batch (not counted)."""
    return (workload.decode_context_tokens - workload.cached_prompt_tokens) / block + 0.5


def kv_blocks_needed(tokens: int, block: int = BLOCK_TOKENS) -> int:
    """vLLM's start-up check (check_enough_kv_cache_memory): blocks for one max_model_len request
    plus the null block."""
    return blocks_for(tokens, block) + NULL_BLOCKS
