"""EFA for the GPU pools whose replicas span nodes: a security group and the device plugin.

- The security group: AWS's EFA requirement, "The security group must allow all inbound and
  outbound traffic to and from the security group itself" (AWS EC2 User Guide, "Elastic Fabric
  Adapter", "Prepare an EFA-enabled security group"): one self-referencing all-traffic rule each
  way. The EFA interfaces of the launch template carry it beside the cluster security group
  (components/gpu_node_pool.py `_efa_interfaces`).
- The device plugin (aws/eks-charts `stable/aws-efa-k8s-device-plugin`, pinned): advertises
  `vpc.amazonaws.com/efa` on the nodes, one per EFA interface, which the serving pods request so
  that NCCL gets the devices. Its chart selects nodes by instance type (p5.48xlarge, p5e, p5en are
  in its list) and tolerates only CriticalAddonsOnly: our GPU taint is added.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from conventions import EFA_DEVICE_PLUGIN_CHART_VERSION, EFA_PLUGIN_NAMESPACE, GPU_TOLERATION


CHART = "aws-efa-k8s-device-plugin"
CHART_REPO = "https://aws.github.io/eks-charts"


def plugin_values() -> dict:
    """The chart's own instance-type affinity stays; it must also tolerate the GPU nodes' taint."""
    return {"tolerations": [GPU_TOLERATION]}


@dataclass(frozen=True)
class EfaSecurityGroupArgs:
    vpc_id: pulumi.Input[str]
    tags: Mapping[str, str]


class EfaSecurityGroup(pulumi.ComponentResource):
    """A security group that admits all traffic from and to itself (EFA's OS-bypass traffic)."""

    def __init__(self, name: str, args: EfaSecurityGroupArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:efa:EfaSecurityGroup", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg", vpc_id=args.vpc_id, description="EFA: all traffic within the group (AWS EFA requirement)",
            tags={**args.tags, "Name": f"{name}-efa"}, opts=child)
        sg_id = self.security_group.id
        rule_opts = pulumi.ResourceOptions(parent=self.security_group)
        self.ingress = aws.vpc.SecurityGroupIngressRule(
            f"{name}-self-in", security_group_id=sg_id, referenced_security_group_id=sg_id, ip_protocol="-1",
            description="EFA: all inbound from the group itself", opts=rule_opts)
        self.egress = aws.vpc.SecurityGroupEgressRule(
            f"{name}-self-out", security_group_id=sg_id, referenced_security_group_id=sg_id, ip_protocol="-1",
            description="EFA: all outbound to the group itself", opts=rule_opts)
        self.register_outputs({"securityGroupId": sg_id})


@dataclass(frozen=True)
class EfaPluginArgs:
    provider: k8s.Provider


class EfaPlugin(pulumi.ComponentResource):
    """One Helm release of the EFA device plugin DaemonSet."""

    def __init__(self, name: str, args: EfaPluginArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:efa:EfaPlugin", name, None, opts)
        self.release = k8s.helm.v3.Release(
            f"{name}-release", name=CHART, chart=CHART, version=EFA_DEVICE_PLUGIN_CHART_VERSION,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=CHART_REPO),
            namespace=EFA_PLUGIN_NAMESPACE, values=plugin_values(),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider))
        self.register_outputs({"release": self.release.name})
