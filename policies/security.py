"""Security rules: a closed control plane, hardened nodes, secrets kept secret, an authenticated and
rate-limited gateway.
"""
from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence

from pulumi_policy import Severity

from conventions import ANNOTATION_PROXIES, ANNOTATION_QUOTA_BUDGET_QPS, IMDS_HOP_LIMIT

from .resources import (
    BACKEND_TRAFFIC_POLICY, CLUSTER, CONFIG_MAP, GATEWAY, HELM_RELEASE, HTTP_ROUTE, LAUNCH_TEMPLATE,
    NODE_GROUP, SECURITY_POLICY, as_dict, as_list, get, k8s_name, namespace, pod_specs,
    selector_matches, truthy,
)
from .rules import Rule, resource_rule, stack_rule

RULES: list[Rule] = []
# More addresses than a /8 on the Kubernetes API is the internet, whatever the CIDRs look like:
# no office or VPN egress is that large.
MAX_API_ADDRESSES = 2 ** 24


@resource_rule(
    RULES, "eks-api-endpoint-restricted",
    description="The EKS API endpoint is private or open only to listed CIDRs, never 0.0.0.0/0.",
    severity=Severity.CRITICAL,
    remediation="Set llm-serving:apiAllowedCidrs to your office or VPN egress CIDRs, or make the endpoint "
                "private (vpcConfig.endpointPublicAccess: false).",
    tags=("security",))
def eks_api_endpoint_restricted(args, report_violation):
    if args.resource_type != CLUSTER:
        return
    vpc = get(args.props, "vpcConfig", default={})
    public = get(vpc, "endpointPublicAccess", default=True)       # AWS's default is a public endpoint
    if public is False or str(public).lower() == "false":
        return
    cidrs = [str(c) for c in as_list(get(vpc, "publicAccessCidrs", default=[]))]
    if not cidrs:
        report_violation("the EKS API endpoint is public and lists no publicAccessCidrs, so AWS opens it to "
                         "0.0.0.0/0")
        return
    open_to_all = [c for c in cidrs if ipaddress.ip_network(c, strict=False).prefixlen == 0]
    if open_to_all:
        report_violation(f"the EKS API endpoint is open to {', '.join(open_to_all)}")
        return
    # Judged by the address space covered, not the literal /0: 0.0.0.0/1 + 128.0.0.0/1 is open too.
    covered = sum(n.num_addresses for n in ipaddress.collapse_addresses(
        ipaddress.ip_network(c, strict=False) for c in cidrs if ipaddress.ip_network(c, strict=False).version == 4))
    if covered > MAX_API_ADDRESSES:
        report_violation(f"the EKS API endpoint is open to {covered / 2 ** 32:.1%} of IPv4 ({', '.join(cidrs)}), "
                         f"more than a /{32 - MAX_API_ADDRESSES.bit_length() + 1}; list only your own egress ranges")


@resource_rule(
    RULES, "launch-template-imdsv2",
    description="Every node launches from a launch template that requires IMDSv2 (httpTokens: required) with a "
                "hop limit of 1, so pods cannot reach the node role's credentials.",
    severity=Severity.HIGH,
    remediation="Give every node group a launch template with metadataOptions.httpTokens: required and "
                "httpPutResponseHopLimit: 1; give pods AWS access through EKS Pod Identity.",
    tags=("security", "nodes"))
def launch_template_imdsv2(args, report_violation):
    if args.resource_type == NODE_GROUP:
        if "launchTemplate" not in args.props:
            report_violation(f"node group {args.name} has no launch template; EKS's default one allows IMDSv1")
        return
    if args.resource_type != LAUNCH_TEMPLATE:
        return
    options = get(args.props, "metadataOptions", default={})
    if get(options, "httpEndpoint") == "disabled":
        return
    tokens = get(options, "httpTokens", default="optional")
    if tokens != "required":
        report_violation(f"launch template {args.name} allows IMDSv1 (metadataOptions.httpTokens: {tokens})")
    hops = get(options, "httpPutResponseHopLimit")
    if hops != IMDS_HOP_LIMIT:
        shown = "unset (the AMI's default applies; EKS's own templates use 2)" if hops is None else f"{hops:g}"
        report_violation(f"launch template {args.name} lets pods reach the instance metadata "
                         f"(httpPutResponseHopLimit {shown}); set it to {IMDS_HOP_LIMIT}")


