"""The vLLM replicas the plan asks for, where the plan puts them, reachable only through the gateway.

One Deployment per zone (replicas = the plan's count for that zone) pinned to that zone's GPU
nodes, spread evenly over the zone's nodes, so losing a node or a zone costs exactly what the
plan assumed. Every vLLM argument, the drain timing, the disruption budget, the burst-scaling
bounds and the policy annotations come from the plan; nothing is typed twice.

Ports: vLLM serves the OpenAI API and `/metrics` on the same port (8000), and a NetworkPolicy
works on ports, not paths. So the API port admits only the gateway namespace, and a small
sidecar re-exposes `GET /metrics` alone on its own port (9400), which admits only the
monitoring namespace: Prometheus can scrape without being able to call the model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from conventions import (  # noqa: F401 (VLLM_IMAGE, METRICS_PROXY_IMAGE: read here and by other components)
    ANNOTATION_ENVIRONMENT, ANNOTATION_GPUS_PER_NODE, ANNOTATION_REPLICA_CAPACITY_QPS, ANNOTATION_TARGET_QPS,
    ANNOTATION_TENSOR_PARALLEL, ANNOTATION_ZONE, KEDA_CHART_VERSION, KEDA_NAMESPACE, LABEL_APP_NAME, LABEL_ENVIRONMENT,
    METRICS_PROXY_IMAGE, MONITORING_NAMESPACE, VLLM_API_PORT, VLLM_IMAGE, VLLM_METRICS_PORT,
)
from settings import StackSettings
from sizing.planner import Plan

from .drain import drain_timing, longest_request_s
from .gpu_node_pool import LABEL_ROLE, MODEL_CACHE_PATH

KEDA_CHART, KEDA_VERSION, KEDA_REPO = "keda", KEDA_CHART_VERSION, "https://kedacore.github.io/charts"   # CRD in ../shared/crds
API_PORT = VLLM_API_PORT
METRICS_PORT = VLLM_METRICS_PORT
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
ZONE_KEY, HOST_KEY = "topology.kubernetes.io/zone", "kubernetes.io/hostname"
APP_LABELS = {LABEL_APP_NAME: "vllm", LABEL_ROLE: "serving"}
CONTAINER_CACHE_PATH = "/models"

# Platform figures (not workload figures), each with the reason for its value.
HUB_DOWNLOAD_GB_PER_S = 0.25    # a cold start pulls the checkpoint from the hub (conservative)
CACHE_LOAD_GB_PER_S = 1.0       # NVMe RAID0 read into host memory, then the GPUs
ENGINE_WARMUP_S = 300           # CUDA graph capture and compilation before /health answers
PROBE_PERIOD_S = 10
SHM_GIB_PER_GPU = 4             # NCCL buffers for tensor-parallel all-reduce live in /dev/shm
CPU_SHARE_OF_GPU_SLICE = 0.5    # of the node's vCPUs per GPU: room left for daemons and bursts
MEMORY_GIB_PER_GPU = 48         # host memory for safetensors staging and the tokenizer workers

METRICS_PROXY_CONF = f"""\
server {{
  listen {METRICS_PORT};
  location = /metrics {{ proxy_pass http://127.0.0.1:{API_PORT}/metrics; }}
  location / {{ return 404; }}
}}
"""


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


def startup_budget_s(weights_gb: float) -> int:
    """Seconds a cold replica may take before its startup probe gives up: download the
    checkpoint, load it, warm the engine."""
    return math.ceil(weights_gb / HUB_DOWNLOAD_GB_PER_S + weights_gb / CACHE_LOAD_GB_PER_S + ENGINE_WARMUP_S)


def vllm_args(plan: Plan, shutdown_timeout_s: int) -> list[str]:
    """The container arguments, every value from `plan.engine_args`."""
    a = plan.engine_args
    return [
        "--model", a["checkpoint"],
        "--served-model-name", plan.request.model,
        "--port", str(API_PORT),
        "--download-dir", CONTAINER_CACHE_PATH,
        "--tensor-parallel-size", str(a["tensor_parallel_size"]),
        "--kv-cache-dtype", a["kv_cache_dtype"],
        "--max-model-len", str(a["max_model_len"]),
        "--max-num-seqs", str(a["max_num_seqs"]),
        "--enable-chunked-prefill",
        "--max-num-batched-tokens", str(a["max_num_batched_tokens"]),
        "--gpu-memory-utilization", str(a["gpu_memory_utilization"]),
        "--shutdown-timeout", str(shutdown_timeout_s),
    ]


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


def policy_annotations(plan: Plan, settings: StackSettings, zone: str) -> dict[str, str]:
    """What the guard policies read from the workload alone (docs/contracts.md)."""
    return {
        ANNOTATION_ZONE: zone,
        ANNOTATION_TARGET_QPS: str(round(target_qps(plan), 4)),
        ANNOTATION_REPLICA_CAPACITY_QPS: str(round(plan.capacity_per_replica.qps, 4)),
        ANNOTATION_TENSOR_PARALLEL: str(plan.tp),
        ANNOTATION_GPUS_PER_NODE: str(plan.instance.gpus),
        ANNOTATION_ENVIRONMENT: settings.environment,
    }


# -- the component ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ServingArgs:
    plan: Plan
    settings: StackSettings
    provider: k8s.Provider
    hub_token: pulumi.Input[str]                  # a Pulumi secret: settings.pulumi_config.secret("hubToken")
    gateway_namespace: str                        # where the Envoy proxies run
    monitoring_namespace: str = MONITORING_NAMESPACE      # where Prometheus runs
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"   # KEDA's query endpoint


class Serving(pulumi.ComponentResource):
    """Namespace, hub token, per-zone vLLM Deployments, PDB, Service, NetworkPolicies, burst scaling."""

    def __init__(self, name: str, args: ServingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:serving:Serving", name, None, opts)
        plan, settings = args.plan, args.settings
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.provider)
        ns_name = settings.serving.namespace
        self.namespace_name = ns_name
        self.pod_labels = dict(APP_LABELS)
        self.drain = drain_timing(longest_request_s(plan))
        startup_s = startup_budget_s(plan.weights_gb)

        self.namespace = k8s.core.v1.Namespace(
            f"{name}-ns", metadata={"name": ns_name, "labels": {LABEL_ENVIRONMENT: settings.environment}},
            opts=k8s_opts)
        ns_opts = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[self.namespace])
        self.hub_secret = k8s.core.v1.Secret(
            f"{name}-hub-token", metadata={"name": "hub-token", "namespace": ns_name},
            type="Opaque", string_data={"HF_TOKEN": args.hub_token}, opts=ns_opts)
        metrics_conf = k8s.core.v1.ConfigMap(
            f"{name}-metrics-proxy", metadata={"name": "vllm-metrics-proxy", "namespace": ns_name},
            data={"default.conf": METRICS_PROXY_CONF}, opts=ns_opts)

        self.deployments: dict[str, k8s.apps.v1.Deployment] = {}
        self.scaled_objects: list[k8s.apiextensions.CustomResource] = []
        self.keda = None
        if settings.serving.burstScaling:
            self.keda = k8s.helm.v3.Release(
                f"{name}-keda", name="keda", chart=KEDA_CHART, version=KEDA_VERSION,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=KEDA_REPO),
                namespace=KEDA_NAMESPACE, create_namespace=True,
                values={"nodeSelector": {LABEL_ROLE: "system"}}, opts=k8s_opts)
        previous = None
        for zone, count in plan.replicas_by_zone.items():
            if count == 0:
                continue
            _, burst_max = zone_node_slots(plan, zone)
            deploy_name = f"vllm-{zone}"
            labels = {**APP_LABELS, "llm-serving.io/zone": zone}
            # Zones roll one after another (Pulumi waits for each rollout): an update never
            # takes down more than one zone's replicas, the loss the plan is sized for.
            chain = [self.namespace, self.hub_secret, metrics_conf] + ([previous] if previous else [])
            deployment = k8s.apps.v1.Deployment(
                f"{name}-{zone}",
                metadata={"name": deploy_name, "namespace": ns_name, "labels": labels,
                          "annotations": policy_annotations(plan, settings, zone)},
                spec=self._deployment_spec(plan, zone, count, labels, startup_s, metrics_conf),
                opts=pulumi.ResourceOptions(
                    parent=self, provider=args.provider, depends_on=chain,
                    custom_timeouts=pulumi.CustomTimeouts(create=f"{startup_s + 300}s", update=f"{startup_s + 300}s"),
                    # With burst scaling KEDA owns the replica count above the plan's floor.
                    ignore_changes=["spec.replicas"] if settings.serving.burstScaling else None))
            self.deployments[zone] = deployment
            previous = deployment
            if settings.serving.burstScaling and burst_max > count:
                self.scaled_objects.append(self._scaled_object(
                    name, args, zone, deploy_name, count, burst_max, burst_queue_target(plan), deployment))

        max_per_node = max(n.replicas for n in plan.nodes)
        self.pdb = k8s.policy.v1.PodDisruptionBudget(
            f"{name}-pdb", metadata={"name": "vllm", "namespace": ns_name},
            spec={"minAvailable": disruption_min_available(plan.replicas, plan.replicas_after_loss, max_per_node),
                  "selector": {"matchLabels": dict(APP_LABELS)},
                  # A replica still loading its model is not serving: evicting it costs nothing.
                  "unhealthyPodEvictionPolicy": "AlwaysAllow"},
            opts=ns_opts)
        self.service = k8s.core.v1.Service(
            f"{name}-svc", metadata={"name": "vllm", "namespace": ns_name, "labels": dict(APP_LABELS)},
            spec={"type": "ClusterIP", "selector": dict(APP_LABELS),
                  "ports": [{"name": "http", "port": API_PORT, "targetPort": "http", "protocol": "TCP"},
                            {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}]},
            opts=ns_opts)
        self.network_policies = self._network_policies(name, args, ns_opts)

        self.service_name = "vllm"
        self.register_outputs({"namespace": ns_name, "service": self.service_name,
                               "deployments": {z: d.metadata["name"] for z, d in self.deployments.items()}})

    # -- pieces --------------------------------------------------------------------------------
    def _deployment_spec(self, plan: Plan, zone: str, count: int, labels: dict, startup_s: int,
                         metrics_conf: k8s.core.v1.ConfigMap) -> dict:
        tp, drain = plan.tp, self.drain
        cpu = max(1, int(plan.instance.vcpus / plan.instance.gpus * tp * CPU_SHARE_OF_GPU_SLICE))
        vllm = {
            "name": "vllm",
            "image": VLLM_IMAGE,
            "args": vllm_args(plan, drain.shutdown_timeout_s),
            "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub-token", "key": "HF_TOKEN"}}},
                    {"name": "HF_HOME", "value": f"{CONTAINER_CACHE_PATH}/hf-home"}],
            "ports": [{"name": "http", "containerPort": API_PORT, "protocol": "TCP"}],
            "resources": {"limits": {GPU_RESOURCE: str(tp)},
                          "requests": {GPU_RESOURCE: str(tp), "cpu": str(cpu), "memory": f"{MEMORY_GIB_PER_GPU * tp}Gi"}},
            "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"},
                             {"name": "model-cache", "mountPath": CONTAINER_CACHE_PATH}],
            "startupProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": PROBE_PERIOD_S,
                             "failureThreshold": math.ceil(startup_s / PROBE_PERIOD_S)},
            "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5,
                               "failureThreshold": 2},
            "livenessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": PROBE_PERIOD_S,
                              "timeoutSeconds": 5, "failureThreshold": 6},
            # Keep serving while the endpoint's removal reaches Envoy and the picker; then
            # SIGTERM starts vLLM's bounded drain (--shutdown-timeout).
            "lifecycle": {"preStop": {"sleep": {"seconds": drain.pre_stop_s}}},
        }
        metrics_proxy = {
            "name": "metrics-proxy",
            "image": METRICS_PROXY_IMAGE,
            "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
            "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
            "volumeMounts": [{"name": "metrics-proxy-conf", "mountPath": "/etc/nginx/conf.d", "readOnly": True}],
            "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                                "capabilities": {"drop": ["ALL"]}},
        }
        return {
            "replicas": count,
            "selector": {"matchLabels": labels},
            # No surge: a surge pod would sit on a node beyond the plan's placement.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {LABEL_ROLE: "gpu", ZONE_KEY: zone},
                    "tolerations": [GPU_TOLERATION],
                    # Even over the zone's nodes, as the plan places them (round robin).
                    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": HOST_KEY,
                                                   "whenUnsatisfiable": "DoNotSchedule",
                                                   "labelSelector": {"matchLabels": labels}}],
                    "terminationGracePeriodSeconds": drain.grace_period_s,
                    "containers": [vllm, metrics_proxy],
                    "volumes": [
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{SHM_GIB_PER_GPU * tp}Gi"}},
                        {"name": "model-cache", "hostPath": {"path": MODEL_CACHE_PATH, "type": "DirectoryOrCreate"}},
                        {"name": "metrics-proxy-conf", "configMap": {"name": metrics_conf.metadata["name"]}},
                    ],
                },
            },
        }

    def _scaled_object(self, name: str, args: ServingArgs, zone: str, deploy_name: str, floor: int,
                       ceiling: int, queue_target: int, deployment) -> k8s.apiextensions.CustomResource:
        ns = args.settings.serving.namespace
        query = f'sum(vllm:num_requests_waiting{{namespace="{ns}",pod=~"{deploy_name}-.*"}})'
        return k8s.apiextensions.CustomResource(
            f"{name}-{zone}-burst", api_version="keda.sh/v1alpha1", kind="ScaledObject",
            metadata={"name": deploy_name, "namespace": ns},
            spec={"scaleTargetRef": {"name": deploy_name},
                  "minReplicaCount": floor, "maxReplicaCount": ceiling,
                  "cooldownPeriod": 600,     # a replica costs minutes to load: do not flap
                  "triggers": [{"type": "prometheus", "metricType": "AverageValue",
                                "metadata": {"serverAddress": args.prometheus_url, "query": query,
                                             "threshold": str(queue_target)}}]},
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[deployment, self.keda]))

    def _network_policies(self, name: str, args: ServingArgs, opts: pulumi.ResourceOptions) -> list:
        ns = args.settings.serving.namespace

        def from_namespace(n: str) -> dict:
            return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": n}}}

        specs = {
            # Nothing reaches any pod in the namespace unless a policy below (or another
            # component's) admits it.
            "default-deny-ingress": {"podSelector": {}, "policyTypes": ["Ingress"]},
            "vllm-api-from-gateway": {
                "podSelector": {"matchLabels": dict(APP_LABELS)}, "policyTypes": ["Ingress"],
                "ingress": [{"from": [from_namespace(args.gateway_namespace)],
                             "ports": [{"protocol": "TCP", "port": API_PORT}]}]},
            "vllm-metrics-from-monitoring": {
                "podSelector": {"matchLabels": dict(APP_LABELS)}, "policyTypes": ["Ingress"],
                "ingress": [{"from": [from_namespace(args.monitoring_namespace)],
                             "ports": [{"protocol": "TCP", "port": METRICS_PORT}]}]},
        }
        return [k8s.networking.v1.NetworkPolicy(f"{name}-{key}", metadata={"name": key, "namespace": ns},
                                                spec=spec, opts=opts)
                for key, spec in specs.items()]
