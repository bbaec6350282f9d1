"""How a replica's GPUs split a model: the layout, and what each costs in memory, reads and links.

Three layouts, as vLLM 0.29.0 runs them (vllm/engine/arg_utils.py at v0.29.0: `--tensor-parallel-size`,
`--data-parallel-size`, `--enable-expert-parallel`):

- `tp`: tensor parallelism over the replica's N GPUs (`--tensor-parallel-size N`). Every layer is
  split N ways; each layer ends in an all-reduce. An MoE layer's experts are split too (each GPU
  holds 1/N of every expert). KV heads are split: with fewer KV heads than N, vLLM replicates them
  (N / kv_heads copies); MLA's latent has no heads to split, so every GPU holds the whole latent
  cache (N copies).
- `dp-ep`: data-parallel attention with expert parallelism (`--data-parallel-size N
  --tensor-parallel-size 1 --enable-expert-parallel`), MoE models only: each GPU runs attention
  and the dense layers for its own sequences (their weights on every GPU), holds 1/N of the
  experts, and trades tokens with the others in two all-to-alls per MoE layer (dispatch, combine)
  over NVLink. The KV cache is not replicated: each sequence's KV lives on one GPU.

- `tp-ep`: TP attention with expert-parallel MoE (`--tensor-parallel-size N
  --enable-expert-parallel`, data-parallel size 1), MoE models only: attention and the dense
  layers split N ways as under `tp`, KV as `tp`; each GPU holds E/N whole experts instead of 1/N
  of every expert. What vLLM 0.29.0 runs (the release's Python sources, vllm-0.29.0 on PyPI):
  - EP size: `FusedMoEParallelConfig.make` (vllm/model_executor/layers/fused_moe/config.py:1212-1215)
    turns EP on when DP x PCP x TP > 1 and `enable_expert_parallel`; the MoE layer's TP is
    flattened over DP x PCP x TP (`flatten_tp_across_dp_and_pcp`, :1121-1130) and becomes the EP
    size, the MoE TP size 1 (:1241-1256): with DP = 1, EP = N = TP. The EP group is those ranks
    (vllm/distributed/parallel_state.py:2063-2073). Experts go to ranks E // N each, the first
    E % N ranks one more, contiguously by default ("linear":
    vllm/model_executor/layers/fused_moe/expert_map_manager.py:66-78).
  - Collectives: the default `--all2all-backend` is `allgather_reducescatter`
    (vllm/config/parallel.py:195; `naive` and `pplx` were removed and fall back to it, :488-494;
    there is no VLLM_ALL2ALL_BACKEND in vllm/envs.py at 0.29.0). But with DP = 1 no all-to-all
    runs at all: `use_all2all_kernels` needs DP > 1, PCP > 1 or sequence parallelism
    (fused_moe/config.py:1060-1063), sequence-parallel MoE needs DP > 1
    (`use_sequence_parallel_moe`, vllm/config/parallel.py:704-719; Qwen3-MoE and DeepSeek take
    it from there: vllm/model_executor/models/qwen3_moe.py:149), and the naive dispatch/combine
    runs only with DP > 1 or sequence parallelism (`do_naive_dispatch_combine`,
    vllm/model_executor/layers/fused_moe/runner/moe_runner.py:790-794). The tokens after
    attention's all-reduce are already on every rank; each rank runs its local experts on them
    and the MoE output is all-reduced over the TP group (`_maybe_reduce_final_output`,
    moe_runner.py:503-509, `tensor_model_parallel_all_reduce` = the TP group's,
    vllm/distributed/communication_op.py:12-14). So a layer runs the two all-reduces `tp` runs
    (attention, MoE), of the same bytes: `sizing.step.comm_terms` charges `tp-ep` as `tp` (it
    falls through to the all-reduces; tests/test_tp_ep.py pins it).
    (The all-gather / reduce-scatter of `allgather_reducescatter`,
    vllm/distributed/device_communicators/all2all.py:44-150, is what `dp-ep` runs at 0.29.0.)
  - Why it exists: under `tp` each GPU's slice of an expert is moe_intermediate / N wide, and an
    FP8 block-quantized checkpoint needs that to be a multiple of the block (128): vLLM refuses
    otherwise (vllm/model_executor/layers/quantization/fp8.py:566-572; Qwen3-235B-A22B-FP8 at
    TP=8 is 1536 / 8 = 192). Under `tp-ep` experts stay whole, so only E % N matters (`fits_tp`).
    The sizing does not model that refusal (the catalog's config carries no block size), nor the
    narrower GEMMs' lower efficiency: both layouts cost the same bytes and collectives here.

One replica is one vLLM server either way (`vllm serve` with DP behind one API endpoint).
"""
from __future__ import annotations

LAYOUTS = ("tp", "dp-ep", "tp-ep")
EP_LAYOUTS = ("dp-ep", "tp-ep")   # expert parallel: MoE models only
GB = 1e9
DISPATCH_BYTES = 2          # tokens travel as BF16 activations both ways (dispatch and combine)


def layout_of(shape) -> str:
    return getattr(shape, "layout", "tp") or "tp"


def expert_bytes(shape) -> float:
    return shape.model.expert_weight_bytes(shape.weights)


def replica_weight_bytes(shape) -> float:
    """All GPUs of the replica together: with DP attention the non-expert weights sit on every GPU."""
    total = shape.model.weight_bytes(shape.weights)
    if layout_of(shape) == "dp-ep":
        experts = expert_bytes(shape)
        return shape.tp * (total - experts) + experts
    return total


