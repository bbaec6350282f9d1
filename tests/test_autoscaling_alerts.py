"""The autoscaled fleet's alerts under the real Prometheus rule engine (promtool): each fires on
synthetic series that break its rule and stays silent on series that keep it. Thresholds come from
the plan's policy, built here on the contract (sizing.roles.AutoscalePolicy)."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

import sizing.planner
from observability.autoscaling_alerts import autoscaling_group, cold_start_s
from observability.rules import alert_names, render_rule_file, rule_groups
from tests.stacks import plan_for
from tests.test_autoscaling_deploy import PEAK_40_QPS, policy_for, with_policy  # noqa: F401 (a fixture)
from tests.test_rules_promtool import EVAL, NAMESPACE, counter, expand, gauge, promtool

AUTOSCALING_ALERTS = {"LLMServingScalingPinnedAtMax", "LLMServingBelowAutoscalingFloor",
                      "LLMServingScaleUpSlowerThanColdStart"}


@pytest.fixture
def autoscaled_plan(monkeypatch):
    monkeypatch.setattr(sizing.planner, "_with_autoscale",
                        lambda p, req: dataclasses.replace(p, autoscale=policy_for(p)))
    return plan_for("prod", PEAK_40_QPS)[1]


def hpa(zone: str, current: int, desired: int, ceiling: int) -> list[dict]:
    labels = {"namespace": NAMESPACE, "horizontalpodautoscaler": f"vllm-{zone}"}
    return [gauge("kube_horizontalpodautoscaler_status_current_replicas", labels, current),
            gauge("kube_horizontalpodautoscaler_status_desired_replicas", labels, desired),
            gauge("kube_horizontalpodautoscaler_spec_max_replicas", labels, ceiling)]


def ready_pods(ready: dict[str, list[int]]) -> list[dict]:
    out = []
    for zone, states in ready.items():
        for i, state in enumerate(states):
            pod = {"namespace": NAMESPACE, "pod": f"vllm-{zone}-{i}"}
            out += [gauge("kube_pod_status_ready", {**pod, "condition": "true"}, state),
                    gauge("kube_pod_labels", {**pod, "label_app_kubernetes_io_name": "vllm",
                                              "label_llm_serving_io_role": "serving",
                                              "label_llm_serving_io_zone": zone}, 1)]
    return out


def ttft_mean(seconds: float) -> list[dict]:
    """TTFT (the plan states its SLOs at the mean) and TPOT well within its SLO."""
    r = {"namespace": NAMESPACE, "zone": "us-east-1a", "pod": "vllm-us-east-1a-0"}
    out = []
    for family, value in (("vllm:time_to_first_token_seconds", seconds),
                          ("vllm:request_time_per_output_token_seconds", 0.001)):
        out += [counter(f"{family}_count", r, 10.0), counter(f"{family}_sum", r, 10.0 * value)]
    return out


def cases(plan):
    """(alert, fires, series): one breaking and one keeping each rule."""
    slo, a, b = plan.request.workload.ttft_slo_s, "us-east-1a", "us-east-1b"
    ceiling, ok = plan.autoscale.ceiling_by_zone[a], {a: [1, 1], b: [1, 1]}
    return [
        ("LLMServingScalingPinnedAtMax", True, hpa(a, ceiling, ceiling, ceiling) + ttft_mean(1.5 * slo) + ready_pods(ok)),
        ("LLMServingScalingPinnedAtMax", False, hpa(a, ceiling, ceiling, ceiling) + ttft_mean(0.5 * slo) + ready_pods(ok)),
        ("LLMServingBelowAutoscalingFloor", True, ready_pods({a: [0, 0], b: [1]})),
        ("LLMServingBelowAutoscalingFloor", False, ready_pods({a: [1], b: [1]})),
        ("LLMServingScaleUpSlowerThanColdStart", True, hpa(a, 3, 3, ceiling) + ready_pods({a: [1, 0, 0], b: [1]})),
        ("LLMServingScaleUpSlowerThanColdStart", False, hpa(a, 2, 2, ceiling) + ready_pods({a: [1, 1], b: [1]})),
    ]


def suite(plan, rules_path) -> dict:
    rules = {r["alert"]: r for g in yaml.safe_load(rules_path.read_text())["groups"] for r in g["rules"] if "alert" in r}
    tests = []
    for alert, fires, series in cases(plan):
        labels = {"alertname": alert, "severity": rules[alert]["labels"]["severity"]}
        if alert != "LLMServingBelowAutoscalingFloor" or fires:
            labels["zone"] = "us-east-1a"
        expected = [{"exp_labels": labels, "exp_annotations": {
            k: expand(v, labels) for k, v in rules[alert]["annotations"].items()}}] if fires else []
        tests.append({"interval": "1m", "input_series": series, "alert_rule_test": [
            {"eval_time": EVAL, "alertname": alert, "exp_alerts": expected}]})
    return {"rule_files": [rules_path.name], "evaluation_interval": "1m", "tests": tests}


@pytest.fixture
def rendered(autoscaled_plan, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(render_rule_file(rule_groups(autoscaled_plan, NAMESPACE,
                                                 extra_groups=(autoscaling_group(autoscaled_plan, NAMESPACE),))))
    return autoscaled_plan, path


def test_the_autoscaling_alerts_are_there_only_when_keda_scales_the_fleet(with_policy, build_program):
    def names(recording):
        rules = next(r for r in recording.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule"))
        return set(alert_names(rules.inputs["spec"]["groups"])) & AUTOSCALING_ALERTS
    def all_names(recording):
        rules = next(r for r in recording.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule"))
        return set(alert_names(rules.inputs["spec"]["groups"]))
    with_policy()
    off = build_program("prod", {**PEAK_40_QPS, "serving": {"autoscaling": {"enabled": False}}})
    on = build_program("prod", PEAK_40_QPS)
    assert (names(off), names(on)) == (set(), AUTOSCALING_ALERTS)
    # The fleet stands under the peak's count off-peak: the floor alert replaces the plan's replica-count one.
    assert all_names(off) - all_names(on) == {"LLMServingReplicasBelowPlan"}


def test_every_autoscaling_alert_has_a_firing_and_a_silent_case(autoscaled_plan):
    assert {a for a, fires, _ in cases(autoscaled_plan) if fires} == AUTOSCALING_ALERTS
    assert {a for a, fires, _ in cases(autoscaled_plan) if not fires} == AUTOSCALING_ALERTS


def test_a_slow_scale_up_is_judged_against_the_planned_cold_start(rendered):
    plan, path = rendered
    rule = next(r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]
                if r.get("alert") == "LLMServingScaleUpSlowerThanColdStart")
    assert rule["for"] == f"{-(-int(cold_start_s(plan)) // 60)}m"
    assert cold_start_s(plan) == plan.autoscale.cold_start.replica_on_new_node_s


@pytest.mark.promtool
def test_promtool_accepts_the_autoscaling_rules_and_each_alert_fires_only_when_broken(rendered):
    plan, path = rendered
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0 and "SUCCESS" in checked.stdout, checked.stdout + checked.stderr
    test_path = path.parent / "rules_test.yaml"
    test_path.write_text(yaml.safe_dump(suite(plan, path), sort_keys=False))
    result = promtool("test", "rules", str(test_path))
    assert result.returncode == 0, result.stdout + result.stderr
