"""Default-deny network policies in the monitoring, gateway and controller namespaces, and each flow
their pods need, judged the way a NetworkPolicy engine judges it: a flow passes when an egress rule of
the source's namespace and an ingress rule of the destination's both admit it (a namespace without
policies admits everything; the ones here all have them)."""
from __future__ import annotations

import ipaddress

import pytest

from offline.manifests import kubernetes_objects

STACKS = {"prod": ("prod", None), "prod-burst": ("prod", {"serving": {"burstScaling": True}}),
          "prod-multinode": ("prod-multinode", None)}
SERVING = "llm-serving"
POLICED = {"monitoring", "envoy-gateway-system", "envoy-ai-gateway-system", "cert-manager", "external-dns",
           "nvidia-device-plugin"}
EXTRA = {"prod-burst": {"keda"}, "prod-multinode": {"lws-system"}}

API_SERVICE = ("ip", "172.20.0.1")      # the `kubernetes` Service address (SERVICE_CIDR's first)


@pytest.fixture(params=list(STACKS))
def stack_objects(recorded, request):
    stack, overrides = STACKS[request.param]
    return request.param, kubernetes_objects(recorded(stack, overrides))


def policies(objects, ns):
    return [o["spec"] for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == ns]


def node_address(objects) -> str:
    """An address in the cluster's first private subnet (a node, or a control-plane interface): the
    VPC's first /19 block, as components/network.py lays it out from the prod fixture's VPC CIDR."""
    picker = next(p for p in policies(objects, SERVING) if "Egress" in p["policyTypes"]
                  and p["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/name") == "endpoint-picker")
    cidr = next(peer["ipBlock"]["cidr"] for rule in picker["egress"] for peer in rule["to"]
                if "ipBlock" in peer and not peer["ipBlock"]["cidr"].startswith("172.20."))
    return str(ipaddress.ip_network(cidr)[10])


def _peer_admits(peer, own_ns, other) -> bool:
    kind, value = other[0], other[1]
    if "ipBlock" in peer:
        if kind != "ip":
            return False
        block = peer["ipBlock"]
        address = ipaddress.ip_address(value)
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(e) for e in block.get("except", []))
    if kind != "pod":
        return False
    _, ns, labels = other
    if "namespaceSelector" in peer:
        wanted = peer["namespaceSelector"].get("matchLabels", {})
        if wanted.get("kubernetes.io/metadata.name", ns) != ns:
            return False
    elif ns != own_ns:
        return False
    return peer.get("podSelector", {}).get("matchLabels", {}).items() <= labels.items()


def _admits(specs, direction, own_ns, own_labels, other, port, protocol="TCP") -> bool:
    selecting = [s for s in specs if direction in s["policyTypes"]
                 and s["podSelector"].get("matchLabels", {}).items() <= own_labels.items()]
    if not selecting:
        return True
    key, peers_key = ("egress", "to") if direction == "Egress" else ("ingress", "from")
    for spec in selecting:
        for rule in spec.get(key, []):
            ports = rule.get("ports")
            if ports and not any(p["port"] == port and p.get("protocol", "TCP") == protocol for p in ports):
                continue
            peers = rule.get(peers_key)
            if not peers or any(_peer_admits(peer, own_ns, other) for peer in peers):
                return True
    return False


def passes(objects, source, destination, port, protocol="TCP") -> bool:
    """`source`, `destination`: ("pod", namespace, labels) or ("ip", address)."""
    ok = True
    if source[0] == "pod":
        ok &= _admits(policies(objects, source[1]), "Egress", source[1], source[2], destination, port, protocol)
    if destination[0] == "pod":
        ok &= _admits(policies(objects, destination[1]), "Ingress", destination[1], destination[2], source,
                      port, protocol)
    return ok


def pod(ns, **labels):
    return ("pod", ns, {k.replace("__", "/").replace("_", "."): v for k, v in labels.items()})


ENVOY, EG = pod("envoy-gateway-system", app="envoy"), pod("envoy-gateway-system", control="envoy-gateway")
PROMETHEUS, KEDA = pod("monitoring", app="prometheus"), pod("keda", app="keda-operator")
VLLM = ("pod", SERVING, {"app.kubernetes.io/name": "vllm", "llm-serving.io/role": "serving"})
PICKER = ("pod", SERVING, {"app.kubernetes.io/name": "endpoint-picker", "llm-serving.io/role": "gateway"})


def test_every_policed_namespace_denies_by_default_and_resolves_names(stack_objects):
    stack, objects = stack_objects
    made = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"} - {SERVING}
    assert made == POLICED | EXTRA.get(stack, set()), stack
    for ns in made:
        named = {o["metadata"]["name"]: o["spec"] for o in objects
                 if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == ns}
        assert named["default-deny-ingress"] == {"podSelector": {}, "policyTypes": ["Ingress"]}, ns
        assert named["default-deny-egress"] == {"podSelector": {}, "policyTypes": ["Egress"]}, ns
        assert passes(objects, pod(ns), pod("kube-system", **{"k8s-app": "kube-dns"}), 53, "UDP"), ns


