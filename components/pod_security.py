"""Least privilege for every pod the program runs (Kubernetes' `restricted` Pod Security Standard).

Pods: a non-root user, the runtime's default seccomp profile, files owned by the pod's group
(fsGroup), and no service-account token unless the pod talks to the API server. Containers:
no privilege escalation, every capability dropped, and a read-only root filesystem wherever the
process allows it, with an emptyDir for each path it must write.
"""
from __future__ import annotations

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


def pod_security(talks_to_api_server: bool = False) -> dict:
    """Pod-level fields: the securityContext and whether the service-account token is mounted."""
    return {"securityContext": dict(POD_NON_ROOT), "automountServiceAccountToken": talks_to_api_server}
