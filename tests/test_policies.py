"""The guard policy pack: layouts in, violations out, by policy name.

Two tables: layouts the program builds from stack-config variations, and hand-built resource
sets for what the program cannot produce. Both go through `offline.policy_run.evaluate`, which
runs the pack's own policy functions. Every policy has a failing and a passing case.
"""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from offline.engine import Recording, Registration
from offline.values import SECRET_SIG, SIG_KEY, is_secret
from offline.policy_run import evaluate
from policies.registry import RULES, levels, pack_environment
from tests.stacks import stack_config

ROOT = Path(__file__).resolve().parent.parent
ALL_POLICIES = {r.name for r in RULES}


def names(violations: list[dict]) -> set[str]:
    return {v["policy"] for v in violations}


def messages(violations: list[dict], policy: str) -> list[str]:
    return [v["message"] for v in violations if v["policy"] == policy]


# -- program-built layouts ------------------------------------------------------------------
WORKLOAD_40_QPS = {"qps": 40, "inputTokens": 1000, "outputTokens": 300, "maxModelLen": 8192, "ttftSeconds": 1.0,
                   "tpotSeconds": 0.040}
ONE_ZONE_TWO_POOLS = [{"zone": "us-east-1a", "instanceType": "p5.48xlarge", "nodes": 1},
                      {"zone": "us-east-1a", "name": "second", "instanceType": "p5.48xlarge", "nodes": 1}]
ONE_POOL_TWO_NODES = [{"zone": "us-east-1a", "instanceType": "p5.48xlarge", "nodes": 2}]
SPREAD_AND_CAPACITY = {"gpu-capacity-spans-zones", "serving-replicas-spread-across-zones", "capacity-after-zone-loss"}


@pytest.mark.parametrize("stack, overrides, expected", [
    pytest.param("prod", {}, set(), id="prod as committed"),
    pytest.param("staging", {}, set(), id="staging as committed"),
    pytest.param("prod", {"gpuPools": ONE_ZONE_TWO_POOLS}, SPREAD_AND_CAPACITY, id="both pools in one zone"),
    pytest.param("prod", {"gpuPools": ONE_POOL_TWO_NODES}, SPREAD_AND_CAPACITY, id="one pool with two nodes"),
    pytest.param("prod", {"workload": WORKLOAD_40_QPS, "replicas": 2}, {"capacity-after-zone-loss"},
                 id="40 QPS the surviving zone cannot carry"),
    pytest.param("prod", {"apiAllowedCidrs": ["0.0.0.0/0"]}, {"eks-api-endpoint-restricted"}, id="open API endpoint"),
    pytest.param("prod", {"apiAllowedCidrs": ["0.0.0.0/1", "128.0.0.0/1"]}, {"eks-api-endpoint-restricted"},
                 id="API endpoint open through two halves"),
    pytest.param("prod", {"apiAllowedCidrs": ["203.0.113.0/24", "198.51.100.0/24"]}, set(),
                 id="API endpoint open to two office ranges"),
    pytest.param("prod", {"hubToken": "hf_plaintext_token"}, set(), id="plain-text hub token in the stack file"),
])
def test_program_layouts(recorded, stack, overrides, expected):
    violations = evaluate(recorded(stack, overrides), stack)
    assert names(violations) == expected
    assert all(v["level"] == "mandatory" for v in violations)


def test_dev_single_replica_is_advised_not_blocked(recorded):
    violations = evaluate(recorded("dev"), "dev")
    assert names(violations) == SPREAD_AND_CAPACITY
    assert {v["level"] for v in violations} == {"advisory"}
    assert messages(violations, "serving-replicas-spread-across-zones") == [
        "serving runs 1 replica; at least 2 are needed so that losing a node or a zone leaves one serving"]


def test_prod_replicas_one_is_built_and_rejected_by_the_policies(recorded):
    """replicas: 1 overrides the plan; the program builds it and the policies reject it."""
    violations = evaluate(recorded("prod", {"replicas": 1}), "prod")
    failed = {v["policy"] for v in violations if v["level"] == "mandatory"}
    assert {"serving-replicas-spread-across-zones", "capacity-after-zone-loss"} <= failed


def test_approved_capacity_block_purchase_passes_the_opt_in_policy(recorded):
    pools = [{"zone": "us-east-1a", "instanceType": "p5.48xlarge", "nodes": 1},
             {"zone": "us-east-1b", "instanceType": "p5.48xlarge", "nodes": 1,
              "capacityBlock": {"purchase": True, "allowPurchase": True, "offeringId": "cb-0123456789abcdef0",
                                "durationHours": 24}}]
    rec = recorded("prod", {"gpuPools": pools})
    assert rec.of_type("aws:ec2/capacityBlockReservation:CapacityBlockReservation")
    assert [v for v in evaluate(rec, "prod") if v["policy"] == "capacity-block-opt-in"] == []


def test_plain_text_token_still_reaches_kubernetes_as_a_secret(recorded):
    rec = recorded("prod", {"hubToken": "hf_plaintext_token"})
    secrets = [r for r in rec.of_type("kubernetes:core/v1:Secret") if "hf_plaintext_token" in json.dumps(r.inputs)]
    assert secrets and all(is_secret(r.inputs["stringData"]) for r in secrets)


def test_exact_messages_of_program_layouts(recorded):
    one_zone = evaluate(recorded("prod", {"gpuPools": ONE_POOL_TWO_NODES}), "prod")
    assert messages(one_zone, "gpu-capacity-spans-zones") == [
        "all GPU capacity (1 node group, 2 nodes) sits in one zone, us-east-1a; losing it stops serving"]
    assert messages(one_zone, "serving-replicas-spread-across-zones") == [
        "all 2 serving replicas run in us-east-1a; spread them over at least two zones"]
    open_api = evaluate(recorded("prod", {"apiAllowedCidrs": ["0.0.0.0/0"]}), "prod")
    assert messages(open_api, "eks-api-endpoint-restricted") == ["the EKS API endpoint is open to 0.0.0.0/0"]
    halves = evaluate(recorded("prod", {"apiAllowedCidrs": ["0.0.0.0/1", "128.0.0.0/1"]}), "prod")
    assert messages(halves, "eks-api-endpoint-restricted") == [
        "the EKS API endpoint is open to 100.0% of IPv4 (0.0.0.0/1, 128.0.0.0/1), more than a /8; list only your "
        "own egress ranges"]


