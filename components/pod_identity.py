"""AWS access for one Kubernetes service account through EKS Pod Identity.

An IAM role that only the EKS Pod Identity service can assume, its (least-privilege) policy, and
the association that binds the role to one service account in one namespace. The pod identity
agent (an EKS add-on installed by the cluster) hands the pod its credentials; pods never read
the node role (the launch templates set the IMDS hop limit to 1).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from .options import after

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def pod_identity_trust_policy() -> str:
    """Who may assume the role: EKS Pod Identity only (it also tags the session)."""
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
        "Action": ["sts:AssumeRole", "sts:TagSession"]}]})


@dataclass(frozen=True)
class PodIdentityArgs:
    cluster_name: pulumi.Input[str]
    namespace: str
    service_account: str
    policy_json: pulumi.Input[str]            # the role's only permissions
    tags: dict[str, str] = field(default_factory=dict)


class PodIdentity(pulumi.ComponentResource):
    """Role + inline policy + pod identity association for one service account.

    `opts.depends_on`: the pod identity agent add-on; the association waits for it."""

    role: aws.iam.Role
    association: aws.eks.PodIdentityAssociation

    def __init__(self, name: str, args: PodIdentityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:pod_identity:PodIdentity", name, None, opts)
        self.role = aws.iam.Role(
            f"{name}-role", assume_role_policy=pod_identity_trust_policy(), tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self))
        policy = aws.iam.RolePolicy(
            f"{name}-policy", role=self.role.id, policy=args.policy_json,
            opts=pulumi.ResourceOptions(parent=self.role))
        self.association = aws.eks.PodIdentityAssociation(
            f"{name}-association", cluster_name=args.cluster_name, namespace=args.namespace,
            service_account=args.service_account, role_arn=self.role.arn, tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy, *after(opts)]))
        self.register_outputs({"roleArn": self.role.arn, "serviceAccount": f"{args.namespace}/{args.service_account}"})
