"""Whether a shape can run a workload at all: its layout, precision, node span and memory.

`check_shape` raises `SizingError` naming the constraint that fails (TP beyond a node, a layout
or precision the model or GPU cannot take, replicas over nodes vLLM cannot lay out, weights that
do not fit, a served length over the context or beyond the KV cache) and returns the memory it
checked; `candidate_tps` lists the TP degrees a model splits into, and `layout_words` /
`replica_words` are how messages name a replica's layout.
"""
from __future__ import annotations

from . import parallel
from .catalog import Instance, Model
from .memory import CHUNK_MIN, Memory, Shape, kv_blocks_needed, memory
from .profiles import Profile
from .vllm_engine import NULL_BLOCKS, kv_block_tokens
from .workload import SizingError, Workload


def candidate_tps(model: Model, instance: Instance, layout: str = "tp") -> list[int]:
    """The TP degrees a replica may take: within one node, splitting the attention heads (and an
    MoE model's experts: each expert under `tp`, whole experts under `tp-ep`, sizing.parallel.fits_tp)."""
    return [tp for tp in (1, 2, 4, 8, 16) if tp <= instance.gpus and not parallel.fits_tp(model, tp, layout)]


def layout_refusal(shape: Shape) -> tuple[str, str] | None:
    """(why, field) when the layout or precision cannot run this model on this GPU at all."""
    m, tp = shape.model, shape.tp
    if shape.layout not in parallel.LAYOUTS:
        return f"unknown layout '{shape.layout}'; choose one of: {', '.join(parallel.LAYOUTS)}", "layout"
    if shape.layout in parallel.EP_LAYOUTS and not m.is_moe:
        return f"expert parallelism does not apply to {m.id}: a dense model has no experts", "layout"
    if shape.layout in ("tp", "tp-ep") and parallel.fits_tp(m, tp, shape.layout):
        tps = candidate_tps(m, shape.instance, shape.layout)
        return f"{parallel.fits_tp(m, tp, shape.layout)}; use one of {', '.join(map(str, tps))}", "tp"
    native_fp4 = m.arch is not None and m.arch.quantization.method == "mxfp4"
    if shape.weights == "fp4" and "fp4" not in m.checkpoints:
        return f"no FP4 checkpoint of {m.id} in the catalog (vLLM does not quantize to FP4 at load)", "weights"
    if native_fp4 and shape.weights != "fp4" and shape.weights not in m.checkpoints:
        return (f"{m.id} is published in MXFP4 only: serve it with fp4 weights (Hopper runs them "
                "as W4A16)"), "weights"
    return None


def check_shape(shape: Shape, workload: Workload, profile: Profile) -> Memory:
    """Raise SizingError naming the constraint when a shape cannot run the workload at all; else
    the memory it checked (at the smallest step budget: `ReplicaModel(checked=...)` reads it)."""
    m, inst, tp = shape.model, shape.instance, shape.tp
    if tp < 1 or tp > inst.gpus:
        raise SizingError(f"tensor parallel {tp} exceeds the {inst.gpus} GPUs of one {inst.id} node "
                          f"(a TP group never spans nodes); use at most {inst.gpus}", "tp")
    check_nodes(shape)
    refusal = layout_refusal(shape)
    if refusal:
        raise SizingError(*refusal)
    mem = memory(shape, workload, profile, CHUNK_MIN + profile.max_num_seqs)
    if mem.weights_per_gpu_gb >= mem.usable_per_gpu_gb:
        can_tp, can_fp8 = tp < inst.gpus and shape.layout in ("tp", "tp-ep"), shape.weights in ("bf16", "fp16")
        advice = {(True, True): "raise TP, use fp8 weights or a larger GPU", (True, False): "raise TP or use a larger GPU",
                  (False, True): "use fp8 weights or a larger GPU",
                  (False, False): "use a larger GPU or a replica over several nodes"}[(can_tp, can_fp8)]
        where = replica_words(shape)
        raise SizingError(
            f"{shape.weights} weights of {m.id} need {mem.weights_per_gpu_gb:.1f} GB per GPU at {where}, "
            f"more than the {mem.usable_per_gpu_gb:.1f} GB usable on a {inst.gpu.id} "
            f"({advice})", "weights")
    check_served_length(shape, workload, profile, mem)
    return mem


def check_served_length(shape: Shape, workload: Workload, profile: Profile, mem: Memory) -> None:
    """max_model_len within the model's context, and one request of it in the KV cache: vLLM
    0.29.0 refuses to start otherwise (kv_cache_utils.check_enough_kv_cache_memory)."""
    m, served = shape.model, workload.served_max_model_len
    limit = m.context_tokens
    if limit and served > limit:
        raise SizingError(
            f"max_model_len {served:,} is above the {limit:,}-token context of {m.id} (max_position_embeddings); "
            f"state a maximum of at most {limit:,} (longer requests are refused)", "workload.stated_max_model_len")
    block = kv_block_tokens(shape, profile.block_tokens)
    have = mem.kv_cache_tokens // block
    if have < kv_blocks_needed(served, block):
        raise SizingError(
            f"no room for one request of max_model_len {served:,} tokens: the KV cache beside the weights "
            f"holds {max(have - NULL_BLOCKS, 0) * block:,} tokens at {layout_words(shape)} on {shape.instance.gpu.id}, and "
            "vLLM refuses to start (raise TP, use fp8 KV, or lower the stated maximum)", "workload.stated_max_model_len")


MAX_NODES_PER_REPLICA = 4     # the planner and the sweep try replicas of up to this many nodes (PP=2..4)


def layout_words(shape: Shape) -> str:
    """"TP=8", or "TP=8 x PP=2 (2 nodes)" for a replica that spans nodes."""
    return f"TP={shape.tp}" if shape.nodes == 1 else f"TP={shape.tp} x PP={shape.nodes} ({shape.nodes} nodes)"


def replica_words(shape: Shape) -> str:
    """How messages name a replica's layout: `layout_words` for TP, "dp-ep over 8 GPUs" otherwise."""
    return layout_words(shape) if shape.layout == "tp" else f"{shape.layout} over {shape.tp} GPUs"


def check_nodes(shape: Shape) -> None:
    """A replica spans nodes only as vLLM 0.29.0 lays it out across nodes: TP fills each node,
    PP = the node count (docs/serving/parallelism_scaling.md at v0.29.0: "set tensor_parallel_size
    to the number of GPUs per node and pipeline_parallel_size to the number of nodes")."""
    inst, n = shape.instance, shape.nodes
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise SizingError(f"nodes per replica: must be an integer of at least 1 (got {n!r})")
    if n > 1 and getattr(shape, "layout", "tp") != "tp":
        raise SizingError(f"a replica spanning {n} nodes runs tensor parallel within a node and pipeline "
                          f"stages across nodes; layout {shape.layout} stays within one node", "layout")
    if n > 1 and shape.tp != inst.gpus:
        raise SizingError(f"a replica spanning {n} nodes runs TP={inst.gpus} (every GPU of each {inst.id}) "
                          f"and PP={n} across them; TP={shape.tp} leaves GPUs of each node idle", "tp")
    if n > shape.model.layers:
        raise SizingError(f"{n} pipeline stages exceed the {shape.model.layers} layers of {shape.model.id}",
                          "pools")
