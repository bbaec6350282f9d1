"""The AWS half of the program, built under mocks: network, EKS, one GPU node pool per zone.

Expected values come from the stack files through settings and the sizing plan, never from the
components under test.
"""
from __future__ import annotations

import json

import pulumi
import pytest

from offline.engine import is_secret, unwrap
from settings import stack_settings
from sizing.planner import plan as make_plan

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
SUBNET = "aws:ec2/subnet:Subnet"
ADDON = "aws:eks/addon:Addon"
EKS = "aws:eks/cluster:Cluster"
K8S_PROVIDER = "pulumi:providers:kubernetes"
STACKS = ["prod", "staging", "dev"]


def gpu_node_groups(rec):
    groups = [r for r in rec.of_type(NODE_GROUP) if r.inputs.get("labels", {}).get("llm-serving.io/role") == "gpu"]
    assert groups, "no GPU node group recorded"     # the checks below loop over these
    return groups


def found(rec, type_: str):
    """The recorded resources of a type, at least one (a loop over none would check nothing)."""
    resources = rec.of_type(type_)
    assert resources, f"no {type_} recorded"
    return resources


def subnet_zones(rec, subnet_ids):
    by_id = {r.id: r for r in rec.of_type(SUBNET)}
    return {by_id[s].inputs["availabilityZone"] for s in subnet_ids}


def launch_template_of(rec, node_group):
    lt_id = node_group.inputs["launchTemplate"]["id"]
    return next(r for r in rec.of_type(LAUNCH_TEMPLATE) if r.id == lt_id)


# -- GPU node pools ------------------------------------------------------------------------------
@pytest.mark.parametrize("stack", STACKS)
def test_one_gpu_node_group_per_configured_pool(recorded, stack):
    rec = recorded(stack)
    assert len(gpu_node_groups(rec)) == len(stack_settings(stack).gpuPools)


def test_prod_has_two_gpu_node_groups_in_distinct_single_zones(recorded):
    rec = recorded("prod")
    groups = gpu_node_groups(rec)
    zones = [subnet_zones(rec, g.inputs["subnetIds"]) for g in groups]
    assert len(groups) == 2
    assert all(len(z) == 1 for z in zones), zones
    assert len({next(iter(z)) for z in zones}) == 2


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_node_group_subnets_lie_in_its_labelled_zone(recorded, stack):
    rec = recorded(stack)
    for g in gpu_node_groups(rec):
        assert subnet_zones(rec, g.inputs["subnetIds"]) == {g.inputs["labels"]["llm-serving.io/zone"]}


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_node_group_instance_type_and_size_follow_the_stack(recorded, stack):
    settings = stack_settings(stack)
    rec = recorded(stack)
    expected = {p.zone: (p.instanceType, p.nodes) for p in settings.gpuPools}
    for g in gpu_node_groups(rec):
        zone = g.inputs["labels"]["llm-serving.io/zone"]
        itype, nodes = expected[zone]
        assert g.inputs["instanceTypes"] == [itype]
        assert g.inputs["scalingConfig"] == {"desiredSize": nodes, "minSize": nodes, "maxSize": nodes}