# -- hand-built resource sets ---------------------------------------------------------------
NS = "llm-serving"
SERVING_LABELS = {"app.kubernetes.io/name": "vllm", "llm-serving.io/role": "serving"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
ZONE_SPREAD = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}


class Layout:
    """A resource graph built by hand, recorded as the engine records the program's."""

    def __init__(self) -> None:
        self.resources: list[Registration] = []

    def add(self, type_: str, name: str, inputs: dict, prop_deps: dict | None = None, rid: str = "",
            deps: tuple[str, ...] = ()) -> str:
        urn = f"urn:pulumi:prod::llm-serving::{type_}::{name}"
        prop_deps = prop_deps or {}
        self.resources.append(Registration(
            urn=urn, type=type_, name=name, id=rid or f"{name}-id", inputs=inputs,
            outputs={**inputs, "id": rid or f"{name}-id"}, parent="",
            dependencies=sorted({u for us in prop_deps.values() for u in us} | set(deps)),
            property_dependencies=prop_deps, provider="", custom=True))
        return urn

    def cut(self, name: str, dependency: str) -> None:
        """Drop `name`'s dependency on the resource named `dependency` (a broken depends_on)."""
        urn = self.find(dependency).urn
        self.find(name).dependencies = [u for u in self.find(name).dependencies if u != urn]

    def find(self, name: str) -> Registration:
        return next(r for r in self.resources if r.name == name)

    def remove(self, name: str) -> None:
        self.resources = [r for r in self.resources if r.name != name]

    def recording(self) -> Recording:
        for r in self.resources:                    # edits in a case go to the inputs; keep outputs in step
            r.outputs = {**r.inputs, "id": r.id}
        return Recording(stack="prod", resources=self.resources)


def k8s(kind: str, name: str, spec: dict, labels: dict | None = None, annotations: dict | None = None, **extra) -> dict:
    meta = {"name": name, "namespace": NS, **({"labels": labels} if labels else {}),
            **({"annotations": annotations} if annotations else {})}
    return {"apiVersion": "v1", "kind": kind, "metadata": meta, **({"spec": spec} if spec is not None else {}), **extra}


def vllm_deployment(zone: str | None, replicas: int, gpus: int = 4, capacity_qps: str = "15.94") -> dict:
    pod = {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                           "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub-token",
                                                                                       "key": "HF_TOKEN"}}}],
                           "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
           "tolerations": [GPU_TOLERATION]}
    if zone:
        pod["nodeSelector"] = {"topology.kubernetes.io/zone": zone, "llm-serving.io/role": "gpu"}
    else:
        pod["nodeSelector"] = {"llm-serving.io/role": "gpu"}
        pod["topologySpreadConstraints"] = [{**ZONE_SPREAD, "labelSelector": {"matchLabels": SERVING_LABELS}}]
    annotations = {"llm-serving.io/target-qps": "10.0", "llm-serving.io/replica-capacity-qps": capacity_qps,
                   "llm-serving.io/tensor-parallel": str(gpus)}
    return k8s("Deployment", f"vllm-{zone or 'spread'}", {
        "replicas": float(replicas), "selector": {"matchLabels": SERVING_LABELS},
        "template": {"metadata": {"labels": SERVING_LABELS}, "spec": pod}}, labels=SERVING_LABELS,
        annotations=annotations)


