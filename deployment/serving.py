"""The serving replicas as deployment data: where each replica runs, its checkpoint, the startup
and disruption budgets, burst-scaling bounds and the policy annotations, all from the plan.

Pure Python (no Pulumi): components/serving.py builds the objects; the simulator and the twin
read the same replica placements.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from conventions import (
    DECODE_ENGINE_PORT, VLLM_API_PORT,
    ANNOTATION_ENVIRONMENT, ANNOTATION_GPUS_PER_NODE, ANNOTATION_NODES_PER_REPLICA, ANNOTATION_REPLICA_CAPACITY_QPS,
    ANNOTATION_TARGET_QPS, ANNOTATION_TENSOR_PARALLEL, ANNOTATION_ZONE, GPU_RESOURCE, LABEL_APP_NAME, LABEL_ROLE,
)
from settings import StackSettings
from sizing.planner import Plan
from sizing.roles import ServingPool

from .disagg import (
    DISAGGREGATED_ROLES, is_disaggregated, kv_over_efa, kv_transfer_config, pool_annotations, pool_engine_args,
    pool_labels, speculative_annotations, speculative_config,
)
from .drain import DrainTiming, drain_timing, longest_request_s, pool_longest_request_s
from .engine import VllmLaunch


APP_LABELS = {LABEL_APP_NAME: "vllm", LABEL_ROLE: "serving"}
HUB_TOKEN_DIR = "/var/run/secrets/hub"       # the hub token as a file (huggingface_hub reads HF_TOKEN_PATH)
HUB_TOKEN_KEY = "token"

# Platform figures (not workload figures), each with the reason for its value.
HUB_DOWNLOAD_GB_PER_S = 0.25    # a cold start pulls the checkpoint from the hub (conservative)
CACHE_LOAD_GB_PER_S = 1.0       # NVMe RAID0 read into host memory, then the GPUs
ENGINE_WARMUP_S = 300           # CUDA graph capture and compilation before /health answers
SHM_GIB_PER_GPU = 4             # NCCL buffers for tensor-parallel all-reduce live in /dev/shm
CPU_SHARE_OF_GPU_SLICE = 0.5    # of the node's vCPUs per GPU: room left for daemons and bursts
MEMORY_GIB_PER_GPU = 48         # host memory for safetensors staging and the tokenizer workers
MIN_SLICE_MEMORY_GIB = 8        # a MIG replica's pod: the engine, tokenizer and API server alone


# -- figures derived from the plan (pure) ----------------------------------------------------
def disruption_min_available(replicas: int, replicas_after_loss: int, max_per_node: int) -> int:
    """PDB minAvailable: never below what the plan keeps after losing its worst failure domain,
    and always low enough that one node (which holds at most `max_per_node`) can drain.

    With zone or node redundancy `replicas - replicas_after_loss` is the worst domain's count,
    at least one node's, so the target itself already lets a node drain. With no redundancy
    (one node) no budget can do both; draining wins and the plan already says serving stops."""
    if replicas - replicas_after_loss >= max_per_node:
        return replicas_after_loss
    return max(0, replicas - max_per_node)


def disruption_budget(plan: Plan, max_per_node: int) -> dict:
    """The PDB's spec for the plan's replicas. Replicas on one node each: minAvailable over the
    serving pods. Replicas that span nodes: every pod of every group (leaders and workers), at most
    one unavailable. Evicting any pod of a group takes the group down (its engine loses a rank and
    LWS recreates the group), which makes all its pods unready, so no second eviction is allowed
    until that group serves again: a drain costs at most one group at a time."""
    if plan.nodes_per_replica > 1:
        # IfHealthyBudget: an unready group pod may be evicted only while every other group serves
        # (status.currentHealthy >= desiredHealthy, Kubernetes policy/v1 PodDisruptionBudgetSpec). With
        # AlwaysAllow a worker whose probe flapped could be evicted past the budget and take down a
        # second group; a group that is down or loading blocks drains until it serves again.
        return {"maxUnavailable": 1, "selector": {"matchLabels": {LABEL_APP_NAME: "vllm"}},
                "unhealthyPodEvictionPolicy": "IfHealthyBudget"}
    # One pod is one replica: one still loading its model is not serving, evicting it costs nothing.
    return {"minAvailable": disruption_min_available(plan.replicas, plan.replicas_after_loss, max_per_node),
            "selector": {"matchLabels": dict(APP_LABELS)}, "unhealthyPodEvictionPolicy": "AlwaysAllow"}


def floor_disruption_budget() -> dict:
    """The PDB of an autoscaled fleet (deployment.autoscaling): one replica at a time. The fleet moves
    between its floor and its ceiling, so no fixed minAvailable fits both: the plan's (its peak's
    survivors) would block every drain at the floor, the floor's would let a drain take most of the
    peak. One at a time is what the scale-down does too; KEDA's own scale-down deletes pods, which no
    budget governs."""
    return {"maxUnavailable": 1, "selector": {"matchLabels": dict(APP_LABELS)}, "unhealthyPodEvictionPolicy": "AlwaysAllow"}


def startup_budget_s(weights_gb: float) -> int:
    """Seconds a cold replica may take before its startup probe gives up: download the
    checkpoint, load it, warm the engine."""
    return math.ceil(weights_gb / HUB_DOWNLOAD_GB_PER_S + weights_gb / CACHE_LOAD_GB_PER_S + ENGINE_WARMUP_S)


def target_qps(plan: Plan) -> float:
    """The stack's total request rate (open loop: the workload's QPS; closed loop: what the
    clients drive on the replicas left after a loss), from the plan's own throughput figure."""
    w = plan.request.workload
    return plan.output_tokens_per_hour / (w.output_tokens * 3600)


