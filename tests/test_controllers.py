"""What makes the first `pulumi up` work: every object's controller is installed, gets what it
needs (IAM through Pod Identity, a hosted zone, CRDs), and comes first; the checks catch it when not."""
from __future__ import annotations

import copy
import hashlib
import ipaddress
import json
from pathlib import Path

import pytest

from components import load_balancer_controller as lbc
from conventions import SERVICE_CIDR
from components.gateway import AIGW_CONTROLLER_LABELS
from deployment.gateway import GATEWAY_CLUSTER_IP
from conventions import ANNOTATION_AWS_LB_TYPE, ANNOTATION_EXTERNAL_DNS_HOSTNAME
from policies.controllers import contract_violations
from offline.policy_run import evaluate, stack_resources
from tests.conftest import ROOT
from tests.stacks import stack_config

RELEASE = "kubernetes:helm.sh/v3:Release"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ZONE_SPREAD_KEY = "topology.kubernetes.io/zone"
PROVIDED_TLS = {"hostname": "llm.example.com", "certificate": "provided", "apiKeyNames": ["team-a", "team-b"]}


VARIANTS = {"prod": ("prod", None), "staging": ("staging", None), "dev": ("dev", None),
            "prod-burst": ("prod", {"serving": {"burstScaling": True}}),
            "prod-provided-tls": ("prod", {"gateway": PROVIDED_TLS})}


@pytest.fixture
def programs(recorded):
    """The recordings by variant name (built once per session by `recorded`; read only)."""
    class ByVariant:
        def __getitem__(self, variant: str):
            stack, overrides = VARIANTS[variant]
            return recorded(stack, overrides)
    return ByVariant()


@pytest.fixture
def broken_copy(programs):
    """broken_copy(variant) -> a copy of that variant's recording to break on purpose (the shared
    recording is only read; a copy is the same graph as a fresh build, at a fortieth of its cost)."""
    return lambda variant: copy.deepcopy(programs[variant])


def releases(recording) -> dict[str, object]:
    return {r.inputs["chart"].rsplit("/", 1)[-1]: r for r in recording.of_type(RELEASE)}


def depends_on(recording, resource, target) -> bool:
    """Transitively, as the engine orders creation."""
    by_urn, seen, todo = recording.by_urn(), set(), [resource]
    while todo:
        current = todo.pop()
        for urn in [*current.dependencies, *(u for us in current.property_dependencies.values() for u in us),
                    current.parent]:
            if urn and urn not in seen and urn in by_urn:
                seen.add(urn)
                todo.append(by_urn[urn])
    return target.urn in seen


def kind(recording, k: str):
    return [r for r in recording.resources if r.type.endswith(f":{k}")]


# -- the contract holds, and breaking it is caught -------------------------------------------
@pytest.mark.parametrize("variant", ["prod", "staging", "dev", "prod-burst", "prod-provided-tls"])
def test_the_controller_contract_holds(programs, variant):
    assert contract_violations(stack_resources(programs[variant])) == []


def drop(recording, name: str):
    """The recording as if the program had never created `name` (nor anything under it)."""
    gone = {r.urn for r in recording.resources if r.name == name}
    gone |= {r.urn for r in recording.resources if r.parent in gone}
    kept = [r for r in recording.resources if r.urn not in gone]
    for r in kept:
        r.dependencies = [u for u in r.dependencies if u not in gone]
    recording.resources = kept
    return recording


def unhook(recording, name: str, dependency_prefix: str):
    """`name` no longer depends on anything whose name starts with `dependency_prefix` (a lost depends_on)."""
    cut = {r.urn for r in recording.resources if r.name.startswith(dependency_prefix)}
    for r in recording.resources:
        if r.name == name:
            r.dependencies = [u for u in r.dependencies if u not in cut]
    return recording


