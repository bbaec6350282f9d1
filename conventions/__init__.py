"""The names the parts share, defined once: namespaces, ports, label and annotation keys, and the
pinned chart and image versions.

Dependency-free (imports nothing, not even the standard library), so settings, sizing,
components, observability, policies, the offline harness and the CLI can all read it.
`docs/contracts.md` says what each name means to the part that reads it.
"""

PROJECT = "llm-serving"             # the Pulumi project and the config namespace (llm-serving:<key>)
ENVIRONMENT_CONFIG_KEY = f"{PROJECT}:environment"   # dev, staging or prod: what policy levels are keyed by

# -- namespaces ----------------------------------------------------------------------------------
SERVING_NAMESPACE = "llm-serving"                   # the default of serving.namespace
MONITORING_NAMESPACE = "monitoring"                 # Prometheus, Grafana, Alertmanager, DCGM exporter
GATEWAY_CONTROLLER_NAMESPACE = "envoy-gateway-system"    # Envoy Gateway and, by default, its Envoy proxies
AI_GATEWAY_NAMESPACE = "envoy-ai-gateway-system"
GPU_PLUGIN_NAMESPACE = "nvidia-device-plugin"
KEDA_NAMESPACE = "keda"
LWS_NAMESPACE = "lws-system"                         # the LeaderWorkerSet controller (its docs' namespace)
EFA_PLUGIN_NAMESPACE = "kube-system"                 # the EFA device plugin DaemonSet (system-node-critical)
CERT_MANAGER_NAMESPACE = "cert-manager"
EXTERNAL_DNS_NAMESPACE = "external-dns"

# -- zones ---------------------------------------------------------------------------------------
ZONE_LETTERS = "abcdefg"        # the zone letters the VPC's subnet layout has a block for (components/network.py)

# -- ports ---------------------------------------------------------------------------------------
VLLM_API_PORT = 8000                # vLLM's OpenAI API (and, on the same port, its /metrics)
VLLM_METRICS_PORT = 9400            # /metrics alone, re-exposed by a sidecar so Prometheus cannot call the API
PICKER_GRPC_PORT, PICKER_HEALTH_PORT, PICKER_METRICS_PORT = 9002, 9003, 9090   # the endpoint picker's defaults

# -- labels, annotations and tags (docs/contracts.md) -----------------------------------------------
LABEL_APP_NAME = "app.kubernetes.io/name"
LABEL_ROLE = "llm-serving.io/role"
LABEL_ZONE = "llm-serving.io/zone"
LABEL_POOL = "llm-serving.io/pool"
LABEL_ENVIRONMENT = "llm-serving.io/environment"
# On each serving workload: what the failure-domain policies judge it by (values are strings).
ANNOTATION_ZONE = "llm-serving.io/zone"
ANNOTATION_TARGET_QPS = "llm-serving.io/target-qps"                  # the stack's total QPS
ANNOTATION_REPLICA_CAPACITY_QPS = "llm-serving.io/replica-capacity-qps"   # one replica, real, at the SLOs
ANNOTATION_TENSOR_PARALLEL = "llm-serving.io/tensor-parallel"
ANNOTATION_GPUS_PER_NODE = "llm-serving.io/gpus-per-node"
ANNOTATION_ENVIRONMENT = "llm-serving.io/environment"                # the stack's environment: policy levels
ANNOTATION_QUOTA_BUDGET_QPS = "llm-serving.io/quota-budget-qps"      # on the rate-limit policy: what quotas may sum to
ANNOTATION_PROXIES = "llm-serving.io/proxies"                        # on the rate-limit policy: Envoy proxies metering
# Service annotations other controllers act on (the controller contract reads the same keys).
ANNOTATION_AWS_LB_TYPE = "service.beta.kubernetes.io/aws-load-balancer-type"   # AWS Load Balancer Controller
AWS_LB_TYPE_EXTERNAL = "external"       # the in-tree provider answers ImplementedElsewhere for it
ANNOTATION_EXTERNAL_DNS_HOSTNAME = "external-dns.alpha.kubernetes.io/hostname"
# Launch templates: a pod (one hop more, through its veth) cannot reach the node role's credentials.
IMDS_HOP_LIMIT = 1
TAG_GPUS_PER_NODE = "llm-serving.io/gpus-per-node"                  # on GPU node groups
ANNOTATION_FLOOR_QPS = "llm-serving.io/floor-qps"    # on an autoscaling ScaledObject: the load its floor carries
ANNOTATION_NODES_PER_REPLICA = "llm-serving.io/nodes-per-replica"   # on serving workloads: the group size
ROLE_SERVING_WORKER = "serving-worker"   # a multi-node replica's worker pods: no API, not behind the Service
# Rules about replicas that span nodes: the planner's refusal and the policy pack name them alike.
RULE_GROUP_IN_ONE_ZONE = "replica-group-in-one-zone"
RULE_ZONE_HOLDS_WHOLE_GROUPS = "zone-holds-whole-groups"
# -- scheduling: the keys pods are placed by, and the GPU nodes' one taint --------------------------
ZONE_KEY = "topology.kubernetes.io/zone"            # the well-known node labels spread and selectors use
HOST_KEY = "kubernetes.io/hostname"
SYSTEM_ROLE_LABEL = {LABEL_ROLE: "system"}          # the system node group's label: controllers and jobs
GPU_ROLE_LABEL = {LABEL_ROLE: "gpu"}                # every GPU node group's label
GPU_RESOURCE = "nvidia.com/gpu"                     # what the NVIDIA device plugin advertises
# The GPU nodes' taint, in Kubernetes' spelling (EKS's API spells the effect NO_SCHEDULE:
# components/gpu_node_pool.py maps it); every pod that may run there tolerates exactly it.
GPU_TAINT = {"key": GPU_RESOURCE, "value": "true", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU_TAINT["key"], "operator": "Equal", "value": GPU_TAINT["value"],
                  "effect": GPU_TAINT["effect"]}