def test_prod_gpu_nodes_are_p5_48xlarge(recorded):
    rec = recorded("prod")
    assert {t for g in gpu_node_groups(rec) for t in g.inputs["instanceTypes"]} == {"p5.48xlarge"}


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_node_group_uses_the_nvidia_al2023_ami(recorded, stack):
    rec = recorded(stack)
    assert {g.inputs["amiType"] for g in gpu_node_groups(rec)} == {"AL2023_x86_64_NVIDIA"}


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_node_group_labels_and_taint_follow_the_contract(recorded, stack):
    plan = make_plan(stack_settings(stack).plan_request())
    rec = recorded(stack)
    pools = {p.zone: p.label for p in plan.request.pools}
    for g in gpu_node_groups(rec):
        zone = g.inputs["labels"]["llm-serving.io/zone"]
        assert g.inputs["labels"] == {"llm-serving.io/pool": pools[zone], "llm-serving.io/role": "gpu",
                                      "llm-serving.io/zone": zone}
        assert g.inputs["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
        assert g.inputs["tags"]["llm-serving.io/gpus-per-node"] == str(plan.instance.gpus)


@pytest.mark.parametrize("stack", STACKS)
def test_every_launch_template_requires_imdsv2_with_hop_limit_1(recorded, stack):
    rec = recorded(stack)
    for lt in found(rec, LAUNCH_TEMPLATE):
        assert lt.inputs["metadataOptions"]["httpTokens"] == "required", lt.name
        assert lt.inputs["metadataOptions"]["httpPutResponseHopLimit"] == 1, lt.name


@pytest.mark.parametrize("stack", STACKS)
def test_every_launch_template_encrypts_its_volumes(recorded, stack):
    rec = recorded(stack)
    for lt in found(rec, LAUNCH_TEMPLATE):
        assert lt.inputs["blockDeviceMappings"], lt.name
        assert all(b["ebs"]["encrypted"] == "true" for b in lt.inputs["blockDeviceMappings"]), lt.name


def test_every_node_group_has_a_launch_template(recorded):
    rec = recorded("prod")
    for g in found(rec, NODE_GROUP):
        assert launch_template_of(rec, g).inputs["metadataOptions"]["httpTokens"] == "required"


def test_gpu_user_data_builds_the_nvme_model_cache(recorded):
    import base64
    rec = recorded("prod")
    lt = launch_template_of(rec, gpu_node_groups(rec)[0])
    text = base64.b64decode(lt.inputs["userData"]).decode()
    assert 'Content-Type: multipart/mixed; boundary=' in text
    assert "Content-Type: application/node.eks.aws" in text
    assert "mdadm --create" in text and "--level=0" in text
    assert "MOUNT=/mnt/models" in text


@pytest.mark.parametrize("stack", ["prod", "staging", "dev"])
def test_node_shutdown_grace_covers_the_serving_pods_grace(recorded, stack):
    """A node stop must drain like an eviction: kubelet's grace >= the pod's grace + critical pods."""
    import base64
    import re
    rec = recorded(stack)
    text = base64.b64decode(launch_template_of(rec, gpu_node_groups(rec)[0]).inputs["userData"]).decode()
    node_grace = int(re.search(r"shutdownGracePeriod: (\d+)s", text).group(1))
    critical = int(re.search(r"shutdownGracePeriodCriticalPods: (\d+)s", text).group(1))
    pod_graces = {d.inputs["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
                  for d in rec.of_type("kubernetes:apps/v1:Deployment")
                  if d.inputs["metadata"].get("labels", {}).get("llm-serving.io/role") == "serving"}
    assert pod_graces and node_grace - critical >= max(pod_graces)


# -- capacity reservations, capacity blocks, EFA ---------------------------------------------------
def _pools(**extra_b):
    return [{"zone": "us-east-1a", "instanceType": "p5.48xlarge", "nodes": 1},
            {"zone": "us-east-1b", "instanceType": "p5.48xlarge", "nodes": 1, **extra_b}]


def _pool_b(rec):
    g = next(g for g in gpu_node_groups(rec) if g.inputs["labels"]["llm-serving.io/zone"] == "us-east-1b")
    return g, launch_template_of(rec, g)


def test_capacity_reservation_is_targeted_by_the_launch_template(build_program):
    rec = build_program("prod", {"gpuPools": _pools(capacityReservationId="cr-0123456789abcdef0")})
    g, lt = _pool_b(rec)
    assert lt.inputs["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": "cr-0123456789abcdef0"}}
    assert "instanceMarketOptions" not in lt.inputs
    assert g.inputs["capacityType"] == "ON_DEMAND"


def test_capacity_block_uses_the_capacity_block_market(build_program):
    rec = build_program("prod", {"gpuPools": _pools(capacityBlock={"id": "cr-0fedcba9876543210"})})
    g, lt = _pool_b(rec)
    assert lt.inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert lt.inputs["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": "cr-0fedcba9876543210"}}
    assert lt.inputs["instanceType"] == "p5.48xlarge"
    assert g.inputs["capacityType"] == "CAPACITY_BLOCK"
    assert "instanceTypes" not in g.inputs
    assert not rec.of_type("aws:ec2/capacityBlockReservation:CapacityBlockReservation")


def test_capacity_block_is_bought_only_with_allow_purchase(build_program):
    block = {"purchase": True, "allowPurchase": True, "offeringId": "cb-0123456789abcdef0", "durationHours": 24}
    rec = build_program("prod", {"gpuPools": _pools(capacityBlock=block)})
    (bought,) = rec.of_type("aws:ec2/capacityBlockReservation:CapacityBlockReservation")
    _, lt = _pool_b(rec)
    assert bought.inputs["capacityBlockOfferingId"] == "cb-0123456789abcdef0"
    assert lt.inputs["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"] == bought.id


