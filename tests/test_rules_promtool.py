"""The alert rules under the real Prometheus rule engine (promtool).

For each plan below, the rule file built from it passes `promtool check rules`, and every alert
fires on synthetic series just above its threshold and stays silent just below it. The
thresholds here are read from the plan (and the alert policy), not from the rules, so a rule
that ignored the plan or an SLO change would fail on at least one of the plans.
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from observability.rules import AlertPolicy, alert_names, render_rule_file, rule_groups
from tests.stacks import stack_config

NAMESPACE = "llm-serving"
POLICY = AlertPolicy()
ABOVE, BELOW = 1.02, 0.98          # "just above" and "just below" a threshold
SAMPLES = 30                       # one a minute
EVAL = "25m"                       # rate() over 5m is full from 5m; then every `for` (15m at most)
CLIENT_PREFIX = "https-443"        # an Envoy listener carrying client traffic
DECOY_PREFIX = "eg-stats-http"     # Envoy Gateway's stats listener: must not count as traffic

# stack, config overrides: thresholds must follow each plan and each SLO.
PLANS = {
    "prod": ("prod", {}),
    "staging": ("staging", {}),
    "dev": ("dev", {}),
    "prod-tighter-slos": ("prod", {"llm-serving:workload": {
        "qps": 10, "inputTokens": 1000, "outputTokens": 300, "maxModelLen": 8192, "ttftSeconds": 0.5,
        "tpotSeconds": 0.030}}),
    # Prod states its SLOs at the mean; the same fleet with p95 and p99 SLOs (p99: a quantile the
    # recording rules do not record, read from the buckets).
    "prod-p95": ("prod", {"llm-serving:workload": {"qps": 10, "sloStatistic": "p95", "maxModelLen": 8192}}),
    "prod-p99": ("prod", {"llm-serving:workload": {"qps": 4, "sloStatistic": "p99", "maxModelLen": 8192}}),
}


def promtool(*args: str) -> subprocess.CompletedProcess:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: install Debian's 'prometheus' package (scripts/test does)")
    return subprocess.run([path, *args], capture_output=True, text=True, timeout=60)


def make_settings(name: str):
    from settings import settings_from_config

    stack, overrides = PLANS[name]
    raw = stack_config(stack)
    raw.update(overrides)
    return settings_from_config(stack, raw)


def make_plan(name: str):
    from sizing.planner import plan
    return plan(make_settings(name).plan_request())


def picker_count(name: str) -> int:
    """The endpoint pickers the stack runs (0 without the inference extension)."""
    from deployment.gateway import picker_replicas
    settings = make_settings(name)
    return picker_replicas(len(settings.zones)) if settings.gateway.inferenceExtension else 0


def pickers(count: int, ready: int) -> list[dict]:
    """kube-state-metrics series for `count` endpoint-picker pods, the first `ready` of them ready."""
    out = []
    for i in range(count):
        pod = {"namespace": NAMESPACE, "pod": f"vllm-epp-{i}"}
        out.append(gauge("kube_pod_status_ready", {**pod, "condition": "true"}, 1 if i < ready else 0))
        out.append(gauge("kube_pod_labels", {**pod, "label_app_kubernetes_io_name": "endpoint-picker"}, 1))
    return out


# -- synthetic series --------------------------------------------------------------------------
def _labels(labels: dict) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def counter(name: str, labels: dict, per_s: float) -> dict:
    return {"series": name + _labels(labels), "values": f"0+{per_s * 60!r}x{SAMPLES}"}


def gauge(name: str, labels: dict, value: float) -> dict:
    return {"series": name + _labels(labels), "values": f"{value!r}x{SAMPLES}"}


def replica(zone: str, i: int = 0) -> dict:
    return {"namespace": NAMESPACE, "zone": zone, "pod": f"vllm-{zone}-{i}"}


def latency(family: str, statistic: str, value_s: float, decoy_s: float) -> list[dict]:
    """`family` at `statistic` is value_s, and every other statistic lies near decoy_s, on the
    other side of the SLO: an alert that read the wrong statistic would fail its case.

    A quantile q: all observations in one bucket (0, b], which histogram_quantile reads as q b,
    and a mean of decoy_s. A mean: value_s, and all observations in the bucket (d, 1.5 d], which
    puts every quantile between d and 1.5 d."""
    from sizing.queueing import QUANTILES

    r, rate = replica("us-east-1a"), 10.0
    q = QUANTILES.get(statistic)
    mean, buckets = (decoy_s, [(value_s / q, rate)]) if q else (value_s, [(decoy_s, 0.0), (1.5 * decoy_s, rate)])
    return ([counter(f"{family}_bucket", {**r, "le": repr(bound)}, n) for bound, n in buckets]
            + [counter(f"{family}_bucket", {**r, "le": "+Inf"}, rate),
               counter(f"{family}_count", r, rate), counter(f"{family}_sum", r, mean * rate)])


def pods(plan, ready) -> list[dict]:
    """kube-state-metrics series for the planned pods; `ready(zone, i)` -> 1/0, or None: no pod."""
    out = []
    for zone, count in plan.replicas_by_zone.items():
        for i in range(count):
            state = ready(zone, i)
            if state is None:
                continue
            pod = {"namespace": NAMESPACE, "pod": f"vllm-{zone}-{i}"}
            out.append(gauge("kube_pod_status_ready", {**pod, "condition": "true"}, state))
            out.append(gauge("kube_pod_labels", {**pod, "label_app_kubernetes_io_name": "vllm",
                                                 "label_llm_serving_io_role": "serving",
                                                 "label_llm_serving_io_zone": zone}, 1))
    return out


def offered(per_s: float, decoy_per_s: float = 0.0) -> list[dict]:
    series = [counter("envoy_http_downstream_rq_total", {"envoy_http_conn_manager_prefix": CLIENT_PREFIX}, per_s)]
    if decoy_per_s:
        series.append(counter("envoy_http_downstream_rq_total",
                              {"envoy_http_conn_manager_prefix": DECOY_PREFIX}, decoy_per_s))
    return series


def share_of_traffic(name: str, labels: dict, ratio: float) -> list[dict]:
    """10 client requests/s, `ratio` of them counted by `name`; plus heavy stats-listener traffic
    that would dilute the ratio below its threshold if it were counted."""
    return offered(10.0, decoy_per_s=1000.0) + [counter(name, labels, 10.0 * ratio)]


# -- the cases: (alert, fires?, series, labels of the alerts expected) --------------------------
def picker_cases(count: int) -> list[tuple[str, bool, list[dict], list[dict]]]:
    if not count:
        return []
    return [
        ("LLMServingEndpointPickerDown", True, pickers(count, 0), [{"severity": "critical"}]),
        ("LLMServingEndpointPickerDown", True, [], [{"severity": "critical"}]),     # no picker pod at all
        ("LLMServingEndpointPickerDown", False, pickers(count, 1), []),
        ("LLMServingEndpointPickerDegraded", True, pickers(count, count - 1), [{"severity": "warning"}]),
        ("LLMServingEndpointPickerDegraded", False, pickers(count, count), []),
    ]


def cases(plan, picker_replicas: int = 0) -> list[tuple[str, bool, list[dict], list[dict]]]:
    w = plan.request.workload
    zones = [z for z, n in plan.replicas_by_zone.items() if n]
    first = zones[0]
    r = replica(first)
    in_flight = plan.real.in_flight
    out = []
    stat = w.slo_statistic
    for factor, decoy, fires in ((ABOVE, 0.5, True), (BELOW, 2.0, False)):
        critical, warning = ([{"severity": "critical"}], [{"severity": "warning"}]) if fires else ([], [])
        out += [
            ("LLMServingTTFTAboveSLO", fires, latency("vllm:time_to_first_token_seconds", stat,
                                                      factor * w.ttft_slo_s, decoy * w.ttft_slo_s), critical),
            ("LLMServingTPOTAboveSLO", fires, latency("vllm:request_time_per_output_token_seconds", stat,
                                                      factor * w.tpot_slo_s, decoy * w.tpot_slo_s), critical),
            ("LLMServingLoadNearCapacity", fires,
             offered(factor * POLICY.capacity_share * plan.capacity_qps, decoy_per_s=0 if fires else 1000.0),
             warning),
            ("LLMServingGateway5xxRate", fires,
             share_of_traffic("envoy_http_downstream_rq_xx",
                              {"envoy_http_conn_manager_prefix": CLIENT_PREFIX, "envoy_response_code_class": "5"},
                              factor * POLICY.gateway_5xx_ratio), critical),
            ("LLMServingGatewayRateLimited", fires,
             share_of_traffic("envoy_http_local_rate_limiter_http_local_rate_limit_rate_limited", {},
                              factor * POLICY.gateway_429_ratio), warning),
        ]
        if plan.redundancy != "none":
            out.append(("LLMServingLoadAboveCapacityAfterLoss", fires,
                        offered(factor * plan.capacity_after_zone_loss_qps, decoy_per_s=0 if fires else 1000.0),
                        warning))
    pod_labels = {"zone": first, "pod": r["pod"]}
    out += [
        ("LLMServingKVCacheNearlyFull", True, [gauge("vllm:kv_cache_usage_perc", r, 0.91)],
         [{"severity": "warning", **pod_labels}]),
        ("LLMServingKVCacheNearlyFull", False, [gauge("vllm:kv_cache_usage_perc", r, 0.89)], []),
        # More in the replica than the plan's worst case, some of it waiting: fires.
        ("LLMServingQueueBeyondPlan", True,
         [gauge("vllm:num_requests_running", r, in_flight), gauge("vllm:num_requests_waiting", r, 1)],
         [{"severity": "warning", **pod_labels}]),
        # Half a request short of the plan's figure, even with some waiting: silent.
        ("LLMServingQueueBeyondPlan", False,
         [gauge("vllm:num_requests_running", r, in_flight - 1.5), gauge("vllm:num_requests_waiting", r, 1)], []),
        ("LLMServingReplicasBelowPlan", True,
         pods(plan, lambda z, i: 0 if (z, i) == (first, 0) else 1), [{"severity": "warning"}]),
        ("LLMServingReplicasBelowPlan", False, pods(plan, lambda z, i: 1), []),
        # A zone whose replicas are all unready, and a zone whose replicas are gone: both fire.
        ("LLMServingZoneWithoutReadyReplica", True, pods(plan, lambda z, i: 0 if z == first else 1),
         [{"severity": "critical", "zone": first}]),
        ("LLMServingZoneWithoutReadyReplica", True, pods(plan, lambda z, i: None if z == first else 1),
         [{"severity": "critical", "zone": first}]),
        # Exactly one ready replica in every zone: silent.
        ("LLMServingZoneWithoutReadyReplica", False, pods(plan, lambda z, i: 1 if i == 0 else 0), []),
    ]
    if plan.redundancy == "zone":
        # At the planned load: a zone down leaves no zone to lose; all ready, the plan's N+1 holds.
        out += [
            ("LLMServingRedundancyLost", True, pods(plan, lambda z, i: 0 if z == first else 1) + offered(w.qps),
             [{"severity": "critical"}]),
            ("LLMServingRedundancyLost", False, pods(plan, lambda z, i: 1) + offered(w.qps), []),
        ]
    return out + picker_cases(picker_replicas)


def expand(template: str, labels: dict) -> str:
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)


def promtool_suite(plan, rules_path, picker_replicas: int = 0) -> dict:
    annotations = {r["alert"]: r["annotations"] for g in yaml.safe_load(rules_path.read_text())["groups"]
                   for r in g["rules"] if "alert" in r}
    tests = []
    for alert, _fires, series, expected in cases(plan, picker_replicas):
        tests.append({"interval": "1m", "input_series": series, "alert_rule_test": [{
            "eval_time": EVAL, "alertname": alert,
            "exp_alerts": [{"exp_labels": labels, "exp_annotations": {
                k: expand(v, labels) for k, v in annotations[alert].items()}} for labels in expected]}]})
    return {"rule_files": [rules_path.name], "evaluation_interval": "1m", "tests": tests}


# -- tests -------------------------------------------------------------------------------------
@pytest.fixture(params=sorted(PLANS))
def rendered(request, tmp_path):
    plan, count = make_plan(request.param), picker_count(request.param)
    path = tmp_path / "rules.yaml"
    path.write_text(render_rule_file(rule_groups(plan, NAMESPACE, endpoint_picker_replicas=count)))
    return plan, path, count


@pytest.mark.promtool
def test_promtool_check_rules_accepts_the_rule_file(rendered):
    _, path, _ = rendered
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_firing_and_a_silent_case(rendered):
    plan, path, count = rendered
    alerts = set(alert_names(yaml.safe_load(path.read_text())["groups"]))
    assert {a for a, fires, _, _ in cases(plan, count) if fires} == alerts
    assert {a for a, fires, _, _ in cases(plan, count) if not fires} == alerts


@pytest.mark.promtool
def test_every_alert_fires_above_its_threshold_and_not_below(rendered):
    plan, path, count = rendered
    test_path = path.parent / "rules_test.yaml"
    test_path.write_text(yaml.safe_dump(promtool_suite(plan, path, count), sort_keys=False))
    result = promtool("test", "rules", str(test_path))
    order = "\n".join(f"  {i}: {a} ({'fires' if f else 'silent'})"
                      for i, (a, f, _, _) in enumerate(cases(plan, count)))
    assert result.returncode == 0, result.stdout + result.stderr + "\ncases, in order:\n" + order


@pytest.mark.parametrize("name, statistic, reads", [
    ("prod", "mean", r"^sum \(rate\(vllm:\w+_sum\[5m\]\)\) / sum \(rate\(vllm:\w+_count\[5m\]\)\) > "),
    ("prod-p95", "p95", r"^service:vllm_\w+:p95_5m > "),
    ("dev", "p95", r"^service:vllm_\w+:p95_5m > "),
    ("prod-p99", "p99", r"^histogram_quantile\(0\.99, sum by \(le\) \(rate\(vllm:\w+_bucket\[5m\]\)\)\) > "),
])
def test_latency_alerts_read_the_statistic_the_slo_states(name, statistic, reads):
    from observability.rules import plan_alerts
    plan = make_plan(name)
    latency = [a for a in plan_alerts(plan) if a.statistic is not None]
    assert plan.request.workload.slo_statistic == statistic
    assert [a.name for a in latency] == ["LLMServingTTFTAboveSLO", "LLMServingTPOTAboveSLO"]
    for alert in latency:
        assert alert.statistic == statistic and re.match(reads, alert.expr), alert.expr
        assert alert.summary.startswith(f"{statistic} ")


def test_thresholds_move_with_the_slos():
    loose, tight = make_plan("prod"), make_plan("prod-tighter-slos")
    exprs = {}
    for name, plan in (("loose", loose), ("tight", tight)):
        exprs[name] = {r["alert"]: r["expr"] for g in rule_groups(plan, NAMESPACE) for r in g["rules"] if "alert" in r}
    for alert in ("LLMServingTTFTAboveSLO", "LLMServingTPOTAboveSLO"):
        assert exprs["loose"][alert] != exprs["tight"][alert], alert


@pytest.mark.promtool
def test_recording_rules_aggregate_per_replica_per_zone_and_overall(tmp_path):
    plan = make_plan("prod")
    path = tmp_path / "rules.yaml"
    path.write_text(render_rule_file(rule_groups(plan, NAMESPACE)))
    a, b = replica("us-east-1a"), replica("us-east-1b")
    suite = {"rule_files": [path.name], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [counter("vllm:request_success_total", {**a, "finished_reason": "stop"}, 2.0),
                         counter("vllm:request_success_total", {**a, "finished_reason": "length"}, 1.0),
                         counter("vllm:request_success_total", {**b, "finished_reason": "stop"}, 4.0),
                         gauge("vllm:kv_cache_usage_perc", a, 0.25), gauge("vllm:kv_cache_usage_perc", b, 0.75)],
        "promql_expr_test": [
            {"expr": "pod:vllm_request_success:rate5m", "eval_time": "10m", "exp_samples": [
                {"labels": _labels_of("pod:vllm_request_success:rate5m", a), "value": 3.0},
                {"labels": _labels_of("pod:vllm_request_success:rate5m", b), "value": 4.0}]},
            {"expr": "zone:vllm_request_success:rate5m", "eval_time": "10m", "exp_samples": [
                {"labels": 'zone:vllm_request_success:rate5m{zone="us-east-1a"}', "value": 3.0},
                {"labels": 'zone:vllm_request_success:rate5m{zone="us-east-1b"}', "value": 4.0}]},
            {"expr": "service:vllm_request_success:rate5m", "eval_time": "10m", "exp_samples": [
                {"labels": "service:vllm_request_success:rate5m", "value": 7.0}]},
            {"expr": "service:vllm_kv_cache_usage:avg", "eval_time": "10m", "exp_samples": [
                {"labels": "service:vllm_kv_cache_usage:avg", "value": 0.5}]},
        ]}]}
    test_path = tmp_path / "recording_test.yaml"
    test_path.write_text(yaml.safe_dump(suite, sort_keys=False))
    result = promtool("test", "rules", str(test_path))
    assert result.returncode == 0, result.stdout + result.stderr


def _labels_of(name: str, r: dict) -> str:
    return f'{name}{{pod="{r["pod"]}", zone="{r["zone"]}"}}'