SERVICE_CIDR = "172.20.0.0/16"                      # the cluster's Service range (components/cluster.py sets it)
MODEL_CACHE_PATH = "/mnt/models"                    # the GPU nodes' NVMe model cache, a hostPath for serving pods
EFA_RESOURCE = "vpc.amazonaws.com/efa"       # what the EFA device plugin advertises (one per EFA interface)
TAG_PURCHASE_APPROVED = "llm-serving.io/purchase-approved"          # the capacity-block opt-in
LABEL_GRAFANA_DASHBOARD = "grafana_dashboard"                       # the Grafana sidecar loads ConfigMaps with it

# -- pinned versions (charts and images) -------------------------------------------------------------
VLLM_VERSION = "0.29.0"             # the metric names in observability/contract.py were checked against it
# Images by digest where a published one can be cited (a tag can be moved; a digest cannot). Neither
# was pulled from here (no registry access): each is the digest that independent public projects pin
# for the same tag (found by code search, 2026-12; docs/security.md lists where). The rest are pinned
# by tag, with the reason and how a deploy pins them in docs/security.md.
VLLM_IMAGE_DIGEST = "sha256:c2914767605584b6d8f45686b82de173ecc99e781897aa3d0a66dacd72c51ae1"
VLLM_IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}@{VLLM_IMAGE_DIGEST}"
# Multi-node groups only (components/serving.py `_group_pod`): AWS's Deep Learning Container for
# vLLM 0.29.0 on EC2/EKS, the stock image above plus the EFA installer's userspace (libfabric and the
# aws-ofi-nccl plugin), which the stock image lacks. Tag from aws/deep-learning-containers
# docs/src/data/vllm/0.29.0-gpu-ec2.yml (its first, fully qualified tag; public_registry: true);
# built FROM vllm/vllm-openai:v<version> by docker/vllm/Dockerfile, EFA installer 1.47.0
# (.github/config/image/vllm/ec2-ubuntu.yml efa_version at 0.27.1 and at 0.30.0; docs/multi-node.md).
# Pinned by tag only: no source found here publishes this image's digest, and AWS re-pushes DLC tags
# with patches. VLLM_EFA_IMAGE_DIGEST stays None until resolved at deploy time
# (`crane digest` or `docker buildx imagetools inspect`); `llmserve preflight` warns while it is.
VLLM_EFA_IMAGE_REPOSITORY = "public.ecr.aws/deep-learning-containers/vllm"
VLLM_EFA_IMAGE_TAG = f"{VLLM_VERSION}-gpu-py312-cu130-ubuntu24.04-ec2"
VLLM_EFA_IMAGE_DIGEST: str | None = None
VLLM_EFA_IMAGE = (f"{VLLM_EFA_IMAGE_REPOSITORY}:{VLLM_EFA_IMAGE_TAG}"
                  + (f"@{VLLM_EFA_IMAGE_DIGEST}" if VLLM_EFA_IMAGE_DIGEST else ""))
METRICS_PROXY_IMAGE = ("nginxinc/nginx-unprivileged:1.27.5-alpine"
                       "@sha256:65e3e85dbaed8ba248841d9d58a899b6197106c23cb0ff1a132b7bfe0547e4c0")
