"""The vLLM replicas the plan asks for, where the plan puts them, reachable only through the gateway.

One Deployment per zone (replicas = the plan's count for that zone) pinned to that zone's GPU
nodes, spread evenly over the zone's nodes, so losing a node or a zone costs exactly what the
plan assumed. A replica that spans nodes (`plan.nodes_per_replica` > 1) is instead one
LeaderWorkerSet of that many pods, pinned to one pool of one zone (components/leader_worker_set.py;
docs/multi-node.md says what its disruption budget and rollout do). Every vLLM argument, the drain timing, the disruption budget, the burst-scaling
bounds and the policy annotations come from the plan; nothing is typed twice.

Ports: vLLM serves the OpenAI API and `/metrics` on the same port (8000), and a NetworkPolicy
works on ports, not paths. So the API port admits only the gateway namespace, and a small
sidecar re-exposes `GET /metrics` alone on its own port (9400), which admits only the
monitoring namespace: Prometheus can scrape without being able to call the model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pulumi
import pulumi_kubernetes as k8s

from conventions import (
    EFA_RESOURCE, GPU_ROLE_LABEL, GPU_TOLERATION, HOST_KEY, KEDA_CHART_VERSION, KEDA_NAMESPACE, LABEL_APP_NAME,
    LABEL_ENVIRONMENT, LABEL_POOL, LABEL_ROLE, LABEL_ZONE, LWS_API_VERSION, LWS_KIND, METRICS_PROXY_IMAGE, MODEL_CACHE_PATH,
    MONITORING_NAMESPACE, ROLE_SERVING_WORKER, SYSTEM_ROLE_LABEL, VLLM_API_PORT, VLLM_IMAGE, VLLM_METRICS_PORT, ZONE_KEY,
)
from conventions import VLLM_EFA_IMAGE
from conventions import DECODE_ENGINE_PORT, LABEL_LLM_D_ROLE, LLM_D_ROUTING_SIDECAR_IMAGE, NIXL_SIDE_CHANNEL_PORT
from deployment.disagg import DISAGGREGATED_ROLES
from deployment.autoscaling import scaled_object_spec
from deployment.engine import LEADER_ADDRESS, WORKER_INDEX, multi_node_args, vllm_args
from deployment.model_cache import download_container, engine_cache_env, engine_cache_mounts, served_model_path
from deployment.nccl_transport import (
    NCCL_DEBUG_FILE, NCCL_LOG_DIR, NCCL_METRICS_FILE, NCCL_METRICS_PATH, NCCL_VOLUME, check_container,
)
from deployment.serving import (
    APP_LABELS, HUB_TOKEN_KEY, ReplicaPlacement, ServingSpec, leader_worker_set_spec,
)

from .pods import (
    SCRATCH_MOUNT, chart_namespace_metadata, SCRATCH_VOLUME, container_security, egress_policies, one_pod_per_node, pod_security,
    pod_security_labels, spread,
)

KEDA_CHART, KEDA_REPO = "keda", "https://kedacore.github.io/charts"   # CRD in ../shared/crds
NGINX_UID = 101                               # nginx-unprivileged's own user
PROBE_PERIOD_S = 10

# A worker's probe: its group's leader answers /health (LWS_LEADER_ADDRESS is the leader pod's DNS
# name; the group NetworkPolicy admits the call). The engine serves only while every rank runs.
LEADER_HEALTH_TIMEOUT_S = 4
LEADER_HEALTH_CHECK = (f"import os, urllib.request; urllib.request.urlopen('http://' + os.environ['{LEADER_ADDRESS}'] "
                       f"+ ':{VLLM_API_PORT}/health', timeout={LEADER_HEALTH_TIMEOUT_S})")
# The kubelet kills an exec probe at its timeoutSeconds (default 1 s: a probe whose own timeout is
# 4 s would fail on any slow answer): the command's timeout plus the interpreter's start.
EXEC_PROBE_TIMEOUT_S = LEADER_HEALTH_TIMEOUT_S + 2

# NCCL over EFA, and NCCL's INFO log, whose "Using network" line says which transport a group got.
# They act in the group pods' image (conventions.VLLM_EFA_IMAGE: EFA installer 1.47.0, libfabric
# 2.4.0amzn1.0, aws-ofi-nccl 1.18.0), whose own LD_LIBRARY_PATH puts /opt/amazon/ofi-nccl/lib and
# /opt/amazon/efa/lib first (aws/deep-learning-containers docker/vllm/Dockerfile), so NCCL loads the
# plugin without a setting here. aws-ofi-nccl's doc/efa-env-var.md at v1.18.0 (L29-L45, L114-L117):
# with libfabric >= 1.18.0 and the plugin >= 1.7.0 neither variable is needed ("N/A"), and
# FI_EFA_USE_DEVICE_RDMA=1 is "not harmful" on p4/p5. Both stay: FI_PROVIDER=efa limits libfabric to
# its efa provider (libfabric's fabric(7), FI_PROVIDER), so a node without EFA shows up as NCCL's
# Socket transport, which the transport check reports (deployment/nccl_transport.py).
EFA_ENV = ({"name": "FI_PROVIDER", "value": "efa"}, {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"},
           {"name": "NCCL_DEBUG", "value": "INFO"})
# The DLC's entrypoint (scripts/docker/vllm/dockerd_entrypoint.sh: telemetry, then `vllm serve "$@"`)
# starts a usage reporter unless OPT_OUT_TRACKING is "true" (scripts/docker/telemetry/
# bash_telemetry.sh.template L3); the pods' egress policy would drop it anyway.
EFA_IMAGE_ENV = ({"name": "OPT_OUT_TRACKING", "value": "true"},)

METRICS_PROXY_HEALTH_PATH = "/healthz"
METRICS_PROXY_CONF = f"""\
server {{
  listen {VLLM_METRICS_PORT};
  location = /metrics {{ proxy_pass http://127.0.0.1:{VLLM_API_PORT}/metrics; }}
  location = {METRICS_PROXY_HEALTH_PATH} {{ access_log off; return 200; }}
  location = {NCCL_METRICS_PATH} {{ default_type text/plain; alias {NCCL_METRICS_FILE}; }}
  location / {{ return 404; }}
}}
"""



def vllm_env() -> list[dict]:
    """No secret in the environment, and no hub token at all: the engine serves the directory the
    init step downloaded (components/model_cache.py). Every path vLLM 0.29.0 and the libraries
    under it write is on a volume, so the root filesystem is read-only:
    - the node's compile cache (shared by the node's pods, kept across restarts, so a restart does
      not compile again; the weights beside it are read-only): VLLM_CACHE_ROOT (vllm/envs.py; its
      torch.compile cache, where vLLM also points TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR),
      FlashInfer's JIT kernels (FLASHINFER_WORKSPACE_BASE, flashinfer/jit/env.py: else
      ~/.cache/flashinfer), DeepGEMM's JIT (DG_JIT_CACHE_DIR) and CUDA's PTX cache (CUDA_CACHE_PATH,
      else ~/.nv);
    - the pod's /tmp (an emptyDir): HOME, and so ~/.config/vllm (VLLM_CONFIG_ROOT, usage stats),
      ~/.cache (XDG_CACHE_HOME: the structured-output grammars' caches), torch's default
      /tmp/torchinductor_<user>, vLLM's IPC sockets (VLLM_RPC_BASE_PATH, tempfile.gettempdir());
    - /dev/shm (a memory emptyDir): the tensor-parallel workers' shared memory."""
    return [*engine_cache_env(),
            {"name": "HOME", "value": "/tmp"},
            {"name": "XDG_CACHE_HOME", "value": "/tmp/.cache"},
            {"name": "XDG_CONFIG_HOME", "value": "/tmp/.config"},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},     # no __pycache__ beside the image's sources
            # The uid has no passwd entry in the image; torch's compile cache asks getpass.getuser(),
            # which reads USER before the passwd database.
            {"name": "USER", "value": "vllm"}]


