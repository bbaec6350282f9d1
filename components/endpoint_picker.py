"""Load-aware routing: an InferencePool over the vLLM pods and its endpoint picker (EPP).

Envoy asks the picker (ext_proc, gRPC) which pod should take each request; the picker scrapes
every vLLM pod's `/metrics` and scores queue depth (`vllm:num_requests_waiting`) and KV-cache
usage. It runs active-active (no leader election): with only those two scorers it keeps no
per-replica state (the prefix-cache scorer, which does, is added only when the plan counts on
per-conversation prefix reuse: PREFIX_AWARE_CONFIG), so any replica answers alike and a
PodDisruptionBudget can keep one up while a node drains.

Fail-closed, stated as it is: Envoy AI Gateway v1.0.0 (the extension server that builds the
picker's ext_proc filter) sets `FailureModeAllow: false` and never reads the pool's
`failureMode` (`internal/extensionserver/inferencepool.go`). Without a picker's answer the
request fails; and fail-open could not route anyway, since the pool's cluster sends each request
to the endpoint the picker names. So the pool declares `FailClose`, the picker runs one replica
per zone (two at least) with a PDB, and `LLMServingEndpointPickerDown` (critical) /
`...Degraded` (warning) watch its readiness (observability/rules.py).
"""
from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass

import yaml

import pulumi
import pulumi_kubernetes as k8s

from conventions import ENDPOINT_PICKER_IMAGE, PICKER_GRPC_PORT, PICKER_HEALTH_PORT, PICKER_METRICS_PORT, VLLM_API_PORT
from conventions import LABEL_ZONE, LLM_D_SCHEDULER_IMAGE

from conventions import HOST_KEY, POOL_API, SERVICE_CIDR, SYSTEM_ROLE_LABEL, ZONE_KEY
from deployment.gateway import PICKER_LABELS
from deployment.serving import APP_LABELS

from .options import after
from .pods import SCRATCH_MOUNT, SCRATCH_VOLUME, container_security, pod_security, spread

# The last inference-extension release that ships the picker (v1.6.0 moved it to llm-d); it
# serves the same `inference.networking.k8s.io/v1` InferencePool API as the v1.6.0 CRD.
FAILURE_MODE = "FailClose"      # what the proxy does (AI Gateway v1.0.0): see the module docstring
CONFIG_FILE = "scorers.yaml"


def picker_config(scorers: tuple[tuple[str, int], ...]) -> str:
    """GAIE's EndpointPickerConfig: the scorers with their weights, then the max-score picker."""
    plugins = [name for name, _ in scorers] + ["max-score-picker", "single-profile-handler"]
    refs = [f"  - pluginRef: {name}\n    weight: {weight}\n" for name, weight in scorers]
    return ("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
            + "".join(f"- type: {name}\n" for name in plugins)
            + "schedulingProfiles:\n- name: default\n  plugins:\n" + "".join(refs)
            + "  - pluginRef: max-score-picker\n")


PICKER_CONFIG = picker_config((("queue-scorer", 1), ("kv-cache-utilization-scorer", 1)))
# With a prefix hit fraction (multi-turn reuse, a conversation's prefix cached on one replica) the
# plan counts on requests returning where their prefix is: GAIE v1.5.0's `prefix-cache-scorer`
# (pkg/epp/framework/plugins/scheduling/scorer/prefix, weights 2/2/3 as its chart's default,
# config/charts/epplib/templates/_config.yaml). Each picker replica learns its own approximate
# index, so two replicas route a conversation alike only as often as it lands on the same picker:
# a soft preference, never a correctness matter. A prefix shared by every request (system prompt)
# is cached on every replica after its first request and needs no scorer.
PREFIX_AWARE_CONFIG = picker_config((("queue-scorer", 2), ("kv-cache-utilization-scorer", 2), ("prefix-cache-scorer", 3)))


@dataclass(frozen=True)
class EndpointPickerArgs:
    replicas: int                   # deployment.gateway.picker_replicas: one per zone, at least two
    provider: k8s.Provider
    namespace: str                  # the serving namespace: a pool selects pods in its own namespace
    gateway_namespace: str          # where the Envoy proxies that call the picker run
    monitoring_namespace: str
    api_server_cidrs: tuple[str, ...]   # the cluster's private subnets: the API server's endpoint interfaces
    prefix_aware: bool = False      # the plan counts on per-conversation prefix reuse (see PREFIX_AWARE_CONFIG)
    pd_zones: tuple[str, ...] = ()  # a disaggregated plan's zones: one P/D picker each (pd_picker_config)


