"""The Monitoring component in the built program: what it deploys, where, and how it is wired to
the serving pods, the gateway and the plan."""
from __future__ import annotations

import json
import re

import pytest

from deployment.gateway import picker_replicas
from offline.engine import PLACEHOLDER_PREFIX, is_secret, unwrap
from offline.manifests import kubernetes_objects
from tests.k8s_schema import validate
from observability.rules import rule_groups
from tests.stacks import plan_for

MONITORING = "llm-serving:monitoring:Monitoring"
MONITOR_KINDS = ("PodMonitor", "ServiceMonitor", "PrometheusRule")
RELEASE = "kubernetes:helm.sh/v3:Release"
PINNED = re.compile(r"^\d+\.\d+\.\d+$")


def objects(recording, kind: str | None = None) -> list[dict]:
    return [o for o in kubernetes_objects(recording) if kind is None or o["kind"] == kind]


def named(recording, kind: str, name: str) -> dict:
    return next(o for o in objects(recording, kind) if o["metadata"]["name"] == name)


def releases(recording) -> dict[str, dict]:
    found = {r.inputs["chart"]: r.inputs for r in recording.of_type(RELEASE)}
    assert found, "no Helm release recorded"
    return found


def dashboard(recording) -> dict:
    cm = next(o for o in objects(recording, "ConfigMap")
              if (o["metadata"].get("labels") or {}).get("grafana_dashboard"))
    (text,) = cm["data"].values()
    return json.loads(text)


# -- validity ----------------------------------------------------------------------------------
@pytest.mark.parametrize("stack", ["prod", "dev"])
def test_monitors_and_rules_validate_against_their_crds(recorded, stack):
    found = [o for o in objects(recorded(stack)) if o["kind"] in MONITOR_KINDS]
    assert {o["kind"] for o in found} == set(MONITOR_KINDS)
    for obj in found:
        validate(obj, "1.33")


@pytest.mark.parametrize("stack", ["prod", "dev"])
def test_its_builtin_objects_validate_against_kubernetes(recorded, stack):
    recording = recorded(stack)
    (component,) = recording.of_type(MONITORING)
    kinds = {r.type.rsplit(":", 1)[1] for r in recording.resources if r.parent == component.urn
             and r.type.startswith(("kubernetes:core/", "kubernetes:storage.k8s.io/"))}
    assert kinds == {"Namespace", "Secret", "StorageClass", "ConfigMap"}
    names = {(r.type.rsplit(":", 1)[1], (r.inputs.get("metadata") or {}).get("name")) for r in recording.resources
             if r.parent == component.urn}
    mine = [o for o in objects(recording) if (o["kind"], o["metadata"].get("name")) in names and o["kind"] in kinds]
    assert {o["kind"] for o in mine} == kinds
    for obj in mine:
        validate(obj, "1.33")


def test_every_child_is_parented_to_the_component(recorded):
    recording = recorded("prod")
    (component,) = recording.of_type(MONITORING)
    children = [r for r in recording.resources if r.parent == component.urn]
    assert {r.type.rsplit(":", 1)[1] for r in children} >= {
        "Namespace", "Secret", "StorageClass", "Release", "PodMonitor", "ServiceMonitor", "PrometheusRule", "ConfigMap"}
    assert all(r.name.startswith(f"{component.name}-") for r in children)


# -- secrets -----------------------------------------------------------------------------------
def test_grafana_admin_password_reaches_kubernetes_only_as_a_secret(recorded):
    recording = recorded("prod")
    (secret,) = [r for r in recording.of_type("kubernetes:core/v1:Secret") if r.name == "monitoring-grafana-admin"]
    data = secret.inputs["stringData"]      # secret as a whole, or the password entry
    assert is_secret(data) or is_secret(data["admin-password"])
    assert unwrap(data)["admin-password"] == f"{PLACEHOLDER_PREFIX}-grafanaAdminPassword"
    grafana = releases(recording)["kube-prometheus-stack"]["values"]["grafana"]
    assert grafana["admin"]["existingSecret"] == secret.inputs["metadata"]["name"]
    assert "adminPassword" not in grafana