@pytest.mark.parametrize("breakage, message", [
    (lambda rec: drop(rec, "aws-lb-controller-release"),
     "EnvoyProxy llm-gateway (service.beta.kubernetes.io/aws-load-balancer-type) needs chart "
     "aws-load-balancer-controller, which this program does not install"),
    (lambda rec: unhook(rec, "llm-gateway-envoyproxy", "aws-lb-controller"),
     "EnvoyProxy llm-gateway (service.beta.kubernetes.io/aws-load-balancer-type) does not depend on chart "
     "aws-load-balancer-controller: it could be created before its controller (and outlive it on destroy)"),
    (lambda rec: drop(rec, "external-dns-release"),
     "EnvoyProxy llm-gateway (external-dns.alpha.kubernetes.io/hostname) needs chart external-dns, which this "
     "program does not install"),
    (lambda rec: drop(rec, "cert-manager-issuer"),
     "Certificate llm-gateway-tls names ClusterIssuer llm-serving-acme, which this program does not create"),
    (lambda rec: drop(rec, "gateway-certificate-certificate"),
     "Gateway llm-gateway serves certificate Secret llm-gateway-tls, which nothing in this program creates "
     "(no Certificate writes it, no Secret is it)"),
    (lambda rec: drop(rec, "llm-gateway-inference-crds"),
     "InferencePool vllm needs the gateway-api-inference-extension CRD manifest, which this program does not install"),
    (lambda rec: drop(rec, "monitoring-kube-prometheus-stack"),
     "PodMonitor vllm needs chart kube-prometheus-stack, which this program does not install"),
])
def test_breaking_the_contract_on_purpose_is_caught(broken_copy, breakage, message):
    recording = breakage(broken_copy("prod"))
    found = [v["message"] for v in evaluate(recording, "prod") if v["policy"] == "controller-contract"]
    assert message in found
    assert all(v["level"] == "mandatory" for v in evaluate(recording, "prod") if v["policy"] == "controller-contract")


def test_a_scaled_object_without_keda_is_caught(broken_copy):
    recording = drop(broken_copy("prod-burst"), "serving-keda")
    assert any(m.startswith("ScaledObject ") and "needs chart keda" in m
               for _, m in contract_violations(stack_resources(recording)))


# -- AWS Load Balancer Controller -----------------------------------------------------------
def test_the_load_balancer_controller_runs_two_replicas_over_zones_on_system_nodes(programs):
    values = releases(programs["prod"])["aws-load-balancer-controller"].inputs["values"]
    assert (values["replicaCount"], values["nodeSelector"]) == (2, {"llm-serving.io/role": "system"})
    assert [(c["topologyKey"], c["whenUnsatisfiable"]) for c in values["topologySpreadConstraints"]] == \
        [(ZONE_SPREAD_KEY, "DoNotSchedule")]
    assert values["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"] == lbc.SELECTOR
    # No IMDS for pods (hop limit 1): region and VPC come from the values.
    assert values["region"] == "us-east-1" and values["vpcId"].startswith("vpc-")
    assert values["serviceAccount"] == {"create": True, "name": lbc.SERVICE_ACCOUNT}


@pytest.mark.parametrize("service_account, policy_file", [
    (f"{lbc.NAMESPACE}/{lbc.SERVICE_ACCOUNT}", lbc.IAM_POLICY_FILE),
])
def test_the_controller_gets_the_upstream_iam_policy_through_pod_identity(programs, service_account, policy_file):
    recording = programs["prod"]
    (assoc,) = [a for a in recording.of_type(ASSOCIATION)
                if f"{a.inputs['namespace']}/{a.inputs['serviceAccount']}" == service_account]
    (policy,) = [p for p in recording.of_type(ROLE_POLICY) if p.name.startswith("aws-lb-controller")]
    assert json.loads(policy.inputs["policy"]) == json.loads(policy_file.read_text())
    role = recording.by_urn()[policy.parent]
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert assoc.inputs["roleArn"] == role.outputs["arn"]


def test_shipped_upstream_files_match_their_recorded_checksums():
    table = (ROOT / "components" / "data" / "README.md").read_text()
    for path in (ROOT / "components" / "data").glob("*.json"):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert f"`{path.name}`" in table and f"`{digest}`" in table, path.name


def test_the_gateway_waits_for_its_load_balancer_and_dns_controllers(programs):
    recording = programs["prod"]
    proxy = recording.named("llm-gateway-envoyproxy")
    charts = releases(recording)
    assert depends_on(recording, proxy, charts["aws-load-balancer-controller"])
    assert depends_on(recording, proxy, charts["external-dns"])
    service = proxy.inputs["spec"]["provider"]["kubernetes"]["envoyService"]
    assert service["annotations"][ANNOTATION_AWS_LB_TYPE] == "external"
    assert service["annotations"][ANNOTATION_EXTERNAL_DNS_HOSTNAME] == "llm.example.com"
    assert service["loadBalancerSourceRanges"] == ["0.0.0.0/0"]