# The label the LWS controller puts on every pod of a set (kubernetes-sigs/lws v0.10.0
# api/leaderworkerset/v1/leaderworkerset_types.go L37, SetNameLabelKey); a set holds one group here.
LWS_SET_LABEL = "leaderworkerset.sigs.k8s.io/name"


def group_set_name(group: ReplicaPlacement) -> str:
    return f"vllm-{group.pool}-{group.group}"


# The ports a group's pods use among themselves (TCP; EFA's own traffic is not IP, so no policy sees it):
# - the API port: the workers' probe of the leader's /health;
# - vLLM's master port, torch.distributed's store (vllm/config/parallel.py ParallelConfig.master_port,
#   29501 by default: the launch sets no --master-port);
# - the pod's ephemeral range, where NCCL's bootstrap and socket transport and vLLM's cross-node
#   message queue (shm_broadcast.py: `remote_subscribe_port = get_open_port()`, port 0 when VLLM_PORT
#   is unset) listen: Linux's default net.ipv4.ip_local_port_range, 32768-60999
#   (Documentation/networking/ip-sysctl.rst), per network namespace, so the node's setting is not the pod's.
# A range needs `endPort`, which the VPC CNI's policy agent enforces (aws/aws-network-policy-agent
# pkg/fwruleprocessor/fw_rule_processor.go L254-268); an engine that ignored it would admit 32768 alone.
GROUP_MASTER_PORT = 29501
EPHEMERAL_PORTS = (32768, 60999)
GROUP_PORTS = [{"protocol": "TCP", "port": VLLM_API_PORT}, {"protocol": "TCP", "port": GROUP_MASTER_PORT},
               {"protocol": "TCP", "port": EPHEMERAL_PORTS[0], "endPort": EPHEMERAL_PORTS[1]}]


