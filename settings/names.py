"""Formats the settings accept, each with the rule it follows and why.

Kubernetes names (DNS-1123), the gateway's hostname (Gateway API's `Hostname`), Secret keys,
IAM role ARNs, AWS tags, model checkpoints and the system nodes' instance types. Every checker
returns the value or raises ValueError with the fix; pydantic turns that into `key: message`.
"""
from __future__ import annotations

import ipaddress
import re

from conventions import (AI_GATEWAY_NAMESPACE, GATEWAY_CONTROLLER_NAMESPACE, GPU_PLUGIN_NAMESPACE, KEDA_NAMESPACE,
                         MONITORING_NAMESPACE)

# DNS-1123 label (namespaces, most object names): k8s.io/apimachinery
# pkg/util/validation/validation.go.
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# Gateway API v1 `Hostname` (apis/v1/shared_types.go): a precise name, no scheme, port or path.
HOSTNAME = re.compile(r"(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# A Secret's data key (IsConfigMapKey): letters, digits, '-', '_', '.'.
SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")
ROLE_ARN = re.compile(r"arn:aws(-cn|-us-gov)?:iam::\d{12}:role/[\w+=,.@/-]{1,512}")
# A model hub id (org/name), or a path inside the pod's model cache (the node's NVMe, mounted at
# /models). S3 is not offered: vLLM reads it only through the Run:ai streamer (`--load-format
# runai_streamer`, an extra the image may lack) and the pods have no IAM role for a bucket.
HUB_ID = re.compile(r"[A-Za-z0-9][-\w.]{0,95}/[A-Za-z0-9][-\w.]{0,95}")
MODEL_CACHE_MOUNT = "/models"
LOCAL_PATH = re.compile(r"/models/[-\w.][-\w./]*")

# Namespaces the serving namespace may not take: the cluster's own and the ones the program's
# other components install into (a NetworkPolicy or Namespace object there would break them).
RESERVED_NAMESPACES = frozenset({
    "default", "kube-system", "kube-public", "kube-node-lease", GATEWAY_CONTROLLER_NAMESPACE, AI_GATEWAY_NAMESPACE,
    MONITORING_NAMESPACE, KEDA_NAMESPACE, GPU_PLUGIN_NAMESPACE})

# The system node group's AMI is AL2023 x86_64 (components/cluster.py), so Graviton types (m7g,
# c7g, ...) cannot boot it; these general-purpose x86 families and sizes can.
SYSTEM_FAMILIES = ("m5", "m5a", "m6i", "m6a", "m7i", "m7a", "c5", "c6i", "c6a", "c7i", "c7a", "r5", "r6i", "r7i")
SYSTEM_SIZES = ("large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge")
SYSTEM_INSTANCE_TYPES = tuple(f"{f}.{s}" for f in SYSTEM_FAMILIES for s in SYSTEM_SIZES)

PRIVATE_RANGES = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


def dns_label(value: str, what: str = "name") -> str:
    if len(value) > 63 or not DNS1123_LABEL.fullmatch(value):
        raise ValueError(f"'{value}' is not a valid {what} (DNS-1123 label: lowercase letters, digits and '-', "
                         "starting and ending with a letter or digit, at most 63 characters)")
    return value


def hostname(value: str) -> str:
    if "://" in value or "/" in value or ":" in value:
        raise ValueError(f"'{value}' is not a bare hostname; drop the scheme, port and path (e.g. llm.example.com)")
    if not value or len(value) > 253 or not HOSTNAME.fullmatch(value):
        raise ValueError(f"'{value}' is not a valid hostname; use lowercase DNS labels such as llm.example.com")
    return value


def secret_key(value: str) -> str:
    if not value or len(value) > 253 or not SECRET_KEY.fullmatch(value):
        raise ValueError(f"'{value}' is not a valid Secret key; use letters, digits, '-', '_' and '.'")
    return value


def role_arn(value: str) -> str:
    if not ROLE_ARN.fullmatch(value):
        raise ValueError(f"'{value}' is not an IAM role ARN; use arn:aws:iam::<12-digit account>:role/<name>")
    return value


def tag(key: str, value: str) -> None:
    if key.lower().startswith("aws:"):
        raise ValueError(f"tag '{key}': the aws: prefix is reserved for AWS; rename it")
    if not key or len(key) > 128 or len(value) > 256:
        raise ValueError(f"tag '{key[:40]}': keys take 1 to 128 characters and values at most 256")


def checkpoint(value: str) -> str:
    """A model hub id or a path in the model cache: nothing vLLM would read as an option."""
    if ".." in value.split("/") or not (HUB_ID.fullmatch(value) or LOCAL_PATH.fullmatch(value)):
        raise ValueError(f"'{value}' is not a checkpoint; use a model hub id (org/name) or a path under "
                         f"{MODEL_CACHE_MOUNT}/ on the node's model cache, without '..' or spaces")
    return value


def system_instance_type(value: str) -> str:
    if value not in SYSTEM_INSTANCE_TYPES:
        raise ValueError(f"'{value}' is not a supported system node type; use an x86 general-purpose type "
                         f"such as m7i.2xlarge (families {', '.join(SYSTEM_FAMILIES)})")
    return value


def private_cidr(value: str) -> str:
    net = ipaddress.ip_network(value, strict=True)
    if not any(net.version == r.version and net.subnet_of(r) for r in PRIVATE_RANGES):
        raise ValueError(f"{value} is not in a private range; use part of 10.0.0.0/8, 172.16.0.0/12 "
                         "or 192.168.0.0/16")
    return value