@resource_rule(
    RULES, "launch-template-volumes-encrypted",
    description="Every EBS volume a launch template declares is encrypted, and the root volume is declared.",
    severity=Severity.HIGH,
    remediation="Declare the root volume in blockDeviceMappings with ebs.encrypted: 'true' (optionally a KMS key).",
    tags=("security", "nodes"))
def launch_template_volumes_encrypted(args, report_violation):
    if args.resource_type != LAUNCH_TEMPLATE:
        return
    mappings = as_list(get(args.props, "blockDeviceMappings", default=[]))
    if not mappings:
        report_violation(f"launch template {args.name} declares no blockDeviceMappings: the root volume comes from "
                         "the AMI, unencrypted unless the account encrypts EBS by default")
        return
    for m in mappings:
        ebs = get(m, "ebs")
        if ebs is None:
            continue                     # instance store: encrypted by the hardware on Nitro instances
        if not truthy(get(ebs, "encrypted")):
            report_violation(f"launch template {args.name} declares {get(m, 'deviceName', default='a volume')} "
                             "without ebs.encrypted: 'true'")


# Names of fields that carry credentials; compared lower-case with separators removed.
SECRET_SUFFIXES = ("password", "passwd", "token", "apikey", "apikeys", "secretkey", "accesskey",
                   "privatekey", "clientsecret")
REFERENCE_WORDS = ("existing", "secretname", "secretref", "keyref", "file", "path")
ENV_REFERENCE = re.compile(r"^\$\([A-Za-z_][A-Za-z0-9_]*\)$")


def looks_secret(name: str) -> bool:
    n = re.sub(r"[^a-z0-9]", "", name.lower())
    return n.endswith(SECRET_SUFFIXES) and not any(w in n for w in REFERENCE_WORDS)


def _literal(value) -> bool:
    return isinstance(value, str) and value != "" and not ENV_REFERENCE.match(value)


def _secret_flags(arguments: list) -> list[str]:
    """Flags such as `--api-key VALUE` or `--hf-token=VALUE` given a literal value."""
    found = []
    for i, arg in enumerate(arguments):
        if not isinstance(arg, str) or not arg.startswith("--"):
            continue
        flag, eq, value = arg.partition("=")
        if not eq:
            value = arguments[i + 1] if i + 1 < len(arguments) else None
            if isinstance(value, str) and value.startswith("--"):
                value = None
        if looks_secret(flag) and _literal(value):
            found.append(flag)
    return found


def _helm_secret_paths(values, path: str = "") -> list[str]:
    out = []
    if isinstance(values, Mapping):
        for key in values:
            value = values[key]
            here = f"{path}.{key}" if path else str(key)
            if looks_secret(str(key)) and _literal(value):
                out.append(here)
            else:
                out.extend(_helm_secret_paths(value, here))
    elif isinstance(values, Sequence) and not isinstance(values, (str, bytes)):
        for i, value in enumerate(values):
            out.extend(_helm_secret_paths(value, f"{path}[{i}]"))
    return out


@resource_rule(
    RULES, "secrets-only-as-secrets",
    description="Credentials (hub token, API keys, Grafana password) reach Kubernetes only as Secrets: never a "
                "literal env value, command-line flag, ConfigMap entry or Helm value.",
    severity=Severity.CRITICAL,
    remediation="Read the value with settings.pulumi_config.secret(name), put it in a kubernetes Secret, and "
                "reference it (env valueFrom.secretKeyRef, or the chart's existingSecret).",
    tags=("security", "secrets"))