def test_capacity_block_purchase_without_allow_purchase_is_a_config_error(build_program):
    block = {"purchase": True, "offeringId": "cb-0123456789abcdef0", "durationHours": 24}
    with pytest.raises(pulumi.RunError, match=r"gpuPools\[1\]\.capacityBlock\.allowPurchase: .*non-refundable"):
        build_program("prod", {"gpuPools": _pools(capacityBlock=block)})


def test_efa_adds_one_interface_per_network_card_in_the_cluster_and_efa_security_groups(build_program):
    rec = build_program("prod", {"gpuPools": _pools(efa=True)})
    _, lt = _pool_b(rec)
    cluster = rec.of_type(EKS)[0]
    efa_sg = next(r for r in rec.of_type("aws:ec2/securityGroup:SecurityGroup") if r.name == "efa-sg")
    nics = lt.inputs["networkInterfaces"]
    assert [n["networkCardIndex"] for n in nics] == list(range(len(nics)))
    assert len(nics) > 1
    assert {n["interfaceType"] for n in nics} == {"efa"}
    assert [n["deviceIndex"] for n in nics[:2]] == [0, 1]
    # The EFA group admits all traffic from and to itself (components/efa.py, AWS's EFA requirement).
    assert all(n["securityGroups"] == [cluster.outputs["vpcConfig"]["clusterSecurityGroupId"], efa_sg.id]
               for n in nics)


def test_without_efa_the_launch_template_leaves_interfaces_to_eks(recorded):
    rec = recorded("prod")
    _, lt = _pool_b(rec)
    assert "networkInterfaces" not in lt.inputs


# -- network ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("stack", STACKS)
def test_nat_per_zone_only_where_the_settings_ask(recorded, stack):
    settings = stack_settings(stack)
    rec = recorded(stack)
    zones = {s.inputs["availabilityZone"] for s in rec.of_type(SUBNET)}
    expected = len(zones) if settings.nat_per_zone else 1
    assert len(rec.of_type("aws:ec2/natGateway:NatGateway")) == expected


@pytest.mark.parametrize("stack", STACKS)
def test_every_zone_has_a_public_and_a_private_subnet_tagged_for_load_balancers(recorded, stack):
    rec = recorded(stack)
    by_zone: dict[str, set[str]] = {}
    for s in rec.of_type(SUBNET):
        tags = s.inputs["tags"]
        kind = ("public" if tags.get("kubernetes.io/role/elb") == "1" else
                "private" if tags.get("kubernetes.io/role/internal-elb") == "1" else "untagged")
        by_zone.setdefault(s.inputs["availabilityZone"], set()).add(kind)
    assert set(stack_settings(stack).zones) <= set(by_zone)
    assert all(kinds == {"public", "private"} for kinds in by_zone.values()), by_zone


def test_single_zone_dev_still_gives_eks_two_zones(recorded):
    rec = recorded("dev")
    cluster = rec.of_type(EKS)[0]
    assert len(subnet_zones(rec, cluster.inputs["vpcConfig"]["subnetIds"])) == 2
    assert len(gpu_node_groups(rec)) == 1


def test_private_routes_go_through_nat(recorded):
    rec = recorded("prod")
    private_tables = [r for r in rec.of_type("aws:ec2/routeTable:RouteTable") if "private" in r.name]
    nat_ids = {r.id for r in rec.of_type("aws:ec2/natGateway:NatGateway")}
    assert private_tables
    assert all(t.inputs["routes"][0]["natGatewayId"] in nat_ids for t in private_tables)


# -- EKS -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stack", STACKS)
def test_cluster_version_and_endpoint_follow_the_settings(recorded, stack):
    settings = stack_settings(stack)
    cluster = recorded(stack).of_type(EKS)[0]
    vpc = cluster.inputs["vpcConfig"]
    assert cluster.inputs["version"] == settings.kubernetesVersion
    assert vpc["publicAccessCidrs"] == list(settings.apiAllowedCidrs)
    assert vpc["endpointPrivateAccess"] is True