def group_policies(groups: tuple[ReplicaPlacement, ...]) -> dict[str, dict]:
    """A group's pods talk to each other, and only to each other, on the ports above; no pod reaches
    another group's. Workers fetch their shard of the checkpoint from the hub like the leader."""
    policies = {}
    for group in groups:
        members = {"podSelector": {"matchLabels": {LWS_SET_LABEL: group_set_name(group)}}}
        policies[f"{group_set_name(group)}-group-traffic"] = {
            **members, "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [members], "ports": GROUP_PORTS}],
            "egress": [{"to": [members], "ports": GROUP_PORTS}]}
    return {**policies,
            **egress_policies({LABEL_APP_NAME: "vllm", LABEL_ROLE: ROLE_SERVING_WORKER}, "vllm-worker-hub-egress")}


# -- a disaggregated plan's pods (prefill and decode) --------------------------------------------
# The pieces a disaggregated plan adds to the serving pods: NIXL's side channel on both roles,
# llm-d's routing sidecar on decode pods, EFA for the transfer, and the network policies that let
# a zone's prefill and decode pods (and only those) talk.
#
# How a request flows (llm-d/llm-d-inference-scheduler v0.8.0 docs/disaggregation.md, "P/D"): the
# picker chooses a decode pod and a prefill pod of the same zone (components/endpoint_picker.py) and
# names the prefill pod in the `x-prefiller-host-port` header (pkg/common/common.go
# L11 PrefillEndpointHeader); Envoy sends the request to the decode pod's routing sidecar on the API port,
# which asks the prefill pod's vLLM for the prompt's KV (`do_remote_decode`) and then its own vLLM, on
# DECODE_ENGINE_PORT, to decode with that KV pulled over NIXL (pkg/sidecar/proxy/proxy.go L390-L399: POST
# /v1/chat/completions and /v1/completions go through the P/D handler, everything else, /metrics
# included, is proxied to vLLM; GET /health is answered by the sidecar itself, so the engine's own
# probes go to the engine's port).