# -- disaggregated prefill/decode ------------------------------------------------------------------
# GAIE v1.5.0's picker has no P/D handler: its runner registers one profile handler,
# `single-profile-handler` (kubernetes-sigs/gateway-api-inference-extension v1.5.0
# cmd/epp/runner/runner.go L456, registerInTreePlugins; pkg/epp/framework/plugins/scheduling/profile/
# holds nothing else). llm-d's inference scheduler v0.8.0 (built on GAIE v1.5.0, its go.mod) registers
# GAIE's plugins and its own (pkg/epp/framework/plugins/register.go L21-L49): the `prefill-filter` and
# `decode-filter` on the `llm-d.ai/role` label (filter/bylabel/roles.go), the `by-label` filter
# (filter/bylabel/filter.go: label, validValues, allowsNoLabel), the `disagg-profile-handler`
# (profilehandler/disagg/disagg_profile_handler.go L26: parameters profiles and deciders), the
# `disagg-headers-handler` that names the chosen prefill pod to the decode pod's sidecar, and the
# deciders `always-disagg-pd-decider` and `prefix-based-pd-decider`. Its sample P/D config is
# deploy/config/pd-epp-config.yaml at v0.8.0, which this follows, with two changes:
# - the decider is `always-disagg-pd-decider`: the plan sizes the decode pool for decode steps only
#   and every prompt's prefill on the prefill pool (TTFT includes the transfer); the prefix-based
#   decider would run short or cached prompts on decode pods;
# - each zone has its own picker, whose two profiles keep to its zone's pods (`by-label` on the pods'
#   zone label): a prefill/decode pair never spans zones, whichever picker replica answers.
PD_SCORERS = (("queue-scorer", 1), ("kv-cache-utilization-scorer", 1))
PD_DECIDER = "always-disagg-pd-decider"


def pd_picker_config(zone: str) -> str:
    """llm-d's EndpointPickerConfig for the P/D pairs of one zone."""
    zone_filter = {"name": "zone-filter", "type": "by-label",
                   "parameters": {"label": LABEL_ZONE, "validValues": [zone], "allowsNoLabel": False}}
    plugins = [{"type": "disagg-headers-handler"}, zone_filter, {"type": "prefill-filter"}, {"type": "decode-filter"},
               *({"type": name} for name, _ in PD_SCORERS), {"type": "max-score-picker"}, {"type": PD_DECIDER},
               {"type": "disagg-profile-handler", "parameters": {"deciders": {"prefill": PD_DECIDER}}}]

    def profile(role: str) -> dict:
        return {"name": role, "plugins": [{"pluginRef": "zone-filter"}, {"pluginRef": f"{role}-filter"},
                                          *({"pluginRef": n, "weight": w} for n, w in PD_SCORERS),
                                          {"pluginRef": "max-score-picker"}]}
    return yaml.safe_dump({"apiVersion": "inference.networking.x-k8s.io/v1alpha1", "kind": "EndpointPickerConfig",
                           "plugins": plugins, "schedulingProfiles": [profile("prefill"), profile("decode")]},
                          sort_keys=False)


