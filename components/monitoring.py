"""Monitoring: Prometheus, Alertmanager and Grafana (kube-prometheus-stack), the DCGM exporter,
the scrape targets, the alert rules and the dashboard.

- kube-prometheus-stack runs on the system nodes; Prometheus keeps its data on an encrypted gp3
  volume. When the plan is zone-redundant, Prometheus and Alertmanager run two replicas in
  different zones, so losing a zone (the event the plan is sized for) does not also blind it.
- Grafana's admin password is a Pulumi secret that reaches Kubernetes only as a Secret, which the
  chart reads (`grafana.admin.existingSecret`).
- The DCGM exporter runs on the GPU nodes (tolerating their taint) for GPU utilisation, memory and
  temperature.
- Scrape targets are typed PodMonitor/ServiceMonitor objects (policies and tests can read them)
  whose relabelings set the `job` and `zone` labels the rules in `observability/` rely on.
- The rules and the dashboard are built from the plan by `observability/`; the thresholds live there.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from observability import contract
from observability.dashboard import build_dashboard, dashboard_json
from conventions import (
    DCGM_EXPORTER_CHART_VERSION, DCGM_EXPORTER_IMAGE_TAG, GATEWAY_CONTROLLER_NAMESPACE, GPU_ROLE_LABEL, GPU_TOLERATION,
    KUBE_PROMETHEUS_STACK_CHART_VERSION, LABEL_ENVIRONMENT, LABEL_GRAFANA_DASHBOARD, MONITORING_NAMESPACE,
    PICKER_METRICS_PORT, SYSTEM_ROLE_LABEL, VLLM_METRICS_PORT, ZONE_KEY,
)
from deployment.gateway import PICKER_LABELS, picker_replicas
from deployment.nccl_transport import NCCL_METRICS_PATH
from deployment.serving import APP_LABELS

from .pods import pod_security_labels
from observability.autoscaling_alerts import autoscaled_rule_groups
from observability.rules import AlertPolicy, recorded_names, rule_groups
from sizing.planner import Plan

from .options import after

MONITORING_API = "monitoring.coreos.com/v1"
RELEASE = "kps"                              # short: the chart prefixes every object name with it
DCGM_RELEASE = "dcgm-exporter"
DASHBOARD_LABEL = {LABEL_GRAFANA_DASHBOARD: "1"}   # the chart's Grafana sidecar watches this label
GRAFANA_ADMIN_KEYS = {"user": "admin-user", "password": "admin-password"}

# Platform figures (not workload figures), each with the reason for its value.
SCRAPE_INTERVAL = "15s"          # rate() over 5m then sees 20 samples: steady p95s without much cost
RETENTION = "15d"                # two weeks of history covers a release cycle and its comparison
STORAGE_GI = 50                  # ~100k series (mostly k8s targets) x 15 s x 15 d at ~1.5 B a sample: ~13 GB
RETENTION_SIZE = "45GB"          # keep 10% of the volume free: a full TSDB volume stops ingestion
PROMETHEUS_RESOURCES = {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"memory": "4Gi"}}


@dataclass(frozen=True)
class MonitoringArgs:
    plan: Plan
    stack: str                                     # names the dashboard file
    environment: str                               # the namespace's environment label
    zones: tuple[str, ...]                         # the serving zones (endpoint picker replicas)
    serving_namespace: str                         # where the vLLM (and picker) pods are scraped
    inference_extension: bool                      # the endpoint picker is scraped and charted
    provider: k8s.Provider
    grafana_admin_password: pulumi.Input[str]      # a Pulumi secret: settings.pulumi_config.secret(...)
    namespace: str = MONITORING_NAMESPACE
    gateway_namespace: str = GATEWAY_CONTROLLER_NAMESPACE  # where the Envoy proxies and their controller run
    policy: AlertPolicy = field(default_factory=AlertPolicy)
    kubernetes_version: str = "1.35"               # the cluster's (settings.kubernetesVersion): PSA's pinned rules
    autoscaling: bool = False                      # KEDA scales the fleet: the autoscaling alerts (observability.autoscaling_alerts)


# The monitoring namespace enforces `privileged` (audited and warned at `restricted`): the DCGM
# exporter reads the GPUs through the kubelet's pod-resources socket and the host's driver (hostPath
# volumes, which baseline forbids), and kube-prometheus-stack's node exporter (on: the chart's default) runs with
# the host's network and PID namespaces. Prometheus, Alertmanager, Grafana and the operator alone
# would meet restricted; splitting the exporters into their own namespace would let this one be.
MONITORING_POD_SECURITY = "privileged"


def _job(name: str) -> list[dict]:
    """Relabelings every target gets: a fixed `job` name the rules select on."""
    return [{"action": "replace", "targetLabel": "job", "replacement": name}]


def kube_prometheus_values(args: MonitoringArgs, admin_secret: str, storage_class: str) -> dict:
    ha = args.plan.redundancy == "zone"
    on_system = {"nodeSelector": dict(SYSTEM_ROLE_LABEL)}
    spread = {"podAntiAffinity": "hard", "podAntiAffinityTopologyKey": ZONE_KEY} if ha else {}
    return {
        "fullnameOverride": RELEASE,
        "prometheusOperator": {**on_system, "admissionWebhooks": {"patch": dict(on_system)}},
        "prometheus": {"prometheusSpec": {
            **on_system, **spread,
            "replicas": 2 if ha else 1,
            "scrapeInterval": SCRAPE_INTERVAL, "evaluationInterval": SCRAPE_INTERVAL,
            "retention": RETENTION, "retentionSize": RETENTION_SIZE,
            "resources": PROMETHEUS_RESOURCES,
            # Pick up every PodMonitor, ServiceMonitor and PrometheusRule, not only the chart's own.
            "serviceMonitorSelectorNilUsesHelmValues": False,
            "podMonitorSelectorNilUsesHelmValues": False,
            "ruleSelectorNilUsesHelmValues": False,
            "storageSpec": {"volumeClaimTemplate": {"spec": {
                "storageClassName": storage_class, "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": f"{STORAGE_GI}Gi"}}}}},
        }},
        "alertmanager": {"alertmanagerSpec": {**on_system, **spread, "replicas": 2 if ha else 1}},
        "grafana": {
            **on_system,
            "admin": {"existingSecret": admin_secret, "userKey": GRAFANA_ADMIN_KEYS["user"],
                      "passwordKey": GRAFANA_ADMIN_KEYS["password"]},
            "sidecar": {"dashboards": {"enabled": True, "label": next(iter(DASHBOARD_LABEL)),
                                       "labelValue": DASHBOARD_LABEL["grafana_dashboard"]}},
        },
        # EKS runs the controller manager, scheduler and etcd itself and exposes none of them, and
        # its kube-proxy add-on binds metrics to 127.0.0.1:10249 (eksctl#4081, containers-roadmap#657):
        # scraping them would only fire KubeControllerManagerDown/KubeSchedulerDown/... forever.
        **eks_hidden_components(),
        # The readiness rules join pod readiness with these pod labels (observability/rules.py).
        "kube-state-metrics": {**on_system, "metricLabelsAllowlist": [
            "pods=[app.kubernetes.io/name,llm-serving.io/role,llm-serving.io/zone]"]},
    }


# kube-prometheus-stack components that scrape what EKS does not expose, and their rule groups.
EKS_HIDDEN_COMPONENTS = ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy")
EKS_HIDDEN_RULE_GROUPS = ("kubeControllerManager", "kubeSchedulerAlerting", "kubeSchedulerRecording", "etcd",
                          "kubeProxy")


def eks_hidden_components() -> dict:
    return {**{component: {"enabled": False} for component in EKS_HIDDEN_COMPONENTS},
            "defaultRules": {"rules": {group: False for group in EKS_HIDDEN_RULE_GROUPS}}}


def dcgm_values() -> dict:
    return {
        "image": {"tag": DCGM_EXPORTER_IMAGE_TAG},
        "nodeSelector": dict(GPU_ROLE_LABEL),
        "tolerations": [dict(GPU_TOLERATION)],
        "serviceMonitor": {"enabled": False},      # scraped by the typed ServiceMonitor below
    }


def scrape_targets(args: MonitoringArgs) -> list[tuple[str, str, dict]]:
    """(suffix, kind, spec) of every PodMonitor/ServiceMonitor, each setting its `job` label."""
    serving_ns = args.serving_namespace
    targets = [
        ("vllm", "PodMonitor", {
            "namespaceSelector": {"matchNames": [serving_ns]},
            "selector": {"matchLabels": dict(APP_LABELS)},
            # /metrics on the serving pods' metrics-only port (components/serving.py).
            "podMetricsEndpoints": [{"portNumber": VLLM_METRICS_PORT, "path": "/metrics", "relabelings": [
                *_job(contract.JOBS["vllm"]),
                {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_label_llm_serving_io_zone"],
                 "targetLabel": "zone"}]}]}),
        ("envoy", "PodMonitor", {
            "namespaceSelector": {"matchNames": [args.gateway_namespace]},
            "selector": {"matchLabels": {"app.kubernetes.io/name": "envoy", "app.kubernetes.io/component": "proxy",
                                         "app.kubernetes.io/managed-by": "envoy-gateway"}},
            "podMetricsEndpoints": [{"port": "metrics", "path": "/stats/prometheus",
                                     "relabelings": _job(contract.JOBS["envoy"])}]}),
        ("envoy-gateway", "ServiceMonitor", {
            "namespaceSelector": {"matchNames": [args.gateway_namespace]},
            "selector": {"matchLabels": {"control-plane": "envoy-gateway"}},
            "endpoints": [{"port": "metrics", "path": "/metrics",
                           "relabelings": _job(contract.JOBS["envoy-gateway"])}]}),
        ("dcgm", "ServiceMonitor", {
            "namespaceSelector": {"matchNames": [args.namespace]},
            "selector": {"matchLabels": {"app.kubernetes.io/name": "dcgm-exporter",
                                         "app.kubernetes.io/instance": DCGM_RELEASE}},
            "endpoints": [{"port": "metrics", "path": "/metrics", "relabelings": _job(contract.JOBS["dcgm"])}]}),
    ]
    if args.plan.nodes_per_replica > 1:     # the group leaders' NCCL transport check
        targets.append(("nccl-transport", "PodMonitor", {
            "namespaceSelector": {"matchNames": [serving_ns]},
            "selector": {"matchLabels": dict(APP_LABELS)},
            "podMetricsEndpoints": [{"portNumber": VLLM_METRICS_PORT, "path": NCCL_METRICS_PATH,
                                     "relabelings": _job(contract.JOBS["nccl-transport"])}]}))
    if args.inference_extension:
        targets.append(("endpoint-picker", "PodMonitor", {
            "namespaceSelector": {"matchNames": [serving_ns]},
            "selector": {"matchLabels": dict(PICKER_LABELS)},
            "podMetricsEndpoints": [{"portNumber": PICKER_METRICS_PORT, "path": "/metrics",
                                     "relabelings": _job(contract.JOBS["epp"])}]}))
    return targets


class Monitoring(pulumi.ComponentResource):
    """kube-prometheus-stack, DCGM exporter, scrape targets, PrometheusRule and dashboard.

    `opts.depends_on`: what the namespace (and so everything in it) waits for (the GPU plugin)."""

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-serving:monitoring:Monitoring", name, None, opts)
        ns = args.namespace
        o = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-ns", metadata={"name": ns, "labels": {
                LABEL_ENVIRONMENT: args.environment,
                **pod_security_labels(MONITORING_POD_SECURITY, args.kubernetes_version)}},
            opts=pulumi.ResourceOptions.merge(o, pulumi.ResourceOptions(depends_on=after(opts))))
        in_ns = pulumi.ResourceOptions.merge(o, pulumi.ResourceOptions(depends_on=[self.namespace]))
        self._releases(name, args, o, in_ns)

        # Custom resources need the operator's CRDs, which the chart installs.
        with_crds = pulumi.ResourceOptions.merge(o, pulumi.ResourceOptions(depends_on=[self.stack_release]))
        self.monitors = {
            suffix: k8s.apiextensions.CustomResource(
                f"{name}-{suffix}", api_version=MONITORING_API, kind=kind,
                metadata={"name": suffix, "namespace": ns}, spec=spec, opts=with_crds)
            for suffix, kind, spec in scrape_targets(args)
        }
        groups = self._rules_and_dashboard(name, args, with_crds, in_ns)
        self.namespace_name = ns
        self.register_outputs({"namespace": ns, "alerts": json.dumps(sorted(
            r["alert"] for g in groups for r in g["rules"] if "alert" in r))})

    def _releases(self, name: str, args: MonitoringArgs, o: pulumi.ResourceOptions,
                  in_ns: pulumi.ResourceOptions) -> None:
        """Grafana's admin Secret, Prometheus's StorageClass, kube-prometheus-stack, DCGM exporter."""
        ns = args.namespace
        admin = k8s.core.v1.Secret(
            f"{name}-grafana-admin", metadata={"name": "grafana-admin", "namespace": ns}, type="Opaque",
            string_data={GRAFANA_ADMIN_KEYS["user"]: "admin",
                         GRAFANA_ADMIN_KEYS["password"]: args.grafana_admin_password}, opts=in_ns)
        # EKS (1.30+) ships no default StorageClass; this one is encrypted and zone-aware.
        storage = k8s.storage.v1.StorageClass(
            f"{name}-gp3", metadata={"name": "prometheus-gp3"}, provisioner="ebs.csi.aws.com",
            parameters={"type": "gp3", "encrypted": "true"}, volume_binding_mode="WaitForFirstConsumer",
            allow_volume_expansion=True, reclaim_policy="Retain", opts=o)
        self.stack_release = k8s.helm.v3.Release(
            f"{name}-kube-prometheus-stack", name=RELEASE, chart="kube-prometheus-stack",
            version=KUBE_PROMETHEUS_STACK_CHART_VERSION,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=contract.KUBE_PROMETHEUS_STACK_REPO),
            namespace=ns, values=kube_prometheus_values(args, "grafana-admin", "prometheus-gp3"),
            opts=pulumi.ResourceOptions.merge(in_ns, pulumi.ResourceOptions(depends_on=[admin, storage])))
        self.dcgm_release = k8s.helm.v3.Release(
            f"{name}-dcgm-exporter", name=DCGM_RELEASE, chart="dcgm-exporter", version=DCGM_EXPORTER_CHART_VERSION,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=contract.DCGM_EXPORTER_REPO),
            namespace=ns, values=dcgm_values(), opts=in_ns)

    def _rules_and_dashboard(self, name: str, args: MonitoringArgs, with_crds: pulumi.ResourceOptions,
                             in_ns: pulumi.ResourceOptions) -> list[dict]:
        """The PrometheusRule (alert thresholds from the plan) and the dashboard ConfigMap; returns the groups."""
        ns = args.namespace
        pickers = picker_replicas(len(args.zones)) if args.inference_extension else 0
        make_groups = autoscaled_rule_groups if args.autoscaling and args.plan.autoscale is not None else rule_groups
        groups = make_groups(args.plan, args.serving_namespace, args.policy, endpoint_picker_replicas=pickers)
        self.rules = k8s.apiextensions.CustomResource(
            f"{name}-rules", api_version=MONITORING_API, kind="PrometheusRule",
            metadata={"name": "llm-serving", "namespace": ns}, spec={"groups": groups}, opts=with_crds)
        board = build_dashboard(args.plan, args.stack, recorded_names(groups), args.policy,
                                args.inference_extension)
        self.dashboard = k8s.core.v1.ConfigMap(
            f"{name}-dashboard", metadata={"name": "llm-serving-dashboard", "namespace": ns,
                                           "labels": dict(DASHBOARD_LABEL)},
            data={f"llm-serving-{args.stack}.json": dashboard_json(board)}, opts=in_ns)
        return groups