def reference_layout() -> Layout:
    """The reference design: one p5.48xlarge per zone in two zones, one TP=4 replica each."""
    lay = Layout()
    subnets = {z: lay.add("aws:ec2/subnet:Subnet", f"private-{z}", {"availabilityZone": z, "cidrBlock": cidr},
                          rid=f"subnet-{z}")
               for z, cidr in (("us-east-1a", "10.40.0.0/19"), ("us-east-1b", "10.40.32.0/19"))}
    lay.add("aws:eks/cluster:Cluster", "eks", {"vpcConfig": {"endpointPublicAccess": True,
                                                            "publicAccessCidrs": ["203.0.113.0/24"]}})
    encrypted_root = [{"deviceName": "/dev/xvda", "ebs": {"encrypted": "true", "volumeSize": 500.0}}]
    for pool in ("us-east-1a", "us-east-1b", "system"):
        lt = lay.add("aws:ec2/launchTemplate:LaunchTemplate", f"lt-{pool}", {
            "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1.0},
            "blockDeviceMappings": encrypted_root})
        zones = list(subnets) if pool == "system" else [pool]
        gpu = pool != "system"
        lay.add("aws:eks/nodeGroup:NodeGroup", f"ng-{pool}", {
            "subnetIds": [f"subnet-{z}" for z in zones], "launchTemplate": {"id": f"lt-{pool}-id", "version": "1"},
            "instanceTypes": ["p5.48xlarge" if gpu else "m7i.2xlarge"],
            "labels": {"llm-serving.io/role": "gpu" if gpu else "system", "llm-serving.io/pool": pool},
            "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}] if gpu else [],
            "tags": {"llm-serving.io/gpus-per-node": "8"} if gpu else {},
            "scalingConfig": {"desiredSize": float(len(zones)), "minSize": 1.0, "maxSize": 2.0}},
            prop_deps={"subnetIds": [subnets[z] for z in zones], "launchTemplate": [lt]})
    lay.add("kubernetes:core/v1:Secret", "hub-token", k8s("Secret", "hub-token", None, stringData={
        SIG_KEY: SECRET_SIG, "value": {"HF_TOKEN": "offline-preview-secret-hubToken"}}))
    for zone in subnets:
        lay.add("kubernetes:apps/v1:Deployment", f"vllm-{zone}", vllm_deployment(zone, 1))
    lay.add("kubernetes:policy/v1:PodDisruptionBudget", "vllm-pdb",
            k8s("PodDisruptionBudget", "vllm", {"selector": {"matchLabels": SERVING_LABELS}, "maxUnavailable": 1.0}))
    picker_labels = {"app.kubernetes.io/name": "endpoint-picker"}
    # The controllers of the custom resources below, which depend on them (the controller contract).
    pool_crd = lay.add("kubernetes:yaml/v2:ConfigFile", "inference-crds", {
        "file": "https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases/download/v1.6.0/"
                "manifests.yaml"})
    eg = lay.add("kubernetes:helm.sh/v3:Release", "envoy-gateway", {
        "chart": "oci://docker.io/envoyproxy/gateway-helm", "version": "v1.9.0", "values": {}}, deps=(pool_crd,))
    aigw = lay.add("kubernetes:helm.sh/v3:Release", "ai-gateway", {
        "chart": "oci://docker.io/envoyproxy/ai-gateway-helm", "version": "v1.0.0", "values": {}}, deps=(pool_crd, eg))
    lay.add("kubernetes:core/v1:Service", "epp-svc", k8s("Service", "vllm-epp", {"selector": picker_labels}))
    lay.add("kubernetes:apps/v1:Deployment", "epp", k8s("Deployment", "vllm-epp", {
        "replicas": 2.0, "selector": {"matchLabels": picker_labels},
        "template": {"metadata": {"labels": picker_labels}, "spec": {
            "nodeSelector": {"llm-serving.io/role": "system"},
            "topologySpreadConstraints": [{**ZONE_SPREAD, "labelSelector": {"matchLabels": picker_labels}}],
            "containers": [{"name": "epp", "image": "registry.k8s.io/gateway-api-inference-extension/epp:v1.0.0"}]}}},
        labels=picker_labels))
    lay.add("kubernetes:inference.networking.k8s.io/v1:InferencePool", "pool", k8s("InferencePool", "vllm", {
        "selector": {"matchLabels": SERVING_LABELS}, "targetPorts": [{"number": 8000.0}],
        "endpointPickerRef": {"name": "vllm-epp", "port": {"number": 9002.0}, "failureMode": "FailClose"}}),
        deps=(pool_crd, eg, aigw))
    lay.add("kubernetes:gateway.networking.k8s.io/v1:Gateway", "gateway", k8s("Gateway", "llm", {
        "gatewayClassName": "envoy", "listeners": [{"name": "https", "port": 443.0, "protocol": "HTTPS"}]}), deps=(eg,))
    lay.add("kubernetes:gateway.networking.k8s.io/v1:HTTPRoute", "route", k8s("HTTPRoute", "openai", {
        "parentRefs": [{"name": "llm"}],
        "rules": [{"backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "vllm"}]}]}),
        deps=(eg,))
    lay.add("kubernetes:gateway.envoyproxy.io/v1alpha1:SecurityPolicy", "auth", k8s("SecurityPolicy", "api-keys", {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "llm"}],
        "apiKeyAuth": {"credentialRefs": [{"kind": "Secret", "name": "api-keys"}],
                       "extractFrom": [{"headers": ["authorization"]}]}}), deps=(eg,))
    lay.add("kubernetes:gateway.envoyproxy.io/v1alpha1:BackendTrafficPolicy", "traffic", k8s(
        "BackendTrafficPolicy", "openai", {
            "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "openai"}],
            "rateLimit": {"local": {"rules": [{"limit": {"requests": 9.0, "unit": "Second"}}]}}}), deps=(eg,))
    return lay


def spec_of(lay: Layout, name: str) -> dict:
    return lay.find(name).inputs["spec"]


def pod_of(lay: Layout, name: str) -> dict:
    return spec_of(lay, name)["template"]["spec"]


def set_zone(lay: Layout, subnet: str, zone: str) -> None:
    lay.find(subnet).inputs["availabilityZone"] = zone


def one_spread_deployment(lay: Layout, **pod_changes) -> None:
    lay.remove("vllm-us-east-1a")
    lay.remove("vllm-us-east-1b")
    dep = vllm_deployment(None, 2)
    dep["spec"]["template"]["spec"].update(pod_changes)
    lay.add("kubernetes:apps/v1:Deployment", "vllm-spread", dep)


def add_helm_release(lay: Layout, values: dict) -> None:
    lay.add("kubernetes:helm.sh/v3:Release", "grafana", {"chart": "grafana", "version": "10.1.4", "values": values})


def add_capacity_block(lay: Layout, tags: dict) -> None:
    lay.add("aws:ec2/capacityBlockReservation:CapacityBlockReservation", "block", {
        "capacityBlockOfferingId": "cbr-0123456789abcdef0", "instancePlatform": "Linux/UNIX", "tags": tags})


def route_policy(lay: Layout, type_: str, name: str, spec: dict) -> None:
    kind = type_.rsplit(":", 1)[-1]
    lay.add(type_, name, k8s(kind, name, {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "openai"}], **spec}),
        deps=(lay.find("envoy-gateway").urn,))


SP = "kubernetes:gateway.envoyproxy.io/v1alpha1:SecurityPolicy"
BTP = "kubernetes:gateway.envoyproxy.io/v1alpha1:BackendTrafficPolicy"

# (mutation of the reference layout, the policies that must fail)
def replica_groups(lay: Layout) -> None:
    """Replicas that span nodes: two p5 nodes per zone, one LeaderWorkerSet (size 2) per zone in
    place of the Deployments, after the LeaderWorkerSet controller (chart lws)."""
    lws = lay.add("kubernetes:helm.sh/v3:Release", "lws", {
        "chart": "oci://registry.k8s.io/lws/charts/lws", "version": "0.10.0", "values": {}})
    for zone in ("us-east-1a", "us-east-1b"):
        lay.find(f"ng-{zone}").inputs["scalingConfig"].update(desiredSize=2.0, minSize=2.0, maxSize=2.0)
        deployment = lay.find(f"vllm-{zone}").inputs
        lay.remove(f"vllm-{zone}")
        pod = copy.deepcopy(deployment["spec"]["template"])
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "8"
        pod["spec"]["nodeSelector"]["llm-serving.io/pool"] = zone
        meta = copy.deepcopy(deployment["metadata"])
        meta["annotations"].update({"llm-serving.io/tensor-parallel": "8", "llm-serving.io/nodes-per-replica": "2"})
        lay.add("kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet", f"vllm-{zone}", {
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta,
            "spec": {"replicas": 1.0, "leaderWorkerTemplate": {
                "size": 2.0, "leaderTemplate": pod, "workerTemplate": copy.deepcopy(pod)}}}, deps=(lws,))