# NCCL/libfabric over EFA as the multi-node replicas set it (components/serving.py EFA_ENV):
# libfabric's efa provider with GPUDirect RDMA, which NIXL's LIBFABRIC backend uses the same way.
EFA_KV_ENV = ({"name": "FI_PROVIDER", "value": "efa"}, {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"})
SIDECAR_CONNECTOR = "nixlv2"     # the sidecar's name for vLLM's NixlConnector protocol (pkg/sidecar/proxy/options.go)


def workload_name(prefix: str, spec: ServingSpec, zone: str | None = None) -> str:
    """`vllm-<zone>` for the aggregated replicas (unchanged), `vllm-<role>-<zone>` for a pool's."""
    parts = [prefix] + ([spec.role] if spec.role != "aggregated" else []) + ([zone] if zone else [])
    return "-".join(parts)


def engine_port_name(spec: ServingSpec) -> str:
    """The engine's port name: `http` where vLLM takes the API port itself; on decode pods the routing
    sidecar takes it (and the name `http` the Service and the pool target), vLLM listens behind it."""
    return "engine" if spec.role == "decode" else "http"


def side_channel_ports(spec: ServingSpec) -> list[int]:
    """NIXL's handshake listener per data-parallel rank (VLLM_NIXL_SIDE_CHANNEL_PORT + rank)."""
    return [NIXL_SIDE_CHANNEL_PORT + rank for rank in range(spec.launch.engine.data_parallel_size)]


def routing_sidecar_container(spec: ServingSpec) -> dict:
    """llm-d's routing sidecar (v0.8.0 flags: pkg/sidecar/proxy/options.go L123 AddFlags), a native sidecar
    (an init container that keeps running) as llm-d's own P/D deployment runs it
    (deploy/components/vllm-sim-pd/deployments.yaml): it starts before vLLM and stops after it, so it
    keeps proxying while vLLM drains. Plain HTTP inside the pod network, as vLLM's own port is."""
    dp = spec.launch.engine.data_parallel_size
    args = [f"--port={VLLM_API_PORT}", f"--vllm-port={DECODE_ENGINE_PORT}", f"--kv-connector={SIDECAR_CONNECTOR}",
            "--secure-proxy=false"] + ([f"--data-parallel-size={dp}"] if dp > 1 else [])
    return {
        "name": "routing-sidecar", "image": LLM_D_ROUTING_SIDECAR_IMAGE, "args": args, "restartPolicy": "Always",
        "ports": [{"name": "http", "containerPort": VLLM_API_PORT, "protocol": "TCP"}],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": container_security(),
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5},
    }


def with_kv_transfer(pod: dict, spec: ServingSpec, efa_devices: int) -> dict:
    """A pool's pod spec with NIXL's side channel on the engine (advertised at the pod's own IP: the
    connector's default host is localhost), EFA devices when the transfer runs on EFA, and on decode
    pods the routing sidecar."""
    containers = [dict(c) for c in pod["containers"]]
    engine = containers[0]
    engine["env"] = [*engine["env"],
                     {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                     {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(NIXL_SIDE_CHANNEL_PORT)}]
    engine["ports"] = [*engine["ports"], *({"name": f"nixl-{i}" if i else "nixl", "containerPort": port, "protocol": "TCP"}
                                           for i, port in enumerate(side_channel_ports(spec)))]
    if spec.kv_over_efa and efa_devices:
        # NIXL's LIBFABRIC backend loads libfabric from the image: the stock one carries none, so these
        # pods run the group image (conventions.VLLM_EFA_IMAGE, the same vLLM with EFA installer 1.47.0).
        engine["image"] = VLLM_EFA_IMAGE
        engine["resources"] = {part: {**engine["resources"][part], EFA_RESOURCE: str(efa_devices)}
                               for part in ("limits", "requests")}
        engine["env"] = [*engine["env"], *EFA_KV_ENV, *EFA_IMAGE_ENV]
    out = {**pod, "containers": containers}
    if spec.role == "decode":     # after the model's download (which runs to completion), the native sidecar
        out["initContainers"] = [*pod.get("initContainers", []), routing_sidecar_container(spec)]
    return out


def kv_transfer_policies(pools: tuple[ServingSpec, ...]) -> dict[str, dict]:
    """Per zone, its prefill and decode pods reach each other, and no other zone's: NIXL's side channel
    (ZMQ over TCP), the decode sidecar's call to the prefill pod's API, and, unless the KV moves over
    EFA, UCX's TCP data connections on the ports UCX picks itself (any TCP port, as the multi-node
    groups' policy admits NCCL's). On EFA the KV moves by RDMA over SRD on the EFA device, below IP,
    where no NetworkPolicy acts: the EFA security group (components/efa.py, all traffic within
    itself) is what admits it."""
    if not pools:
        return {}
    zones = dict.fromkeys(z.zone for p in pools for z in p.zones)
    ports = sorted({VLLM_API_PORT, *(port for p in pools for port in side_channel_ports(p))})
    rules = [{"protocol": "TCP", "port": port} for port in ports]
    if not any(p.kv_over_efa for p in pools):
        rules = [{"protocol": "TCP"}]       # UCX's data connections: every TCP port (the two above included)
    out = {}
    for zone in zones:
        peers = {"podSelector": {
            "matchLabels": {LABEL_APP_NAME: "vllm", LABEL_ROLE: "serving", LABEL_ZONE: zone},
            "matchExpressions": [{"key": LABEL_LLM_D_ROLE, "operator": "In", "values": list(DISAGGREGATED_ROLES)}]}}
        out[f"vllm-kv-transfer-{zone}"] = {
            **peers, "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [peers], "ports": rules}], "egress": [{"to": [peers], "ports": rules}]}
    return out


# -- the component ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ServingArgs:
    spec: ServingSpec                             # deployment.serving.serving_spec(plan, settings)
    provider: k8s.Provider
    hub_token: pulumi.Input[str]                  # a Pulumi secret: settings.pulumi_config.secret("hubToken")
    gateway_namespace: str                        # where the Envoy proxies run
    monitoring_namespace: str = MONITORING_NAMESPACE      # where Prometheus runs
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"   # KEDA's query endpoint
    group_controller: pulumi.Resource | None = None      # the LeaderWorkerSet controller (replicas spanning nodes)
    efa_devices: int = 0                                  # EFA devices per node each group pod requests
    kubernetes_version: str = "1.35"                      # the cluster's (settings.kubernetesVersion): PSA's pinned rules


# The serving namespace enforces `privileged`, audited and warned at `restricted`: every vLLM pod
# meets restricted (non-root, no escalation, every capability dropped, RuntimeDefault seccomp; EFA
# devices come from the device plugin as a resource, no capability, no IPC_LOCK) except one volume:
# the node's model cache is a hostPath, which baseline already forbids (PSS "HostPath Volumes").
# Moving the cache off hostPath (a CSI ephemeral volume or a per-node PVC) would let this be restricted.
SERVING_POD_SECURITY = "privileged"


def vllm_container(spec: ServingSpec) -> dict:
    """The engine: every argument from the plan; non-root, the hub token as a file, a memory limit."""
    gpus, memory = str(spec.gpus_per_pod), f"{spec.memory_gib}Gi"
    return {
        "name": "vllm",
        "image": VLLM_IMAGE,
        # The directory the init step filled, not the hub id (components/model_cache.py).
        "args": vllm_args(replace(spec.launch, model=served_model_path(spec.launch.model))),
        "env": vllm_env(),
        "ports": [{"name": engine_port_name(spec), "containerPort": spec.launch.port, "protocol": "TCP"}],
        "resources": {"limits": {spec.gpu_resource: gpus, "memory": memory},
                      "requests": {spec.gpu_resource: gpus, "cpu": str(spec.cpu), "memory": memory}},
        # Read-only root: every path it writes is moved onto a volume (vllm_env).
        "securityContext": container_security(),
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"},
                         *engine_cache_mounts(),
                         SCRATCH_MOUNT],
        "startupProbe": {"httpGet": {"path": "/health", "port": engine_port_name(spec)}, "periodSeconds": PROBE_PERIOD_S,
                         "failureThreshold": math.ceil(spec.startup_s / PROBE_PERIOD_S)},
        "readinessProbe": {"httpGet": {"path": "/health", "port": engine_port_name(spec)}, "periodSeconds": 5,
                           "failureThreshold": 2},
        "livenessProbe": {"httpGet": {"path": "/health", "port": engine_port_name(spec)}, "periodSeconds": PROBE_PERIOD_S,
                          "timeoutSeconds": 5, "failureThreshold": 6},
        # Keep serving while the endpoint's removal reaches Envoy and the picker; then
        # SIGTERM starts vLLM's bounded drain (--shutdown-timeout).
        "lifecycle": {"preStop": {"sleep": {"seconds": spec.drain.pre_stop_s}}},
    }


def metrics_proxy_container() -> dict:
    return {
        "name": "metrics-proxy",
        "image": METRICS_PROXY_IMAGE,
        "ports": [{"name": "metrics", "containerPort": VLLM_METRICS_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
        # nginx-unprivileged writes only its pid and temp files, all under /tmp (an emptyDir).
        "volumeMounts": [{"name": "metrics-proxy-conf", "mountPath": "/etc/nginx/conf.d", "readOnly": True},
                         SCRATCH_MOUNT],
        "securityContext": {**container_security(), "runAsUser": NGINX_UID, "runAsGroup": NGINX_UID},
        # nginx's own health (/healthz answers without vLLM): a proxy that stops answering is
        # restarted, while vLLM's state stays vLLM's probes' business (its /metrics 502s at startup).
        "readinessProbe": {"httpGet": {"path": METRICS_PROXY_HEALTH_PATH, "port": "metrics"}, "periodSeconds": 10},
        "livenessProbe": {"httpGet": {"path": METRICS_PROXY_HEALTH_PATH, "port": "metrics"}, "periodSeconds": 20,
                          "failureThreshold": 3},
    }


class Serving(pulumi.ComponentResource):
    """Namespace, hub token, per-zone vLLM Deployments, PDB, Service, NetworkPolicies, burst scaling."""

    def __init__(self, name: str, args: ServingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:serving:Serving", name, None, opts)
        spec = args.spec
        self._efa_devices = args.efa_devices
        self.namespace_name = spec.namespace
        self.pod_labels = dict(APP_LABELS)
        ns_opts = self._namespace_and_config(name, args)
        self.deployments: dict[str, k8s.apps.v1.Deployment] = {}
        self.groups: list[k8s.apiextensions.CustomResource] = []
        self.scaled_objects: list[k8s.apiextensions.CustomResource] = []
        self.keda = None
        self._previous: pulumi.Resource | None = None     # zones (and pools) roll one after another
        for workload in spec.workloads:      # the aggregated replicas, or the prefill and decode pools
            if workload.nodes_per_replica > 1:
                self._replica_groups(name, args)
            else:
                self._zone_deployments(name, args, workload)
        self._budget_and_service(name, args, ns_opts)
        self.network_policies = self._network_policies(name, args, ns_opts)
        self.service_name = "vllm"
        self.register_outputs({"namespace": spec.namespace, "service": self.service_name,
                               "deployments": {z: d.metadata["name"] for z, d in self.deployments.items()},
                               "leaderWorkerSets": [g.metadata["name"] for g in self.groups]})

    # -- steps ---------------------------------------------------------------------------------
    def _namespace_and_config(self, name: str, args: ServingArgs) -> pulumi.ResourceOptions:
        """The namespace, the hub token Secret and the metrics proxy's config; options for what lives there."""
        ns = args.spec.namespace
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-ns", metadata={"name": ns, "labels": {
                LABEL_ENVIRONMENT: args.spec.environment,
                **pod_security_labels(SERVING_POD_SECURITY, args.kubernetes_version)}},
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider))
        ns_opts = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[self.namespace])
        self.hub_secret = k8s.core.v1.Secret(
            f"{name}-hub-token", metadata={"name": "hub-token", "namespace": ns},
            type="Opaque", string_data={HUB_TOKEN_KEY: args.hub_token}, opts=ns_opts)
        self.metrics_conf = k8s.core.v1.ConfigMap(
            f"{name}-metrics-proxy", metadata={"name": "vllm-metrics-proxy", "namespace": ns},
            data={"default.conf": METRICS_PROXY_CONF}, opts=ns_opts)
        return ns_opts

    def _zone_deployments(self, name: str, args: ServingArgs, spec: ServingSpec) -> None:
        """One Deployment per zone with replicas (and, with burst scaling, KEDA and a ScaledObject each);
        for a disaggregated plan one per (pool, zone), each pool's pods labelled with its role."""
        if (spec.burst_scaling or spec.autoscaling) and self.keda is None:
            self.keda = k8s.helm.v3.Release(
                f"{name}-keda", name="keda", chart=KEDA_CHART, version=KEDA_CHART_VERSION,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=KEDA_REPO),
                namespace=KEDA_NAMESPACE,
                values={"nodeSelector": dict(SYSTEM_ROLE_LABEL)},
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[k8s.core.v1.Namespace(
                    f"{name}-keda-ns", metadata=chart_namespace_metadata(KEDA_NAMESPACE, args.kubernetes_version),
                    opts=pulumi.ResourceOptions(parent=self, provider=args.provider))]))
        for zr in spec.zones:
            zone, count = zr.zone, zr.replicas
            deploy_name = workload_name("vllm", spec, zone)
            labels = {**spec.app_labels, LABEL_ZONE: zone}
            # Zones roll one after another (Pulumi waits for each rollout): an update never
            # takes down more than one zone's replicas, the loss the plan is sized for.
            previous = self._previous
            chain = [self.namespace, self.hub_secret, self.metrics_conf] + ([previous] if previous else [])
            timeout = f"{spec.startup_s + 300}s"
            deployment = k8s.apps.v1.Deployment(
                workload_name(name, spec, zone),
                metadata={"name": deploy_name, "namespace": spec.namespace, "labels": labels,
                          "annotations": spec.annotations[zone]},
                spec=self._deployment_spec(spec, zone, count, labels),
                opts=pulumi.ResourceOptions(
                    parent=self, provider=args.provider, depends_on=chain,
                    custom_timeouts=pulumi.CustomTimeouts(create=timeout, update=timeout),
                    # With burst scaling or autoscaling KEDA owns the replica count above the floor.
                    ignore_changes=["spec.replicas"] if spec.burst_scaling or spec.autoscaling else None))
            self.deployments[zone if spec.role == "aggregated" else f"{spec.role}/{zone}"] = deployment
            self._previous = deployment
            for zs in (z for z in spec.autoscaling if z.zone == zone):    # the plan's policy (deployment.autoscaling)
                self.scaled_objects.append(k8s.apiextensions.CustomResource(
                    f"{name}-{zone}-autoscale", api_version="keda.sh/v1alpha1", kind="ScaledObject",
                    metadata={"name": deploy_name, "namespace": spec.namespace, "labels": labels,
                              "annotations": zs.annotations},
                    spec=scaled_object_spec(zs, args.prometheus_url),
                    opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[deployment, self.keda])))
            if spec.burst_scaling and zr.burst_max > count:
                self.scaled_objects.append(self._scaled_object(
                    name, args, zone, deploy_name, count, zr.burst_max, spec.burst_queue_target, deployment))

    def _replica_groups(self, name: str, args: ServingArgs) -> None:
        """One LeaderWorkerSet per replica, on the pool and zone the plan placed it in. Each waits
        until its group serves (`pulumi.com/waitFor`, the provider's generic await on the set's
        Available condition) before the next one rolls: an update never takes two groups at once."""
        spec = args.spec
        self.scaled_objects, self.keda = [], None     # burst scaling fills idle GPUs of one node: not groups
        previous: list[pulumi.Resource] = []
        timeout = f"{spec.startup_s + 300}s"
        controller = [args.group_controller] if args.group_controller is not None else []
        for group in spec.groups:
            set_name = group_set_name(group)
            labels = {**APP_LABELS, LABEL_ZONE: group.zone}
            annotations = {**spec.annotations[group.zone], "pulumi.com/waitFor": "condition=Available"}
            resource = k8s.apiextensions.CustomResource(
                f"{name}-{group.pool}-{group.group}", api_version=LWS_API_VERSION, kind=LWS_KIND,
                metadata={"name": set_name, "namespace": spec.namespace, "labels": labels, "annotations": annotations},
                spec=leader_worker_set_spec(spec.nodes_per_replica,
                                            self._group_pod(spec, group, labels, args.efa_devices, leader=True),
                                            self._group_pod(spec, group, labels, args.efa_devices, leader=False)),
                opts=pulumi.ResourceOptions(
                    parent=self, provider=args.provider,
                    depends_on=[self.namespace, self.hub_secret, self.metrics_conf, *controller, *previous],
                    custom_timeouts=pulumi.CustomTimeouts(create=timeout, update=timeout)))
            self.groups.append(resource)
            previous = [resource]

    def _group_pod(self, spec: ServingSpec, group: ReplicaPlacement, labels: dict, efa_devices: int,
                   leader: bool) -> dict:
        """A group's leader (API, metrics, rank 0) or worker (headless, rank LWS_WORKER_INDEX) pod,
        on the GPU nodes of the one pool (hence zone) the plan placed the group in."""
        pod_labels = labels if leader else {**labels, LABEL_ROLE: ROLE_SERVING_WORKER}
        engine = vllm_container(spec)
        # Every rank on the image that carries libfabric and aws-ofi-nccl (leader and workers alike:
        # one engine build per group); the vLLM version and the `vllm serve` entrypoint are the stock one's.
        engine["image"] = VLLM_EFA_IMAGE
        engine["env"] = [*engine["env"], *EFA_IMAGE_ENV]
        rank = "0" if leader else f"$({WORKER_INDEX})"
        engine["args"] = [*engine["args"], *multi_node_args(spec.launch.engine, rank, leader)]
        if efa_devices:
            for part in ("limits", "requests"):
                engine["resources"][part][EFA_RESOURCE] = str(efa_devices)
            engine["env"] = [*engine["env"], *EFA_ENV]
        if not leader:     # no API: ready while its group's leader serves (the engine needs every rank)
            engine["ports"] = []
            # No liveness probe: a worker whose engine dies exits, and restarting a worker because its
            # leader is slow would recreate the whole group (RecreateGroupOnPodRestart).
            del engine["livenessProbe"]
            for probe in ("startupProbe", "readinessProbe"):
                engine[probe] = {k: v for k, v in engine[probe].items() if k != "httpGet"} | {
                    "exec": {"command": ["python3", "-c", LEADER_HEALTH_CHECK]},
                    "timeoutSeconds": EXEC_PROBE_TIMEOUT_S}
        if leader:     # the transport check (deployment/nccl_transport.py): NCCL's log to a file it reads
            engine["env"] = [*engine["env"], {"name": "NCCL_DEBUG_FILE", "value": NCCL_DEBUG_FILE}]
            engine["volumeMounts"] = [*engine["volumeMounts"], {"name": NCCL_VOLUME["name"], "mountPath": NCCL_LOG_DIR}]
            proxy = metrics_proxy_container()
            proxy["volumeMounts"] = [*proxy["volumeMounts"],
                                     {"name": NCCL_VOLUME["name"], "mountPath": NCCL_LOG_DIR, "readOnly": True}]
            check = check_container(METRICS_PROXY_IMAGE, container_security(), SCRATCH_MOUNT)
        pod = self._pod_spec(spec, [engine, proxy, check] if leader else [engine])
        if leader:
            pod["volumes"] = [*pod["volumes"], dict(NCCL_VOLUME)]
        pod["nodeSelector"] = {**GPU_ROLE_LABEL, ZONE_KEY: group.zone, LABEL_POOL: group.pool}
        pod["affinity"] = one_pod_per_node({LABEL_APP_NAME: "vllm"})
        return {"metadata": {"labels": pod_labels}, "spec": pod}

    def _budget_and_service(self, name: str, args: ServingArgs, ns_opts: pulumi.ResourceOptions) -> None:
        ns = args.spec.namespace
        # One budget per pool (the aggregated replicas: one), each selecting its own pool's pods.
        self.pdbs = [k8s.policy.v1.PodDisruptionBudget(
            f"{workload_name(name, spec)}-pdb", metadata={"name": workload_name("vllm", spec), "namespace": ns},
            spec=spec.disruption_budget,       # unhealthyPodEvictionPolicy included (deployment.serving)
            opts=ns_opts) for spec in args.spec.workloads]
        self.pdb = self.pdbs[0]
        self.service = k8s.core.v1.Service(
            f"{name}-svc", metadata={"name": "vllm", "namespace": ns, "labels": dict(APP_LABELS)},
            spec={"type": "ClusterIP", "selector": dict(APP_LABELS),
                  "ports": [{"name": "http", "port": VLLM_API_PORT, "targetPort": "http", "protocol": "TCP"},
                            {"name": "metrics", "port": VLLM_METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}]},
            opts=ns_opts)

    # -- pieces --------------------------------------------------------------------------------
    def _deployment_spec(self, serving: ServingSpec, zone: str, count: int, labels: dict) -> dict:
        spec = self._pod_spec(serving, [vllm_container(serving), metrics_proxy_container()])
        if serving.role in DISAGGREGATED_ROLES:      # NIXL's side channel, EFA; decode: llm-d's routing sidecar
            spec = with_kv_transfer(spec, serving, self._efa_devices)
        spec["nodeSelector"] = {**GPU_ROLE_LABEL, ZONE_KEY: zone}
        # Even over the zone's nodes, as the plan places them (round robin).
        spec["topologySpreadConstraints"] = spread(labels, keys=(HOST_KEY,))
        return {
            "replicas": count,
            "selector": {"matchLabels": labels},
            # No surge: a surge pod would sit on a node beyond the plan's placement.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        }

    def _pod_spec(self, spec: ServingSpec, containers: list[dict]) -> dict:
        """What every vLLM pod shares: security, GPU toleration, drain, volumes."""
        return {
            **pod_security(),      # vLLM never calls the API server: no token
            "nodeSelector": {},
            "tolerations": [GPU_TOLERATION],
            "terminationGracePeriodSeconds": spec.drain.grace_period_s,
            "initContainers": [download_container(spec.launch.model, container_security(), SCRATCH_MOUNT)],
            "containers": containers,
            "volumes": [
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{spec.shm_gib}Gi"}},
                {"name": "model-cache", "hostPath": {"path": MODEL_CACHE_PATH, "type": "Directory"}},
                {"name": "metrics-proxy-conf", "configMap": {"name": self.metrics_conf.metadata["name"]}},
                # Readable by the pod's group only (fsGroup): the token never sits in the env.
                {"name": "hub-token", "secret": {"secretName": "hub-token", "defaultMode": 0o440}},
                SCRATCH_VOLUME,
            ],
        }

    def _scaled_object(self, name: str, args: ServingArgs, zone: str, deploy_name: str, floor: int,
                       ceiling: int, queue_target: int, deployment) -> k8s.apiextensions.CustomResource:
        ns = args.spec.namespace
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
        ns = args.spec.namespace

        def from_namespace(n: str) -> dict:
            return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": n}}}

        dns = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                       "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
               "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
        specs = {
            # Nothing reaches any pod in the namespace, and no pod reaches anything (the instance
            # metadata service included), unless a policy below (or another component's) admits it.
            "default-deny-ingress": {"podSelector": {}, "policyTypes": ["Ingress"]},
            "default-deny-egress": {"podSelector": {}, "policyTypes": ["Egress"]},
            "dns-egress": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [dns]},
            # vLLM downloads the checkpoint from the model hub over HTTPS.
            **egress_policies(APP_LABELS, "vllm-hub-egress"),
            "vllm-api-from-gateway": {
                "podSelector": {"matchLabels": dict(APP_LABELS)}, "policyTypes": ["Ingress"],
                "ingress": [{"from": [from_namespace(args.gateway_namespace)],
                             "ports": [{"protocol": "TCP", "port": VLLM_API_PORT}]}]},
            **(group_policies(args.spec.groups) if args.spec.nodes_per_replica > 1 else {}),
            **kv_transfer_policies(args.spec.pools),      # a disaggregated plan: prefill <-> decode within a zone
            "vllm-metrics-from-monitoring": {
                "podSelector": {"matchLabels": dict(APP_LABELS)}, "policyTypes": ["Ingress"],
                "ingress": [{"from": [from_namespace(args.monitoring_namespace)],
                             "ports": [{"protocol": "TCP", "port": VLLM_METRICS_PORT}]}]},
        }
        return [k8s.networking.v1.NetworkPolicy(f"{name}-{key}", metadata={"name": key, "namespace": ns},
                                                spec=spec, opts=opts)
                for key, spec in specs.items()]
