"""Disaggregated prefill/decode and speculative decoding as deployment data: each pool's vLLM launch
(its NIXL connector, its speculation), placement per zone, disruption budget, drain and policy
annotations, all from the plan's `serving_pools`, `kv_transfer` and `speculative` (sizing.roles).

Pure Python (no Pulumi): deployment/serving.py turns these into one `ServingSpec` per pool, and
components/serving.py builds one workload per (pool, zone); docs/disaggregation-deploy.md says why.

Upstream, at the versions pinned in conventions (checked in the source, not run):
- vLLM's NixlConnector reads `kv_connector_extra_config.backends` (default ["UCX"]; no environment
  variable selects it) in `NixlConnectorWorker.__init__`, and advertises its handshake listener at
  VLLM_NIXL_SIDE_CHANNEL_HOST:VLLM_NIXL_SIDE_CHANNEL_PORT + data_parallel_rank
  (`NixlConnectorScheduler.__init__`; defaults "localhost" and 5600 in vllm/envs.py), which is why
  every pod sets the host to its own IP (vllm-project/vllm, stored snapshot 002a1057 of
  vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py; not the v0.29.0 tag itself).
- vLLM's `SpeculativeConfig` takes `method`, `num_speculative_tokens` and `model` (the drafter);
  its `SpeculativeMethod` spells the draft-model method `draft_model` (vllm/config/speculative.py).
"""
from __future__ import annotations

import json
import math
from dataclasses import replace

from conventions import (
    ANNOTATION_ENVIRONMENT, ANNOTATION_GPUS_PER_NODE, ANNOTATION_KV_LINK, ANNOTATION_REPLICA_CAPACITY_QPS,
    ANNOTATION_SERVING_ROLE, ANNOTATION_SPECULATIVE_ACCEPTANCE, ANNOTATION_SPECULATIVE_METHOD, ANNOTATION_TARGET_QPS,
    ANNOTATION_TENSOR_PARALLEL, ANNOTATION_ZONE, LABEL_LLM_D_ROLE, PROJECT,
)
from settings import StackSettings
from sizing.planner import Plan
from sizing.roles import KvTransfer, ServingPool


KV_CONNECTOR = "NixlConnector"
KV_ROLE = "kv_both"            # llm-d's P/D guide runs both roles as kv_both: the request says which side it is
# NIXL's transport per link: libfabric's efa provider on EFA (GPUDirect RDMA, SRD), UCX otherwise
# (within a node UCX moves GPU memory over NVLink with its cuda_ipc transport).
NIXL_BACKEND = {"efa": "LIBFABRIC", "nvlink": "UCX"}
DISAGGREGATED_ROLES = ("prefill", "decode")


def is_disaggregated(plan: Plan) -> bool:
    roles = plan.pools_by_role
    return plan.serving_mode == "disaggregated" and all(r in roles for r in DISAGGREGATED_ROLES)


def kv_over_efa(plan: Plan) -> bool:
    return is_disaggregated(plan) and plan.kv_transfer is not None and plan.kv_transfer.link == "efa"


# -- engine flags ------------------------------------------------------------------------------
def kv_transfer_config(transfer: KvTransfer | None) -> str:
    """`--kv-transfer-config`: the NIXL connector on both roles, its transport for the plan's link, and
    how long a prefill keeps a request's KV for its decode (the plan's lease; the connector reads
    `kv_lease_duration` from the same extra config in the snapshots that have it, else ignores it)."""
    link = transfer.link if transfer is not None else "nvlink"
    extra: dict = {"backends": [NIXL_BACKEND.get(link, "UCX")]}
    if transfer is not None and transfer.kv_lease_s > 0:
        extra["kv_lease_duration"] = math.ceil(transfer.kv_lease_s)
    return json.dumps({"kv_connector": KV_CONNECTOR, "kv_role": KV_ROLE, "kv_connector_extra_config": extra},
                      separators=(",", ":"), sort_keys=True)


def speculative_config(plan: Plan) -> str | None:
    """`--speculative-config` when the plan runs speculation, None when it is off or not planned: the
    planner's own JSON (`EngineArgs.speculative_config`, sizing.speculative)."""
    return plan.engine_args.speculative_config


