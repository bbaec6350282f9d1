"""The EKS cluster: IAM, the control plane, core add-ons, the system node group, and the
Kubernetes provider every Kubernetes resource in the program uses.

- The API endpoint is public only to `apiAllowedCidrs` (and private inside the VPC).
- Access is by EKS access entries (API mode), not the aws-auth ConfigMap.
- Kubernetes secrets are envelope-encrypted with a customer-managed KMS key.
- The cluster starts without EKS's self-managed add-ons; the managed add-ons below replace them,
  so their versions and configuration (network policy in the VPC CNI) are ours.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from conventions import IMDS_HOP_LIMIT, SERVICE_CIDR, SYSTEM_ROLE_LABEL
from settings.names import cluster_name, control_plane_log_group, secrets_key_alias
from settings.schema import SystemNodeSettings

from .network import Network

CONTROL_PLANE_LOG_TYPES = ["api", "audit", "authenticator", "controllerManager", "scheduler"]
CONTROL_PLANE_LOG_RETENTION_DAYS = 90       # audit trail long enough for an incident review
SYSTEM_ROOT_VOLUME_GIB = 50
SYSTEM_MAX_SCALE = 2                         # max size = 2 x desired: room to scale up by hand
ADMIN_POLICY = ":eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"   # after "arn:<partition>"
# Read-only Kubernetes access for the CI preview role: EKS's view policy (most namespaced objects,
# not Secrets), never cluster-admin. A preview that may not patch falls back from a server-side
# dry run to a client-side diff (pulumi/pulumi-kubernetes#2419, in v4.34.2).
VIEW_POLICY = ":eks::aws:cluster-access-policy/AmazonEKSViewPolicy"
EBS_CSI_SERVICE_ACCOUNT = "ebs-csi-controller-sa"


# The cluster's Service CIDR, fixed (not EKS's pick) so the gateway can take a known in-cluster
# address that the run-once Jobs map its hostname to (components/gateway.py).
SERVICE_CIDR = "172.20.0.0/16"


def imdsv2_required() -> aws.ec2.LaunchTemplateMetadataOptionsArgs:
    """IMDSv2 only, hop limit 1: processes on the node (and host-network agents such as the VPC
    CNI and the pod identity agent) reach it; pods, one hop further, do not, so vLLM (root) or a
    Job that pip-installs cannot read the node role's credentials. Pods that need AWS get it
    from EKS Pod Identity; controllers get region and VPC from their values, not from IMDS."""
    return aws.ec2.LaunchTemplateMetadataOptionsArgs(
        http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=IMDS_HOP_LIMIT,
        instance_metadata_tags="disabled")


def hardened_launch_template(resource_name: str, *, name_tag: str, root_gib: int, description: str,
                             tags: dict[str, str], opts: pulumi.ResourceOptions, **extra) -> aws.ec2.LaunchTemplate:
    """A node launch template with what every node here gets: IMDSv2 only, an encrypted root
    volume, the Name tag on the instance and its volumes. `extra` adds pool-specific arguments."""
    return aws.ec2.LaunchTemplate(
        resource_name,
        description=description,
        metadata_options=imdsv2_required(),
        block_device_mappings=[encrypted_root_volume(root_gib)],
        tag_specifications=[aws.ec2.LaunchTemplateTagSpecificationArgs(
            resource_type=kind, tags={**tags, "Name": name_tag}) for kind in ("instance", "volume")],
        update_default_version=True,
        tags=tags,
        opts=opts,
        **extra,
    )


def encrypted_root_volume(size_gib: int) -> aws.ec2.LaunchTemplateBlockDeviceMappingArgs:
    """The AL2023 root volume (/dev/xvda): gp3, encrypted (account default EBS key), deleted with the node."""
    return aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
        device_name="/dev/xvda",
        ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
            volume_size=size_gib, volume_type="gp3", encrypted="true", delete_on_termination="true"),
    )


def _assume_role_policy(service: str) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": service},
        "Action": ["sts:AssumeRole", "sts:TagSession"]}]})


@dataclass(frozen=True)
class ClusterArgs:
    stack: str                              # names the cluster, its KMS alias and log group (settings.names)
    environment: str                        # prod turns on deletion protection
    region: str                             # the kubeconfig's `aws eks get-token --region`
    kubernetes_version: str
    api_allowed_cidrs: tuple[str, ...]      # who may reach the public API endpoint
    admin_role_arns: tuple[str, ...]        # IAM roles granted cluster admin through access entries
    system_nodes: SystemNodeSettings
    tags: Mapping[str, str]
    network: Network
    view_role_arns: tuple[str, ...] = ()    # IAM roles granted read-only access (the CI preview role)
    node_ami_release_version: str | None = None   # nodeAmiReleaseVersion: the system nodes' AMI release


class Cluster(pulumi.ComponentResource):
    """EKS control plane, access entries, managed add-ons, system nodes and a Kubernetes provider.

    Built in named steps, in order: IAM roles, encryption and logs, control plane, admin access,
    the add-ons nodes need, system nodes, the add-ons that need nodes, the Kubernetes provider."""

    eks_cluster: aws.eks.Cluster
    node_role: aws.iam.Role
    system_node_group: aws.eks.NodeGroup
    k8s_provider: k8s.Provider
    kubeconfig: pulumi.Output[str]
    node_dependencies: list[pulumi.Resource]   # what a node group waits for (CNI, kube-proxy)
    pod_identity_agent: aws.eks.Addon

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:cluster:Cluster", name, None, opts)
        self._name, self._args = name, args
        self._child = pulumi.ResourceOptions(parent=self)
        self._tags = dict(args.tags)
        # Output-returning invokes: they resolve alongside registrations instead of blocking the program.
        self._partition = aws.get_partition_output().partition
        self._cluster_name = cluster_name(args.stack)     # checked with the settings (stack_name_problems)

        cluster_role, cluster_policy, node_policies = self._iam_roles()
        secrets_key, log_group = self._encryption_and_logs()
        self._control_plane(cluster_role, cluster_policy, secrets_key, log_group)
        self._admin_access()
        self._node_addons(node_policies)
        self._system_nodes()
        self._deployment_addons()
        self._kubernetes_provider()
        cluster = self.eks_cluster
        self.register_outputs({
            "clusterName": cluster.name,
            "endpoint": cluster.endpoint,
            "nodeRoleArn": self.node_role.arn,
            "kubeconfig": self.kubeconfig,
        })

    def _managed_policy(self, policy: str) -> pulumi.Output[str]:
        return pulumi.Output.concat("arn:", self._partition, ":iam::aws:policy/", policy)

    def _iam_roles(self) -> tuple[aws.iam.Role, aws.iam.RolePolicyAttachment, list[aws.iam.RolePolicyAttachment]]:
        """The control plane's role and the nodes' role, each with its AWS managed policies."""
        name, tags = self._name, self._tags
        cluster_role = aws.iam.Role(
            f"{name}-cluster-role", assume_role_policy=_assume_role_policy("eks.amazonaws.com"),
            tags=tags, opts=self._child)
        cluster_policy = aws.iam.RolePolicyAttachment(
            f"{name}-cluster-policy", role=cluster_role.name,
            policy_arn=self._managed_policy("AmazonEKSClusterPolicy"),
            opts=pulumi.ResourceOptions(parent=cluster_role))

        self.node_role = aws.iam.Role(
            f"{name}-node-role", assume_role_policy=_assume_role_policy("ec2.amazonaws.com"), tags=tags,
            opts=self._child)
        node_policies = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{policy}", role=self.node_role.name, policy_arn=self._managed_policy(policy),
                opts=pulumi.ResourceOptions(parent=self.node_role))
            for policy in ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy",
                           "AmazonEC2ContainerRegistryReadOnly",
                           "AmazonSSMManagedInstanceCore")   # shell access without SSH keys or open ports
        ]
        return cluster_role, cluster_policy, node_policies

    def _encryption_and_logs(self) -> tuple[aws.kms.Key, aws.cloudwatch.LogGroup]:
        name, tags, cluster_name = self._name, self._tags, self._cluster_name
        secrets_key = aws.kms.Key(
            f"{name}-secrets-key", description=f"EKS secrets envelope encryption for {cluster_name}",
            enable_key_rotation=True, deletion_window_in_days=30, tags=tags, opts=self._child)
        aws.kms.Alias(f"{name}-secrets-key-alias", name=secrets_key_alias(self._args.stack),
                      target_key_id=secrets_key.key_id, opts=pulumi.ResourceOptions(parent=secrets_key))
        # Created before the cluster so EKS writes into a group with a retention, not an unbounded one.
        log_group = aws.cloudwatch.LogGroup(
            f"{name}-control-plane-logs", name=control_plane_log_group(self._args.stack),
            retention_in_days=CONTROL_PLANE_LOG_RETENTION_DAYS, tags=tags, opts=self._child)
        return secrets_key, log_group

    def _control_plane(self, cluster_role: aws.iam.Role, cluster_policy: aws.iam.RolePolicyAttachment,
                       secrets_key: aws.kms.Key, log_group: aws.cloudwatch.LogGroup) -> None:
        args, network = self._args, self._args.network
        self.eks_cluster = aws.eks.Cluster(
            f"{self._name}-eks",
            name=self._cluster_name,
            version=args.kubernetes_version,
            role_arn=cluster_role.arn,
            vpc_config=aws.eks.ClusterVpcConfigArgs(
                subnet_ids=network.private_subnet_ids,
                endpoint_private_access=True,
                endpoint_public_access=True,
                public_access_cidrs=list(args.api_allowed_cidrs),
            ),
            access_config=aws.eks.ClusterAccessConfigArgs(
                authentication_mode="API",
                # The identity running `pulumi up` keeps admin: the Kubernetes provider acts as it.
                bootstrap_cluster_creator_admin_permissions=True,
            ),
            encryption_config=aws.eks.ClusterEncryptionConfigArgs(
                provider=aws.eks.ClusterEncryptionConfigProviderArgs(key_arn=secrets_key.arn),
                resources=["secrets"],
            ),
            kubernetes_network_config=aws.eks.ClusterKubernetesNetworkConfigArgs(service_ipv4_cidr=SERVICE_CIDR),
            enabled_cluster_log_types=CONTROL_PLANE_LOG_TYPES,
            bootstrap_self_managed_addons=False,
            # Lets an operator (or ARC autoshift) move traffic off an impaired zone: the failure
            # this stack is sized to survive.
            zonal_shift_config=aws.eks.ClusterZonalShiftConfigArgs(enabled=len(network.private_subnets) > 1),
            deletion_protection=args.environment == "prod",
            tags=self._tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[cluster_policy, log_group]),
        )

    def _admin_access(self) -> None:
        """Access entries: cluster-admin for `adminRoleArns`, view for `previewRoleArns`."""
        for kind, arns, policy in (("admin", self._args.admin_role_arns, ADMIN_POLICY),
                                   ("view", self._args.view_role_arns, VIEW_POLICY)):
            for i, arn in enumerate(arns):
                self._access_entry(f"{self._name}-{kind}-{i}", arn, policy)

    def _access_entry(self, name: str, principal_arn: str, policy: str) -> None:
        cluster = self.eks_cluster
        entry = aws.eks.AccessEntry(
            name, cluster_name=cluster.name, principal_arn=principal_arn, type="STANDARD",
            tags=self._tags, opts=pulumi.ResourceOptions(parent=cluster))
        aws.eks.AccessPolicyAssociation(
            f"{name}-policy", cluster_name=cluster.name, principal_arn=entry.principal_arn,
            policy_arn=pulumi.Output.concat("arn:", self._partition, policy),
            access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
            opts=pulumi.ResourceOptions(parent=entry))

    def _addon(self, addon_name: str, depends_on=(), **kwargs) -> aws.eks.Addon:
        # The version EKS marks as default for this Kubernetes version, resolved when the
        # program runs and kept in state; bump kubernetesVersion to move it.
        cluster = self.eks_cluster
        version = aws.eks.get_addon_version_output(addon_name=addon_name,
                                                   kubernetes_version=self._args.kubernetes_version)
        return aws.eks.Addon(
            f"{self._name}-{addon_name}", cluster_name=cluster.name, addon_name=addon_name,
            addon_version=version.version, resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="PRESERVE", tags=self._tags,
            opts=pulumi.ResourceOptions(parent=cluster, depends_on=list(depends_on)), **kwargs)

    def _node_addons(self, node_policies: list[aws.iam.RolePolicyAttachment]) -> None:
        """Add-ons that nodes need to become Ready (DaemonSets: created before any node)."""
        self.pod_identity_agent = self._addon("eks-pod-identity-agent")   # every Pod Identity association waits for it
        vpc_cni = self._addon("vpc-cni", configuration_values=json.dumps({
            # NetworkPolicy enforcement: the serving namespace's policies rely on it.
            "enableNetworkPolicy": "true",
        }))
        kube_proxy = self._addon("kube-proxy")
        self.node_dependencies = [vpc_cni, kube_proxy, self.pod_identity_agent, *node_policies]

    def _system_nodes(self) -> None:
        """System node group (CPU, every zone): gateway, monitoring, CoreDNS."""
        name, network, cluster_name = self._name, self._args.network, self._cluster_name
        system_nodes = self._args.system_nodes
        desired = system_nodes.nodesPerZone * len(network.private_subnets)
        system_template = hardened_launch_template(
            f"{name}-system-lt", name_tag=f"{cluster_name}-system", root_gib=SYSTEM_ROOT_VOLUME_GIB,
            description=f"{cluster_name} system nodes: IMDSv2 only, encrypted root volume", tags=self._tags,
            opts=self._child)
        self.system_node_group = aws.eks.NodeGroup(
            f"{name}-system",
            cluster_name=self.eks_cluster.name,
            node_role_arn=self.node_role.arn,
            subnet_ids=network.private_subnet_ids,
            instance_types=[system_nodes.instanceType],
            ami_type="AL2023_x86_64_STANDARD",
            capacity_type="ON_DEMAND",
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                desired_size=desired, min_size=desired, max_size=desired * SYSTEM_MAX_SCALE),
            update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1),
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=system_template.id, version=system_template.latest_version.apply(str)),
            labels=dict(SYSTEM_ROLE_LABEL),
            version=self.eks_cluster.version,                 # the nodes follow the control plane
            release_version=self._args.node_ami_release_version,
            tags=self._tags,
            opts=pulumi.ResourceOptions(parent=self.eks_cluster, depends_on=self.node_dependencies),
        )

    def _deployment_addons(self) -> None:
        """Add-ons that run as Deployments: they need nodes first."""
        name = self._name
        self._addon("coredns", depends_on=[self.system_node_group])
        ebs_csi_role = aws.iam.Role(
            f"{name}-ebs-csi-role", assume_role_policy=_assume_role_policy("pods.eks.amazonaws.com"),
            tags=self._tags, opts=self._child)
        ebs_csi_policy = aws.iam.RolePolicyAttachment(
            f"{name}-ebs-csi-policy", role=ebs_csi_role.name,
            policy_arn=self._managed_policy("service-role/AmazonEBSCSIDriverPolicy"),
            opts=pulumi.ResourceOptions(parent=ebs_csi_role))
        self._addon("aws-ebs-csi-driver", depends_on=[self.system_node_group, self.pod_identity_agent, ebs_csi_policy],
                    pod_identity_associations=[aws.eks.AddonPodIdentityAssociationArgs(
                        role_arn=ebs_csi_role.arn, service_account=EBS_CSI_SERVICE_ACCOUNT)])

    def _kubernetes_provider(self) -> None:
        cluster, region = self.eks_cluster, self._args.region
        self.cluster_name = cluster.name
        self.kubeconfig = pulumi.Output.secret(pulumi.Output.all(
            cluster.name, cluster.endpoint, cluster.certificate_authority.data,
        ).apply(lambda parts: kubeconfig_json(*parts, region=region)))
        self.k8s_provider = k8s.Provider(
            f"{self._name}-k8s",
            kubeconfig=self.kubeconfig,
            # Kubernetes objects wait for the system nodes, so webhooks and charts have somewhere to run.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.system_node_group]),
        )


def kubeconfig_json(cluster_name: str, endpoint: str, ca_data: str, region: str) -> str:
    """A kubeconfig that authenticates with `aws eks get-token` (short-lived tokens, no static keys)."""
    user = f"{cluster_name}-admin"
    return json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": cluster_name,
        "users": [{"name": user, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", cluster_name, "--region", region, "--output", "json"],
            "interactiveMode": "Never",
        }}}],
    })
