"""The namespaces the program's Helm releases run in, made by the program so each carries its Pod
Security Admission labels (Helm's `create_namespace` makes a bare namespace: no labels).

Each chart's pods were read at its pinned version; the level is the strictest they meet, with what
the chart needs from our values to meet it. `audit` and `warn` are `restricted` everywhere
(components/pods.py `pod_security_labels`). kube-system is not ours to label (the EKS add-ons and
the VPC CNI run privileged there), so the releases in it (the AWS Load Balancer Controller, the EFA
device plugin) keep it as it is.

A stack deployed before these namespaces were the program's has them already (Helm made them): each
is imported once before the next `pulumi up` (docs/operations.md, "Namespaces").

Pure data: components/pods.py `chart_namespace_metadata` labels each namespace from this table.
"""
from __future__ import annotations

from conventions import (
    AI_GATEWAY_NAMESPACE, CERT_MANAGER_NAMESPACE, EXTERNAL_DNS_NAMESPACE, GATEWAY_CONTROLLER_NAMESPACE,
    GPU_PLUGIN_NAMESPACE, KEDA_NAMESPACE, LWS_NAMESPACE,
)

# namespace -> the standard it enforces, and why its pods meet it (or need less).
CHART_NAMESPACE_SECURITY: dict[str, tuple[str, str]] = {
    # kedacore/charts v2.20.2 keda/values.yaml L467-525: every container drops ALL, no escalation,
    # RuntimeDefault seccomp; every pod runAsNonRoot.
    KEDA_NAMESPACE: ("restricted", "KEDA's chart defaults meet restricted"),
    # kubernetes-sigs/lws v0.10.0 charts/lws/values.yaml L23-34 (no seccomp profile in the chart's
    # defaults: components/leader_worker_set.py adds RuntimeDefault), templates/manager/deployment.yaml L36-47.
    LWS_NAMESPACE: ("restricted", "the LWS manager with our seccomp profile meets restricted"),
    # envoyproxy/gateway v1.8.3: the controller and certgen Job (charts/gateway-helm/values.tmpl.yaml
    # L67-77, L162-173) and the Envoy proxies and shutdown manager it creates
    # (internal/infrastructure/kubernetes/proxy/resource.go L483-515 over resource/resource.go
    # L113-128: uid 65532, drop ALL, RuntimeDefault); the AI Gateway's ext_proc sidecar injected
    # into them (envoyproxy/ai-gateway v1.0.0 internal/controller/gateway_mutator.go L427-439, the same).
    GATEWAY_CONTROLLER_NAMESPACE: ("restricted", "Envoy Gateway's controller and proxies meet restricted"),
    # envoyproxy/ai-gateway v1.0.0 manifests/charts/ai-gateway-helm/values.yaml L138-139 sets no
    # security context: components/gateway.py `ai_gateway_values` sets the restricted one.
    AI_GATEWAY_NAMESPACE: ("restricted", "the AI Gateway controller with our security context meets restricted"),
    # cert-manager v1.21.1 deploy/charts/cert-manager/values.yaml L424-437 (controller), L825-838
    # (webhook), L1233-1246 (cainjector), L1541-1554 (startupapicheck).
    CERT_MANAGER_NAMESPACE: ("restricted", "cert-manager's chart defaults meet restricted"),
    # kubernetes-sigs/external-dns external-dns-helm-chart-1.21.1 charts/external-dns/values.yaml L92-123.
    EXTERNAL_DNS_NAMESPACE: ("restricted", "external-dns's chart defaults meet restricted"),
    # The device plugin registers with the kubelet through its socket directory, a hostPath
    # (/var/lib/kubelet/device-plugins; NVIDIA/k8s-device-plugin v0.19.3
    # deployments/helm/nvidia-device-plugin/templates/daemonset-device-plugin.yml L230-251, beside
    # the driver and CDI roots), which baseline already forbids (PSS "HostPath Volumes").
    GPU_PLUGIN_NAMESPACE: ("privileged", "the device plugin mounts the kubelet's device-plugins hostPath"),
}

