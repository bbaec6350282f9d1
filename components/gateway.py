"""The Envoy gateway: the only way in. It terminates TLS, checks API keys, meters each key with a
fast 429, bounds time and retries by the SLOs, and routes by load.

- Envoy Gateway (controller) and its Envoy proxies run on the system nodes, spread over zones.
- Every route sits behind one Gateway that a SecurityPolicy (API keys) covers as a whole, so a
  route added later is authenticated too.
- Per-key quotas are local (each proxy keeps its own token buckets, no Redis to run): a key's
  limit is divided by the proxy count, and the sum over keys never exceeds the plan's capacity
  after a zone loss times `gateway.rateLimitShare`. A client whose connections all reach one
  proxy gets 1/proxies of its quota; the global (Redis) mode avoids that at the cost of a Redis.
- Load-aware routing: with `gateway.inferenceExtension`, the route's backend is an InferencePool
  and an endpoint picker chooses the pod (Envoy AI Gateway's controller is the extension server
  that teaches Envoy Gateway this backend kind); without it, Envoy's least-request balancing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from conventions import (
    AI_GATEWAY_NAMESPACE, ANNOTATION_AWS_LB_TYPE, ANNOTATION_EXTERNAL_DNS_HOSTNAME, ANNOTATION_PROXIES,
    ANNOTATION_QUOTA_BUDGET_QPS, AWS_LB_TYPE_EXTERNAL, ENVOY_AI_GATEWAY_VERSION, ENVOY_GATEWAY_VERSION,
    GATEWAY_CONTROLLER_NAMESPACE, INFERENCE_EXTENSION_VERSION, MONITORING_NAMESPACE, VLLM_API_PORT,
)
from conventions import HOST_KEY, POOL_API, SYSTEM_ROLE_LABEL, ZONE_KEY
from deployment.api_keys import gate_key, parse_api_keys
from deployment.gateway import GATEWAY_CLUSTER_IP, GatewaySpec

from .endpoint_picker import EndpointPicker, EndpointPickerArgs
from .options import after
from .pods import chart_namespace_metadata, spread

EG_CHART = "oci://docker.io/envoyproxy/gateway-helm"   # CRDs pinned in scripts/upstream-files.json (vendor/upstream)
AIGW_CHART, AIGW_CRDS_CHART = "oci://docker.io/envoyproxy/ai-gateway-helm", "oci://docker.io/envoyproxy/ai-gateway-crds-helm"
INFERENCE_CRDS_URL = ("https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases/download/"
                      f"{INFERENCE_EXTENSION_VERSION}/manifests.yaml")
GATEWAY_API = "gateway.networking.k8s.io/v1"
EG_API = "gateway.envoyproxy.io/v1alpha1"
OPENAI_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/models")
CLIENT_ID_HEADER = "x-llm-client-id"    # set by the API-key filter (before rate limiting) to the key's name
RETRY_STATUS = 503


class StatusCustomResource(k8s.apiextensions.CustomResource):
    """A CustomResource whose live `status` is an output too (the SDK's declares only its inputs),
    so the Gateway's address can be exported once the controller has written it."""
    status: pulumi.Output[Any]

    def _internal_init(self, resource_name, api_version, kind, opts=None, metadata=None, spec=None, __props__=None):
        props = k8s.apiextensions.CustomResourceArgs.__new__(k8s.apiextensions.CustomResourceArgs)
        props.__dict__.update(api_version=api_version, kind=kind, metadata=metadata, spec=spec, status=None)
        pulumi.CustomResource.__init__(self, f"kubernetes:{api_version}:{kind}", resource_name, props, opts)


def gateway_address(status: dict | None) -> str | None:
    addresses = (status or {}).get("addresses") or []
    return addresses[0].get("value") if addresses else None


def check_key_names(text: str, names: tuple[str, ...]) -> dict:
    """The apiKeys secret must name exactly the configured keys (never quoted in an error)."""
    return parse_api_keys(text, names)


def envoy_gateway_values(replicas: int, inference_extension: bool) -> dict:
    """Envoy Gateway's controller: two replicas or more (leader election is on in the chart) on
    the system nodes, spread over zones, a PDB; with the inference extension, the AI Gateway
    controller as its extension server for the InferencePool backend."""
    controller_spread = spread({"control-plane": "envoy-gateway"}, when="ScheduleAnyway")
    config: dict = {"envoyGateway": {"gateway": {"controllerName": "gateway.envoyproxy.io/gatewayclass-controller"},
                                     "provider": {"type": "Kubernetes"}}}
    if inference_extension:
        config["envoyGateway"]["extensionApis"] = {"enableBackend": True}
        config["envoyGateway"]["extensionManager"] = {
            "backendResources": [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "version": "v1"}],
            "hooks": {"xdsTranslator": {"translation": {k: {"includeAll": True} for k in
                                                        ("listener", "route", "cluster", "secret")},
                                        "post": ["Translation", "Cluster", "Route"]}},
            "service": {"fqdn": {"hostname": f"ai-gateway-controller.{AI_GATEWAY_NAMESPACE}.svc.cluster.local",
                                 "port": 1063}}}
    return {"deployment": {"replicas": replicas, "pod": {
                "nodeSelector": dict(SYSTEM_ROLE_LABEL), "topologySpreadConstraints": controller_spread}},
            "podDisruptionBudget": {"minAvailable": 1},
            "config": config}