def test_grafana_password_value_appears_in_no_plain_input(recorded):
    placeholder = f"{PLACEHOLDER_PREFIX}-grafanaAdminPassword"

    def plain_strings(value):
        if is_secret(value):
            return
        if isinstance(value, dict):
            for v in value.values():
                yield from plain_strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from plain_strings(v)
        elif isinstance(value, str):
            yield value

    recording = recorded("prod")
    leaks = [r.name for r in recording.resources if any(placeholder in s for s in plain_strings(r.inputs))]
    assert leaks == []
    assert any(placeholder in json.dumps(unwrap(r.inputs)) for r in recording.resources)   # it is there, wrapped


# -- where things run --------------------------------------------------------------------------
def test_charts_are_pinned(recorded):
    for chart, release in releases(recorded("prod")).items():
        assert PINNED.match(release["version"].lstrip("v")), chart


def test_prometheus_stack_runs_on_system_nodes_with_retention_and_a_volume(recorded):
    values = releases(recorded("prod"))["kube-prometheus-stack"]["values"]
    spec = values["prometheus"]["prometheusSpec"]
    for part in (spec, values["alertmanager"]["alertmanagerSpec"], values["grafana"], values["prometheusOperator"]):
        assert part["nodeSelector"] == {"llm-serving.io/role": "system"}
    assert spec["retention"] and spec["retentionSize"]
    claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
    storage_class = named(recorded("prod"), "StorageClass", claim["storageClassName"])
    assert storage_class["parameters"] == {"type": "gp3", "encrypted": "true"}


@pytest.mark.parametrize("stack, replicas", [("prod", 2), ("dev", 1)])
def test_prometheus_and_alertmanager_survive_a_zone_loss_when_the_plan_does(recorded, stack, replicas):
    values = releases(recorded(stack))["kube-prometheus-stack"]["values"]
    for spec in (values["prometheus"]["prometheusSpec"], values["alertmanager"]["alertmanagerSpec"]):
        assert spec["replicas"] == replicas
        assert (spec.get("podAntiAffinityTopologyKey") == "topology.kubernetes.io/zone") == (replicas == 2)


def test_dcgm_exporter_runs_on_gpu_nodes_through_their_taint(recorded):
    values = releases(recorded("prod"))["dcgm-exporter"]["values"]
    assert values["nodeSelector"] == {"llm-serving.io/role": "gpu"}
    gpu_taint = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    assert gpu_taint in values["tolerations"]
    assert PINNED.match(values["image"]["tag"].split("-")[0])


# -- scrape targets match what the other components deploy -------------------------------------
def _pod_templates(recording, labels: dict) -> list[dict]:
    return [d["spec"]["template"] for d in objects(recording, "Deployment")
            if labels.items() <= d["spec"]["template"]["metadata"]["labels"].items()]