def secrets_only_as_secrets(args, report_violation):
    kind = args.resource_type.rsplit(":", 1)[-1]
    name = k8s_name(args.props, args.name)
    pods = pod_specs(args.resource_type, args.props)
    if pods:
        containers = [c for pod in pods
                      for c in as_list(get(pod, "initContainers", default=[])) + as_list(get(pod, "containers", default=[]))]
        for c in containers:
            cname = get(c, "name", default="?")
            for env in as_list(get(c, "env", default=[])):
                var = str(get(env, "name", default=""))
                if looks_secret(var) and _literal(get(env, "value")):
                    report_violation(f"{kind} {name}: container {cname} sets {var} to a literal value; "
                                     "use valueFrom.secretKeyRef")
            arguments = as_list(get(c, "command", default=[])) + as_list(get(c, "args", default=[]))
            for flag in _secret_flags(arguments):
                report_violation(f"{kind} {name}: container {cname} passes {flag} a literal value on its "
                                 "command line; pass it through an env var from a Secret")
    elif args.resource_type == CONFIG_MAP:
        for key, value in as_dict(get(args.props, "data", default={})).items():
            if looks_secret(key) and _literal(value):
                report_violation(f"ConfigMap {name} holds {key}; credentials belong in a Secret")
    elif args.resource_type == HELM_RELEASE:
        for path in _helm_secret_paths(get(args.props, "values", default={})):
            report_violation(f"Helm release {name} passes {path} as a chart value; point the chart at a "
                             "Secret instead (e.g. existingSecret)")


def _attached(policy, kind: str, target_name: str, target_ns: str, target_labels: dict) -> bool:
    if namespace(policy.props) != target_ns:
        return False
    spec = get(policy.props, "spec", default={})
    refs = as_list(get(spec, "targetRefs", default=[]))
    if get(spec, "targetRef") is not None:
        refs.append(get(spec, "targetRef"))
    if any(get(r, "kind") == kind and get(r, "name") == target_name for r in refs):
        return True
    return any(get(s, "kind") == kind and selector_matches(as_dict(s), target_labels)
               for s in as_list(get(spec, "targetSelectors", default=[])))


def _route_coverage(route, policies, gateways, satisfies) -> tuple[bool, list[str]]:
    """Whether `satisfies` holds for the route, Envoy Gateway style: a policy attached to the route
    replaces the Gateway's (unless it sets mergeType); otherwise every parent Gateway needs one."""
    ns = namespace(route.props)
    name = k8s_name(route.props, route.name)
    labels = as_dict(get(route.props, "metadata", "labels", default={}))
    on_route = [p for p in policies if _attached(p, "HTTPRoute", name, ns, labels)]
    parents = []
    for ref in as_list(get(route.props, "spec", "parentRefs", default=[])):
        if get(ref, "kind", default="Gateway") == "Gateway":
            parents.append((get(ref, "name"), get(ref, "namespace", default=ns)))
    on_gateways = []
    for gw_name, gw_ns in parents:
        gw = gateways.get((gw_name, gw_ns))
        gw_labels = as_dict(get(gw.props, "metadata", "labels", default={})) if gw else {}
        on_gateways.append([p for p in policies if _attached(p, "Gateway", gw_name, gw_ns, gw_labels)])
    gateway_ok = bool(parents) and all(any(satisfies(p) for p in ps) for ps in on_gateways)
    if on_route:
        if any(satisfies(p) for p in on_route):
            return True, []
        merges = any(get(p.props, "spec", "mergeType") for p in on_route)
        return merges and gateway_ok, [k8s_name(p.props, p.name) for p in on_route]
    return gateway_ok, []


def _gateways(resources) -> dict:
    return {(k8s_name(r.props, r.name), namespace(r.props)): r for r in resources if r.resource_type == GATEWAY}


AUTH_METHODS = ("apiKeyAuth", "jwt", "oidc", "basicAuth", "extAuth")


def _authenticates(policy) -> bool:
    spec = get(policy.props, "spec", default={})
    return any(get(spec, m) is not None for m in AUTH_METHODS)


def _uncovered_routes(args, policy_type: str, covers):
    """(route name, route, overriding route-level policies) for each HTTPRoute that no policy of
    `policy_type` satisfying `covers` protects, on the route or its Gateway."""
    policies = [r for r in args.resources if r.resource_type == policy_type]
    gateways = _gateways(args.resources)
    for route in (r for r in args.resources if r.resource_type == HTTP_ROUTE):
        ok, overriding = _route_coverage(route, policies, gateways, covers)
        if not ok:
            yield k8s_name(route.props, route.name), route, overriding