AIGW_CONTROLLER_REPLICAS = 2
AIGW_CONTROLLER_LABELS = {"app.kubernetes.io/name": "ai-gateway-helm", "app.kubernetes.io/instance": "ai-gateway"}


def ai_gateway_values() -> dict:
    """The AI Gateway controller (v1.0.0 chart): its admission webhook is `failurePolicy: Fail`
    for Envoy proxy pods, so with one replica a lost zone stops any new proxy pod from
    starting. Two replicas (leader election is on in the chart), preferring different zones
    (the chart takes `affinity`, not spread constraints; preferred so a rolling update's extra
    pod still schedules with two zones)."""
    return {"controller": {
        "replicaCount": AIGW_CONTROLLER_REPLICAS,
        # The chart sets no security context (values.yaml L138-139 at v1.0.0); its namespace enforces
        # restricted. The image's user is distroless `nonroot` by name (Dockerfile L13, L40), which
        # the kubelet cannot check against runAsNonRoot: its uid, 65532, is given.
        "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                               "seccompProfile": {"type": "RuntimeDefault"}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "privileged": False, "readOnlyRootFilesystem": True},
        "nodeSelector": dict(SYSTEM_ROLE_LABEL),
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100, "podAffinityTerm": {"topologyKey": ZONE_KEY,
                                               "labelSelector": {"matchLabels": dict(AIGW_CONTROLLER_LABELS)}}}]}},
    }}


def envoy_proxy_spec(gateway_name: str, proxies: int, allowed_cidrs: tuple[str, ...],
                     dns_hostname: str | None) -> dict:
    """The proxies: on the system nodes, spread over zones and nodes; their Service an
    internet-facing NLB with IP targets (the AWS Load Balancer Controller's annotations), open to
    `allowed_cidrs` only, at a fixed in-cluster address, and published in DNS when the stack
    manages it (external-dns reads the hostname annotation)."""
    proxy_spread = spread({"app.kubernetes.io/component": "proxy",
                           "gateway.envoyproxy.io/owning-gateway-name": gateway_name}, keys=(ZONE_KEY, HOST_KEY))
    annotations = {ANNOTATION_AWS_LB_TYPE: AWS_LB_TYPE_EXTERNAL,
                   "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
                   "service.beta.kubernetes.io/aws-load-balancer-scheme": "internet-facing"}
    if dns_hostname:
        annotations[ANNOTATION_EXTERNAL_DNS_HOSTNAME] = dns_hostname
    return {"provider": {"type": "Kubernetes", "kubernetes": {
        "envoyDeployment": {"replicas": proxies, "pod": {
            "nodeSelector": dict(SYSTEM_ROLE_LABEL), "topologySpreadConstraints": proxy_spread}},
        "envoyPDB": {"minAvailable": 1},
        "envoyService": {
            "type": "LoadBalancer", "externalTrafficPolicy": "Local",
            "loadBalancerSourceRanges": list(allowed_cidrs),
            "annotations": annotations,
            # The in-cluster address the accuracy gate and the load test reach the gateway at
            # (with the public hostname as Host and SNI), so they need no public DNS.
            "patch": {"type": "StrategicMerge", "value": {"spec": {"clusterIP": GATEWAY_CLUSTER_IP}}}},
    }}}


