"""external-dns: points the gateway's hostname at its load balancer in Route 53.

- Chart kubernetes-sigs `external-dns` 1.21.1 (app 0.21.0), AWS provider, the `service` source
  only: it publishes the one Service that carries the `external-dns.alpha.kubernetes.io/hostname`
  annotation (the Envoy proxies' LoadBalancer Service, once the AWS Load Balancer Controller has
  given it an NLB hostname), into the one hosted zone `gateway.hostedZoneId`.
- Route 53 access through EKS Pod Identity, least privilege after external-dns's AWS tutorial
  (`docs/tutorials/aws.md` at that tag): change and list records in that zone, list zones.
- `upsert-only`: it never deletes a record it did not create; the TXT registry (owner id = the
  cluster name) marks the records it owns.
- One replica: it reconciles on a loop and a short outage only delays a DNS change, never
  serving.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from conventions import EXTERNAL_DNS_CHART_VERSION, EXTERNAL_DNS_NAMESPACE, SYSTEM_ROLE_LABEL

from .identity_release import ChartRelease, ControllerArgs, release_with_identity

CHART, CHART_REPO = "external-dns", "https://kubernetes-sigs.github.io/external-dns/"
NAMESPACE = EXTERNAL_DNS_NAMESPACE
RELEASE = "external-dns"
SERVICE_ACCOUNT = "external-dns"
CHART_RELEASE = ChartRelease(CHART, EXTERNAL_DNS_CHART_VERSION, CHART_REPO, RELEASE, NAMESPACE, SERVICE_ACCOUNT)


def route53_records_policy(hosted_zone_id: str) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow",
         "Action": ["route53:ChangeResourceRecordSets", "route53:ListResourceRecordSets",
                    "route53:ListTagsForResources"],
         "Resource": f"arn:aws:route53:::hostedzone/{hosted_zone_id}"},
        {"Effect": "Allow", "Action": "route53:ListHostedZones", "Resource": "*"},
    ]})


def chart_values(cluster_name: pulumi.Input[str], region: str, hosted_zone_id: str) -> dict:
    return {
        "provider": {"name": "aws"},
        "env": [{"name": "AWS_DEFAULT_REGION", "value": region}],   # no IMDS to read it from (hop limit 1)
        "sources": ["service"],
        "policy": "upsert-only",
        "registry": "txt",
        "txtOwnerId": cluster_name,
        "extraArgs": [f"--zone-id-filter={hosted_zone_id}"],
        "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT},
        "nodeSelector": dict(SYSTEM_ROLE_LABEL),
    }


@dataclass(frozen=True, kw_only=True)
class ExternalDnsArgs(ControllerArgs):
    hosted_zone_id: str


class ExternalDns(pulumi.ComponentResource):
    """external-dns's IAM (Pod Identity) and its Helm release."""

    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: ExternalDnsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:external_dns:ExternalDns", name, None, opts)
        self.release = release_with_identity(
            self, name, CHART_RELEASE, cluster_name=args.cluster_name,
            policy_json=route53_records_policy(args.hosted_zone_id), tags=args.tags,
            values=chart_values(args.cluster_name, args.region, args.hosted_zone_id), provider=args.provider,
            kubernetes_version=args.kubernetes_version, opts=opts)
        self.register_outputs({"chart": f"{CHART}@{EXTERNAL_DNS_CHART_VERSION}"})