# (what, source, destination, port): each needed; a destination "node" is an address in the private subnets.
NEEDED = [
    ("Prometheus scrapes vLLM's metrics port", PROMETHEUS, VLLM, 9400),
    ("Prometheus scrapes the picker", PROMETHEUS, PICKER, 9090),
    ("Prometheus scrapes Envoy's stats", PROMETHEUS, ENVOY, 19001),
    ("Prometheus scrapes the kubelet", PROMETHEUS, "node", 10250),
    ("Prometheus scrapes the node exporter", PROMETHEUS, "node", 9100),
    ("Grafana queries Prometheus", pod("monitoring", app="grafana"), PROMETHEUS, 9090),
    ("Prometheus sends to Alertmanager", PROMETHEUS, pod("monitoring", app="alertmanager"), 9093),
    ("the API server calls the Prometheus operator's webhook", "node", pod("monitoring"), 10250),
    ("the operator watches the API server", pod("monitoring"), API_SERVICE, 443),
    ("clients reach the listener", ("ip", "203.0.113.9"), ENVOY, 10443),
    ("Envoy calls vLLM", ENVOY, VLLM, 8000),
    ("Envoy calls the picker", ENVOY, PICKER, 9002),
    ("Envoy gets its config from its controller", ENVOY, EG, 18000),
    ("Envoy Gateway calls its extension server", EG, pod("envoy-ai-gateway-system"), 1063),
    ("the API server calls Envoy Gateway's webhook", "node", EG, 9443),
    ("the API server calls the AI Gateway's webhook", "node", pod("envoy-ai-gateway-system"), 9443),
    ("the AI Gateway watches the API server", pod("envoy-ai-gateway-system"), API_SERVICE, 443),
    ("cert-manager reaches the ACME CA", pod("cert-manager"), ("ip", "198.51.100.7"), 443),
    ("cert-manager's DNS-01 check asks the zone's servers", pod("cert-manager"), ("ip", "198.51.100.7"), 53),
    ("cert-manager gets credentials from the Pod Identity agent", pod("cert-manager"), ("ip", "169.254.170.23"), 80),
    ("the API server calls cert-manager's webhook", "node", pod("cert-manager"), 10250),
    ("external-dns reaches Route 53", pod("external-dns"), ("ip", "198.51.100.8"), 443),
    ("external-dns watches the API server", pod("external-dns"), API_SERVICE, 443),
]
NEEDED_IN = {
    "prod-burst": [("KEDA queries Prometheus", KEDA, PROMETHEUS, 9090),
                   ("the API server calls KEDA's metrics API", "node", KEDA, 6443),
                   ("KEDA watches the API server", KEDA, API_SERVICE, 443)],
    "prod-multinode": [("the API server calls the LWS webhook", "node", pod("lws-system"), 9443),
                       ("the LWS controller watches the API server", pod("lws-system"), API_SERVICE, 443)],
}
REFUSED = [
    ("Prometheus calls the model", PROMETHEUS, VLLM, 8000),
    ("Prometheus reaches the internet", PROMETHEUS, ("ip", "198.51.100.7"), 443),
    ("the internet reaches Prometheus", ("ip", "203.0.113.9"), PROMETHEUS, 9090),
    ("the internet reaches Envoy's admin stats", ("ip", "203.0.113.9"), ENVOY, 19001),
    ("Envoy reaches the internet", ENVOY, ("ip", "198.51.100.7"), 443),
    ("the device plugin reaches anything", pod("nvidia-device-plugin"), API_SERVICE, 443),
    ("cert-manager reaches the instance metadata service", pod("cert-manager"), ("ip", "169.254.169.254"), 80),
    ("the AI Gateway reaches vLLM", pod("envoy-ai-gateway-system"), VLLM, 8000),
]


def _resolved(objects, end):
    return ("ip", node_address(objects)) if end == "node" else end


def _flows(stack):
    return [*NEEDED, *NEEDED_IN.get(stack, [])]


def test_every_needed_flow_passes(stack_objects):
    stack, objects = stack_objects
    for what, source, destination, port in _flows(stack):
        protocol = "UDP" if port == 53 else "TCP"
        assert passes(objects, _resolved(objects, source), _resolved(objects, destination), port, protocol), what


def test_what_no_pod_needs_is_refused(stack_objects):
    _, objects = stack_objects
    for what, source, destination, port in REFUSED:
        assert not passes(objects, _resolved(objects, source), _resolved(objects, destination), port), what


def test_the_pickers_api_server_egress_is_the_service_and_the_clusters_private_subnets(recorded):
    """Not the whole VPC: the public subnets (the load balancer's, the NAT's) and the VPC's unused
    blocks are out; the private subnets stay in, where EKS puts the control plane's interfaces."""
    from components.network import subnet_cidrs
    recording = recorded("prod")
    objects = kubernetes_objects(recording)
    (vpc,) = recording.of_type("aws:ec2/vpc:Vpc")
    vpc_cidr = vpc.inputs["cidrBlock"]
    (egress,) = [o["spec"] for o in objects if o["metadata"]["name"] == "epp-egress"]
    cidrs = {peer["ipBlock"]["cidr"] for rule in egress["egress"] for peer in rule["to"] if "ipBlock" in peer}
    private = {subnet_cidrs(vpc_cidr, "us-east-1", f"us-east-1{z}")[0] for z in "ab"}
    assert cidrs == {"172.20.0.1/32", *private}
    public = ipaddress.ip_network(subnet_cidrs(vpc_cidr, "us-east-1", "us-east-1a")[1])
    assert not passes(objects, PICKER, ("ip", str(public[10])), 443)
    assert vpc_cidr not in cidrs
    assert passes(objects, PICKER, API_SERVICE, 443)
