"""A controller's Helm release that reaches AWS through EKS Pod Identity.

The AWS Load Balancer Controller, cert-manager and external-dns have the same shape: an IAM role
for the chart's service account (`pod_identity.PodIdentity`), then the chart's release, which
waits for the association so the controller's first AWS call already has credentials. One
`ChartRelease` per controller says which chart, where, and how the release differs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from .options import after
from .pod_identity import PodIdentity, PodIdentityArgs
from .pods import chart_namespace_metadata


@dataclass(frozen=True, kw_only=True)
class ControllerArgs:
    """What every such controller is given (`__main__.py`'s `controller_base`); each controller's
    args class adds its own fields."""
    cluster_name: pulumi.Input[str]
    region: str
    provider: k8s.Provider
    kubernetes_version: str               # the cluster's: the release's namespace's Pod Security labels
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ChartRelease:
    chart: str
    version: str                          # pinned (conventions)
    repo: str
    release: str
    namespace: str
    service_account: str                  # the chart's service account, bound to the role
    create_namespace: bool = True         # the program makes the namespace (components/pods.py chart_namespace_metadata); False: kube-system
    wait_for_pods: bool = False           # True: `skip_await=False`, the release waits for ready pods

    def release_inputs(self) -> dict:
        """The Release's arguments beyond name, values and options. Only the ones a controller
        sets are passed, so each recorded Release keeps exactly the inputs it had."""
        inputs = {"name": self.release, "chart": self.chart, "version": self.version,
                  "repository_opts": k8s.helm.v3.RepositoryOptsArgs(repo=self.repo), "namespace": self.namespace}
        if self.wait_for_pods:
            inputs["skip_await"] = False
        return inputs


def release_with_identity(parent: pulumi.ComponentResource, name: str, spec: ChartRelease, *,
                          cluster_name: pulumi.Input[str], policy_json: pulumi.Input[str], tags: dict[str, str],
                          values: dict, provider: k8s.Provider, kubernetes_version: str,
                          opts: pulumi.ResourceOptions | None) -> k8s.helm.v3.Release:
    """`{name}-identity` (role, policy, association) and `{name}-release`, both children of
    `parent`; `opts.depends_on` (the pod identity agent) is what the identity waits for."""
    identity = PodIdentity(f"{name}-identity", PodIdentityArgs(
        cluster_name=cluster_name, namespace=spec.namespace, service_account=spec.service_account,
        policy_json=policy_json, tags=dict(tags)),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=after(opts)))
    namespace = [k8s.core.v1.Namespace(
        f"{name}-ns", metadata=chart_namespace_metadata(spec.namespace, kubernetes_version),
        opts=pulumi.ResourceOptions(parent=parent, provider=provider))] if spec.create_namespace else []
    return k8s.helm.v3.Release(
        f"{name}-release", **spec.release_inputs(), values=values,
        opts=pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=[identity.association, *namespace]))
