"""The AWS Load Balancer Controller: it turns the gateway's LoadBalancer Service into an NLB.

The Envoy proxies' Service carries `service.beta.kubernetes.io/aws-load-balancer-type: external`
(IP targets). The in-tree AWS cloud provider answers `ImplementedElsewhere` for that annotation
(kubernetes/cloud-provider-aws `pkg/providers/v1/aws_loadbalancer.go`, `isLBExternal`): only this
controller acts on it, and it is also what enforces the Service's `loadBalancerSourceRanges`
(the NLB's security group rules, aws-load-balancer-controller v3.5.0
`pkg/service/model_build_managed_sg.go`). Without it the Service stays Pending and the Gateway
never gets an address.

- Chart aws/eks-charts `aws-load-balancer-controller` 3.5.0 (app v3.5.0), IAM policy from the
  same app version (`components/data/`, with its source), through EKS Pod Identity.
- Two replicas on the system nodes, one per zone (leader election is on in the chart), a PDB.
- `region` and `vpcId` are given: with the IMDS hop limit at 1 the pods cannot read them from
  the instance metadata.
- The Service mutator webhook is off: our one LoadBalancer Service names its controller with
  its annotations, and a webhook on every Service would make Service creation depend on this
  controller's availability.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from conventions import AWS_LOAD_BALANCER_CONTROLLER_CHART_VERSION, SYSTEM_ROLE_LABEL

from .identity_release import ChartRelease, ControllerArgs, release_with_identity
from .pods import spread

CHART, CHART_REPO = "aws-load-balancer-controller", "https://aws.github.io/eks-charts"
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "aws-load-balancer-controller"
RELEASE = "aws-load-balancer-controller"
REPLICAS = 2
IAM_POLICY_FILE = Path(__file__).resolve().parent / "data" / "aws-load-balancer-controller-iam-policy.json"
# The Service annotations this controller owns (conventions.ANNOTATION_AWS_LB_TYPE, AWS_LB_TYPE_EXTERNAL) are
# what the controller contract reads.
SELECTOR = {"app.kubernetes.io/name": CHART, "app.kubernetes.io/instance": RELEASE}
# kube-system exists; wait for the pods: the gateway's Service must find a running controller
# (and its credentials) when Envoy Gateway creates it.
CHART_RELEASE = ChartRelease(CHART, AWS_LOAD_BALANCER_CONTROLLER_CHART_VERSION, CHART_REPO, RELEASE, NAMESPACE,
                             SERVICE_ACCOUNT, create_namespace=False, wait_for_pods=True)


def iam_policy_json() -> str:
    return IAM_POLICY_FILE.read_text()


def chart_values(cluster_name: pulumi.Input[str], region: str, vpc_id: pulumi.Input[str]) -> dict:
    return {
        "clusterName": cluster_name, "region": region, "vpcId": vpc_id,
        "replicaCount": REPLICAS,
        "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT},
        "nodeSelector": dict(SYSTEM_ROLE_LABEL),
        "topologySpreadConstraints": spread(SELECTOR),
        "podDisruptionBudget": {"maxUnavailable": 1},
        "enableServiceMutatorWebhook": False,
    }


@dataclass(frozen=True, kw_only=True)
class LoadBalancerControllerArgs(ControllerArgs):
    vpc_id: pulumi.Input[str]


class LoadBalancerController(pulumi.ComponentResource):
    """The controller's IAM (Pod Identity) and its Helm release."""

    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: LoadBalancerControllerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:load_balancer_controller:LoadBalancerController", name, None, opts)
        self.release = release_with_identity(
            self, name, CHART_RELEASE, cluster_name=args.cluster_name, policy_json=iam_policy_json(), tags=args.tags,
            values=chart_values(args.cluster_name, args.region, args.vpc_id), provider=args.provider,
            kubernetes_version=args.kubernetes_version, opts=opts)
        self.register_outputs({"chart": f"{CHART}@{AWS_LOAD_BALANCER_CONTROLLER_CHART_VERSION}", "replicas": REPLICAS})
