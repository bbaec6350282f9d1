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
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from conventions import EXTERNAL_DNS_CHART_VERSION

from .cluster import SYSTEM_ROLE_LABEL
from .options import after
from .pod_identity import PodIdentity, PodIdentityArgs

CHART, CHART_REPO = "external-dns", "https://kubernetes-sigs.github.io/external-dns/"
NAMESPACE = "external-dns"
RELEASE = "external-dns"
SERVICE_ACCOUNT = "external-dns"


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


@dataclass(frozen=True)
class ExternalDnsArgs:
    cluster_name: pulumi.Input[str]
    region: str
    hosted_zone_id: str
    provider: k8s.Provider
    tags: dict[str, str] = field(default_factory=dict)


class ExternalDns(pulumi.ComponentResource):
    """external-dns's IAM (Pod Identity) and its Helm release."""

    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: ExternalDnsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:external_dns:ExternalDns", name, None, opts)
        identity = PodIdentity(f"{name}-identity", PodIdentityArgs(
            cluster_name=args.cluster_name, namespace=NAMESPACE, service_account=SERVICE_ACCOUNT,
            policy_json=route53_records_policy(args.hosted_zone_id),
            tags=dict(args.tags)), opts=pulumi.ResourceOptions(parent=self, depends_on=after(opts)))
        self.release = k8s.helm.v3.Release(
            f"{name}-release", name=RELEASE, chart=CHART, version=EXTERNAL_DNS_CHART_VERSION,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=CHART_REPO),
            namespace=NAMESPACE, create_namespace=True,
            values=chart_values(args.cluster_name, args.region, args.hosted_zone_id),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[identity.association]))
        self.register_outputs({"chart": f"{CHART}@{EXTERNAL_DNS_CHART_VERSION}"})
