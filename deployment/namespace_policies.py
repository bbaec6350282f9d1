"""Default-deny NetworkPolicies for the monitoring, gateway and controller namespaces, with what each
one's pods need allowed (the serving namespace has its own: components/serving.py).

Every namespace here gets the same three: nothing in, nothing out, DNS to the cluster's resolver.
Then, per namespace, each allowance is named for what it carries, with the port cited where it is
set (the chart's values or template at its pinned version). Pure data: components/namespace_policies.py
makes the objects.

The API server, two ways. Its own calls into the cluster (admission webhooks, the KEDA metrics
APIService) come from the control plane's endpoint interfaces, which EKS places in the subnets the
cluster is given: here the private subnets (components/cluster.py `vpc_config`), so a webhook port
admits those CIDRs. Calls to it (controllers, the endpoint picker) go to the `kubernetes` Service
address and, after kube-proxy's DNAT, to the same interfaces. A NetworkPolicy cannot name the
interfaces themselves (EKS replaces them on a control-plane update; `kubectl get endpoints
kubernetes -n default` lists today's), so the rule admits the private subnets' CIDRs, which also
hold every node and pod: a pod listening on a webhook port or on 443 there stays reachable. Dedicated
control-plane subnets would narrow it to the interfaces alone; that is a cluster change not made here.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from conventions import (
    AI_GATEWAY_NAMESPACE, CERT_MANAGER_NAMESPACE, EXTERNAL_DNS_NAMESPACE, GATEWAY_CONTROLLER_NAMESPACE,
    GPU_PLUGIN_NAMESPACE, KEDA_NAMESPACE, LWS_NAMESPACE, MONITORING_NAMESPACE, PICKER_GRPC_PORT,
    PICKER_METRICS_PORT, SERVICE_CIDR, VLLM_API_PORT, VLLM_METRICS_PORT,
)

METADATA_RANGE = "169.254.0.0/16"
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
# The EKS Pod Identity agent, on every node at this link-local address, port 80 (EKS User Guide,
# "EKS Pod Identity": the agent listens on 169.254.170.23): the controllers' AWS credentials.
POD_IDENTITY_AGENT = "169.254.170.23/32"

ENVOY_LISTENER_PORT = 10443        # the HTTPS listener's 443 + 10000 (Envoy Gateway shifts privileged ports)
ENVOY_STATS_PORT, ENVOY_READINESS_PORT = 19001, 19003   # envoyproxy/gateway v1.8.3 internal/xds/bootstrap/bootstrap.go L45, L47
EG_WEBHOOK_PORT = 9443             # the topology injector (charts/gateway-helm/templates/envoy-gateway-deployment.yaml L80-81)
AIGW_WEBHOOK_PORT, AIGW_EXTENSION_PORT = 9443, 1063   # ai-gateway-helm values.yaml L170-184 at v1.0.0
KEDA_METRICS_API_PORT, KEDA_WEBHOOK_PORT = 6443, 9443  # kedacore/charts v2.20.2 keda/values.yaml L532, L210
LWS_WEBHOOK_PORT = 9443            # kubernetes-sigs/lws v0.10.0 charts/lws/values.yaml L35-37
CERT_MANAGER_WEBHOOK_PORT = 10250  # cert-manager v1.21.1 deploy/charts/cert-manager/values.yaml L1090
PROMETHEUS_OPERATOR_WEBHOOK_PORT = 10250   # kube-prometheus-stack prometheusOperator.tls.internalPort (its default)
PROMETHEUS_PORT = 9090
# Prometheus scrapes these on the nodes' own addresses: the kubelet (and its cAdvisor), the node
# exporter and kube-proxy run on the host network.
NODE_SCRAPE_PORTS = (10250, 9100, 10249)


@dataclass(frozen=True)
class PolicyPeers:
    """What the policies name outside their namespace."""
    cluster_cidrs: tuple[str, ...]     # the cluster's private subnets: nodes, pods, the control plane's interfaces
    vpc_cidr: str                      # network.vpcCidr: the load balancer's subnets are in it too
    serving_namespace: str
    inference_extension: bool          # the endpoint picker runs (the proxies call it, Prometheus scrapes it)


def tcp(*ports: int) -> list[dict]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def namespace(name: str) -> dict:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def blocks(cidrs) -> list[dict]:
    return [{"ipBlock": {"cidr": c}} for c in cidrs]


def api_server(peers: PolicyPeers) -> list[dict]:
    """The `kubernetes` Service address (the Service CIDR's first) and the private subnets."""
    return blocks((f"{ipaddress.ip_network(SERVICE_CIDR)[1]}/32", *peers.cluster_cidrs))


PUBLIC = {"ipBlock": {"cidr": "0.0.0.0/0", "except": [METADATA_RANGE, *PRIVATE_RANGES]}}
SAME_NAMESPACE = {"podSelector": {}}


def _ingress(rules: list[dict]) -> dict:
    return {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": rules}


def _egress(rules: list[dict]) -> dict:
    return {"podSelector": {}, "policyTypes": ["Egress"], "egress": rules}


def baseline_policies() -> dict[str, dict]:
    dns = {"to": [{**namespace("kube-system"), "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
           "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    return {"default-deny-ingress": {"podSelector": {}, "policyTypes": ["Ingress"]},
            "default-deny-egress": {"podSelector": {}, "policyTypes": ["Egress"]},
            "dns-egress": _egress([dns])}


def _within() -> dict[str, dict]:
    """The namespace's own pods talk to each other (a chart's parts: controller and proxies, operator
    and metrics server, Prometheus, Alertmanager and Grafana)."""
    return {"within-namespace-ingress": _ingress([{"from": [SAME_NAMESPACE]}]),
            "within-namespace-egress": _egress([{"to": [SAME_NAMESPACE]}])}


def _api_calls(peers: PolicyPeers) -> dict[str, dict]:
    return {"api-server-egress": _egress([{"to": api_server(peers), "ports": tcp(443)}])}


def _webhooks(peers: PolicyPeers, *ports: int) -> dict[str, dict]:
    return {"from-api-server": _ingress([{"from": blocks(peers.cluster_cidrs), "ports": tcp(*ports)}])}


def _aws_calls() -> dict[str, dict]:
    """AWS APIs (Route 53, STS) and, for cert-manager, the ACME directory: public HTTPS; the
    credentials from the node's Pod Identity agent."""
    return {"aws-egress": _egress([{"to": [PUBLIC], "ports": tcp(443)},
                                   {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": tcp(80)}])}


def monitoring(peers: PolicyPeers) -> dict[str, dict]:
    scraped = [{"to": [namespace(peers.serving_namespace)],
                "ports": tcp(VLLM_METRICS_PORT, *((PICKER_METRICS_PORT,) if peers.inference_extension else ()))},
               {"to": [namespace(GATEWAY_CONTROLLER_NAMESPACE)], "ports": tcp(ENVOY_STATS_PORT)},
               {"to": blocks(peers.cluster_cidrs), "ports": tcp(*NODE_SCRAPE_PORTS)}]
    return {**_within(), **_api_calls(peers), **_webhooks(peers, PROMETHEUS_OPERATOR_WEBHOOK_PORT),
            # KEDA's Prometheus trigger queries it (components/serving.py `_scaled_object`).
            "prometheus-from-keda": _ingress([{"from": [namespace(KEDA_NAMESPACE)], "ports": tcp(PROMETHEUS_PORT)}]),
            "scrape-egress": _egress(scraped)}


def gateway(peers: PolicyPeers) -> dict[str, dict]:
    """Envoy Gateway and its proxies: clients reach the listener through the NLB (IP targets: the
    NLB's own addresses or the clients', so from anywhere); the proxies call the vLLM Service or,
    with the inference extension, the endpoint picker, then the pod it picks; the controller talks
    to the API server and its extension server, the AI Gateway controller."""
    backends = [{"to": [namespace(peers.serving_namespace)],
                 "ports": tcp(VLLM_API_PORT, *((PICKER_GRPC_PORT,) if peers.inference_extension else ()))}]
    extension = [{"to": [namespace(AI_GATEWAY_NAMESPACE)], "ports": tcp(AIGW_EXTENSION_PORT)}] \
        if peers.inference_extension else []
    return {**_within(), **_api_calls(peers), **_webhooks(peers, EG_WEBHOOK_PORT),
            "listener-from-clients": _ingress([{"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}],
                                                "ports": tcp(ENVOY_LISTENER_PORT)},
                                               # Envoy's readiness port, for a health check the NLB sends
                                               # from its own subnets (inside the VPC)
                                               {"from": blocks((peers.vpc_cidr,)), "ports": tcp(ENVOY_READINESS_PORT)}]),
            "metrics-from-monitoring": _ingress([{"from": [namespace(MONITORING_NAMESPACE)],
                                                  "ports": tcp(ENVOY_STATS_PORT)}]),
            "backends-egress": _egress(backends + extension)}


def ai_gateway(peers: PolicyPeers) -> dict[str, dict]:
    return {**_api_calls(peers), **_webhooks(peers, AIGW_WEBHOOK_PORT),
            "extension-from-envoy-gateway": _ingress([{"from": [namespace(GATEWAY_CONTROLLER_NAMESPACE)],
                                                       "ports": tcp(AIGW_EXTENSION_PORT)}])}


def keda(peers: PolicyPeers) -> dict[str, dict]:
    return {**_within(), **_api_calls(peers), **_webhooks(peers, KEDA_METRICS_API_PORT, KEDA_WEBHOOK_PORT),
            "prometheus-egress": _egress([{"to": [namespace(MONITORING_NAMESPACE)], "ports": tcp(PROMETHEUS_PORT)}])}


def controller(peers: PolicyPeers, *webhook_ports: int) -> dict[str, dict]:
    return {**_api_calls(peers), **(_webhooks(peers, *webhook_ports) if webhook_ports else {})}


def namespace_policies(ns: str, peers: PolicyPeers) -> dict[str, dict]:
    """Every NetworkPolicy of `ns` (one of NAMESPACE_POLICIES), default-deny first."""
    return {**baseline_policies(), **NAMESPACE_POLICIES[ns](peers)}


NAMESPACE_POLICIES = {
    MONITORING_NAMESPACE: monitoring,
    GATEWAY_CONTROLLER_NAMESPACE: gateway,
    AI_GATEWAY_NAMESPACE: ai_gateway,
    KEDA_NAMESPACE: keda,
    LWS_NAMESPACE: lambda peers: controller(peers, LWS_WEBHOOK_PORT),
    CERT_MANAGER_NAMESPACE: lambda peers: {**controller(peers, CERT_MANAGER_WEBHOOK_PORT), **_aws_calls(),
                                           # the DNS-01 self-check asks the zone's authoritative servers
                                           "dns01-check-egress": _egress([{"to": [PUBLIC], "ports": [
                                               {"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}])},
    EXTERNAL_DNS_NAMESPACE: lambda peers: {**controller(peers), **_aws_calls()},
    # The device plugin talks to the kubelet through a socket on the host: no network at all.
    GPU_PLUGIN_NAMESPACE: lambda peers: {},
}