def kv_copies(shape) -> float:
    """How many copies of each token's KV the replica keeps (see the module docstring)."""
    m, n = shape.model, shape.tp
    if layout_of(shape) == "dp-ep" or n <= 1:
        return 1.0
    if m.is_mla:
        return float(n)
    return max(1.0, n / m.kv_heads)


def kv_bytes_per_token(shape, context: float | None = None) -> float:
    """KV bytes per token of context for the whole replica, copies included."""
    return shape.model.kv_bytes_per_token(shape.kv_dtype, context) * kv_copies(shape)


def decode_read_bytes(shape, batch: float) -> float:
    """Weight bytes a decode step of `batch` sequences costs, counted as if spread evenly over
    the replica's GPUs (time = this / (N x bandwidth)). `tp`: the dense and attention weights
    once, plus the experts the batch touches. `dp-ep`: every GPU reads the dense and attention
    weights itself (N times), the touched experts once between them."""
    m, w = shape.model, shape.weights
    total = m.decode_read_bytes(w, batch)
    if layout_of(shape) == "dp-ep":
        base = m.decode_read_bytes(w, 0.0)
        return shape.tp * base + (total - base)
    if layout_of(shape) == "tp-ep" and m.is_moe and batch > 0:
        a = m.arch
        per_expert_layer = expert_bytes(shape) / (a.moe_layer_count * a.num_experts)
        busiest = experts_touched_per_gpu(shape, batch) * a.moe_layer_count * per_expert_layer
        return m.decode_read_bytes(w, 0.0) + shape.tp * busiest
    return total


def experts_touched_per_gpu(shape, batch: float) -> float:
    """`tp-ep`: the expected routed experts one GPU runs per MoE layer for `batch` tokens. Uniform
    routing touches E (1 - (1 - k/E)^B) experts, spread over the GPUs by expert: E/N (1 - (1 -
    k/E)^B) each. The busiest GPU sets the step; its count is above this mean (by the spread of
    the draw), which is not modelled: the expectation times N is the whole replica's touched
    experts, so the read equals `tp`'s (where every GPU reads 1/N of each touched expert)."""
    a = shape.model.arch
    return a.experts_touched(batch) / shape.tp


def decode_read_line(shape, batch: float) -> tuple[float, float]:
    """(bytes at batch 0, bytes per extra sequence) of the tangent to `decode_read_bytes` at
    `batch`: the distinct experts grow concavely with the batch, so the tangent is exact at the
    operating batch and an upper bound elsewhere (the step model is linear in n)."""
    if not shape.model.is_moe:
        return decode_read_bytes(shape, batch), 0.0
    n = max(batch, 1.0)
    f, f2 = decode_read_bytes(shape, n), decode_read_bytes(shape, n + 1)
    slope = f2 - f
    return f - slope * n, slope


def attention_width(model) -> float:
    """Per layer, the attention FLOPs per token per token of context, over 4 (Llama: hidden)."""
    a = model.arch
    if a is None:
        return float(model.hidden)
    if a.is_mla:
        return a.num_attention_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim) / 2
    return float(a.num_attention_heads * a.head_dim)


def attention_layers_at(model, context: float) -> float:
    """Layers' worth of attention at a context: a sliding layer sees at most its window."""
    a = model.arch
    if a is None or not a.sliding_layers:
        return float(model.layers)
    sliding = sum(a.sliding_layers)
    share = min(1.0, a.sliding_window / context) if context > 0 else 1.0
    return (model.layers - sliding) + sliding * share


def all_to_all_terms(shape) -> tuple[float, float]:
    """(fixed s, s per token) of the dispatch and combine all-to-alls of every MoE layer
    (`dp-ep` only): a token goes to k experts, (N-1)/N of them on other GPUs; the N GPUs send
    in parallel over their own NVLink ports."""
    m, n = shape.model, shape.tp
    if layout_of(shape) != "dp-ep" or n <= 1 or not m.is_moe:
        return 0.0, 0.0
    a, link = m.arch, shape.instance.link
    calls = 2 * a.moe_layer_count
    per_token = 2 * a.experts_per_token * a.hidden_size * DISPATCH_BYTES * (n - 1) / n
    return calls * link.latency_us * 1e-6, per_token * a.moe_layer_count / (n * link.bandwidth_gbps * GB)


def serving_args(shape) -> dict:
    """The vLLM 0.29.0 parallelism arguments the layout assumes."""
    if layout_of(shape) == "dp-ep":
        return {"tensor_parallel_size": 1, "data_parallel_size": shape.tp, "enable_expert_parallel": True}
    if layout_of(shape) == "tp-ep":
        return {"tensor_parallel_size": shape.tp, "data_parallel_size": 1, "enable_expert_parallel": True}
    return {"tensor_parallel_size": shape.tp, "data_parallel_size": 1, "enable_expert_parallel": False}


def fits_tp(model, tp: int, layout: str = "tp") -> str:
    """Why `tp` cannot split this model's heads or experts ('' when it can). `tp` splits every
    expert's intermediate size; `tp-ep` hands out whole experts, so N must divide the routed
    experts instead (vLLM 0.29.0 gives the first E % N ranks one more, expert_map_manager.py:66-69;
    the sizing keeps every GPU's share equal)."""
    if model.heads % tp:
        return f"tensor parallel {tp} does not divide the {model.heads} attention heads of {model.id}"
    a = model.arch
    if layout == "tp-ep":
        if a is not None and a.is_moe and a.num_experts % tp:
            return f"expert parallel {tp} does not divide the {a.num_experts} routed experts of {model.id}"
        return ""
    if a is not None and a.is_moe and a.moe_intermediate_size % tp:
        return (f"tensor parallel {tp} does not divide the experts' intermediate size "
                f"{a.moe_intermediate_size} of {model.id}")
    return ""
