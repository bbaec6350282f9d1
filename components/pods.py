"""What every pod the program runs shares: least privilege, placement and egress.

Least privilege (Kubernetes' `restricted` Pod Security Standard). Pods: a non-root user, the runtime's default seccomp profile, files owned by the pod's group
(fsGroup), and no service-account token unless the pod talks to the API server. Containers:
no privilege escalation, every capability dropped, and a read-only root filesystem wherever the
process allows it, with an emptyDir for each path it must write.

Placement: one shape of spread constraint for every workload the program schedules (the
controllers' chart values and our own pod specs), so a zone-redundant workload is spread the same
way everywhere. Egress: HTTPS to public addresses only. Run-once Jobs: one pod shape.

Pure data, no Pulumi; the component modules share these helpers and nothing else of each other's.
"""
from __future__ import annotations

from collections.abc import Mapping

from conventions import GATEWAY_CONTROLLER_NAMESPACE, HOST_KEY, SYSTEM_ROLE_LABEL, ZONE_KEY
from deployment.gateway import GATEWAY_CLUSTER_IP
from deployment.namespaces import CHART_NAMESPACE_SECURITY

APP_UID = 1000          # one unprivileged user for every container we configure (owns the model cache)
APP_GID = 1000
POD_NON_ROOT = {"runAsNonRoot": True, "runAsUser": APP_UID, "runAsGroup": APP_GID, "fsGroup": APP_GID,
                "seccompProfile": {"type": "RuntimeDefault"}}
SCRATCH_VOLUME = {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}
SCRATCH_MOUNT = {"name": "tmp", "mountPath": "/tmp"}


def container_security(read_only_root: bool = True) -> dict:
    """The container's securityContext; `read_only_root=False` only where the process writes paths
    it cannot be told to move (say why at the call)."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "privileged": False,
            "readOnlyRootFilesystem": read_only_root, "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"}}


# Pod Security Admission (Kubernetes' pod-security admission controller): a namespace's labels name
# the Pod Security Standard it enforces, audits and warns on, each pinned to the cluster's minor so a
# control-plane upgrade does not change the rules under running pods. `audit` and `warn` stay at
# `restricted` everywhere: where `enforce` must be looser, the API server still reports each pod's
# gap from restricted (an audit annotation, a warning to `kubectl apply`), and the gap is the one
# stated at the call (tests/test_pod_security.py holds every pod to restricted less that gap).
PSA_PREFIX = "pod-security.kubernetes.io"
PSA_LEVELS = ("privileged", "baseline", "restricted")


def pod_security_labels(enforce: str, kubernetes_version: str) -> dict[str, str]:
    """The namespace labels enforcing `enforce`, auditing and warning on `restricted`, at the cluster's minor."""
    if enforce not in PSA_LEVELS:
        raise ValueError(f"unknown Pod Security Standard {enforce!r}")
    version = "v" + ".".join(kubernetes_version.split(".")[:2])
    labels = {}
    for mode, level in (("enforce", enforce), ("audit", "restricted"), ("warn", "restricted")):
        labels[f"{PSA_PREFIX}/{mode}"] = level
        labels[f"{PSA_PREFIX}/{mode}-version"] = version
    return labels


def chart_namespace_metadata(namespace: str, kubernetes_version: str) -> dict:
    """A Helm release's namespace, made by the program (not Helm's bare `create_namespace`), with the
    standard its chart's pods meet (deployment/namespaces.py states each and why)."""
    return {"name": namespace,
            "labels": pod_security_labels(CHART_NAMESPACE_SECURITY[namespace][0], kubernetes_version)}


def pod_security(talks_to_api_server: bool = False) -> dict:
    """Pod-level fields: the securityContext and whether the service-account token is mounted."""
    return {"securityContext": dict(POD_NON_ROOT), "automountServiceAccountToken": talks_to_api_server}


METADATA_RANGE = "169.254.0.0/16"             # the instance metadata service (169.254.169.254) and link-local
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")


def egress_policies(pod_labels: dict[str, str] | None = None, name: str = "https") -> dict[str, dict]:
    """Egress for pods matching `pod_labels` (all pods when None): DNS to the cluster's resolver, and
    HTTPS to public addresses only (the model hub, the gateway's public name, a package index),
    never the instance metadata service or addresses inside the VPC."""
    selector = {"matchLabels": dict(pod_labels)} if pod_labels else {}
    public = {"ipBlock": {"cidr": "0.0.0.0/0", "except": [METADATA_RANGE, *PRIVATE_RANGES]}}
    return {name: {"podSelector": selector, "policyTypes": ["Egress"],
                   "egress": [{"to": [public], "ports": [{"protocol": "TCP", "port": 443}]}]}}


def one_shot_pod_spec(container: dict, volumes: list[dict], hostname: str,
                      init_containers: tuple[dict, ...] = ()) -> dict:
    """The pod of a run-once Job (load test, accuracy gate): on the system nodes, non-root with a
    read-only root filesystem (/tmp is an emptyDir), no service-account token (it never calls the
    API server), never restarted in place (a failure is read, not retried over its own results).
    The gateway's public hostname resolves, inside the pod only, to the gateway's in-cluster
    address: the client sends that name as Host and SNI (so TLS, the route and auth are the real
    ones) without waiting for public DNS or going out through the load balancer."""
    def hardened(c: dict) -> dict:
        return {**c, "securityContext": container_security(),
                "volumeMounts": [*c.get("volumeMounts", []), SCRATCH_MOUNT]}

    spec = {"restartPolicy": "Never", "nodeSelector": dict(SYSTEM_ROLE_LABEL), **pod_security(),
            "hostAliases": [{"ip": GATEWAY_CLUSTER_IP, "hostnames": [hostname]}],
            "containers": [hardened(container)], "volumes": [*volumes, SCRATCH_VOLUME]}
    if init_containers:
        spec["initContainers"] = [hardened(c) for c in init_containers]
    return spec


def job_egress(labels: dict[str, str], name: str) -> dict[str, dict]:
    """A Job's egress: HTTPS to public addresses (the model hub, a package index) and the gateway
    in the cluster: its Service address, and its Envoy pods, which listen on the Service port plus
    10000 (Envoy Gateway shifts privileged ports so the proxy needs no capability)."""
    policies = egress_policies(labels, name)
    gateway_pods = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": GATEWAY_CONTROLLER_NAMESPACE}}}
    policies[name]["egress"].append({"to": [{"ipBlock": {"cidr": f"{GATEWAY_CLUSTER_IP}/32"}}, gateway_pods],
                                     "ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 10443}]})
    return policies


def one_pod_per_node(labels: dict) -> dict:
    """Never two group pods on one node (each takes every GPU of it anyway; this says so)."""
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": HOST_KEY, "labelSelector": {"matchLabels": dict(labels)}}]}}


def spread(labels: Mapping[str, str], keys: tuple[str, ...] = (ZONE_KEY,),
           when: str = "DoNotSchedule") -> list[dict]:
    """At most one pod more on any zone (or node) than on another, for the pods matching `labels`:
    one replica per zone where there are zones enough, and a rolling update's surge pod still fits."""
    return [{"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": when,
             "labelSelector": {"matchLabels": dict(labels)}} for key in keys]
