"""The controller contract: every object that needs a controller has it, installed by the same
program, and depends on it.

A manifest that validates is not a system that works: a custom resource whose controller is not
installed stays unreconciled, a Service annotation nobody acts on stays Pending, a Certificate
whose issuer is missing never becomes a Secret. The rule below reads the resource graph alone
(types, inputs, dependencies) and reports, for each such object, a missing controller, a missing
CRD source, a missing issuer or certificate, or a missing dependency (so `pulumi up` would
create the object before what acts on it, or destroy them in the wrong order).

What acts on what (the table is the contract; docs/contracts.md explains it):
- custom resources, by API group: the Helm chart(s) that run their controller and install their
  CRDs, or the CRD manifest the program applies (InferencePool);
- Service annotations (also those an EnvoyProxy puts on the Service Envoy Gateway creates);
- cert-manager Certificates -> their issuer; Gateway listeners -> the Secret their certificate is.
"""
from __future__ import annotations

from dataclasses import dataclass

from pulumi_policy import Severity

from conventions import ANNOTATION_AWS_LB_TYPE, ANNOTATION_EXTERNAL_DNS_HOSTNAME, AWS_LB_TYPE_EXTERNAL, EFA_RESOURCE

from .resources import GATEWAY, HELM_RELEASE, SERVICE, as_dict, as_list, get, k8s_name, namespace
from .rules import Rule, stack_rule

RULES: list[Rule] = []

CONFIG_FILE = "kubernetes:yaml/v2:ConfigFile"
SECRET = "kubernetes:core/v1:Secret"
CERTIFICATE = "kubernetes:cert-manager.io/v1:Certificate"
CLUSTER_ISSUER = "kubernetes:cert-manager.io/v1:ClusterIssuer"
ENVOY_PROXY = "kubernetes:gateway.envoyproxy.io/v1alpha1:EnvoyProxy"
INFERENCE_CRDS = "gateway-api-inference-extension"     # in the CRD manifest's URL


@dataclass(frozen=True)
class Controller:
    charts: tuple[str, ...]            # Helm charts (last path segment) that must be installed
    crd_source: str | None = None      # a ConfigFile whose file names this, when the CRDs are not in a chart



# Custom resources by API group.
BY_API_GROUP: dict[str, Controller] = {
    "gateway.networking.k8s.io": Controller(("gateway-helm",)),            # Envoy Gateway (CRDs in its chart)
    "gateway.envoyproxy.io": Controller(("gateway-helm",)),
    # Envoy Gateway routes to a pool only through the AI Gateway controller (its extension server).
    "inference.networking.k8s.io": Controller(("gateway-helm", "ai-gateway-helm"), INFERENCE_CRDS),
    "monitoring.coreos.com": Controller(("kube-prometheus-stack",)),       # prometheus-operator
    "keda.sh": Controller(("keda",)),
    "cert-manager.io": Controller(("cert-manager",)),
    # kubernetes-sigs/lws v0.10.0 (CRDs in the chart's crds/, components/leader_worker_set.py).
    "leaderworkerset.x-k8s.io": Controller(("lws",)),
}
# Extended resources a pod requests, by the device plugin that advertises them on the nodes.
BY_RESOURCE: dict[str, Controller] = {
    EFA_RESOURCE: Controller(("aws-efa-k8s-device-plugin",)),     # components/efa.py
}
# Service annotations by the controller that acts on them (the in-tree AWS provider answers
# ImplementedElsewhere for `aws-load-balancer-type: external`).
BY_ANNOTATION: dict[str, Controller] = {
    ANNOTATION_AWS_LB_TYPE: Controller(("aws-load-balancer-controller",)),
    ANNOTATION_EXTERNAL_DNS_HOSTNAME: Controller(("external-dns",)),
}
BUILT_IN_GROUPS = {"core", "apps", "batch", "policy", "rbac.authorization.k8s.io", "networking.k8s.io",
                   "storage.k8s.io", "apiextensions.k8s.io", "autoscaling", "scheduling.k8s.io",
                   "admissionregistration.k8s.io", "coordination.k8s.io", "helm.sh", "yaml"}