def test_cluster_uses_access_entries_encrypted_secrets_and_logs(recorded):
    rec = recorded("prod")
    cluster = rec.of_type(EKS)[0]
    key = rec.of_type("aws:kms/key:Key")[0]
    assert cluster.inputs["accessConfig"]["authenticationMode"] == "API"
    assert cluster.inputs["encryptionConfig"] == {"provider": {"keyArn": key.outputs["arn"]}, "resources": ["secrets"]}
    assert key.inputs["enableKeyRotation"] is True
    assert {"api", "audit", "authenticator"} <= set(cluster.inputs["enabledClusterLogTypes"])


def test_admin_roles_get_cluster_admin_access_entries(build_program):
    arns = ["arn:aws:iam::123456789012:role/platform-admin", "arn:aws:iam::123456789012:role/oncall"]
    rec = build_program("prod", {"adminRoleArns": arns})
    entries = rec.of_type("aws:eks/accessEntry:AccessEntry")
    policies = rec.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
    assert sorted(e.inputs["principalArn"] for e in entries) == sorted(arns)
    assert sorted(p.inputs["principalArn"] for p in policies) == sorted(arns)
    assert {p.inputs["policyArn"].rsplit("/", 1)[-1] for p in policies} == {"AmazonEKSClusterAdminPolicy"}
    assert all(p.inputs["accessScope"] == {"type": "cluster"} for p in policies)


