"""The cluster autoscaler: moves each autoscaled GPU node group's desired size between its bounds.

- Chart kubernetes/autoscaler `cluster-autoscaler` 9.59.0 (tag cluster-autoscaler-chart-9.59.0,
  cluster-autoscaler/charts/cluster-autoscaler/values.yaml: `cloudProvider`, `awsRegion`,
  `autoDiscovery.clusterName`, `autoDiscovery.tags`, `image.tag`, `rbac.serviceAccount`,
  `extraArgs`, `nodeSelector`), the image at the cluster's Kubernetes minor version (the autoscaler
  is released per minor: conventions.CLUSTER_AUTOSCALER_IMAGE_TAGS).
- Auto-discovery: `--node-group-auto-discovery=asg:tag=k8s.io/cluster-autoscaler/enabled,
  k8s.io/cluster-autoscaler/<cluster>` (the chart's default `autoDiscovery.tags`;
  cluster-autoscaler/cloudprovider/aws/README.md "Auto-Discovery Setup" at cluster-autoscaler-1.35.0).
  EKS puts both tags on every managed node group's Auto Scaling group; the groups that must not move
  (system nodes, a Capacity Block or reservation) have min = max, so the autoscaler cannot move them.
- AWS access through EKS Pod Identity: the README's "Full Cluster Autoscaler Features Policy"
  (describe calls, `eks:DescribeNodegroup` for a group at zero nodes), with SetDesiredCapacity and
  TerminateInstanceInAutoScalingGroup only on this cluster's groups (the README's advice to restrict
  them, by tag condition on `eks:cluster-name`).
- `expander: least-waste` and `balance-similar-node-groups: false`: a serving pod is pinned to its
  zone's node group, so the group that fits it is the one to grow; scale-down of a node waits the
  policy's stabilization (`scale-down-unneeded-time`), after KEDA has drained its replicas.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from conventions import CLUSTER_AUTOSCALER_CHART_VERSION, CLUSTER_AUTOSCALER_IMAGE_TAGS, SYSTEM_ROLE_LABEL

from .identity_release import ChartRelease, ControllerArgs, release_with_identity
from .pods import POD_NON_ROOT, container_security

CHART, CHART_REPO = "cluster-autoscaler", "https://kubernetes.github.io/autoscaler"
NAMESPACE = "kube-system"
RELEASE = SERVICE_ACCOUNT = "cluster-autoscaler"
CHART_RELEASE = ChartRelease(CHART, CLUSTER_AUTOSCALER_CHART_VERSION, CHART_REPO, RELEASE, NAMESPACE,
                             SERVICE_ACCOUNT, create_namespace=False)


def autoscaler_policy(cluster_name: str) -> str:
    """The README's full-features policy, the two mutating actions limited to this cluster's groups."""
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Resource": "*", "Action": [
            "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
            "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities",
            "ec2:DescribeImages", "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplateVersions",
            "ec2:GetInstanceTypesFromInstanceRequirements", "eks:DescribeNodegroup"]},
        {"Effect": "Allow", "Resource": "*",
         "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
         # EKS tags a managed node group's Auto Scaling group with its cluster (`eks:cluster-name`).
         "Condition": {"StringEquals": {"aws:ResourceTag/eks:cluster-name": cluster_name}}},
    ]})


def chart_values(cluster_name: str, region: str, kubernetes_version: str, scale_down_unneeded_s: int) -> dict:
    return {
        "cloudProvider": "aws",
        "awsRegion": region,
        "autoDiscovery": {"clusterName": cluster_name},
        "image": {"tag": CLUSTER_AUTOSCALER_IMAGE_TAGS[kubernetes_version]},
        "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
        "extraArgs": {"expander": "least-waste", "balance-similar-node-groups": False,
                      "scale-down-unneeded-time": f"{scale_down_unneeded_s}s"},
        "nodeSelector": dict(SYSTEM_ROLE_LABEL),
        # The restricted Pod Security Standard: the image is distroless `static:nonroot` (its Dockerfile at
        # cluster-autoscaler-1.35.0) and writes nothing to its root filesystem.
        "securityContext": dict(POD_NON_ROOT),
        "containerSecurityContext": container_security(),
    }


@dataclass(frozen=True, kw_only=True)
class ClusterAutoscalerArgs(ControllerArgs):      # ControllerArgs.kubernetes_version: its image's minor
    scale_down_unneeded_s: int          # the policy's scale-down stabilization


class ClusterAutoscaler(pulumi.ComponentResource):
    """The autoscaler's IAM (Pod Identity) and its Helm release."""

    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: ClusterAutoscalerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:cluster_autoscaler:ClusterAutoscaler", name, None, opts)
        cluster = pulumi.Output.from_input(args.cluster_name)
        self.release = release_with_identity(
            self, name, CHART_RELEASE, cluster_name=args.cluster_name,
            policy_json=cluster.apply(autoscaler_policy), tags=args.tags,
            values=cluster.apply(lambda c: chart_values(c, args.region, args.kubernetes_version,
                                                        args.scale_down_unneeded_s)),
            provider=args.provider, kubernetes_version=args.kubernetes_version, opts=opts)
        self.register_outputs({"chart": f"{CHART}@{CLUSTER_AUTOSCALER_CHART_VERSION}"})