def group_workers_unpinned(lay: Layout) -> None:
    replica_groups(lay)
    worker = lay.find("vllm-us-east-1a").inputs["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    worker["nodeSelector"] = {"llm-serving.io/role": "gpu"}


def one_node_for_a_two_node_group(lay: Layout) -> None:
    replica_groups(lay)
    lay.find("ng-us-east-1b").inputs["scalingConfig"].update(desiredSize=1.0, minSize=1.0, maxSize=1.0)


def add_scaled_objects(lay: Layout, floors: dict[str, int], floor_qps: str | None = None) -> None:
    """KEDA and one ScaledObject per zone's serving Deployment, with the floors given (autoscaling)."""
    keda = lay.add("kubernetes:helm.sh/v3:Release", "keda", {"chart": "keda", "version": "2.20.2", "values": {}})
    for zone, floor in floors.items():
        annotations = {"llm-serving.io/floor-qps": floor_qps} if floor_qps else None
        lay.add("kubernetes:keda.sh/v1alpha1:ScaledObject", f"scale-{zone}", {
            "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            **k8s("ScaledObject", f"vllm-{zone}", {"scaleTargetRef": {"name": f"vllm-{zone}"},
                                                   "minReplicaCount": float(floor), "maxReplicaCount": 1.0},
                  annotations=annotations)}, deps=(keda, lay.find(f"vllm-{zone}").urn))