def test_the_preview_role_gets_read_only_access_never_admin(build_program):
    preview = "arn:aws:iam::123456789012:role/llm-serving-ci-preview"
    admin = "arn:aws:iam::123456789012:role/platform-admin"
    rec = build_program("prod", {"adminRoleArns": [admin], "previewRoleArns": [preview]})
    policies = {p.inputs["principalArn"]: p for p in rec.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")}
    assert policies[preview].inputs["policyArn"] == "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"
    assert policies[admin].inputs["policyArn"].endswith("/AmazonEKSClusterAdminPolicy")
    assert policies[preview].inputs["accessScope"] == {"type": "cluster"}


def test_core_addons_are_installed(recorded):
    rec = recorded("prod")
    assert {a.inputs["addonName"] for a in rec.of_type(ADDON)} == {
        "vpc-cni", "coredns", "kube-proxy", "aws-ebs-csi-driver", "eks-pod-identity-agent"}


def test_vpc_cni_enforces_network_policy(recorded):
    rec = recorded("prod")
    cni = next(a for a in rec.of_type(ADDON) if a.inputs["addonName"] == "vpc-cni")
    assert json.loads(cni.inputs["configurationValues"])["enableNetworkPolicy"] == "true"


def test_ebs_csi_driver_gets_its_role_through_pod_identity(recorded):
    rec = recorded("prod")
    csi = next(a for a in rec.of_type(ADDON) if a.inputs["addonName"] == "aws-ebs-csi-driver")
    (assoc,) = csi.inputs["podIdentityAssociations"]
    role = next(r for r in rec.of_type("aws:iam/role:Role") if r.outputs["arn"] == assoc["roleArn"])
    assert assoc["serviceAccount"] == "ebs-csi-controller-sa"
    assert "pods.eks.amazonaws.com" in role.inputs["assumeRolePolicy"]


@pytest.mark.parametrize("stack", STACKS)
def test_system_node_group_spans_every_zone_with_the_system_label(recorded, stack):
    settings = stack_settings(stack)
    rec = recorded(stack)
    (system,) = [g for g in rec.of_type(NODE_GROUP) if g.inputs["labels"] == {"llm-serving.io/role": "system"}]
    cluster = rec.of_type(EKS)[0]
    zones = subnet_zones(rec, system.inputs["subnetIds"])
    assert zones == subnet_zones(rec, cluster.inputs["vpcConfig"]["subnetIds"])
    assert len(zones) >= 2
    assert system.inputs["instanceTypes"] == [settings.systemNodes.instanceType]
    assert system.inputs["scalingConfig"]["desiredSize"] == settings.systemNodes.nodesPerZone * len(zones)


# -- Kubernetes provider and outputs -----------------------------------------------------------------
def test_kubernetes_provider_is_built_from_the_cluster(recorded):
    rec = recorded("prod")
    (provider,) = rec.of_type(K8S_PROVIDER)
    cluster = rec.of_type(EKS)[0]
    assert is_secret(provider.inputs["kubeconfig"])
    kubeconfig = json.loads(unwrap(provider.inputs["kubeconfig"]))
    assert kubeconfig["clusters"][0]["cluster"]["server"] == cluster.outputs["endpoint"]
    assert kubeconfig["users"][0]["user"]["exec"]["args"][:4] == ["eks", "get-token", "--cluster-name",
                                                                   cluster.outputs["name"]]


def test_every_kubernetes_resource_uses_the_cluster_provider(recorded):
    rec = recorded("prod")
    (provider,) = rec.of_type(K8S_PROVIDER)
    k8s = [r for r in rec.resources if r.type.startswith("kubernetes:")]
    assert k8s, "the program registers no Kubernetes resources"
    assert all(r.provider.startswith(provider.urn + "::") for r in k8s), \
        [r.name for r in k8s if not r.provider.startswith(provider.urn + "::")]


@pytest.mark.parametrize("stack", STACKS)
def test_outputs_carry_cluster_name_secret_kubeconfig_and_the_plan(recorded, stack):
    plan = make_plan(stack_settings(stack).plan_request())
    rec = recorded(stack)
    out = rec.outputs
    assert out["clusterName"] == rec.of_type(EKS)[0].outputs["name"]
    assert is_secret(out["kubeconfig"])
    assert out["plan"]["replicas"] == plan.replicas
    assert out["plan"]["replicasByZone"] == plan.replicas_by_zone
    assert out["plan"]["gpusPerReplica"] == plan.gpus_per_replica
    assert out["plan"]["capacityAfterZoneLossQps"] == pytest.approx(plan.capacity_after_zone_loss_qps, abs=1e-3)


def test_invalid_config_fails_the_program_with_the_settings_message(build_program):
    with pytest.raises(pulumi.RunError) as err:
        build_program("prod", {"gpuPools": [{"zone": "us-west-2a", "instanceType": "p5.48xlarge", "nodes": 1}]})
    assert str(err.value) == ("invalid stack config:\n"
                              "llm-serving:gpuPools[0].zone: 'us-west-2a' is not a zone of the region "
                              "us-east-1; use a zone such as us-east-1a")


def test_gateway_address_output_is_the_gateways_status_address(recorded):
    rec = recorded("prod")
    (gateway,) = rec.of_type("kubernetes:gateway.networking.k8s.io/v1:Gateway")
    assert rec.outputs["gatewayAddress"] == gateway.outputs["status"]["addresses"][0]["value"]
    assert rec.outputs["gatewayHostname"] == gateway.inputs["spec"]["listeners"][0]["hostname"]


# -- day 2: upgrades that reach the nodes ------------------------------------------------------------
def test_every_node_group_follows_the_clusters_version_and_the_stated_ami(build_program):
    rec = build_program("prod", {"kubernetesVersion": "1.34", "nodeAmiReleaseVersion": "1.34.2-20251120"})
    (cluster,) = rec.of_type("aws:eks/cluster:Cluster")
    groups = rec.of_type("aws:eks/nodeGroup:NodeGroup")
    assert len(groups) == 3 and cluster.inputs["version"] == "1.34"        # the system group and two GPU pools
    assert {(g.inputs["version"], g.inputs["releaseVersion"]) for g in groups} == {("1.34", "1.34.2-20251120")}
    assert all(not g.ignore_changes for g in groups)


def test_a_capacity_block_pool_is_never_upgraded_in_place(build_program):
    """EKS upgrades a Capacity Block node group only at desired size 0: the program leaves its version
    and AMI where they are (docs/operations.md has the procedure); the other pool still moves."""
    rec = build_program("prod", {"gpuPools": _pools(capacityBlock={"id": "cr-0fedcba9876543210"})})
    block, _ = _pool_b(rec)
    assert set(block.ignore_changes) == {"version", "releaseVersion"}
    (other,) = [g for g in rec.of_type("aws:eks/nodeGroup:NodeGroup") if g.name.startswith("gpu-") and g is not block]
    assert other.ignore_changes == () and other.inputs["version"] == "1.35"


@pytest.mark.parametrize("release, problem", [
    ("1.34.2-20251120", "llm-serving:nodeAmiReleaseVersion: 1.34.2-20251120 is an AMI for another Kubernetes "
                        "version than kubernetesVersion 1.35; use a 1.35.x release"),
    ("latest", "llm-serving:nodeAmiReleaseVersion: "),
])
def test_an_ami_release_of_another_version_or_shape_is_refused(build_program, release, problem):
    with pytest.raises(pulumi.RunError) as err:
        build_program("prod", {"nodeAmiReleaseVersion": release})
    assert problem in str(err.value)