# -- certificate and DNS ----------------------------------------------------------------------
def test_cert_manager_issues_over_route53_dns01_in_the_configured_zone(programs):
    recording = programs["prod"]
    issuer = kind(recording, "ClusterIssuer")[0].inputs["spec"]["acme"]
    assert issuer["solvers"] == [{"dns01": {"route53": {"region": "us-east-1", "hostedZoneID": "Z0EXAMPLE00000000000"}}}]
    values = releases(recording)["cert-manager"].inputs["values"]
    assert values["crds"]["enabled"] and values["replicaCount"] == 2 and values["webhook"]["replicaCount"] == 2


@pytest.mark.parametrize("prefix, allowed_resources", [
    ("cert-manager", {"arn:aws:route53:::change/*", "arn:aws:route53:::hostedzone/Z0EXAMPLE00000000000"}),
    ("external-dns", {"*", "arn:aws:route53:::hostedzone/Z0EXAMPLE00000000000"}),
])
def test_dns_controllers_get_least_privilege_on_the_one_zone(programs, prefix, allowed_resources):
    (policy,) = [p for p in programs["prod"].of_type(ROLE_POLICY) if p.name.startswith(prefix)]
    statements = json.loads(policy.inputs["policy"])["Statement"]
    assert {s["Resource"] for s in statements} == allowed_resources
    wildcard = [s for s in statements if s["Resource"] == "*"]
    assert all(s["Action"] == "route53:ListHostedZones" for s in wildcard)


def test_an_explicit_certificate_needs_no_cert_manager_or_dns(programs):
    recording = programs["prod-provided-tls"]
    assert "cert-manager" not in releases(recording) and "external-dns" not in releases(recording)
    (secret,) = [s for s in recording.of_type("kubernetes:core/v1:Secret") if s.inputs.get("type") == "kubernetes.io/tls"]
    assert secret.inputs["metadata"]["name"] == "llm-gateway-tls"
    assert sorted(secret.inputs["stringData"]["value"]) == ["tls.crt", "tls.key"]     # kept a secret


def test_the_run_once_jobs_reach_the_gateway_in_cluster_with_its_hostname(programs):
    recording = programs["prod"]
    service = recording.named("llm-gateway-envoyproxy").inputs["spec"]["provider"]["kubernetes"]["envoyService"]
    assert service["patch"]["value"]["spec"]["clusterIP"] == GATEWAY_CLUSTER_IP
    network = recording.named("llm-eks").inputs["kubernetesNetworkConfig"]
    assert ipaddress.ip_address(GATEWAY_CLUSTER_IP) in ipaddress.ip_network(network["serviceIpv4Cidr"])
    assert network["serviceIpv4Cidr"] == SERVICE_CIDR
    (gate,) = [j for j in recording.of_type("kubernetes:batch/v1:Job") if "accuracy-gate" in j.name]
    pod = gate.inputs["spec"]["template"]["spec"]
    assert pod["hostAliases"] == [{"ip": GATEWAY_CLUSTER_IP, "hostnames": ["llm.example.com"]}]


# -- ordering and the control path's redundancy ------------------------------------------------
@pytest.mark.parametrize("chart", ["gateway-helm", "ai-gateway-helm"])
def test_controllers_start_after_the_inference_pool_crd(programs, chart):
    recording = programs["prod"]
    crds = recording.named("llm-gateway-inference-crds")
    assert depends_on(recording, releases(recording)[chart], crds)