def zone_node_slots(plan: Plan, zone: str) -> tuple[int, int]:
    """(most replicas on one node, replicas the zone's nodes could hold with their idle GPUs)."""
    nodes = [n for n in plan.nodes if n.zone == zone]
    return max(n.replicas for n in nodes), sum(n.replicas + n.gpus_idle // plan.tp for n in nodes)


def burst_queue_target(plan: Plan) -> int:
    """Waiting requests per replica that still start within the TTFT SLO: the slack between the
    SLO and the planned TTFT, in prompt prefills. KEDA adds replicas above it."""
    slack_ms = plan.request.workload.ttft_slo_s * 1e3 - plan.real.ttft_ms
    if not math.isfinite(slack_ms):
        return 1
    return max(1, math.floor(slack_ms / plan.prefill_ms))


def host_memory_gib(plan: Plan) -> int:
    """Host memory per replica pod: MEMORY_GIB_PER_GPU per GPU; on a MIG slice, the slice's share of it
    (its memory fraction: the checkpoint it stages is that much smaller), so a node's slices fit its memory."""
    from sizing.mig import split_slice_id
    sliced = split_slice_id(plan.instance.gpu.id)
    if sliced is None:
        return MEMORY_GIB_PER_GPU * plan.tp
    return max(MIN_SLICE_MEMORY_GIB, math.ceil(MEMORY_GIB_PER_GPU * sliced[1].memory_fraction))


def mig_resource(plan: Plan) -> str:
    """What a replica's pod requests: whole GPUs, or its MIG slice (the device plugin's mixed strategy
    advertises each profile as `nvidia.com/mig-<profile>`: components/gpu_plugin.py)."""
    from sizing.mig import split_slice_id
    sliced = split_slice_id(plan.instance.gpu.id)
    return sliced[1].resource if sliced else GPU_RESOURCE


def served_checkpoint(plan: Plan, settings: StackSettings) -> str:
    """The stack's `model.checkpoint` when set (a hub id or a path in the model cache), else the catalog's."""
    return settings.model.checkpoint or plan.checkpoint


def served_model_name(plan: Plan, settings: StackSettings) -> str:
    """The name clients ask for: `model.id` as the stack gives it; for a stack that sizes a local
    config.json (`model.config`) without an id, the model sized (its folder's name), never the
    default id of a model it is not."""
    if settings.model.config and "id" not in settings.model.model_fields_set:
        return plan.replica_model.shape.model.name
    return plan.request.model


def policy_annotations(plan: Plan, environment: str, zone: str) -> dict[str, str]:
    """What the guard policies read from the workload alone (docs/contracts.md)."""
    return {
        ANNOTATION_ZONE: zone,
        ANNOTATION_TARGET_QPS: str(round(target_qps(plan), 4)),
        ANNOTATION_REPLICA_CAPACITY_QPS: str(round(plan.capacity_per_replica.qps, 4)),
        ANNOTATION_TENSOR_PARALLEL: str(plan.tp),      # GPUs a replica takes on each node (the policies' reading)
        ANNOTATION_GPUS_PER_NODE: str(plan.instance.gpus),
        ANNOTATION_ENVIRONMENT: environment,
        **({ANNOTATION_NODES_PER_REPLICA: str(plan.nodes_per_replica)} if plan.nodes_per_replica > 1 else {}),
        **speculative_annotations(plan),      # none unless the plan runs speculation
    }


def leader_worker_set_spec(nodes: int, leader_pod: dict, worker_pod: dict) -> dict:
    """One group of `nodes` pods. Rollout: one group at a time, no surge (a surge group would need
    N more nodes than the plan has); the set holds one group, so an update replaces it in place."""
    return {
        "replicas": 1,
        "leaderWorkerTemplate": {
            "size": nodes,
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": leader_pod,
            "workerTemplate": worker_pod,
        },
        "rolloutStrategy": {"type": "RollingUpdate",
                            "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
        "startupPolicy": "LeaderCreated",
    }


# -- where each replica runs ------------------------------------------------------------------
@dataclass(frozen=True)
class ReplicaPlacement:
    """One planned replica: on one node (`group` None) or a group of nodes in one pool (hence zone)."""
    name: str                   # `<pool>/node-<i>/<j>`, or `<pool>/group-<g>` for a replica spanning nodes
    zone: str
    pool: str
    nodes: tuple[str, ...]      # the node(s) it runs on, `<pool>/node-<i>`
    group: int | None = None

    @property
    def group_size(self) -> int:
        return len(self.nodes)


def replica_placements(plan: Plan) -> tuple[ReplicaPlacement, ...]:
    """Every planned replica, from the plan's node slots: the serving objects, the simulator and the
    twin all read this one list."""
    out, groups = [], {}
    for slot in plan.nodes:
        if slot.group is not None:
            groups.setdefault((slot.pool, slot.group), []).append(slot)
            continue
        node = f"{slot.pool}/node-{slot.node}"
        out += [ReplicaPlacement(f"{node}/{j}", slot.zone, slot.pool, (node,)) for j in range(slot.replicas)]
    for (pool, g), slots in groups.items():
        out.append(ReplicaPlacement(f"{pool}/group-{g}", slots[0].zone, pool,
                                    tuple(f"{pool}/node-{s.node}" for s in slots), group=g))
    return tuple(out)


@dataclass(frozen=True)
class ZoneReplicas:
    """One zone's single-node replicas: the Deployment's count and, with burst scaling, its ceiling."""
    zone: str
    replicas: int
    burst_max: int              # replicas the zone's nodes could hold with their idle GPUs


@dataclass(frozen=True)
class ServingSpec:
    """Everything components/serving.py builds, from the plan and the stack's serving settings."""
    namespace: str
    environment: str
    burst_scaling: bool                       # settings.serving.burstScaling (single-node replicas only)
    launch: VllmLaunch
    gpus_per_pod: int                         # GPUs a replica takes on each node (one pod per node)
    nodes_per_replica: int
    cpu: int                                  # per replica pod (per group pod when it spans nodes)
    memory_gib: int
    shm_gib: int
    drain: DrainTiming
    startup_s: int
    zones: tuple[ZoneReplicas, ...]           # zones with single-node replicas, in the plan's order
    groups: tuple[ReplicaPlacement, ...]      # replicas that span nodes
    burst_queue_target: int
    disruption_budget: dict
    annotations: dict[str, dict[str, str]]    # zone -> the policy annotations of its workloads
    # Serving roles (deployment.disagg): "aggregated", or one pool's role. A disaggregated plan's spec
    # holds no replicas of its own (zones and groups empty): its `pools` are the prefill and decode specs.
    role: str = "aggregated"
    app_labels: dict[str, str] = field(default_factory=lambda: dict(APP_LABELS))   # this spec's pods' labels
    kv_over_efa: bool = False                 # NIXL moves KV over EFA: the pods request EFA devices
    pools: tuple["ServingSpec", ...] = ()
    autoscaling: tuple = ()                   # deployment.autoscaling.ZoneScaling per zone (serving.autoscaling)
    gpu_resource: str = GPU_RESOURCE          # nvidia.com/gpu, or nvidia.com/mig-<profile> on MIG slices

    @property
    def workloads(self) -> tuple["ServingSpec", ...]:
        """The specs whose replicas the serving component builds: the pools, or this one."""
        return self.pools or (self,)


def serving_spec(plan: Plan, settings: StackSettings) -> ServingSpec:
    from .autoscaling import zone_scalings
    gpus = plan.tp
    drain = drain_timing(longest_request_s(plan))
    # A disaggregated plan's pools replace the aggregated replicas (pool_serving_specs): none of their own.
    disaggregated = is_disaggregated(plan)
    scaling = () if disaggregated else zone_scalings(plan, settings, drain)
    zones = () if disaggregated else tuple(
        ZoneReplicas(z, n, zone_node_slots(plan, z)[1]) for z, n in plan.replicas_by_zone.items() if n)
    launch = VllmLaunch(plan.engine_args, model=served_checkpoint(plan, settings),
                        served_model_name=served_model_name(plan, settings),
                        shutdown_timeout=drain.shutdown_timeout_s, speculative_config=speculative_config(plan))
    spec = ServingSpec(
        namespace=settings.serving.namespace, environment=settings.environment,
        burst_scaling=settings.serving.burstScaling, launch=launch, gpus_per_pod=gpus,
        nodes_per_replica=plan.nodes_per_replica,
        cpu=max(1, int(plan.instance.vcpus / plan.instance.gpus * gpus * CPU_SHARE_OF_GPU_SLICE)),
        memory_gib=host_memory_gib(plan), shm_gib=SHM_GIB_PER_GPU * gpus,
        drain=drain, startup_s=startup_budget_s(plan.weights_gb), zones=zones,
        groups=() if disaggregated else tuple(p for p in replica_placements(plan) if p.group is not None),
        burst_queue_target=burst_queue_target(plan),
        disruption_budget={} if disaggregated else (
            floor_disruption_budget() if scaling else disruption_budget(plan, max(n.replicas for n in plan.nodes))),
        annotations={} if disaggregated else {z: policy_annotations(plan, settings.environment, z)
                                              for z in plan.replicas_by_zone},
        autoscaling=scaling, gpu_resource=mig_resource(plan))
    return replace(spec, pools=pool_serving_specs(plan, settings, spec)) if disaggregated else spec


# -- a disaggregated plan's pools (deployment.disagg) ----------------------------------------
def pool_disruption_budget(plan: Plan, pool: ServingPool, labels: dict) -> dict:
    """One PDB per pool: never below what the pool keeps after losing its worst zone, and low enough
    that a node (which holds at most the pool's replicas of one zone) can drain."""
    worst_zone = max(pool.replicas_by_zone.values(), default=0)
    per_node = max(1, min(plan.instance.gpus // max(1, pool.tp), worst_zone))
    return {"minAvailable": disruption_min_available(pool.replicas, pool.replicas - worst_zone, per_node),
            "selector": {"matchLabels": dict(labels)}, "unhealthyPodEvictionPolicy": "AlwaysAllow"}


def pool_serving_specs(plan: Plan, settings: StackSettings, base: ServingSpec) -> tuple[ServingSpec, ...]:
    """One `ServingSpec` per role (prefill, decode), each derived from the plan's aggregated spec `base`
    (deployment.serving.serving_spec) with the pool's launch, zones, drain, budget and annotations."""
    roles = plan.pools_by_role
    out = []
    for role in DISAGGREGATED_ROLES:
        pool = roles[role]
        drain = drain_timing(pool_longest_request_s(plan, role))
        launch = replace(base.launch, engine=pool_engine_args(plan.engine_args, pool),
                         shutdown_timeout=drain.shutdown_timeout_s,
                         port=DECODE_ENGINE_PORT if role == "decode" else VLLM_API_PORT,
                         kv_transfer_config=kv_transfer_config(plan.kv_transfer),
                         speculative_config=speculative_config(plan) if role == "decode" else None)
        labels = pool_labels(role, base.app_labels)
        out.append(replace(
            base, role=role, launch=launch, gpus_per_pod=pool.tp, nodes_per_replica=pool.nodes_per_replica,
            cpu=max(1, int(plan.instance.vcpus / plan.instance.gpus * pool.tp * CPU_SHARE_OF_GPU_SLICE)),
            memory_gib=MEMORY_GIB_PER_GPU * pool.tp, shm_gib=SHM_GIB_PER_GPU * pool.tp, drain=drain,
            zones=tuple(ZoneReplicas(z, n, n) for z, n in pool.replicas_by_zone.items() if n),
            groups=(), burst_scaling=False, app_labels=labels,
            disruption_budget=pool_disruption_budget(plan, pool, labels),
            annotations={z: pool_annotations(plan, pool, settings.environment, z, target_qps(plan))
                         for z in pool.replicas_by_zone},
            kv_over_efa=kv_over_efa(plan), pools=()))
    return tuple(out)
