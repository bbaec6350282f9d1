"""How a replica's engine is launched: the vLLM server's arguments, from one table of field to flag.

The plan decides the engine's figures (`sizing.engine_args.EngineArgs`, named as vLLM 0.29.0's
`vllm/engine/arg_utils.py` `EngineArgs` names them); the deployment adds what to serve, under which
name, on which port, and how long to drain. `VllmLaunch` holds both, and `FLAGS` is the only place
a flag is spelled: `vllm_args` and `multi_node_args` read every value through it. The flags are
vLLM 0.29.0's (`vllm/engine/arg_utils.py` `EngineArgs.add_cli_args`, `vllm/entrypoints/openai/
cli_args.py` for `--port`, `--served-model-name` and `--shutdown-timeout`; the multi-node ones as
docs/serving/parallelism_scaling.md "Running vLLM with MultiProcessing" launches them).
docs/contracts.md prints the table; tests/test_serving.py holds the two together.

Pure Python (no Pulumi).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from conventions import VLLM_API_PORT
from sizing.engine_args import EngineArgs

LEADER_ADDRESS, WORKER_INDEX = "LWS_LEADER_ADDRESS", "LWS_WORKER_INDEX"   # what LWS sets in every group pod
CONTAINER_CACHE_PATH = "/models"          # the node's model cache, where the serving container mounts it


class When(Enum):
    """When a field becomes a flag."""
    ALWAYS = "always"            # `--flag value`
    ABOVE_ONE = "above one"      # `--flag value` when the value is > 1 (vLLM's default is 1)
    SWITCH = "when true"         # `--flag` alone, when the value is true
    WHEN_SET = "when set"        # `--flag value` when the value is not None


@dataclass(frozen=True)
class Flag:
    field: str                   # a VllmLaunch field, or an EngineArgs field (through VllmLaunch.engine)
    flag: str
    when: When = When.ALWAYS


# Order is the command line's.
FLAGS: tuple[Flag, ...] = (
    Flag("model", "--model"),
    Flag("served_model_name", "--served-model-name"),
    Flag("port", "--port"),
    Flag("download_dir", "--download-dir"),
    Flag("tensor_parallel_size", "--tensor-parallel-size"),
    # The MoE layout (sizing.parallel): `--data-parallel-size N --enable-expert-parallel` under dp-ep.
    Flag("data_parallel_size", "--data-parallel-size", When.ABOVE_ONE),
    Flag("enable_expert_parallel", "--enable-expert-parallel", When.SWITCH),
    # fp8 served from a BF16 checkpoint: vLLM quantizes at load.
    Flag("quantization", "--quantization", When.WHEN_SET),
    Flag("kv_cache_dtype", "--kv-cache-dtype"),
    Flag("max_model_len", "--max-model-len"),
    Flag("max_num_seqs", "--max-num-seqs"),
    Flag("enable_chunked_prefill", "--enable-chunked-prefill", When.SWITCH),
    Flag("max_num_batched_tokens", "--max-num-batched-tokens"),
    Flag("gpu_memory_utilization", "--gpu-memory-utilization"),
    Flag("shutdown_timeout", "--shutdown-timeout"),
    Flag("enable_prefix_caching", "--enable-prefix-caching", When.SWITCH),
    # JSON, one argument each (no shell reads the container's args): a disaggregated pool's NIXL
    # connector (deployment.disagg.kv_transfer_config) and the plan's speculation
    # (deployment.disagg.speculative_config); unset, neither flag appears.
    Flag("kv_transfer_config", "--kv-transfer-config", When.WHEN_SET),
    Flag("speculative_config", "--speculative-config", When.WHEN_SET),
)
# A replica that spans nodes adds these, on the leader and on every worker (mp backend).
MULTI_NODE_FLAGS: tuple[Flag, ...] = (
    Flag("pipeline_parallel_size", "--pipeline-parallel-size"),
    Flag("nnodes", "--nnodes"),
    Flag("node_rank", "--node-rank"),
    Flag("master_addr", "--master-addr"),
    Flag("distributed_executor_backend", "--distributed-executor-backend"),
    Flag("headless", "--headless", When.SWITCH),     # workers: no API server
)


@dataclass(frozen=True)
class VllmLaunch:
    """One replica's `vllm serve`: the plan's engine arguments and what the deployment adds."""
    engine: EngineArgs
    model: str                        # the checkpoint: a hub id, or a path in the model cache
    served_model_name: str            # the name clients ask for (the plan's model)
    shutdown_timeout: int             # seconds of drain after SIGTERM (deployment.drain)
    port: int = VLLM_API_PORT
    download_dir: str = CONTAINER_CACHE_PATH
    enable_chunked_prefill: bool = True   # the plan's TTFT assumes chunked prefill
    kv_transfer_config: str | None = None  # JSON: vLLM's KVTransferConfig (a disaggregated pool's replicas)
    speculative_config: str | None = None  # JSON: vLLM's SpeculativeConfig (the plan's speculation, when on)

    def value(self, field: str):
        return getattr(self, field) if hasattr(self, field) else getattr(self.engine, field)


@dataclass(frozen=True)
class GroupRank:
    """Where one pod of a multi-node replica stands in its group."""
    pipeline_parallel_size: int
    nnodes: int
    node_rank: str                    # "0" on the leader; `$(LWS_WORKER_INDEX)` on a worker
    master_addr: str = f"$({LEADER_ADDRESS})"
    distributed_executor_backend: str = "mp"
    headless: bool = False

    def value(self, field: str):
        return getattr(self, field)


def flags_of(table: tuple[Flag, ...], source) -> list[str]:
    """The command line for `source` (anything with `.value(field)`), in the table's order."""
    out: list[str] = []
    for f in table:
        v = source.value(f.field)
        if f.when is When.SWITCH:
            out += [f.flag] if v else []
        elif f.when is When.ABOVE_ONE:
            out += [f.flag, str(v)] if v > 1 else []
        elif f.when is When.WHEN_SET:
            out += [f.flag, str(v)] if v is not None else []
        else:
            out += [f.flag, str(v)]
    return out


def vllm_args(launch: VllmLaunch) -> list[str]:
    """The serving container's arguments, every value from the launch (the plan's engine arguments)."""
    return flags_of(FLAGS, launch)


def multi_node_args(engine: EngineArgs, rank: str, leader: bool) -> list[str]:
    """vLLM 0.29.0's multi-node launch (mp backend): the leader serves the API, workers are headless."""
    nodes = engine.pipeline_parallel_size
    return flags_of(MULTI_NODE_FLAGS, GroupRank(nodes, nodes, rank, headless=not leader))