def test_the_ai_gateway_controller_is_redundant_over_zones(programs):
    controller = releases(programs["prod"])["ai-gateway-helm"].inputs["values"]["controller"]
    assert controller["replicaCount"] == 2
    (term,) = controller["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == ZONE_SPREAD_KEY
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == AIGW_CONTROLLER_LABELS


def test_envoy_gateway_controller_is_redundant_over_zones(programs):
    deployment = releases(programs["prod"])["gateway-helm"].inputs["values"]["deployment"]
    assert deployment["replicas"] >= 2
    assert deployment["pod"]["topologySpreadConstraints"][0]["topologyKey"] == ZONE_SPREAD_KEY


# -- nodes and the cluster --------------------------------------------------------------------
@pytest.mark.parametrize("stack", ["prod", "staging", "dev"])
def test_gpu_node_groups_drain_before_they_replace(programs, stack):
    groups = [g for g in programs[stack].of_type("aws:eks/nodeGroup:NodeGroup")
              if g.inputs["labels"].get("llm-serving.io/role") == "gpu"]
    assert groups
    assert [g.inputs["updateConfig"] for g in groups] == [{"maxUnavailable": 1, "updateStrategy": "MINIMAL"}] * len(groups)


def test_gpu_pools_update_one_zone_after_the_other(programs):
    groups = [g for g in programs["prod"].of_type("aws:eks/nodeGroup:NodeGroup")
              if g.inputs["labels"].get("llm-serving.io/role") == "gpu"]
    assert len(groups) == 2
    first, second = groups
    assert first.urn in second.dependencies and second.urn not in first.dependencies


def test_prod_runs_an_eks_version_in_standard_support_and_in_envoy_gateways_matrix(programs):
    assert programs["prod"].named("llm-eks").inputs["version"] == "1.35"


# -- secrets ------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, ciphertext", [
    ("v1:Zm9vYmFyYmF6cXV4:Qx1HJx0cF9lQWq1bqkq7uB5f0m0tAQ8d3kJH2Q==", True),       # passphrase / awskms:// provider
    ("AAABAJx3n2m8Qn0vYk1Jc2lGd0VZbm9TMnpXeHh6c1FJbWJ4c1dwR0NlS2c9", True),        # Pulumi Cloud provider
    ("<ciphertext>", False), ("CHANGEME", False), ("v1:REPLACE_ME:xxx", False), ("...", False), ("", False),
    ("v1:c2hvcnQ=:Qx1HJx0cF9lQWq1b", False),          # a nonce that is not 12 bytes
    ("hf_abcdefghijklmnop", False),                    # a token pasted in plain text
])
def test_only_pulumi_ciphertext_counts_as_a_secure_value(value, ciphertext):
    from settings.ciphertext import is_ciphertext
    assert is_ciphertext(value) is ciphertext


def test_no_real_format_ciphertext_is_refused():
    """100,000 random values of both formats, as Pulumi writes them (a 12-byte nonce and AES-GCM's
    sealed bytes, at least its 16-byte tag; or the service's base64): every one is ciphertext.
    (The substring check this replaces refused about 1 in 500.)"""
    import base64
    import random

    from settings.ciphertext import is_ciphertext
    rng = random.Random(2026)
    refused = []
    for i in range(100_000):
        if i % 2:
            value = (f"v1:{base64.b64encode(rng.randbytes(12)).decode()}:"
                     f"{base64.b64encode(rng.randbytes(rng.randint(16, 96))).decode()}")
        else:
            value = base64.b64encode(rng.randbytes(rng.randint(24, 200))).decode()
        if not is_ciphertext(value):
            refused.append(value)
    assert refused == []


@pytest.mark.parametrize("value", [
    "changeme", "CHANGE-ME", "placeholder", "REPLACE_ME", "todo", "xxxxxxxxxxxxxxxxxxxxxxxx",
    "AAAAAAAAAAAAAAAAAAAAAAAA", "secretsecretsecretsecret", "dGhpcyBpcyBhIGZha2Ugc2VjcmV0",   # base64 of text
    "v1:AAAAAAAAAAAAAAAA:Qx1HJx0cF9lQWq1bqkq7uB5f0m0tAQ8d3kJH2Q==",                          # a zero nonce
    "v1:Zm9vYmFyYmF6cXV4:ZmFrZSBjaXBoZXJ0ZXh0IGZha2U=",                                     # base64 of text
    "v1:Zm9vYmFyYmF6cXV4:Qx1HJx0=",                                                         # shorter than a GCM tag
], ids=lambda v: v[:24])
def test_a_hand_typed_stand_in_is_refused_by_its_shape(value):
    from settings.ciphertext import is_ciphertext
    assert is_ciphertext(value) is False


@pytest.mark.parametrize("provider", [
    {"secretsprovider": "awskms://alias/llm-serving-dev?region=us-east-1",          # pulumi stack init --secrets-provider awskms://...
     "encryptedkey": "AQICAHhAr5c3Zf0pJm8Ftl0sC6ulyhBBiFuV2F0yqSQe5EwzqgE2XXo="},
    {"encryptionsalt": "v1:Ab3dZl8aUf0=:v1:mx3YbD4fsN0z2kOA:tNwL6tQm8kVQ0t+5yN1uXr8QYx7qV1o="},   # passphrase
], ids=["awskms", "passphrase"])
def test_a_stack_file_with_real_ciphertext_previews(tmp_path, provider):
    """What `pulumi stack init --secrets-provider ...` and `pulumi config set --secret` leave in the file."""
    import yaml

    from llmserve.cli import main
    from settings import read_stack_config, stack_file
    config = read_stack_config(stack_file("dev"))
    config["llm-serving:hubToken"] = {"secure": "v1:Zm9vYmFyYmF6cXV4:Qx1HJx0cF9lQWq1bqkq7uB5f0m0tAQ8d3kJH2Q=="}
    config["llm-serving:apiKeys"] = {"secure": "AAABAJx3n2m8Qn0vYk1Jc2lGd0VZbm9TMnpXeHh6c1FJbWJ4c1dwR0NlS2c9"}
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(yaml.safe_dump({**provider, "config": config}))
    assert main(["preview", "--stack", "dev", "--config", str(path)]) == 0
    assert main(["preflight", "--stack", "dev", "--config", str(path)]) == 1     # example values, before AWS