@pytest.mark.parametrize("monitor", ["vllm", "endpoint-picker"])
def test_pod_monitor_selects_pods_and_a_port_they_expose(recorded, monitor):
    recording = recorded("prod")
    spec = named(recording, "PodMonitor", monitor)["spec"]
    templates = _pod_templates(recording, spec["selector"]["matchLabels"])
    assert templates
    (endpoint,) = spec["podMetricsEndpoints"]
    for template in templates:
        ports = {p["containerPort"]: p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
        assert ports.get(endpoint["portNumber"]) == "metrics"
    namespaces = {d["metadata"]["namespace"] for d in objects(recording, "Deployment")
                  if spec["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()}
    assert namespaces == set(spec["namespaceSelector"]["matchNames"])


def test_vllm_series_get_a_zone_label_from_the_pod(recorded):
    endpoint = named(recorded("prod"), "PodMonitor", "vllm")["spec"]["podMetricsEndpoints"][0]
    assert {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_label_llm_serving_io_zone"],
            "targetLabel": "zone"} in endpoint["relabelings"]


def test_no_endpoint_picker_monitor_without_the_inference_extension(recorded):
    assert [o for o in objects(recorded("dev"), "PodMonitor") if o["metadata"]["name"] == "endpoint-picker"] == []


# -- the plan reaches the rules and the dashboard ------------------------------------------------
@pytest.mark.parametrize("stack", ["prod", "dev"])
def test_deployed_rules_are_the_ones_built_from_the_plan(recorded, stack):
    settings, plan = plan_for(stack)
    deployed = named(recorded(stack), "PrometheusRule", "llm-serving")["spec"]["groups"]
    pickers = picker_replicas(len(settings.zones)) if settings.gateway.inferenceExtension else 0
    assert json.loads(json.dumps(deployed, sort_keys=True)) == json.loads(
        json.dumps(rule_groups(plan, settings.serving.namespace, endpoint_picker_replicas=pickers), sort_keys=True))


@pytest.mark.parametrize("stack, alerts", [
    ("prod", {"LLMServingEndpointPickerDown", "LLMServingEndpointPickerDegraded"}),
    ("dev", set()),          # no inference extension, no picker in the request path
])
def test_endpoint_picker_availability_is_alerted_where_it_serves(recorded, stack, alerts):
    deployed = named(recorded(stack), "PrometheusRule", "llm-serving")["spec"]["groups"]
    names = {r["alert"] for g in deployed for r in g["rules"] if "EndpointPicker" in r.get("alert", "")}
    assert names == alerts


@pytest.mark.parametrize("stack", ["prod", "dev"])
def test_kube_prometheus_stack_scrapes_nothing_eks_hides(recorded, stack):
    values = releases(recorded(stack))["kube-prometheus-stack"]["values"]
    assert {c: values[c]["enabled"] for c in ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy")} \
        == {"kubeControllerManager": False, "kubeScheduler": False, "kubeEtcd": False, "kubeProxy": False}
    assert not any(values["defaultRules"]["rules"].values())


@pytest.mark.parametrize("stack", ["prod", "dev"])
def test_every_dashboard_panel_states_its_unit_and_has_a_query(recorded, stack):
    panels = dashboard(recorded(stack))["panels"]
    assert panels
    for panel in panels:
        assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]
        assert panel["targets"], panel["title"]


def _lines(panel: dict) -> set[float]:
    return {s["value"] for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"] if s["value"] is not None}


@pytest.mark.parametrize("stack, statistic", [("prod", "mean"), ("staging", "p95"), ("dev", "p95")])
def test_latency_panels_show_the_statistic_the_slo_and_its_alert_read(recorded, stack, statistic):
    from observability.rules import plan_alerts
    _, plan = plan_for(stack)
    panels = {p["title"]: p for p in dashboard(recorded(stack))["panels"]}
    latency = [a for a in plan_alerts(plan) if a.statistic is not None]
    assert [a.statistic for a in latency] == [statistic, statistic]
    for alert, title in zip(latency, ("time to first token", "time per output token")):
        panel = panels[f"{statistic} {title}"]
        first = panel["targets"][0]
        assert alert.expr == f"{first['expr']} > {alert.threshold}"
        assert first["legendFormat"] == f"{statistic} all"
        assert alert.threshold in _lines(panel)


def test_dashboard_draws_slo_and_capacity_lines_from_the_plan(recorded):
    _, plan = plan_for("prod")
    panels = {p["title"]: p for p in dashboard(recorded("prod"))["panels"]}
    w = plan.request.workload
    assert w.ttft_slo_s in _lines(panels[f"{w.slo_statistic} time to first token"])
    assert w.tpot_slo_s in _lines(panels[f"{w.slo_statistic} time per output token"])
    capacity = sorted(_lines(panels["request rate against capacity"]))
    assert capacity == pytest.approx(sorted([plan.capacity_after_zone_loss_qps, plan.capacity_qps]), abs=1e-3)