CASES = {
    # failure domains
    "reference layout": (lambda lay: None, set()),
    "GPU subnets in one zone": (lambda lay: set_zone(lay, "private-us-east-1b", "us-east-1a"),
                                {"gpu-capacity-spans-zones", "serving-replicas-spread-across-zones",
                                 "capacity-after-zone-loss", "tp-group-fits-on-node", "endpoint-picker-redundant"}),
    "one replica": (lambda lay: spec_of(lay, "vllm-us-east-1b").update(replicas=0.0),
                    {"serving-replicas-spread-across-zones", "capacity-after-zone-loss"}),
    "one spread Deployment (DoNotSchedule)": (one_spread_deployment, set()),
    "spread with ScheduleAnyway": (
        lambda lay: one_spread_deployment(lay, topologySpreadConstraints=[{**ZONE_SPREAD,
                                                                           "whenUnsatisfiable": "ScheduleAnyway"}]),
        {"serving-replicas-spread-across-zones", "capacity-after-zone-loss"}),
    "replica capacity below target": (
        lambda lay: lay.find("vllm-us-east-1a").inputs["metadata"]["annotations"].update(
            {"llm-serving.io/replica-capacity-qps": "5.83"}) or lay.find("vllm-us-east-1b").inputs["metadata"][
            "annotations"].update({"llm-serving.io/replica-capacity-qps": "5.83"}),
        {"capacity-after-zone-loss"}),
    "second zone has no GPU node": (lambda lay: lay.find("ng-us-east-1b").inputs["scalingConfig"].update(
        desiredSize=0.0), {"capacity-after-zone-loss"}),
    "no PodDisruptionBudget": (lambda lay: lay.remove("vllm-pdb"), {"pdb-covers-serving"}),
    # replicas that span nodes
    "replica groups of two nodes, one per zone": (replica_groups, set()),
    "a group's workers not pinned to its zone": (group_workers_unpinned, {"replica-group-in-one-zone"}),
    "one node in a zone for a two-node group": (one_node_for_a_two_node_group,
                                                {"zone-holds-whole-groups", "capacity-after-zone-loss"}),
    "PDB minAvailable = replicas": (
        lambda lay: spec_of(lay, "vllm-pdb").update(minAvailable=2.0, maxUnavailable=None),
        {"pdb-covers-serving"}),
    "PDB maxUnavailable 50%": (lambda lay: spec_of(lay, "vllm-pdb").update(maxUnavailable="50%"), set()),
    "PDB maxUnavailable 100%": (lambda lay: spec_of(lay, "vllm-pdb").update(maxUnavailable="100%"),
                                {"pdb-covers-serving"}),
    "TP group larger than a node": (
        lambda lay: [lay.find(n).inputs.update(vllm_deployment(z, 1, gpus=16))
                     for n, z in (("vllm-us-east-1a", "us-east-1a"), ("vllm-us-east-1b", "us-east-1b"))],
        {"tp-group-fits-on-node", "capacity-after-zone-loss"}),
    "serving pods without the GPU toleration": (
        lambda lay: [pod_of(lay, n).update(tolerations=[]) for n in ("vllm-us-east-1a", "vllm-us-east-1b")],
        {"tp-group-fits-on-node", "capacity-after-zone-loss"}),
    "picker claims to fail open": (lambda lay: spec_of(lay, "pool")["endpointPickerRef"].update(failureMode="FailOpen"),
                                   {"endpoint-picker-redundant"}),
    "picker has one replica": (lambda lay: spec_of(lay, "epp").update(replicas=1.0), {"endpoint-picker-redundant"}),
    "picker not spread": (lambda lay: pod_of(lay, "epp").pop("topologySpreadConstraints"),
                          {"endpoint-picker-redundant"}),
    "picker missing": (lambda lay: lay.remove("epp"), {"endpoint-picker-redundant"}),
    # security
    "EKS endpoint open to the world": (
        lambda lay: lay.find("eks").inputs["vpcConfig"].update(publicAccessCidrs=["0.0.0.0/0"]),
        {"eks-api-endpoint-restricted"}),
    "EKS endpoint public without CIDRs": (lambda lay: lay.find("eks").inputs["vpcConfig"].pop("publicAccessCidrs"),
                                          {"eks-api-endpoint-restricted"}),
    "EKS endpoint private": (
        lambda lay: lay.find("eks").inputs.update(vpcConfig={"endpointPublicAccess": False,
                                                             "publicAccessCidrs": ["0.0.0.0/0"]}), set()),
    "launch template allows IMDSv1": (
        lambda lay: lay.find("lt-system").inputs["metadataOptions"].update(httpTokens="optional"),
        {"launch-template-imdsv2"}),
    "node group without launch template": (lambda lay: lay.find("ng-system").inputs.pop("launchTemplate"),
                                           {"launch-template-imdsv2"}),
    "Envoy Gateway not installed": (lambda lay: lay.remove("envoy-gateway"), {"controller-contract"}),
    "InferencePool created before its controllers": (
        lambda lay: [lay.cut("pool", dep) for dep in ("inference-crds", "envoy-gateway", "ai-gateway")],
        {"controller-contract"}),
    "launch template lets pods reach IMDS (hop limit 2)": (
        lambda lay: lay.find("lt-us-east-1a").inputs["metadataOptions"].update(httpPutResponseHopLimit=2.0),
        {"launch-template-imdsv2"}),
    "launch template leaves the hop limit to the AMI": (
        lambda lay: lay.find("lt-us-east-1a").inputs["metadataOptions"].pop("httpPutResponseHopLimit"),
        {"launch-template-imdsv2"}),
    "unencrypted volume": (lambda lay: lay.find("lt-us-east-1a").inputs.update(
        blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeSize": 500.0}}]),
        {"launch-template-volumes-encrypted"}),
    "no root volume declared": (lambda lay: lay.find("lt-us-east-1a").inputs.pop("blockDeviceMappings"),
                                {"launch-template-volumes-encrypted"}),
    "token as a literal env value": (
        lambda lay: pod_of(lay, "vllm-us-east-1a")["containers"][0].update(
            env=[{"name": "HF_TOKEN", "value": "hf_abc"}]), {"secrets-only-as-secrets"}),
    "API key as a literal flag": (
        lambda lay: pod_of(lay, "vllm-us-east-1a")["containers"][0].update(args=["--api-key", "sk-123"]),
        {"secrets-only-as-secrets"}),
    "API key flag from an env var": (
        lambda lay: pod_of(lay, "vllm-us-east-1a")["containers"][0].update(args=["--api-key=$(VLLM_API_KEY)"]),
        set()),
    "API key in a ConfigMap": (
        lambda lay: lay.add("kubernetes:core/v1:ConfigMap", "cm", k8s("ConfigMap", "cm", None,
                                                                      data={"api-key": "sk-123"})),
        {"secrets-only-as-secrets"}),
    "Grafana password as a chart value": (
        lambda lay: add_helm_release(lay, {"adminPassword": "hunter2"}), {"secrets-only-as-secrets"}),
    "Grafana password from an existing Secret": (
        lambda lay: add_helm_release(lay, {"admin": {"existingSecret": "grafana-admin",
                                                     "passwordKey": "admin-password"}}), set()),
    "route without authentication": (lambda lay: lay.remove("auth"), {"routes-behind-auth"}),
    "route-level policy without auth overrides the Gateway's": (
        lambda lay: route_policy(lay, SP, "cors", {"cors": {"allowOrigins": ["https://example.com"]}}),
        {"routes-behind-auth"}),
    "route-level API key auth": (
        lambda lay: lay.remove("auth") or route_policy(lay, SP, "keys", {"apiKeyAuth": {"credentialRefs": []}}),
        set()),
    "no rate limit": (lambda lay: spec_of(lay, "traffic").pop("rateLimit"), {"rate-limit-exists"}),
    "quotas above the budget the program sized": (
        lambda lay: lay.find("traffic").inputs["metadata"].update(
            annotations={"llm-serving.io/quota-budget-qps": "0.5", "llm-serving.io/proxies": "2"}),
        {"quotas-within-capacity-after-zone-loss"}),
    "quotas within the budget the program sized": (
        lambda lay: lay.find("traffic").inputs["metadata"].update(
            annotations={"llm-serving.io/quota-budget-qps": "1000", "llm-serving.io/proxies": "2"}), set()),
    "rate limit on the Gateway": (
        lambda lay: spec_of(lay, "traffic").update(targetRefs=[{"kind": "Gateway", "name": "llm"}]), set()),
    # autoscaling
    "autoscaling floor in one zone only": (
        lambda lay: add_scaled_objects(lay, {"us-east-1a": 1, "us-east-1b": 0}),
        {"autoscaling-floor-n-plus-one-by-zone"}),
    "autoscaling floor short of the trough after a zone loss": (
        lambda lay: add_scaled_objects(lay, {"us-east-1a": 1, "us-east-1b": 1}, floor_qps="20"),
        {"autoscaling-floor-n-plus-one-by-zone"}),
    "autoscaling floor N+1 by zone at the trough": (
        lambda lay: add_scaled_objects(lay, {"us-east-1a": 1, "us-east-1b": 1}, floor_qps="15"), set()),
    # cost
    "capacity block bought without opt-in": (lambda lay: add_capacity_block(lay, {"team": "ml-platform"}),
                                             {"capacity-block-opt-in"}),
    "capacity block bought with opt-in": (
        lambda lay: add_capacity_block(lay, {"llm-serving.io/purchase-approved": "true"}), set()),
}


# -- disaggregated prefill/decode and speculative decoding (policies/disaggregation.py) ----------------
PD_ROLES = ("prefill", "decode")


def pd_deployment(zone: str, role: str, link: str, backends: tuple[str, ...], efa: bool, capacity_qps: str) -> dict:
    """One pool's workload in one zone, as the serving component renders it (role label and annotations,
    the NIXL connector's JSON, EFA devices when the link is efa)."""
    d = vllm_deployment(zone, 1, capacity_qps=capacity_qps)
    labels = {**SERVING_LABELS, "llm-d.ai/role": role}
    d["metadata"]["name"], d["metadata"]["labels"] = f"vllm-{role}-{zone}", labels
    d["metadata"]["annotations"].update({"llm-serving.io/serving-role": role, "llm-serving.io/kv-transfer-link": link})
    d["spec"]["selector"]["matchLabels"] = d["spec"]["template"]["metadata"]["labels"] = labels
    engine = d["spec"]["template"]["spec"]["containers"][0]
    engine["args"] = ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both",
                                                          "kv_connector_extra_config": {"backends": list(backends)}})]
    if efa:
        engine["resources"]["limits"]["vpc.amazonaws.com/efa"] = "32"
    return d