def test_a_missing_secret_is_one_line_naming_the_command():
    from settings.pulumi_config import missing_secrets_message
    message = missing_secrets_message("prod", ["hubToken", "apiKeys"])
    assert "\n" not in message
    assert message == ("secret config not set: llm-serving:hubToken, llm-serving:apiKeys; set each with "
                       "`pulumi config set --secret <key> <value> --stack prod` "
                       "(e.g. `pulumi config set --secret hubToken ... --stack prod`)")


def test_the_program_stops_on_a_missing_secret_before_registering_anything():
    import pulumi
    from pulumi.runtime.config import set_all_config

    from settings import stack_settings
    from settings.pulumi_config import require_secrets

    settings = stack_settings("prod")
    set_all_config({"llm-serving:apiKeys": "{}"}, ["llm-serving:apiKeys"])
    with pytest.raises(pulumi.RunError) as exc:
        require_secrets(settings)
    assert str(exc.value).startswith("secret config not set: llm-serving:hubToken, llm-serving:grafanaAdminPassword;")


# -- settings ----------------------------------------------------------------------------------
@pytest.mark.parametrize("gateway, problem", [
    ({"hostname": "llm.example.com", "apiKeyNames": ["a"]},
     "llm-serving:gateway: certificate: acme needs hostedZoneId (the Route 53 zone holding hostname) and acmeEmail; "
     "or set certificate: provided and the tlsCertificate and tlsPrivateKey secrets"),
    ({"hostname": "llm.example.com", "hostedZoneId": "example.com", "acmeEmail": "ops@example.com"},
     "llm-serving:gateway.hostedZoneId: String should match pattern '^Z[A-Z0-9]{1,31}$'"),
])
def test_the_certificate_source_is_explicit(gateway, problem):
    from settings import SettingsError, settings_from_config
    raw = {**stack_config("prod"), "llm-serving:gateway": gateway}
    with pytest.raises(SettingsError) as exc:
        settings_from_config("prod", raw)
    assert exc.value.problems == [problem]


def test_a_provided_certificate_adds_its_two_secrets():
    from settings import settings_from_config
    settings = settings_from_config("prod", {**stack_config("prod"), "llm-serving:gateway": PROVIDED_TLS})
    assert settings.required_secrets == ("hubToken", "apiKeys", "grafanaAdminPassword", "tlsCertificate",
                                         "tlsPrivateKey")


# -- the preview shows the order --------------------------------------------------------------
def test_preview_json_lists_each_resources_dependencies_and_the_placeholder_secrets():
    from typer.testing import CliRunner

    from llmserve.cli import app

    result = CliRunner().invoke(app, ["preview", "--stack", "prod", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    urns = {r["urn"] for r in doc["resources"]}
    assert all(set(r["dependencies"]) <= urns for r in doc["resources"])
    proxy = next(r for r in doc["resources"] if r["name"] == "llm-gateway-envoyproxy")
    assert any(u.endswith("::aws-lb-controller-release") for u in proxy["dependencies"])
    assert doc["placeholderSecrets"] == ["llm-serving:apiKeys", "llm-serving:grafanaAdminPassword",
                                         "llm-serving:hubToken"]


def test_the_text_preview_says_which_secrets_are_placeholders():
    from typer.testing import CliRunner

    from llmserve.cli import app

    result = CliRunner().invoke(app, ["preview", "--stack", "dev"])
    assert result.exit_code == 0
    assert result.output.splitlines()[-1] == (
        "Secrets: offline placeholders for apiKeys, grafanaAdminPassword, hubToken (a real `pulumi up` needs "
        "each set with `pulumi config set --secret <key> <value>`).")