ENVOY_GATEWAY_VERSION = "v1.8.3"    # chart and CRDs (vendor/upstream): AI Gateway v1.0 tests EG v1.8.1+ (docs/gateway-versions.md)
ENVOY_AI_GATEWAY_VERSION = "v1.0.0"
INFERENCE_EXTENSION_VERSION = "v1.6.0"   # the InferencePool CRDs (the picker image stays at v1.5.0, below)
# The last inference-extension release that ships the picker (v1.6.0 moved it to llm-d); it
# serves the same `inference.networking.k8s.io/v1` InferencePool API as the v1.6.0 CRD.
POOL_API = "inference.networking.k8s.io/v1"
ENDPOINT_PICKER_IMAGE = "registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0"
KUBE_PROMETHEUS_STACK_CHART_VERSION = "88.2.0"   # ships prometheus-operator v0.93.0, the CRDs in ../shared/crds
DCGM_EXPORTER_CHART_VERSION = "4.8.3"            # deploys DCGM 4.6.0 / exporter 4.8.3
DCGM_EXPORTER_IMAGE_TAG = "4.6.0-4.8.3-distroless"
KEDA_CHART_VERSION = "2.20.2"
NVIDIA_DEVICE_PLUGIN_CHART_VERSION = "0.19.3"
# Replicas that span nodes: kubernetes-sigs/lws v0.10.0 (chart oci://registry.k8s.io/lws/charts/lws,
# CRD in scripts/upstream-files.json) and aws/eks-charts stable/aws-efa-k8s-device-plugin.
LWS_VERSION = "v0.10.0"
LWS_API_VERSION, LWS_KIND = "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"   # a replica group
LWS_CHART_VERSION = "0.10.0"            # site/content/en/docs/installation at v0.10.0: CHART_VERSION=0.10.0
EFA_DEVICE_PLUGIN_CHART_VERSION = "v0.5.30"   # app v0.5.20 (Chart.yaml at aws/eks-charts 5239609)
GUIDELLM_IMAGE = "ghcr.io/vllm-project/guidellm:v0.8.1"
PYTHON_IMAGE = "python:3.12.8-slim-bookworm"     # the accuracy gate's lm-eval runner
# The controllers the gateway needs (each through EKS Pod Identity): components/*.py cite their sources.
AWS_LOAD_BALANCER_CONTROLLER_CHART_VERSION = "3.5.0"   # aws/eks-charts; app v3.5.0 (its IAM policy: components/data)
CERT_MANAGER_CHART_VERSION = "v1.21.1"                 # jetstack, with its CRDs
EXTERNAL_DNS_CHART_VERSION = "1.21.1"                  # kubernetes-sigs; app 0.21.0

# -- disaggregated prefill/decode and speculative decoding (docs/disaggregation-deploy.md) ----------
# The role label llm-d's scheduler filters pods by (llm-d/llm-d-inference-scheduler v0.8.0
# pkg/epp/framework/plugins/scheduling/filter/bylabel/roles.go L11-L16: RoleLabel, RoleDecode, RolePrefill).
LABEL_LLM_D_ROLE = "llm-d.ai/role"
ANNOTATION_SERVING_ROLE = "llm-serving.io/serving-role"        # aggregated | prefill | decode (the plan's pool)
ANNOTATION_KV_LINK = "llm-serving.io/kv-transfer-link"         # nvlink | efa: the plan's prefill -> decode link
ANNOTATION_SPECULATIVE_METHOD = "llm-serving.io/speculative-method"
ANNOTATION_SPECULATIVE_ACCEPTANCE = "llm-serving.io/speculative-acceptance-rate"   # the plan's per-token acceptance
# NIXL's handshake port (vllm/envs.py VLLM_NIXL_SIDE_CHANNEL_PORT, default 5600; the connector adds the
# data-parallel rank) and the decode engine's own port behind llm-d's routing sidecar, which takes
# VLLM_API_PORT on decode pods (deploy/components/vllm-sim-pd/deployments.yaml at v0.8.0: --vllm-port=8200).
NIXL_SIDE_CHANNEL_PORT = 5600
DECODE_ENGINE_PORT = 8200
# The P/D picker and the decode pods' routing sidecar: llm-d inference scheduler v0.8.0, built against
# gateway-api-inference-extension v1.5.0 (its go.mod L37), the picker version pinned above. By tag: no
# published digest was found in source or docs (docs/disaggregation-deploy.md).
LLM_D_SCHEDULER_IMAGE = "ghcr.io/llm-d/llm-d-inference-scheduler:v0.8.0"
LLM_D_ROUTING_SIDECAR_IMAGE = "ghcr.io/llm-d/llm-d-routing-sidecar:v0.8.0"
# The GPU node autoscaler (serving.autoscaling): kubernetes/autoscaler chart cluster-autoscaler 9.59.0
# (tag cluster-autoscaler-chart-9.59.0, appVersion 1.35.0), its image at the cluster's minor version.
CLUSTER_AUTOSCALER_CHART_VERSION = "9.59.0"
CLUSTER_AUTOSCALER_IMAGE_TAGS = {"1.34": "v1.34.2", "1.35": "v1.35.0"}   # git tags cluster-autoscaler-1.34.2, -1.35.0