# -- the component ---------------------------------------------------------------------------
@dataclass(frozen=True)
class GatewayArgs:
    spec: GatewaySpec                      # deployment.gateway.gateway_spec(plan, settings)
    provider: k8s.Provider
    api_keys: pulumi.Input[str]            # a Pulumi secret: JSON {name: key}
    namespace: str                         # the serving namespace (routes, policies, pool live there)
    service_name: str                      # the vLLM Service (the fallback backend)
    tls_secret_name: str                   # the listener's certificate (components.cert_manager.GatewayCertificate)
    kubernetes_version: str                # the cluster's: the controllers' namespaces' Pod Security labels
    cluster_cidrs: tuple[str, ...]         # the cluster's private subnets (the picker's API server peers)
    monitoring_namespace: str = MONITORING_NAMESPACE
    controllers: tuple = ()                # load balancer and DNS controllers, the certificate


class Gateway(pulumi.ComponentResource):
    """Envoy Gateway and its custom resources: proxies, listener, route, API-key auth, quotas.

    `opts.depends_on`: the serving component; the custom resources and the key Secret wait for it.
    Built in named steps: quota figures, controllers, gateway, routing, auth, traffic policy."""

    def __init__(self, name: str, args: GatewayArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:gateway:Gateway", name, None, opts)
        self._name, self._args, self._after = name, args, after(opts)
        spec = args.spec
        gw = spec.settings
        self.rate_limit, self.gate_key = spec.tenant_rate_limit, spec.gate_key
        self.timeouts, self.proxy_replicas = spec.timeouts, spec.proxies
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)

        crds = self._controllers(name, args, child)
        # The proxies' Service needs its load balancer (and DNS) controllers, the listener its
        # certificate: installed first, removed last (the NLB is deleted before its controller).
        self._cr_opts = pulumi.ResourceOptions(parent=self, provider=args.provider,
                                               depends_on=crds + list(args.controllers) + self._after)
        self._listener()
        self._routing(crds)
        self._auth(child)
        # What the quotas may share out, for the guard policy that sums the rules against it.
        budget = {ANNOTATION_QUOTA_BUDGET_QPS: f"{spec.quota_budget_qps:.4f}",
                  ANNOTATION_PROXIES: str(self.proxy_replicas)}
        self.traffic_policy = self._cr("traffic", EG_API, "BackendTrafficPolicy",
                                       {"name": "openai", "namespace": args.namespace, "annotations": budget},
                                       self._traffic_spec(spec), deps=[self.route])
        # The load balancer's address, once Envoy Gateway has provisioned it (unknown in a preview).
        self.address = self.gateway.status.apply(gateway_address)
        self.register_outputs({"gateway": name, "hostname": gw.hostname, "address": self.address,
                               "proxyReplicas": self.proxy_replicas,
                               "rateLimitPerKey": f"{self.rate_limit.requests}/{self.rate_limit.unit}"})

    # -- pieces --------------------------------------------------------------------------------
    def _cr(self, suffix: str, api: str, kind: str, metadata: dict, spec: dict, deps=(), with_status=False):
        cls = StatusCustomResource if with_status else k8s.apiextensions.CustomResource
        return cls(
            f"{self._name}-{suffix}", api_version=api, kind=kind, metadata=metadata, spec=spec,
            opts=pulumi.ResourceOptions.merge(self._cr_opts, pulumi.ResourceOptions(depends_on=list(deps))))

    def _listener(self) -> None:
        """EnvoyProxy -> GatewayClass -> Gateway (the HTTPS listener with its certificate)."""
        name, args, gw = self._name, self._args, self._args.spec.settings
        proxy_config = self._cr("envoyproxy", EG_API, "EnvoyProxy", {"name": name, "namespace": GATEWAY_CONTROLLER_NAMESPACE},
                                envoy_proxy_spec(name, self.proxy_replicas, args.spec.allowed_cidrs,
                                                 gw.hostname if gw.manages_dns else None))
        self.gateway_class = self._cr("class", GATEWAY_API, "GatewayClass", {"name": name}, {
            "controllerName": "gateway.envoyproxy.io/gatewayclass-controller",
            "parametersRef": {"group": "gateway.envoyproxy.io", "kind": "EnvoyProxy", "name": name,
                              "namespace": GATEWAY_CONTROLLER_NAMESPACE}}, deps=[proxy_config])
        self.gateway = self._cr("gateway", GATEWAY_API, "Gateway",
                                {"name": name, "namespace": args.namespace}, with_status=True, spec={
            "gatewayClassName": name,
            "listeners": [{"name": "https", "protocol": "HTTPS", "port": 443, "hostname": gw.hostname,
                           "tls": {"mode": "Terminate",
                                   "certificateRefs": [{"kind": "Secret", "name": args.tls_secret_name}]},
                           "allowedRoutes": {"namespaces": {"from": "Same"}}}]}, deps=[self.gateway_class])

    def _routing(self, crds: list) -> None:
        """The OpenAI route: to the endpoint picker's InferencePool, or straight to the vLLM Service."""
        name, args, gw = self._name, self._args, self._args.spec.settings
        self.picker = None
        if gw.inferenceExtension:
            self.picker = EndpointPicker(f"{name}-picker", EndpointPickerArgs(
                replicas=args.spec.pickers, provider=args.provider, namespace=args.namespace,
                gateway_namespace=GATEWAY_CONTROLLER_NAMESPACE, monitoring_namespace=args.monitoring_namespace,
                api_server_cidrs=args.cluster_cidrs, prefix_aware=args.spec.prefix_aware, pd_zones=args.spec.pd_zones),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*crds, *self._after]))
            backend = {"group": POOL_API.split("/")[0], "kind": "InferencePool", "name": self.picker.pool_name}
        else:
            backend = {"kind": "Service", "name": args.service_name, "port": VLLM_API_PORT}
        t = self.timeouts
        self.route = self._cr("route", GATEWAY_API, "HTTPRoute", {"name": "openai", "namespace": args.namespace}, {
            "parentRefs": [{"name": name, "sectionName": "https"}],
            "hostnames": [gw.hostname],
            "rules": [{"matches": [{"path": {"type": "Exact", "value": p}} for p in OPENAI_PATHS],
                       "backendRefs": [backend],
                       "timeouts": {"request": t.request, "backendRequest": t.backend_request}}]},
            deps=[self.gateway] + ([self.picker] if self.picker else []))

    def _auth(self, child: pulumi.ResourceOptions) -> None:
        """The client keys Secret and the SecurityPolicy that checks every request against it."""
        name, args, gw, ns = self._name, self._args, self._args.spec.settings, self._args.namespace
        self.api_key_secret = k8s.core.v1.Secret(
            f"{name}-api-keys", metadata={"name": "gateway-api-keys", "namespace": ns}, type="Opaque",
            string_data=pulumi.Output.from_input(args.api_keys).apply(
                lambda text: self._client_keys(text, gw.apiKeyNames)),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=self._after)))
        # On the Gateway, not the route: every route this Gateway ever carries needs a key.
        self.security_policy = self._cr("auth", EG_API, "SecurityPolicy", {"name": "api-keys", "namespace": ns}, {
            "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": name}],
            "apiKeyAuth": {"credentialRefs": [{"kind": "Secret", "name": "gateway-api-keys"}],
                           "extractFrom": [{"headers": ["authorization"]}],   # OpenAI clients: "Bearer <key>"
                           "forwardClientIDHeader": CLIENT_ID_HEADER, "sanitize": True}},
            deps=[self.gateway, self.api_key_secret])

    def _controllers(self, name: str, args: GatewayArgs, opts: pulumi.ResourceOptions) -> list:
        """Envoy Gateway (and, with the inference extension, the InferencePool CRD and the AI
        Gateway), each after the CRDs it watches: both controllers look for the InferencePool
        CRD once at start-up and never again (AI Gateway v1.0.0
        `internal/controller/controller.go` skips its InferencePool controller for good).
        Returns what custom resources must wait for."""
        inference = args.spec.settings.inferenceExtension
        version = args.kubernetes_version
        eg_ns = k8s.core.v1.Namespace(
            f"{name}-eg-ns", metadata=chart_namespace_metadata(GATEWAY_CONTROLLER_NAMESPACE, version),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider))
        pool_crd = [k8s.yaml.v2.ConfigFile(f"{name}-inference-crds", file=INFERENCE_CRDS_URL, opts=opts)] \
            if inference else []
        eg = k8s.helm.v3.Release(
            f"{name}-envoy-gateway", name="envoy-gateway", chart=EG_CHART, version=ENVOY_GATEWAY_VERSION,
            namespace=GATEWAY_CONTROLLER_NAMESPACE,
            values=envoy_gateway_values(args.spec.proxies, inference),
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[*pool_crd, eg_ns])))
        if not inference:
            return [eg]
        aigw_ns = k8s.core.v1.Namespace(
            f"{name}-aigw-ns", metadata=chart_namespace_metadata(AI_GATEWAY_NAMESPACE, version),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider))
        aigw_crds = k8s.helm.v3.Release(
            f"{name}-ai-gateway-crds", name="ai-gateway-crds", chart=AIGW_CRDS_CHART, version=ENVOY_AI_GATEWAY_VERSION,
            namespace=AI_GATEWAY_NAMESPACE,
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[aigw_ns])))
        aigw = k8s.helm.v3.Release(
            f"{name}-ai-gateway", name="ai-gateway", chart=AIGW_CHART, version=ENVOY_AI_GATEWAY_VERSION,
            namespace=AI_GATEWAY_NAMESPACE, values=ai_gateway_values(),
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[*pool_crd, aigw_crds, eg])))
        return [*pool_crd, eg, aigw_crds, aigw]

    def _client_keys(self, text: str, names: tuple[str, ...]) -> dict:
        keys = check_key_names(text, names)
        if self.gate_key is not None:
            keys[self.gate_key] = gate_key(text)
        return keys

    def _traffic_spec(self, gateway: GatewaySpec) -> dict:
        limits = gateway.rate_limits
        spec = {
            "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "openai"}],
            "rateLimit": {"local": {"rules": [{
                "clientSelectors": [{"headers": [{"name": CLIENT_ID_HEADER, "type": "Exact", "value": key}]}],
                "limit": {"requests": limit.requests, "unit": limit.unit},
                "shared": True,      # one bucket per key across the route's paths
            } for key, limit in limits.items()]}},
            # Safe to retry: a refused connection or a 503 means the engine never started the request.
            "retry": {"numRetries": 1, "retryOn": {"triggers": ["connect-failure", "retriable-status-codes"],
                                                   "httpStatusCodes": [RETRY_STATUS]}},
            "timeout": {"tcp": {"connectTimeout": self.timeouts.connect}},
            "circuitBreaker": gateway.circuit_limits,
        }
        if self.picker is None:
            spec["loadBalancer"] = {"type": "LeastRequest"}
        return spec