def disaggregate(lay: Layout, link: str = "nvlink", backends: tuple[str, ...] = ("UCX",), efa: bool = False,
                 capacity_qps: str = "12.5", efa_nodes: bool = False) -> None:
    """The reference layout with one prefill and one decode TP=4 replica per zone instead of the aggregated one."""
    for zone in ("us-east-1a", "us-east-1b"):
        lay.remove(f"vllm-{zone}")
        for role in PD_ROLES:
            lay.add("kubernetes:apps/v1:Deployment", f"vllm-{role}-{zone}",
                    pd_deployment(zone, role, link, backends, efa, capacity_qps))
        if efa_nodes:
            lay.find(f"lt-{zone}").inputs["networkInterfaces"] = [{"interfaceType": "efa", "networkCardIndex": 0.0}]


def speculate(lay: Layout, acceptance: str | None) -> None:
    d = lay.find("vllm-us-east-1a").inputs
    d["spec"]["template"]["spec"]["containers"][0]["args"] = [
        "--speculative-config", json.dumps({"method": "eagle3", "num_speculative_tokens": 3})]
    if acceptance is not None:
        d["metadata"]["annotations"]["llm-serving.io/speculative-acceptance-rate"] = acceptance


CASES.update({
    "P/D pairs in each zone over NVLink": (disaggregate, set()),
    "P/D over EFA with EFA": (lambda lay: disaggregate(lay, "efa", ("LIBFABRIC",), efa=True, efa_nodes=True), set()),
    "decode without a prefill in its zone": (
        lambda lay: (disaggregate(lay), lay.remove("vllm-prefill-us-east-1b")),
        {"pd-pair-in-one-zone", "pool-capacity-after-zone-loss"}),
    "P/D pool short after a zone loss": (
        lambda lay: disaggregate(lay, capacity_qps="5"), {"pool-capacity-after-zone-loss"}),
    "KV planned over EFA, rendered over UCX without EFA": (
        lambda lay: disaggregate(lay, "efa"), {"kv-transfer-on-planned-fabric"}),
    "KV planned over NVLink across two nodes": (
        lambda lay: (disaggregate(lay), lay.find("ng-us-east-1a").inputs["scalingConfig"].update(desiredSize=2.0)),
        {"kv-transfer-on-planned-fabric"}),
    "speculation with its acceptance": (lambda lay: speculate(lay, "0.7"), set()),
    "speculation without its acceptance": (lambda lay: speculate(lay, None), {"speculative-plan-declares-acceptance"}),
})


@pytest.mark.parametrize("case", list(CASES))
def test_hand_built_layouts(case):
    mutate, expected = CASES[case]
    lay = reference_layout()
    mutate(lay)
    assert names(evaluate(lay.recording(), "prod")) == expected


def test_every_policy_has_a_failing_and_a_passing_case():
    failing = set().union(*(expected for _, expected in CASES.values()))
    assert failing == ALL_POLICIES
    assert CASES["reference layout"][1] == set()    # passes every policy


@pytest.mark.parametrize("case, policy, message", [
    ("one replica", "serving-replicas-spread-across-zones",
     "serving runs 1 replica; at least 2 are needed so that losing a node or a zone leaves one serving"),
    ("replica capacity below target", "capacity-after-zone-loss",
     "losing us-east-1a leaves 5.83 of 11.66 QPS of serving capacity at the SLOs (2 replicas of 5.83 QPS), "
     "short of the 10 QPS target"),
    ("second zone has no GPU node", "capacity-after-zone-loss",
     "losing us-east-1a leaves 0 of 15.94 QPS of serving capacity at the SLOs (1 replica of 15.94 QPS), short of "
     "the 10 QPS target; vllm-us-east-1b: only 0 of 1 replicas fit on the GPU nodes of us-east-1b"),
    ("a group's workers not pinned to its zone", "replica-group-in-one-zone",
     "LeaderWorkerSet vllm-us-east-1a: a 2-pod group may put its nodes in us-east-1a, us-east-1b; a group's nodes "
     "must sit in one zone"),
    ("one node in a zone for a two-node group", "zone-holds-whole-groups",
     "GPU node group ng-us-east-1b has 1 node, not a multiple of the 2-node group: 1 node(s) hold no whole group"),
    ("one node in a zone for a two-node group", "zone-holds-whole-groups",
     "us-east-1b has 1 GPU node, no whole 2-node group: the zone serves nothing, and losing the other zone stops "
     "serving"),
    ("one node in a zone for a two-node group", "capacity-after-zone-loss",
     "losing us-east-1a leaves 0 of 15.94 QPS of serving capacity at the SLOs (1 replica of 15.94 QPS), short of "
     "the 10 QPS target; vllm-us-east-1b: only 0 of 1 replicas fit on the GPU nodes of us-east-1b"),
    ("PDB minAvailable = replicas", "pdb-covers-serving",
     "PodDisruptionBudget vllm allows no disruption of the 2 pods it covers: draining a node would block forever"),
    ("TP group larger than a node", "tp-group-fits-on-node",
     "Deployment vllm-us-east-1a requests 16 GPUs per pod but a node of ng-us-east-1a has 8; a tensor-parallel "
     "group cannot span nodes"),
    ("InferencePool created before its controllers", "controller-contract",
     "InferencePool vllm does not depend on the gateway-api-inference-extension CRD manifest: it could be created "
     "before its controller (and outlive it on destroy)"),
    ("Envoy Gateway not installed", "controller-contract",
     "Gateway llm needs chart gateway-helm, which this program does not install"),
    ("launch template lets pods reach IMDS (hop limit 2)", "launch-template-imdsv2",
     "launch template lt-us-east-1a lets pods reach the instance metadata (httpPutResponseHopLimit 2); set it to 1"),
    ("picker claims to fail open", "endpoint-picker-redundant",
     "InferencePool vllm declares failureMode FailOpen, which Envoy AI Gateway v1.0.0 does not honour (its ext_proc "
     "filter fails closed); declare FailClose and keep the picker redundant"),
    ("token as a literal env value", "secrets-only-as-secrets",
     "Deployment vllm-us-east-1a: container vllm sets HF_TOKEN to a literal value; use valueFrom.secretKeyRef"),
    ("route-level policy without auth overrides the Gateway's", "routes-behind-auth",
     "HTTPRoute openai has SecurityPolicy cors without authentication, which replaces any on its Gateway"),
    ("autoscaling floor in one zone only", "autoscaling-floor-n-plus-one-by-zone",
     "the autoscaling floor (us-east-1a: 1, us-east-1b: 0) leaves no replica after losing us-east-1a: scaled down, "
     "the fleet does not survive a zone loss"),
    ("autoscaling floor short of the trough after a zone loss", "autoscaling-floor-n-plus-one-by-zone",
     "losing us-east-1a at the autoscaling floor leaves 1 replica carrying 15.94 QPS, short of the trough's 20 QPS "
     "the floor is sized for"),
    ("capacity block bought without opt-in", "capacity-block-opt-in",
     "capacity block block would buy offering cbr-0123456789abcdef0, which cannot be refunded, without the "
     "llm-serving.io/purchase-approved: 'true' tag"),
    ("decode without a prefill in its zone", "pd-pair-in-one-zone",
     "us-east-1b runs 1 decode replica and no prefill replica: its decode pods would pair with another zone's"),
    ("P/D pool short after a zone loss", "pool-capacity-after-zone-loss",
     "losing us-east-1a leaves the decode pool 5 of 10 QPS at the SLOs, short of the 10 QPS target"),
    ("KV planned over EFA, rendered over UCX without EFA", "kv-transfer-on-planned-fabric",
     "Deployment vllm-decode-us-east-1a: the plan's KV link is efa but NIXL's backends are ['UCX']; set "
     "kv_connector_extra_config.backends to [\"LIBFABRIC\"]"),
    ("KV planned over EFA, rendered over UCX without EFA", "kv-transfer-on-planned-fabric",
     "Deployment vllm-prefill-us-east-1b: the plan's KV link is efa but it may run on node groups without EFA "
     "interfaces: ng-us-east-1b"),
    ("KV planned over NVLink across two nodes", "kv-transfer-on-planned-fabric",
     "the plan's KV link is nvlink, but the prefill and decode pods of us-east-1a may land on 2 nodes (p5.48xlarge): "
     "a pair over NVLink needs both on one node; plan the link as efa or give the zone one node"),
    ("speculation without its acceptance", "speculative-plan-declares-acceptance",
     "Deployment vllm-us-east-1a speculates but declares no acceptance in (0, 1) "
     "(llm-serving.io/speculative-acceptance-rate: None); the plan's TPOT gain depends on it"),
])
def test_exact_messages(case, policy, message):
    mutate, _ = CASES[case]
    lay = reference_layout()
    mutate(lay)
    assert message in messages(evaluate(lay.recording(), "prod"), policy)