def api_group(resource_type: str) -> str | None:
    """`kubernetes:<group>/<version>:<Kind>` -> group; None for non-Kubernetes types."""
    if not resource_type.startswith("kubernetes:") or resource_type.count(":") != 2:
        return None
    return resource_type.split(":")[1].rsplit("/", 1)[0]


def chart_name(release) -> str:
    return str(get(release.props, "chart", default="")).rstrip("/").rsplit("/", 1)[-1]


class Graph:
    """The stack's resources with what each depends on, transitively (dependencies, property
    dependencies and what the parent depends on, as the engine orders them)."""

    def __init__(self, resources):
        self.resources = list(resources)
        self._closure: dict[str, set[str]] = {}

    def depends_on(self, resource, target) -> bool:
        return target.urn in self._reach(resource)

    def _reach(self, resource) -> set[str]:
        if resource.urn in self._closure:
            return self._closure[resource.urn]
        self._closure[resource.urn] = seen = set()
        stack = [resource]
        while stack:
            current = stack.pop()
            direct = list(current.dependencies or [])
            for deps in (current.property_dependencies or {}).values():
                direct.extend(deps)
            if current.parent is not None:
                direct.append(current.parent)
            for dep in direct:
                if dep.urn not in seen:
                    seen.add(dep.urn)
                    stack.append(dep)
        return seen

    def releases(self, chart: str) -> list:
        return [r for r in self.resources if r.resource_type == HELM_RELEASE and chart_name(r) == chart]

    def crd_manifests(self, source: str) -> list:
        return [r for r in self.resources
                if r.resource_type == CONFIG_FILE and source in str(get(r.props, "file", default=""))]


def _check(graph: Graph, resource, controller: Controller, what: str) -> list[str]:
    """Problems with `resource` (described as `what`) against its controller."""
    problems = []
    needed = [(f"chart {c}", graph.releases(c)) for c in controller.charts]
    if controller.crd_source:
        needed.append((f"the {controller.crd_source} CRD manifest", graph.crd_manifests(controller.crd_source)))
    for label, found in needed:
        if not found:
            problems.append(f"{what} needs {label}, which this program does not install")
        elif not any(graph.depends_on(resource, r) for r in found):
            problems.append(f"{what} does not depend on {label}: it could be created before its controller "
                            "(and outlive it on destroy)")
    return problems


def _service_annotations(resource) -> dict:
    if resource.resource_type == SERVICE:
        return as_dict(get(resource.props, "metadata", "annotations", default={}))
    if resource.resource_type == ENVOY_PROXY:      # the Service Envoy Gateway creates for the proxies
        return as_dict(get(resource.props, "spec", "provider", "kubernetes", "envoyService", "annotations",
                           default={}))
    return {}


def _service_type(resource) -> str | None:
    if resource.resource_type == SERVICE:
        return get(resource.props, "spec", "type")
    if resource.resource_type == ENVOY_PROXY:
        return get(resource.props, "spec", "provider", "kubernetes", "envoyService", "type", default="LoadBalancer")
    return None


def _certificate_problems(graph: Graph, resource) -> list[str]:
    name = k8s_name(resource.props, resource.name)
    ref = as_dict(get(resource.props, "spec", "issuerRef", default={}))
    if get(ref, "kind", default="Issuer") != "ClusterIssuer":
        return [f"Certificate {name} uses a namespaced Issuer; this program issues through ClusterIssuers"]
    issuers = [r for r in graph.resources if r.resource_type == CLUSTER_ISSUER
               and k8s_name(r.props, r.name) == get(ref, "name")]
    if not issuers:
        return [f"Certificate {name} names ClusterIssuer {get(ref, 'name')}, which this program does not create"]
    if not any(graph.depends_on(resource, i) for i in issuers):
        return [f"Certificate {name} does not depend on its ClusterIssuer {get(ref, 'name')}"]
    return []


