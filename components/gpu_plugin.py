"""The NVIDIA device plugin: advertises `nvidia.com/gpu` on the GPU nodes so pods can request them.

The EKS NVIDIA AMI already carries the driver and the container toolkit, so the plugin alone is
enough (no GPU operator). Its chart defaults to node affinity on labels that Node Feature
Discovery would set; we run no NFD, so the affinity is replaced by our own GPU role label.
"""
from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from conventions import GPU_PLUGIN_NAMESPACE, GPU_ROLE_LABEL, GPU_TOLERATION, LABEL_ROLE, NVIDIA_DEVICE_PLUGIN_CHART_VERSION

from .pods import chart_namespace_metadata


CHART = "nvidia-device-plugin"
CHART_REPO = "https://nvidia.github.io/k8s-device-plugin"


def plugin_values(mig_strategy: str | None = None) -> dict:
    """`mig_strategy` "mixed" when the plan's replicas take MIG slices: the plugin then advertises each
    profile as its own resource, `nvidia.com/mig-<profile>` (NVIDIA/k8s-device-plugin README, "Configuration
    Option Details", MIG_STRATEGY; the chart's top-level `migStrategy` value, deployments/helm/
    nvidia-device-plugin/values.yaml). The geometry itself is made on the node before kubelet starts
    (components/gpu_node_pool.py mig_script): no GPU operator, no mig-manager."""
    gpu_nodes = dict(GPU_ROLE_LABEL)
    return {
        **({"migStrategy": mig_strategy} if mig_strategy else {}),
        "nodeSelector": gpu_nodes,
        # Replaces the chart's NFD-based nodeSelectorTerms list (lists are replaced, not merged).
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": LABEL_ROLE, "operator": "In", "values": ["gpu"]}]}]}}},
        "tolerations": [GPU_TOLERATION],
        "gfd": {"enabled": False},
        "nfd": {"enabled": False},
    }


@dataclass(frozen=True)
class GpuPluginArgs:
    provider: k8s.Provider
    kubernetes_version: str               # the cluster's: its namespace's Pod Security labels are pinned to it
    mig_strategy: str | None = None       # "mixed" on MIG slices (deployment.node_pools NodePoolSpec.mig)


class GpuPlugin(pulumi.ComponentResource):
    """One Helm release of the device plugin DaemonSet on every GPU node."""

    def __init__(self, name: str, args: GpuPluginArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:gpu_plugin:GpuPlugin", name, None, opts)
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-ns", metadata=chart_namespace_metadata(GPU_PLUGIN_NAMESPACE, args.kubernetes_version),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider))
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name="nvidia-device-plugin",
            chart=CHART, version=NVIDIA_DEVICE_PLUGIN_CHART_VERSION,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=CHART_REPO),
            namespace=GPU_PLUGIN_NAMESPACE,
            values=plugin_values(args.mig_strategy),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[self.namespace]))
        self.register_outputs({"release": self.release.name})
