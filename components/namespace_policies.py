"""The default-deny NetworkPolicies of the monitoring, gateway and controller namespaces, each with
what its pods need allowed (deployment/namespace_policies.py says what and why, port by port).

`opts.depends_on`: the components whose namespaces these are (a namespace exists before its policies).
"""
from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from deployment.namespace_policies import PolicyPeers, namespace_policies

from .options import after, own


@dataclass(frozen=True)
class NamespacePoliciesArgs:
    provider: k8s.Provider
    namespaces: tuple[str, ...]          # the ones this stack makes (each a key of NAMESPACE_POLICIES)
    peers: PolicyPeers


class NamespacePolicies(pulumi.ComponentResource):
    def __init__(self, name: str, args: NamespacePoliciesArgs, opts: pulumi.ResourceOptions | None = None):
        # Its children wait on the namespaces' components, not the component itself (`own`: a component
        # waiting on a failed input would outlive a failed in-process run and fail the next one).
        super().__init__("llm-serving:namespace_policies:NamespacePolicies", name, None, own(opts))
        o = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=after(opts))
        self.policies = [
            k8s.networking.v1.NetworkPolicy(f"{name}-{ns}-{key}", metadata={"name": key, "namespace": ns},
                                            spec=spec, opts=o)
            for ns in args.namespaces for key, spec in namespace_policies(ns, args.peers).items()]
        self.register_outputs({"namespaces": list(args.namespaces)})