def _listener_problems(graph: Graph, gateway) -> list[str]:
    """Each HTTPS listener's certificate Secret is made by this program (a Certificate that
    writes it, or the Secret itself) and the Gateway depends on what makes it."""
    ns, name = namespace(gateway.props), k8s_name(gateway.props, gateway.name)
    problems = []
    for listener in as_list(get(gateway.props, "spec", "listeners", default=[])):
        for ref in as_list(get(listener, "tls", "certificateRefs", default=[])):
            secret = get(ref, "name")
            makers = [r for r in graph.resources if namespace(r.props) == get(ref, "namespace", default=ns) and (
                (r.resource_type == CERTIFICATE and get(r.props, "spec", "secretName") == secret)
                or (r.resource_type == SECRET and k8s_name(r.props, r.name) == secret))]
            if not makers:
                problems.append(f"Gateway {name} serves certificate Secret {secret}, which nothing in this "
                                "program creates (no Certificate writes it, no Secret is it)")
            elif not any(graph.depends_on(gateway, m) for m in makers):
                problems.append(f"Gateway {name} does not depend on what creates its certificate Secret {secret}")
    return problems


def _requested_resources(props) -> set[str]:
    """Every resource name a container anywhere in the object requests or limits (pod templates of
    any kind, LeaderWorkerSets' leader and worker templates included)."""
    found: set[str] = set()
    stack = [props]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("resources"), dict):
                for part in ("limits", "requests"):
                    found.update(as_dict(get(node["resources"], part, default={})))
            stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend(node)
    return found


def contract_violations(resources) -> list[tuple[str, str]]:
    """(urn, message) for every broken clause of the contract."""
    graph = Graph(resources)
    out: list[tuple[str, str]] = []
    for r in graph.resources:
        group = api_group(r.resource_type)
        kind = r.resource_type.rsplit(":", 1)[-1]
        name = k8s_name(r.props, r.name) if group else r.name
        if group and group not in BUILT_IN_GROUPS:
            controller = BY_API_GROUP.get(group)
            if controller is None:
                out.append((r.urn, f"{kind} {name}: no controller is known for API group {group}; add it to "
                                   "policies/controllers.py with the chart that runs it"))
            else:
                out.extend((r.urn, m) for m in _check(graph, r, controller, f"{kind} {name}"))
        annotations = _service_annotations(r)
        if _service_type(r) == "LoadBalancer" and annotations.get(ANNOTATION_AWS_LB_TYPE) != AWS_LB_TYPE_EXTERNAL:
            out.append((r.urn, f"{kind} {name}: a LoadBalancer Service without "
                               f"{ANNOTATION_AWS_LB_TYPE}: {AWS_LB_TYPE_EXTERNAL} falls to the "
                               "in-tree AWS provider (a Classic Load Balancer, no source-range enforcement by "
                               "the AWS Load Balancer Controller)"))
        for key in annotations:
            if key in BY_ANNOTATION:
                out.extend((r.urn, m) for m in _check(graph, r, BY_ANNOTATION[key], f"{kind} {name} ({key})"))
        for key in _requested_resources(r.props) & BY_RESOURCE.keys():
            out.extend((r.urn, m) for m in _check(graph, r, BY_RESOURCE[key], f"{kind} {name} ({key})"))
        if r.resource_type == CERTIFICATE:
            out.extend((r.urn, m) for m in _certificate_problems(graph, r))
        if r.resource_type == GATEWAY:
            out.extend((r.urn, m) for m in _listener_problems(graph, r))
    return out


@stack_rule(
    RULES, "controller-contract",
    description="Every custom resource, load-balancer or DNS Service annotation, Certificate issuer and Gateway "
                "certificate has its controller (and CRDs) installed by this program and depends on it.",
    severity=Severity.CRITICAL,
    remediation="Install the controller the message names (a component in components/) and pass it in the "
                "object's depends_on; for a new API group, add its controller to policies/controllers.py.",
    tags=("controllers", "ordering"))
def controller_contract(args, report_violation):
    for urn, message in contract_violations(args.resources):
        report_violation(message, urn)
