"""Replicas that span nodes: the LeaderWorkerSet controller and one LeaderWorkerSet per replica.

The controller: kubernetes-sigs/lws v0.10.0, Helm chart `oci://registry.k8s.io/lws/charts/lws`
version 0.10.0 (site/content/en/docs/installation/_index.md at v0.10.0), CRDs in the chart's
`crds/` (Helm installs them before the controller; `helm upgrade` does not update them, which
the same page says: a version bump applies them first). Its chart defaults the manager image to
the tag `main` with `pullPolicy: Always` (charts/lws/values.yaml at v0.10.0): pinned here.

A replica of N nodes is one LeaderWorkerSet (`replicas: 1`, `size: N`): the leader runs
`vllm serve` with the OpenAI API and node rank 0, each worker the same engine arguments with
`--headless` and its own rank, as vLLM 0.29.0 documents multi-node serving with its own
multiprocessing backend (docs/serving/parallelism_scaling.md, "Running vLLM with
MultiProcessing"; flags in vllm/engine/arg_utils.py at v0.29.0: `--nnodes`, `--node-rank`,
`--master-addr`, `--headless`). LWS gives every container `LWS_LEADER_ADDRESS` and
`LWS_WORKER_INDEX` (api/leaderworkerset/v1/leaderworkerset_types.go at v0.10.0), which
Kubernetes expands in the arguments. `restartPolicy: RecreateGroupOnPodRestart` (the CRD's
default, written out): a rank that dies takes the engine with it, so the group restarts whole.
"""
from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from conventions import LWS_CHART_VERSION, LWS_NAMESPACE, LWS_VERSION, SYSTEM_ROLE_LABEL, ZONE_KEY

from .pods import chart_namespace_metadata

CHART = "oci://registry.k8s.io/lws/charts/lws"
MANAGER_IMAGE = "registry.k8s.io/lws/lws"


def controller_values() -> dict:
    """The manager on the system nodes, two replicas spread over zones, its image pinned."""
    labels = {"app.kubernetes.io/name": "lws"}
    return {
        "image": {"manager": {"repository": MANAGER_IMAGE, "tag": LWS_VERSION, "pullPolicy": "IfNotPresent"}},
        "replicaCount": 2,
        # The chart's pod context is runAsNonRoot alone (charts/lws/values.yaml L23-25 at v0.10.0);
        # the restricted standard its namespace enforces also asks for a seccomp profile.
        "podSecurityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "nodeSelector": dict(SYSTEM_ROLE_LABEL),
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"topologyKey": ZONE_KEY, "labelSelector": {"matchLabels": labels}}}]}},
    }


@dataclass(frozen=True)
class LwsControllerArgs:
    provider: k8s.Provider
    kubernetes_version: str               # the cluster's: its namespace's Pod Security labels are pinned to it


class LwsController(pulumi.ComponentResource):
    """The LeaderWorkerSet controller and its CRDs (one Helm release)."""

    def __init__(self, name: str, args: LwsControllerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:lws:LwsController", name, None, opts)
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-ns", metadata=chart_namespace_metadata(LWS_NAMESPACE, args.kubernetes_version),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider))
        self.release = k8s.helm.v3.Release(
            f"{name}-release", name="lws", chart=CHART, version=LWS_CHART_VERSION,
            namespace=LWS_NAMESPACE, values=controller_values(),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[self.namespace]))
        self.register_outputs({"release": self.release.name})