def test_violation_names_the_resource():
    lay = reference_layout()
    lay.find("eks").inputs["vpcConfig"]["publicAccessCidrs"] = ["0.0.0.0/0"]
    [v] = evaluate(lay.recording(), "prod")
    assert v == {"policy": "eks-api-endpoint-restricted", "level": "mandatory",
                 "urn": "urn:pulumi:prod::llm-serving::aws:eks/cluster:Cluster::eks",
                 "message": "the EKS API endpoint is open to 0.0.0.0/0"}


# -- a real preview: unknown values ---------------------------------------------------------
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"    # Pulumi's "known after apply"


def test_unknown_subnet_ids_are_followed_through_property_dependencies():
    lay = reference_layout()
    for name in ("ng-us-east-1a", "ng-us-east-1b", "ng-system"):
        lay.find(name).inputs["subnetIds"] = [UNKNOWN]
        lay.find(name).inputs["launchTemplate"]["id"] = UNKNOWN
    assert evaluate(lay.recording(), "prod") == []


def test_an_unknown_value_a_policy_needs_is_reported_not_guessed():
    lay = reference_layout()
    spec_of(lay, "vllm-us-east-1a")["replicas"] = UNKNOWN
    found = [v for v in evaluate(lay.recording(), "prod") if v["policy"] == "serving-replicas-spread-across-zones"]
    assert found == [{"policy": "serving-replicas-spread-across-zones", "level": "advisory", "urn": "",
                      "message": "can't run during preview: string value at .spec.replicas can't be known during "
                                 "preview"}]


# -- enforcement levels ---------------------------------------------------------------------
@pytest.mark.parametrize("stack, level", [("prod", "mandatory"), ("staging", "mandatory"), ("dev", "advisory")])
def test_levels_per_stack(stack, level):
    config = levels(stack)
    assert set(config) == ALL_POLICIES
    expected = {name: level for name in ALL_POLICIES}
    expected["capacity-block-opt-in"] = "mandatory"     # money cannot be refunded, even in dev
    expected["controller-contract"] = "mandatory"       # without its controller nothing deploys, even in dev
    if stack == "staging":      # where the load test belongs: its key above the quota budget is advised
        expected["quotas-within-capacity-after-zone-loss"] = "advisory"
    assert {name: lvl.value for name, lvl in config.items()} == expected


def test_an_environment_without_a_config_file_is_treated_like_prod():
    assert {lvl.value for lvl in levels("no-such-environment").values()} == {"mandatory"}


@pytest.mark.parametrize("environ, environment", [
    ({"PULUMI_STACK": "mine", "PULUMI_CONFIG": '{"llm-serving:environment": "prod", "aws:region": "us-east-1"}'}, "prod"),
    ({"PULUMI_STACK": "dev"}, None),                       # no config: not guessed from the stack name
    ({"PULUMI_STACK": "dev", "PULUMI_CONFIG": "not json"}, None),
    ({"PULUMI_STACK": "dev", "PULUMI_CONFIG": '{"aws:region": "us-east-1"}'}, None),
])
def test_the_pack_reads_the_environment_from_the_stack_config(environ, environment):
    assert pack_environment(environ) == environment


def test_dev_violations_are_advisory():
    lay = reference_layout()
    lay.find("eks").inputs["vpcConfig"]["publicAccessCidrs"] = ["0.0.0.0/0"]
    add_capacity_block(lay, {})
    assert {(v["policy"], v["level"]) for v in evaluate(lay.recording(), "dev")} == {
        ("eks-api-endpoint-restricted", "advisory"), ("capacity-block-opt-in", "mandatory")}


