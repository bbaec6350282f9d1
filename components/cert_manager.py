"""cert-manager: the gateway's TLS certificate, issued by ACME (Let's Encrypt) over Route 53 DNS-01.

- Chart jetstack `cert-manager` v1.21.1 with its CRDs, two controller replicas (leader election)
  and two webhook replicas on the system nodes, spread over zones, with PDBs: the webhook
  validates every cert-manager object, so it must survive a zone loss too.
- Route 53 access through EKS Pod Identity, least privilege: TXT records in the one hosted zone
  (`gateway.hostedZoneId`) and reading the change status. The solver names the zone, so
  cert-manager never lists zones (v1.21.1 `pkg/issuer/acme/dns/route53/route53.go`,
  `getHostedZoneID`). Credentials come from the AWS SDK's default chain ("ambient"), which
  ClusterIssuers may use by default and which reads Pod Identity.
- A ClusterIssuer for the ACME server, and the gateway's Certificate into the listener's Secret.
  DNS-01 needs no inbound path, so the certificate is issued before the load balancer exists.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from conventions import CERT_MANAGER_CHART_VERSION, CERT_MANAGER_NAMESPACE, SYSTEM_ROLE_LABEL

from .identity_release import ChartRelease, ControllerArgs, release_with_identity
from .options import after
from .pods import spread

CHART, CHART_REPO = "cert-manager", "https://charts.jetstack.io"
NAMESPACE = CERT_MANAGER_NAMESPACE
RELEASE = "cert-manager"
SERVICE_ACCOUNT = "cert-manager"          # the chart's controller service account (fullname)
CERT_MANAGER_API = "cert-manager.io/v1"
REPLICAS = 2
ISSUER_NAME = "llm-serving-acme"
CHART_RELEASE = ChartRelease(CHART, CERT_MANAGER_CHART_VERSION, CHART_REPO, RELEASE, NAMESPACE, SERVICE_ACCOUNT)


def route53_dns01_policy(hosted_zone_id: str) -> str:
    """What the DNS-01 solver does: UPSERT/DELETE TXT records in one zone, poll the change."""
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "route53:GetChange", "Resource": "arn:aws:route53:::change/*"},
        {"Effect": "Allow", "Action": ["route53:ChangeResourceRecordSets", "route53:ListResourceRecordSets"],
         "Resource": f"arn:aws:route53:::hostedzone/{hosted_zone_id}",
         "Condition": {"ForAllValues:StringEquals": {"route53:ChangeResourceRecordSetsRecordTypes": ["TXT"]}}},
    ]})


def spread_on_system(component: str) -> dict:
    labels = {"app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/component": component}
    return {"replicaCount": REPLICAS, "nodeSelector": dict(SYSTEM_ROLE_LABEL),
            "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
            "topologySpreadConstraints": spread(labels)}


def chart_values() -> dict:
    return {
        "crds": {"enabled": True, "keep": True},
        **spread_on_system("controller"),
        "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT},
        "webhook": spread_on_system("webhook"),
        "cainjector": {"nodeSelector": dict(SYSTEM_ROLE_LABEL)},
        "startupapicheck": {"nodeSelector": dict(SYSTEM_ROLE_LABEL)},
    }


def issuer_spec(acme_server: str, email: str, region: str, hosted_zone_id: str) -> dict:
    return {"acme": {
        "server": acme_server, "email": email,
        "privateKeySecretRef": {"name": f"{ISSUER_NAME}-account-key"},
        "solvers": [{"dns01": {"route53": {"region": region, "hostedZoneID": hosted_zone_id}}}],
    }}


@dataclass(frozen=True, kw_only=True)
class CertManagerArgs(ControllerArgs):
    hosted_zone_id: str
    acme_server: str
    acme_email: str


class CertManager(pulumi.ComponentResource):
    """cert-manager's IAM (Pod Identity), its release (with CRDs) and the ACME ClusterIssuer."""

    release: k8s.helm.v3.Release
    issuer: k8s.apiextensions.CustomResource
    issuer_name: str

    def __init__(self, name: str, args: CertManagerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:cert_manager:CertManager", name, None, opts)
        self.release = release_with_identity(
            self, name, CHART_RELEASE, cluster_name=args.cluster_name,
            policy_json=route53_dns01_policy(args.hosted_zone_id), tags=args.tags, values=chart_values(),
            provider=args.provider,
            kubernetes_version=args.kubernetes_version, opts=opts)
        self.issuer_name = ISSUER_NAME
        self.issuer = k8s.apiextensions.CustomResource(
            f"{name}-issuer", api_version=CERT_MANAGER_API, kind="ClusterIssuer",
            metadata={"name": ISSUER_NAME},
            spec=issuer_spec(args.acme_server, args.acme_email, args.region, args.hosted_zone_id),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[self.release]))
        self.register_outputs({"chart": f"{CHART}@{CERT_MANAGER_CHART_VERSION}", "issuer": ISSUER_NAME})


def certificate_spec(hostname: str, secret_name: str, issuer_name: str) -> dict:
    return {"secretName": secret_name, "dnsNames": [hostname],
            "issuerRef": {"group": "cert-manager.io", "kind": "ClusterIssuer", "name": issuer_name},
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"}}


@dataclass(frozen=True)
class GatewayCertificateArgs:
    hostname: str
    namespace: str                         # the Gateway's namespace: its listener reads the Secret there
    secret_name: str
    provider: k8s.Provider
    issuer_name: str | None = None         # acme: cert-manager's ClusterIssuer
    certificate_pem: pulumi.Input[str] | None = None   # provided: Pulumi secrets
    private_key_pem: pulumi.Input[str] | None = None


class GatewayCertificate(pulumi.ComponentResource):
    """The gateway listener's certificate Secret: a cert-manager Certificate (acme) or a
    kubernetes.io/tls Secret from the tlsCertificate/tlsPrivateKey Pulumi secrets (provided)."""

    def __init__(self, name: str, args: GatewayCertificateArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:cert_manager:GatewayCertificate", name, None, opts)
        # opts.depends_on: cert-manager and its issuer; the namespace
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=after(opts))
        metadata = {"name": args.secret_name, "namespace": args.namespace}
        if args.issuer_name is not None:
            self.resource = k8s.apiextensions.CustomResource(
                f"{name}-certificate", api_version=CERT_MANAGER_API, kind="Certificate", metadata=metadata,
                spec=certificate_spec(args.hostname, args.secret_name, args.issuer_name), opts=child)
        else:      # certificate: provided (settings.required_secrets: the program required both PEMs)
            self.resource = k8s.core.v1.Secret(
                f"{name}-secret", metadata=metadata, type="kubernetes.io/tls",
                string_data={"tls.crt": args.certificate_pem, "tls.key": args.private_key_pem}, opts=child)
        self.secret_name = args.secret_name
        self.register_outputs({"secret": args.secret_name})