def speculative_annotations(plan: Plan) -> dict[str, str]:
    """On the workloads that run speculation: the method and the acceptance the plan counts on (the
    `speculative-plan-declares-acceptance` policy reads them beside the flag)."""
    spec = plan.speculative
    if speculative_config(plan) is None:
        return {}
    return {ANNOTATION_SPECULATIVE_METHOD: spec.method, ANNOTATION_SPECULATIVE_ACCEPTANCE: str(spec.acceptance_rate)}


def pool_engine_args(engine, pool: ServingPool):
    """The plan's engine arguments with the pool's own parallelism and budgets."""
    if pool.layout == "dp-ep":
        parallel = {"tensor_parallel_size": 1, "data_parallel_size": pool.tp, "enable_expert_parallel": True}
    else:
        parallel = {"tensor_parallel_size": pool.tp, "data_parallel_size": 1,
                    "enable_expert_parallel": pool.layout == "tp-ep"}
    return replace(engine, **parallel, pipeline_parallel_size=pool.nodes_per_replica,
                   max_num_seqs=pool.max_num_seqs or engine.max_num_seqs,
                   max_num_batched_tokens=pool.max_num_batched_tokens or engine.max_num_batched_tokens)


# -- drain, disruption, annotations per pool ------------------------------------------------------
def pool_labels(role: str, app_labels: dict) -> dict[str, str]:
    """The serving pods' labels plus llm-d's role label (which the P/D picker's filters select by)."""
    return {**app_labels, LABEL_LLM_D_ROLE: role} if role in DISAGGREGATED_ROLES else dict(app_labels)


def pool_annotations(plan: Plan, pool: ServingPool, environment: str, zone: str, target_qps: float) -> dict[str, str]:
    """What the policies read from a pool's workload (docs/contracts.md): the aggregated keys with the
    pool's own capacity and TP, its role, the plan's transfer link, and its speculation (decode)."""
    out = {
        ANNOTATION_ZONE: zone,
        ANNOTATION_TARGET_QPS: str(round(target_qps, 4)),
        ANNOTATION_REPLICA_CAPACITY_QPS: str(round(pool.capacity_per_replica_qps, 4)),
        ANNOTATION_TENSOR_PARALLEL: str(pool.tp),
        ANNOTATION_GPUS_PER_NODE: str(plan.instance.gpus),
        ANNOTATION_ENVIRONMENT: environment,
        ANNOTATION_SERVING_ROLE: pool.role,
    }
    if plan.kv_transfer is not None:
        out[ANNOTATION_KV_LINK] = plan.kv_transfer.link
    if pool.role == "decode":
        out.update(speculative_annotations(plan))
    return out


def disaggregation_problems(plan: Plan, settings: StackSettings) -> list[str]:
    """Settings a disaggregated plan cannot be deployed with, each with its fix (deployment.spec)."""
    if not is_disaggregated(plan):
        return []
    problems = []
    if settings.serving.burstScaling:
        problems.append(f"{PROJECT}:serving.burstScaling: a disaggregated plan sizes its prefill and decode pools "
                        "apart, and burst scaling adds aggregated replicas into idle GPUs; set burstScaling: false")
    if not settings.gateway.inferenceExtension:
        problems.append(f"{PROJECT}:gateway.inferenceExtension: a disaggregated plan needs the P/D endpoint picker "
                        "(it sends each request to a decode pod with the prefill pod it pairs); set it to true")
    for role, pool in plan.pools_by_role.items():
        if pool.nodes_per_replica > 1:
            problems.append(f"{PROJECT}:serving.mode: the plan's {role} replicas span {pool.nodes_per_replica} nodes, "
                            "which this version deploys only for aggregated plans; use a larger instance or "
                            "serving.mode: aggregated")
    if kv_over_efa(plan):
        problems += [f"{PROJECT}:gpuPools[{i}].efa: the plan moves KV between prefill and decode nodes over EFA, so "
                     "EFA is on regardless (docs/disaggregation-deploy.md); drop efa: false"
                     for i, pool in enumerate(settings.gpuPools) if "efa" in pool.model_fields_set and not pool.efa]
    return problems