# -- the pack as the CLI runs it ------------------------------------------------------------
def test_importing_the_policy_modules_does_not_block():
    code = ("import policies, policies.registry, offline.policy_run, policies.failure_domains, "
            "policies.security, policies.cost; print(len(policies.registry.POLICIES))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(len(ALL_POLICIES))


def test_the_pack_starts_its_analyzer_server():
    """`python -m pulumi.policy` is what the CLI runs; the pack prints its port, then serves."""
    proc = subprocess.Popen([sys.executable, "-m", "pulumi.policy", "127.0.0.1:0", "policies"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**__import__("os").environ, "PULUMI_STACK": "dev"})
    try:
        port = proc.stdout.readline().strip()
        assert port.isdigit(), proc.stderr.read() if proc.poll() is not None else port
        assert proc.poll() is None                       # still serving
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _served_violations(recording, stack: str, environment: str | None = None) -> list[dict]:
    """The pack run as the CLI runs it: a subprocess serving the analyzer over gRPC (the stack's
    config in PULUMI_CONFIG, environment = the stack name unless given), sent each resource's
    inputs (Analyze) and the whole graph's outputs (AnalyzeStack), secrets wrapped."""
    import os

    import grpc
    from google.protobuf import empty_pb2, struct_pb2
    from pulumi.runtime.proto import analyzer_pb2 as pb
    from pulumi.runtime.proto import analyzer_pb2_grpc

    def struct(value: dict) -> struct_pb2.Struct:
        out = struct_pb2.Struct()
        out.update(value)
        return out

    level = {pb.ADVISORY: "advisory", pb.MANDATORY: "mandatory"}
    proc = subprocess.Popen([sys.executable, "-m", "pulumi.policy", "127.0.0.1:0", "policies"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PULUMI_STACK": stack,
                                 "PULUMI_CONFIG": json.dumps({"llm-serving:environment": environment or stack})})
    try:
        port = proc.stdout.readline().strip()
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = analyzer_pb2_grpc.AnalyzerStub(channel)
            # As the CLI does without --policy-pack-config: the pack's initial config becomes its config.
            info = stub.GetAnalyzerInfo(empty_pb2.Empty())
            stub.Configure(pb.ConfigureAnalyzerRequest(policyConfig=info.initialConfig))
            found = []
            for r in recording.resources:
                resp = stub.Analyze(pb.AnalyzeRequest(type=r.type, properties=struct(r.inputs), urn=r.urn,
                                                      name=r.name, options=pb.AnalyzerResourceOptions(parent=r.parent)))
                # The engine files a resource policy's violation under the resource it judged.
                found.extend((d, d.urn or r.urn) for d in resp.diagnostics)
            resources = [pb.AnalyzerResource(
                type=r.type, properties=struct(r.outputs), urn=r.urn, name=r.name, parent=r.parent,
                dependencies=r.dependencies,
                propertyDependencies={k: pb.AnalyzerPropertyDependencies(urns=v)
                                      for k, v in r.property_dependencies.items()})
                for r in recording.resources]
            found.extend((d, d.urn) for d in stub.AnalyzeStack(pb.AnalyzeStackRequest(resources=resources)).diagnostics)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    # The analyzer prefixes each message with the policy's description.
    return [{"policy": d.policyName, "level": level[d.enforcementLevel], "urn": urn,
             "message": d.message.split("\n", 1)[1]} for d, urn in found]


def _key(v: dict) -> tuple:
    return v["policy"], v["level"], v["urn"], v["message"]


@pytest.mark.parametrize("stack, case", [("prod", "GPU subnets in one zone"), ("prod", "token as a literal env value"),
                                         ("dev", "capacity block bought without opt-in")])
def test_the_served_pack_reports_what_the_offline_preview_reports(stack, case):
    lay = reference_layout()
    CASES[case][0](lay)
    recording = lay.recording()
    offline = evaluate(recording, stack)
    assert offline
    assert sorted(map(_key, _served_violations(recording, stack))) == sorted(map(_key, offline))


def test_the_served_pack_judges_a_program_layout_as_the_offline_preview_does(build_program):
    recording = build_program("prod", {"gpuPools": ONE_POOL_TWO_NODES, "apiAllowedCidrs": ["0.0.0.0/0"]})
    offline = evaluate(recording, "prod")
    assert names(offline) == SPREAD_AND_CAPACITY | {"eks-api-endpoint-restricted"}
    assert sorted(map(_key, _served_violations(recording, "prod"))) == sorted(map(_key, offline))


@pytest.mark.parametrize("environment, level", [("prod", "mandatory"), ("dev", "advisory")])
def test_a_stack_named_mine_gets_its_environments_levels_offline_and_in_the_pack(build_program, environment, level):
    """Levels are keyed by the environment in both places, never by the stack's name (`mine` has
    no config file of its own: keyed by name, the pack would make every policy mandatory)."""
    config = {**stack_config(environment), "llm-serving:apiAllowedCidrs": ["0.0.0.0/0"]}
    recording = build_program("mine", config=config)
    assert recording.settings.environment == environment
    offline = evaluate(recording, recording.settings.environment)
    assert ("eks-api-endpoint-restricted", level) in {(v["policy"], v["level"]) for v in offline}
    served = _served_violations(recording, "mine", environment=environment)
    assert sorted(map(_key, served)) == sorted(map(_key, offline))


# -- quotas and N+1 ------------------------------------------------------------------------------
@pytest.mark.parametrize("stack, overrides, level", [
    ("prod", {}, None),
    ("staging", {}, None),
    ("prod", {"loadTest": {"enabled": True}}, "mandatory"),     # the load test belongs before prod takes traffic
    ("staging", {"loadTest": {"enabled": True}}, "advisory"),
])
def test_quotas_stay_within_the_capacity_after_a_zone_loss_or_the_preview_says_why(recorded, stack, overrides,
                                                                                    level):
    violations = [v for v in evaluate(recorded(stack, overrides), stack)
                  if v["policy"] == "quotas-within-capacity-after-zone-loss"]
    assert [v["level"] for v in violations] == ([level] if level else [])
    if level:
        assert "above the" in violations[0]["message"] and "team-a" in violations[0]["message"] or \
            "staging" in violations[0]["message"]