def picker_container(pool_name: str, namespace: str, image: str = ENDPOINT_PICKER_IMAGE) -> dict:
    return {
        "name": "epp", "image": image,
        "args": ["--pool-name", pool_name, "--pool-namespace", namespace,
                 "--pool-group", "inference.networking.k8s.io",
                 "--config-file", f"/config/{CONFIG_FILE}",
                 # Only the monitoring namespace reaches the metrics port (below).
                 "--metrics-endpoint-auth=false", "--zap-encoder", "json"],
        "ports": [{"name": "grpc", "containerPort": PICKER_GRPC_PORT},
                  {"name": "grpc-health", "containerPort": PICKER_HEALTH_PORT},
                  {"name": "metrics", "containerPort": PICKER_METRICS_PORT}],
        "env": [{"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "livenessProbe": {"grpc": {"port": PICKER_HEALTH_PORT, "service": "inference-extension"}, "periodSeconds": 10},
        "readinessProbe": {"grpc": {"port": PICKER_HEALTH_PORT, "service": "inference-extension"}, "periodSeconds": 2},
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
        # A static Go binary: it writes nothing but /tmp (an emptyDir).
        "securityContext": container_security(),
        "volumeMounts": [{"name": "config", "mountPath": "/config", "readOnly": True}, SCRATCH_MOUNT],
    }


def api_server_peers(cidrs: tuple[str, ...]) -> list[dict]:
    """Where the picker's calls to the API server go: the `kubernetes` Service (the first address of
    the Service CIDR, as the API server allocates it) and, after kube-proxy's DNAT, the control plane's
    private endpoint interfaces, which EKS places in the subnets the cluster is given (the private
    ones: components/cluster.py). Not the rest of the VPC (the public subnets' load balancer and NAT)
    nor the internet; the limit of naming subnets, not the interfaces, is in deployment/namespace_policies.py."""
    kubernetes_service = str(ipaddress.ip_network(SERVICE_CIDR)[1])
    return [{"ipBlock": {"cidr": f"{kubernetes_service}/32"}}, *({"ipBlock": {"cidr": c}} for c in cidrs)]


def picker_network_policies(gateway_namespace: str, monitoring_namespace: str,
                            api_server_cidrs: tuple[str, ...]) -> dict[str, dict]:
    def from_namespace(n: str) -> dict:
        return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": n}}}

    return {
        "epp-from-gateway": {"podSelector": {"matchLabels": dict(PICKER_LABELS)}, "policyTypes": ["Ingress"],
                             "ingress": [{"from": [from_namespace(gateway_namespace)],
                                          "ports": [{"protocol": "TCP", "port": PICKER_GRPC_PORT}]},
                                         {"from": [from_namespace(monitoring_namespace)],
                                          "ports": [{"protocol": "TCP", "port": PICKER_METRICS_PORT}]}]},
        # The picker scores pods from their /metrics on the API port.
        "vllm-from-epp": {"podSelector": {"matchLabels": dict(APP_LABELS)}, "policyTypes": ["Ingress"],
                          "ingress": [{"from": [{"podSelector": {"matchLabels": dict(PICKER_LABELS)}}],
                                       "ports": [{"protocol": "TCP", "port": VLLM_API_PORT}]}]},
        # Out: the vLLM pods' API port (their metrics) and the API server (it watches pods and the
        # pool), nothing else.
        "epp-egress": {"podSelector": {"matchLabels": dict(PICKER_LABELS)}, "policyTypes": ["Egress"],
                       "egress": [{"to": [{"podSelector": {"matchLabels": dict(APP_LABELS)}}],
                                   "ports": [{"protocol": "TCP", "port": VLLM_API_PORT}]},
                                  {"to": api_server_peers(api_server_cidrs), "ports": [{"protocol": "TCP", "port": 443}]}]},
    }


class EndpointPicker(pulumi.ComponentResource):
    """The Gateway API Inference Extension's endpoint picker and the InferencePool it serves.

    `opts.depends_on`: the CRDs (InferencePool) and the serving namespace; every child waits for them."""

    def __init__(self, name: str, args: EndpointPickerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:endpoint_picker:EndpointPicker", name, None, opts)
        ns = args.namespace
        self.pool_name, self.picker_name = "vllm", "vllm-epp"
        self.replicas = args.replicas
        o = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=after(opts))

        account = self._access(name, ns, args, o)
        if args.pd_zones:
            self._pd_pickers(name, ns, args, account, o)
        else:
            config = k8s.core.v1.ConfigMap(f"{name}-config", metadata={"name": self.picker_name, "namespace": ns},
                                           data={CONFIG_FILE: PREFIX_AWARE_CONFIG if args.prefix_aware else PICKER_CONFIG},
                                           opts=o)
            self.deployment = self._deployment(name, ns, config, pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=[config, account]))
            self.deployments = [self.deployment]
        self.pdb = k8s.policy.v1.PodDisruptionBudget(
            f"{name}-pdb", metadata={"name": self.picker_name, "namespace": ns},
            spec={"minAvailable": 1, "selector": {"matchLabels": dict(PICKER_LABELS)}}, opts=o)
        self._service_and_pool(name, ns, o)
        for key, spec in picker_network_policies(args.gateway_namespace, args.monitoring_namespace,
                                                 args.api_server_cidrs).items():
            k8s.networking.v1.NetworkPolicy(f"{name}-{key}", metadata={"name": key, "namespace": ns},
                                            spec=spec, opts=o)
        self.register_outputs({"pool": self.pool_name, "replicas": self.replicas})

    def _service_and_pool(self, name: str, ns: str, o: pulumi.ResourceOptions) -> None:
        """The picker's Service (gRPC for the proxies, metrics) and the InferencePool that names it."""
        self.service = k8s.core.v1.Service(
            f"{name}-svc", metadata={"name": self.picker_name, "namespace": ns},
            spec={"selector": dict(PICKER_LABELS), "ports": [
                {"name": "grpc", "port": PICKER_GRPC_PORT, "targetPort": "grpc", "appProtocol": "http2"},
                {"name": "metrics", "port": PICKER_METRICS_PORT, "targetPort": "metrics"}]},
            opts=o)
        self.pool = k8s.apiextensions.CustomResource(
            f"{name}-pool", api_version=POOL_API, kind="InferencePool",
            metadata={"name": self.pool_name, "namespace": ns},
            spec={"selector": {"matchLabels": dict(APP_LABELS)},
                  "targetPorts": [{"number": VLLM_API_PORT}],
                  "endpointPickerRef": {"name": self.picker_name, "port": {"number": PICKER_GRPC_PORT},
                                        "failureMode": FAILURE_MODE}},
            opts=o)

    def _access(self, name: str, ns: str, args: EndpointPickerArgs, o: pulumi.ResourceOptions):
        """The picker's service account: read pods and its pool in its own namespace, nothing else."""
        account = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata={"name": self.picker_name, "namespace": ns},
                                             automount_service_account_token=False, opts=o)
        role = k8s.rbac.v1.Role(
            f"{name}-role", metadata={"name": self.picker_name, "namespace": ns},
            rules=[{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                   {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"],
                    "verbs": ["get", "list", "watch"]},
                   {"apiGroups": ["inference.networking.x-k8s.io"], "resources": ["inferenceobjectives"],
                    "verbs": ["get", "list", "watch"]}],
            opts=o)
        k8s.rbac.v1.RoleBinding(
            f"{name}-rb", metadata={"name": self.picker_name, "namespace": ns},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": self.picker_name},
            subjects=[{"kind": "ServiceAccount", "name": self.picker_name, "namespace": ns}],
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[role, account]))
        return account

    def _pd_pickers(self, name: str, ns: str, args: EndpointPickerArgs, account, o: pulumi.ResourceOptions) -> None:
        """One llm-d picker per zone (pd_picker_config), all behind the one Service the pool names, so
        any replica answers with a pair of its own zone; the replicas split over the zones, one each
        at least (a zone's picker down, the others' pairs take its requests, as after a zone loss)."""
        per_zone = max(1, math.ceil(self.replicas / len(args.pd_zones)))
        self.replicas = per_zone * len(args.pd_zones)
        self.deployments = []
        for zone in args.pd_zones:
            config = k8s.core.v1.ConfigMap(
                f"{name}-{zone}-config", metadata={"name": f"{self.picker_name}-{zone}", "namespace": ns},
                data={CONFIG_FILE: pd_picker_config(zone)}, opts=o)
            self.deployments.append(self._deployment(
                f"{name}-{zone}", ns, config,
                pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[config, account]),
                replicas=per_zone, labels={**PICKER_LABELS, LABEL_ZONE: zone}, image=LLM_D_SCHEDULER_IMAGE,
                workload=f"{self.picker_name}-{zone}"))
        self.deployment = self.deployments[0]

    def _deployment(self, name: str, ns: str, config, opts: pulumi.ResourceOptions, replicas: int | None = None,
                    labels: dict | None = None, image: str = ENDPOINT_PICKER_IMAGE,
                    workload: str | None = None) -> k8s.apps.v1.Deployment:
        labels = labels or dict(PICKER_LABELS)
        return k8s.apps.v1.Deployment(
            f"{name}-deploy", metadata={"name": workload or self.picker_name, "namespace": ns, "labels": dict(labels)},
            spec={
                "replicas": self.replicas if replicas is None else replicas,
                "selector": {"matchLabels": dict(labels)},
                "template": {"metadata": {"labels": dict(labels)}, "spec": {
                    "serviceAccountName": self.picker_name,
                    # The one pod here that calls the API server: its token is mounted, the account's
                    # default (off) is not used.
                    **pod_security(talks_to_api_server=True),
                    "nodeSelector": dict(SYSTEM_ROLE_LABEL),
                    "topologySpreadConstraints": spread(labels, keys=(ZONE_KEY, HOST_KEY)),
                    "containers": [picker_container(self.pool_name, ns, image)],
                    "volumes": [{"name": "config", "configMap": {"name": config.metadata["name"]}}, SCRATCH_VOLUME],
                }},
            },
            opts=opts)