@stack_rule(
    RULES, "routes-behind-auth",
    description="Every HTTPRoute is behind an Envoy Gateway SecurityPolicy that authenticates (API key, JWT, "
                "OIDC, basic or external auth), on the route or its Gateway.",
    severity=Severity.CRITICAL,
    remediation="Attach a SecurityPolicy with apiKeyAuth (keys from llm-serving:apiKeys) to the route or its "
                "Gateway; a route-level SecurityPolicy replaces the Gateway's, so give it authentication too.",
    tags=("security", "gateway"))
def routes_behind_auth(args, report_violation):
    for name, route, overriding in _uncovered_routes(args, SECURITY_POLICY, _authenticates):
        if overriding:
            report_violation(f"HTTPRoute {name} has SecurityPolicy {', '.join(overriding)} without authentication, "
                             "which replaces any on its Gateway", route.urn)
        else:
            report_violation(f"HTTPRoute {name} is not behind a SecurityPolicy that authenticates", route.urn)


def _rate_limits(policy) -> bool:
    limit = get(policy.props, "spec", "rateLimit", default={})
    return bool(as_list(get(limit, "local", "rules", default=[])) or as_list(get(limit, "global", "rules", default=[])))


def _per_second(limit) -> float:
    unit_s = {"Second": 1, "Minute": 60, "Hour": 3600, "Day": 86400}.get(str(get(limit, "unit")), 1)
    return float(get(limit, "requests", default=0)) / unit_s


@stack_rule(
    RULES, "quotas-within-capacity-after-zone-loss",
    description="The per-key rate limits of every BackendTrafficPolicy, summed over keys and Envoy proxies, stay "
                "within the quota budget the program sized (the capacity left after losing a zone times "
                "gateway.rateLimitShare), so N+1 holds under full quota.",
    severity=Severity.HIGH,
    remediation="Lower the per-key limits or the number of keys; with loadTest.enabled the load test's key is "
                "metered at the fleet's full capacity: run the load test in staging or before prod takes traffic.",
    tags=("gateway", "capacity", "failure-domains"))
def quotas_within_capacity_after_zone_loss(args, report_violation):
    for policy in (r for r in args.resources if r.resource_type == BACKEND_TRAFFIC_POLICY):
        notes = as_dict(get(policy.props, "metadata", "annotations", default={}))
        budget, proxies = notes.get(ANNOTATION_QUOTA_BUDGET_QPS), notes.get(ANNOTATION_PROXIES)
        rules = as_list(get(policy.props, "spec", "rateLimit", "local", "rules", default=[]))
        if budget is None or proxies is None or not rules:
            continue
        per_key = {str(get(r, "clientSelectors", 0, "headers", 0, "value", default="?")): _per_second(get(r, "limit"))
                   for r in rules}
        total = sum(per_key.values()) * int(proxies)
        if total > float(budget) * 1.0001:
            top = max(per_key, key=per_key.get)
            report_violation(f"BackendTrafficPolicy {k8s_name(policy.props, policy.name)}: quotas sum to "
                             f"{total:.2f} QPS over {proxies} proxies, above the {float(budget):.2f} QPS the "
                             f"capacity left after a zone loss allows (key {top}: {per_key[top]:.2f} QPS per proxy)",
                             policy.urn)


@stack_rule(
    RULES, "rate-limit-exists",
    description="Every HTTPRoute is rate limited by an Envoy Gateway BackendTrafficPolicy (on the route or its "
                "Gateway).",
    severity=Severity.HIGH,
    remediation="Attach a BackendTrafficPolicy with rateLimit rules to the route or its Gateway; the gateway "
                "component sizes the limits from the plan's capacity after a zone loss.",
    tags=("security", "gateway", "capacity"))
def rate_limit_exists(args, report_violation):
    for name, route, overriding in _uncovered_routes(args, BACKEND_TRAFFIC_POLICY, _rate_limits):
        if overriding:
            report_violation(f"HTTPRoute {name} has BackendTrafficPolicy {', '.join(overriding)} without a "
                             "rateLimit, which replaces any on its Gateway", route.urn)
        else:
            report_violation(f"HTTPRoute {name} has no rate limit", route.urn)
