"""Recording rules and alerts, built from the sizing plan and the SLOs.

Every threshold is read from the plan (`Thresholds.from_plan`) or from the alert policy (the
shares and ratios an operator chooses, `AlertPolicy`); none is typed into an expression. Each alert
is an `alerts.Alert` (`plan_alerts`), which the dashboard, the twin and `check` read too; latency
alerts read the statistic the SLOs are stated at (`statistic_expr`). The same groups go into the
PrometheusRule object and the plain rule file `llmserve render` writes.

Recorded series follow Prometheus' `level:metric:operation` naming, at three levels:
`pod` (one replica: labels zone, pod), `zone` and `service` (everything).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import yaml

from sizing.planner import Plan
from sizing import queueing

from . import contract
from .alerts import Alert, Behaviour, Expected
from .pd_alerts import pd_alerts, pd_group

RATE_WINDOW = "5m"
LEVELS: tuple[tuple[str, tuple[str, ...]], ...] = (("pod", ("zone", "pod")), ("zone", ("zone",)), ("service", ()))
RECORDED_QUANTILES = (0.5, 0.95)      # the quantiles recorded for every latency histogram

# vLLM latency histograms, by the short name the dashboard and alerts use.
LATENCY_HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "tpot": "vllm:request_time_per_output_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
}
VLLM_COUNTERS = {
    "requests": "vllm:request_success_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
}
VLLM_GAUGES = {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting"}
# Envoy's own listeners (readiness, stats) are not client traffic.
ENVOY_CLIENT_TRAFFIC = 'envoy_http_conn_manager_prefix!~"eg-.*|admin"'


@dataclass(frozen=True)
class AlertPolicy:
    """The shares and ratios an operator chooses; the plan supplies every other figure."""
    kv_cache_usage: float = 0.90          # of the KV cache, per replica
    capacity_share: float = 0.80          # of the sized capacity (all replicas)
    gateway_5xx_ratio: float = 0.01       # of client requests
    gateway_429_ratio: float = 0.05       # of client requests, answered by the rate limit
    slo_for: str = "10m"                  # how long a latency must stay above its SLO
    replicas_for: str = "15m"             # a 70B model takes minutes to load: ride out restarts
    load_for: str = "15m"


@dataclass(frozen=True)
class Thresholds:
    """What each alert compares with, read from the plan once."""
    ttft_slo_s: float
    tpot_slo_s: float
    slo_statistic: str                     # the statistic both SLOs hold at (mean, p50, p90, p95, p99)
    binding: str                           # what limits a replica's capacity (sizing: tpot, ttft, kv, prefill)
    in_flight_per_replica: float          # the plan's worst case: one replica after the loss
    replicas: int
    zones: tuple[str, ...]                # zones the plan puts replicas in
    capacity_qps: float
    capacity_per_replica_qps: float
    capacity_after_zone_loss_qps: float | None  # None when the plan has no failure domain to lose
    redundancy: str                        # zone | node | none
    lost_domain: str
    queue_s: float                         # mean queue wait the plan expects after the loss

    @classmethod
    def from_plan(cls, plan: Plan) -> "Thresholds":
        w = plan.request.workload
        in_flight = plan.real.in_flight
        if not math.isfinite(in_flight):
            in_flight = float(plan.engine_args.max_num_seqs)
        return cls(
            ttft_slo_s=w.ttft_slo_s, tpot_slo_s=w.tpot_slo_s, slo_statistic=w.slo_statistic,
            binding=plan.capacity_per_replica.binding,
            in_flight_per_replica=round(in_flight, 2), replicas=plan.replicas,
            zones=tuple(z for z, n in plan.replicas_by_zone.items() if n > 0),
            capacity_qps=round(plan.capacity_qps, 3),
            capacity_per_replica_qps=round(plan.capacity_per_replica.qps, 3),
            capacity_after_zone_loss_qps=None if plan.redundancy == "none" else round(plan.capacity_after_zone_loss_qps, 3),
            redundancy=plan.redundancy, lost_domain=plan.lost_domain,
            queue_s=round(plan.real.queue_ms / 1e3, 4) if math.isfinite(plan.real.queue_ms) else 0.0,
        )


# -- names --------------------------------------------------------------------------------------
def _metric(name: str) -> str:
    return name.replace("vllm:", "vllm_").removesuffix("_total")


def quantile_series(short: str, level: str, q: float) -> str:
    return f"{level}:{_metric(LATENCY_HISTOGRAMS[short])}:p{round(q * 100)}_{RATE_WINDOW}"


def rate_series(short: str, level: str) -> str:
    return f"{level}:{_metric(VLLM_COUNTERS[short])}:rate{RATE_WINDOW}"


def gauge_series(short: str, level: str) -> str:
    return f"{level}:{_metric(VLLM_GAUGES[short])}:sum"


KV_POD = "pod:vllm_kv_cache_usage:max"
KV_ZONE = "zone:vllm_kv_cache_usage:avg"
KV_SERVICE = "service:vllm_kv_cache_usage:avg"
READY_ZONE = "zone:llm_serving_ready_replicas:sum"
READY_SERVICE = "service:llm_serving_ready_replicas:sum"
READY_PICKERS = "service:llm_serving_ready_endpoint_pickers:sum"
PICKER_APP = "endpoint-picker"       # components/endpoint_picker.py PICKER_LABELS app.kubernetes.io/name
OFFERED_LOAD = f"service:envoy_downstream_requests:rate{RATE_WINDOW}"
GATEWAY_5XX = f"service:envoy_downstream_5xx:rate{RATE_WINDOW}"
GATEWAY_429 = f"service:envoy_rate_limited:rate{RATE_WINDOW}"
GATEWAY_5XX_RATIO = f"service:envoy_downstream_5xx:ratio_rate{RATE_WINDOW}"
GATEWAY_429_RATIO = f"service:envoy_rate_limited:ratio_rate{RATE_WINDOW}"


def _by(labels: tuple[str, ...]) -> str:
    return f" by ({', '.join(labels)})" if labels else ""


# -- recording rules ----------------------------------------------------------------------------
def recording_rules(serving_namespace: str) -> list[dict]:
    rules: list[dict] = []
    for short, family in LATENCY_HISTOGRAMS.items():
        buckets = f"pod:{_metric(family)}_bucket:rate{RATE_WINDOW}"
        rules.append({"record": buckets,
                      "expr": f"sum by (le, zone, pod) (rate({family}_bucket[{RATE_WINDOW}]))"})
        for level, labels in LEVELS:
            for q in RECORDED_QUANTILES:
                rules.append({"record": quantile_series(short, level, q),
                              "expr": f"histogram_quantile({q}, sum by ({', '.join(('le',) + labels)}) ({buckets}))"})
    for short, family in VLLM_COUNTERS.items():
        for level, labels in LEVELS:
            rules.append({"record": rate_series(short, level),
                          "expr": f"sum{_by(labels)} (rate({family}[{RATE_WINDOW}]))"})
    for short, family in VLLM_GAUGES.items():
        for level, labels in LEVELS:
            rules.append({"record": gauge_series(short, level), "expr": f"sum{_by(labels)} ({family})"})
    rules += [
        {"record": KV_POD, "expr": "max by (zone, pod) (vllm:kv_cache_usage_perc)"},
        {"record": KV_ZONE, "expr": "avg by (zone) (vllm:kv_cache_usage_perc)"},
        {"record": KV_SERVICE, "expr": "avg (vllm:kv_cache_usage_perc)"},
        # Readiness from kube-state-metrics, so a replica that is down (no /metrics) still counts.
        # Role `serving` selects one pod per replica: a multi-node replica's leader, ready only while
        # every rank runs (LWS recreates the group when one fails; its workers are `serving-worker`),
        # so these count ready groups, never ready pods (docs/multi-node.md).
        {"record": READY_ZONE, "expr": (
            'sum by (zone) (label_replace('
            f'kube_pod_status_ready{{condition="true", namespace="{serving_namespace}"}}'
            ' * on (namespace, pod) group_left (label_llm_serving_io_zone) '
            f'kube_pod_labels{{namespace="{serving_namespace}", label_app_kubernetes_io_name="vllm", '
            'label_llm_serving_io_role="serving"}, "zone", "$1", "label_llm_serving_io_zone", "(.+)"))')},
        {"record": READY_SERVICE, "expr": f"sum ({READY_ZONE})"},
        # Offered load is measured at the gateway: vLLM only counts what it finishes, which
        # levels off at its capacity exactly when the load exceeds it.
        {"record": OFFERED_LOAD,
         "expr": f"sum (rate(envoy_http_downstream_rq_total{{{ENVOY_CLIENT_TRAFFIC}}}[{RATE_WINDOW}]))"},
        {"record": GATEWAY_5XX, "expr": (
            f'sum (rate(envoy_http_downstream_rq_xx{{envoy_response_code_class="5", {ENVOY_CLIENT_TRAFFIC}}}'
            f'[{RATE_WINDOW}]))')},
        {"record": GATEWAY_429, "expr": (
            f"sum (rate(envoy_http_local_rate_limiter_http_local_rate_limit_rate_limited[{RATE_WINDOW}]))")},
        {"record": GATEWAY_5XX_RATIO, "expr": f"{GATEWAY_5XX} / {OFFERED_LOAD}"},
        {"record": GATEWAY_429_RATIO, "expr": f"{GATEWAY_429} / {OFFERED_LOAD}"},
    ]
    return rules


# -- alerts -------------------------------------------------------------------------------------
SILENT, FIRES = Behaviour.SILENT, Behaviour.FIRES
# The latency alerts: (short name, SLO attribute of Thresholds, alert, the plan's binding
# constraints past which this latency is the one that breaks first, words, what to look at).
LATENCY_SLOS = (
    ("ttft", "ttft_slo_s", "LLMServingTTFTAboveSLO", ("ttft", "kv", "prefill"), "time to first token",
     ". Check queue time and KV-cache usage per replica."),
    ("tpot", "tpot_slo_s", "LLMServingTPOTAboveSLO", ("tpot",), "time per output token",
     ": the decode batches are larger than the plan sized for."),
)
LOAD_MARGIN = 1.05    # load alerts compare the measured (Poisson) request rate itself with their threshold


def statistic_expr(family: str, statistic: str, window: str = RATE_WINDOW, by: tuple[str, ...] = (),
                   selector: str = "") -> str:
    """A latency histogram at an SLO statistic over `window`, from the exporter's own series:
    a mean reads `rate(_sum) / rate(_count)`, a pXX reads `histogram_quantile(0.XX, ...)`."""
    sel = f"{{{selector}}}" if selector else ""
    if statistic == "mean":
        return (f"sum{_by(by)} (rate({family}_sum{sel}[{window}])) / "
                f"sum{_by(by)} (rate({family}_count{sel}[{window}]))")
    return (f"histogram_quantile({queueing.QUANTILES[statistic]}, "
            f"sum by ({', '.join(('le',) + by)}) (rate({family}_bucket{sel}[{window}])))")


def slo_series(short: str, statistic: str) -> str:
    """What a latency alert compares with its SLO: the recorded service quantile when the rules
    record that quantile, else the statistic over the exporter's series."""
    q = queueing.QUANTILES.get(statistic)
    if q in RECORDED_QUANTILES:
        return quantile_series(short, "service", q)
    return statistic_expr(LATENCY_HISTOGRAMS[short], statistic)


def latency_alerts(t: Thresholds, policy: AlertPolicy) -> list[Alert]:
    out = []
    for short, guards, name, bindings, words, look in LATENCY_SLOS:
        slo, stat = getattr(t, guards), t.slo_statistic
        shown = f"{slo:g} s" if short == "ttft" else f"{slo * 1e3:g} ms"
        out.append(Alert(
            name, f"{slo_series(short, stat)} > {slo}", policy.slo_for, "critical",
            f"{stat} {words} is above its {shown} SLO",
            f"{stat} {short.upper()} over all replicas has stayed above {slo:g} s for {policy.slo_for}{look}",
            guards, slo, stat, LATENCY_HISTOGRAMS[short], expected=Expected(
                zone_loss=SILENT, overload=FIRES if t.binding in bindings else Behaviour.NOT_JUDGED,
                overload_above_qps=t.capacity_qps if t.binding in bindings else None)))
    return out


def replica_alerts(t: Thresholds, policy: AlertPolicy) -> list[Alert]:
    running, waiting = gauge_series("running", "pod"), gauge_series("waiting", "pod")
    zones_absent = " or ".join(f'absent({READY_ZONE}{{zone="{z}"}})' for z in t.zones)
    return [
        Alert("LLMServingKVCacheNearlyFull", f"{KV_POD} > {policy.kv_cache_usage}", "5m", "warning",
              f"KV cache of {{{{ $labels.pod }}}} is above {policy.kv_cache_usage:.0%}",
              f"Replica {{{{ $labels.pod }}}} in {{{{ $labels.zone }}}} uses more than {policy.kv_cache_usage:.0%} "
              "of its KV cache; new requests will wait or preempt running ones.",
              "kv_cache_usage", policy.kv_cache_usage),
        Alert("LLMServingQueueBeyondPlan",
              f"({running} + {waiting}) > {t.in_flight_per_replica} and {waiting} > 0", "5m", "warning",
              f"{{{{ $labels.pod }}}} holds more requests than the plan's {t.in_flight_per_replica:g}",
              f"Replica {{{{ $labels.pod }}}} in {{{{ $labels.zone }}}} has requests waiting and more in flight "
              f"than the {t.in_flight_per_replica:g} the plan expects per replica even after losing "
              f"{t.lost_domain or 'a replica'}.", "in_flight_per_replica", t.in_flight_per_replica),
        Alert("LLMServingReplicasBelowPlan", f"({READY_SERVICE} or vector(0)) < {t.replicas}",
              policy.replicas_for, "warning",
              f"fewer ready vLLM replicas than the {t.replicas} planned",
              f"Fewer than {t.replicas} serving replicas have been ready for {policy.replicas_for}; "
              "the service has less headroom than its plan.", "replicas", float(t.replicas),
              expected=Expected(zone_loss=FIRES)),
        Alert("LLMServingZoneWithoutReadyReplica", f"{READY_ZONE} < 1 or {zones_absent}", "5m", "critical",
              "zone {{ $labels.zone }} has no ready vLLM replica",
              "Zone {{ $labels.zone }} has no ready serving replica: "
              + ("the other zones carry the load without zone redundancy." if len(t.zones) > 1
                 else "it is the only zone in the plan, so nothing is serving."),
              "zones", 1.0, expected=Expected(zone_loss=FIRES, per_zone=True)),
    ]


def load_alerts(t: Thresholds, policy: AlertPolicy) -> list[Alert]:
    share_qps = round(policy.capacity_share * t.capacity_qps, 3)
    alerts = [Alert(
        "LLMServingLoadNearCapacity", f"{OFFERED_LOAD} > {share_qps}", policy.load_for, "warning",
        f"load is above {policy.capacity_share:.0%} of the sized {t.capacity_qps:g} QPS",
        f"Requests reaching the gateway have stayed above {share_qps:g} QPS "
        f"({policy.capacity_share:.0%} of the {t.capacity_qps:g} QPS all replicas carry within the SLOs).",
        "capacity_qps", share_qps,
        expected=Expected(zone_loss=SILENT, overload=FIRES, overload_above_qps=policy.capacity_share * t.capacity_qps,
                 overload_margin=LOAD_MARGIN))]
    if t.capacity_after_zone_loss_qps is not None:
        alerts.append(Alert(
            "LLMServingLoadAboveCapacityAfterLoss", f"{OFFERED_LOAD} > {t.capacity_after_zone_loss_qps}",
            policy.load_for, "warning",
            f"N+1 by {t.redundancy} no longer holds: load is above {t.capacity_after_zone_loss_qps:g} QPS",
            f"Requests reaching the gateway have stayed above {t.capacity_after_zone_loss_qps:g} QPS, what the "
            f"replicas left after losing {t.lost_domain} carry within the SLOs. Add replicas or capacity.",
            "capacity_after_zone_loss_qps", t.capacity_after_zone_loss_qps,
            expected=Expected(zone_loss=SILENT, overload=FIRES, overload_above_qps=t.capacity_after_zone_loss_qps,
                     overload_margin=LOAD_MARGIN)))
    if t.redundancy == "zone":
        alerts.append(redundancy_lost_alert(t, policy))
    return alerts


def gateway_alerts(policy: AlertPolicy) -> list[Alert]:
    return [
        Alert("LLMServingGateway5xxRate", f"{GATEWAY_5XX_RATIO} > {policy.gateway_5xx_ratio}", "5m", "critical",
              f"more than {policy.gateway_5xx_ratio:.0%} of requests fail with 5xx at the gateway",
              f"Over {policy.gateway_5xx_ratio:.0%} of client requests got a 5xx from Envoy for 5m.",
              "gateway_5xx_ratio", policy.gateway_5xx_ratio),
        Alert("LLMServingGatewayRateLimited", f"{GATEWAY_429_RATIO} > {policy.gateway_429_ratio}", "10m",
              "warning", f"more than {policy.gateway_429_ratio:.0%} of requests are rate limited (429)",
              f"Over {policy.gateway_429_ratio:.0%} of client requests got 429 from the gateway's rate limit "
              "for 10m: clients exceed their share, or the load exceeds what the limits allow.",
              "gateway_429_ratio", policy.gateway_429_ratio),
    ]


def alert_rules(t: Thresholds, policy: AlertPolicy) -> list[Alert]:
    """The plan's alerts, in the rule file's order."""
    return latency_alerts(t, policy) + replica_alerts(t, policy) + load_alerts(t, policy) + gateway_alerts(policy)


def redundancy_lost_alert(t: Thresholds, policy: AlertPolicy) -> Alert:
    """N+1 by zone, judged on the replicas ready now: while a zone is down (or replicas are
    missing), losing the zone that holds the most ready replicas would leave less capacity than
    the load. The plan's headroom check, recomputed live."""
    left_after_next_loss = f"({READY_SERVICE} - max ({READY_ZONE})) * {t.capacity_per_replica_qps}"
    return Alert(
        "LLMServingRedundancyLost", f"{left_after_next_loss} < {OFFERED_LOAD}", "5m", "critical",
        "N+1 by zone no longer holds: losing another zone would drop load",
        f"With the replicas ready now, losing the zone that holds the most of them would leave "
        f"{t.capacity_per_replica_qps:g} QPS per remaining replica, less than the load reaching the gateway. "
        "Bring the lost replicas back (or add capacity) before anything else is disrupted.",
        "capacity_per_replica_qps", t.capacity_per_replica_qps, expected=Expected(zone_loss=FIRES))


# -- the file -----------------------------------------------------------------------------------
def endpoint_picker_ready_rule(serving_namespace: str) -> dict:
    """The endpoint picker is in every request's path and fails closed: Envoy AI Gateway v1.0.0
    builds its ext_proc filter with `failure_mode_allow: false` and never reads the pool's
    failureMode (`internal/extensionserver/inferencepool.go`). No ready picker, no service."""
    ready = (f'sum (kube_pod_status_ready{{condition="true", namespace="{serving_namespace}"}}'
             ' * on (namespace, pod) group_left () '
             f'kube_pod_labels{{namespace="{serving_namespace}", label_app_kubernetes_io_name="{PICKER_APP}"}})')
    return {"record": READY_PICKERS, "expr": ready}


def endpoint_picker_alerts(replicas: int) -> list[Alert]:
    return [
        Alert("LLMServingEndpointPickerDown", f"({READY_PICKERS} or vector(0)) < 1", "1m", "critical",
              "no endpoint picker is ready: every request through the gateway fails",
              "The gateway's endpoint picker fails closed (Envoy AI Gateway v1.0.0 sets failure_mode_allow: "
              "false on its ext_proc filter), so with no ready picker Envoy answers every request with an "
              "error. Check the picker pods in the serving namespace.", "endpoint_picker_replicas", 1.0),
        Alert("LLMServingEndpointPickerDegraded", f"{READY_PICKERS} < {replicas} and {READY_PICKERS} >= 1",
              "10m", "warning", f"fewer endpoint pickers ready than the {replicas} deployed",
              f"Fewer than {replicas} endpoint picker replicas have been ready for 10m; one more loss (a node "
              "or a zone) stops all traffic, since the picker fails closed.",
              "endpoint_picker_replicas", float(replicas)),
    ]


def multi_node_alerts() -> list[Alert]:
    """Replicas that span nodes: the plan prices each cross-node hop at EFA's bandwidth, so a group
    whose NCCL fell back to TCP sockets is slower than planned (docs/multi-node.md)."""
    expr = 'max by (namespace, pod) (llm_serving_nccl_network{job="nccl-transport", network!~".*Libfabric"}) == 1'
    return [Alert("LLMServingGroupWithoutEfa", expr, "0m", "critical",
                  "a multi-node group's NCCL does not use EFA",
                  "NCCL chose a network other than aws-ofi-nccl's Libfabric (Socket: TCP over the VPC) on this "
                  "group's leader, so every cross-node collective runs far below the EFA bandwidth the plan "
                  "assumed. The image lacks libfabric or the aws-ofi-nccl plugin, or the EFA devices are not "
                  "in the pod: see the leader's nccl-transport container log and docs/multi-node.md.",
                  "nodes_per_replica", None)]


def slo_alerts(plan: Plan, policy: AlertPolicy = AlertPolicy()) -> list[Alert]:
    """The latency alerts: each SLO, at its statistic."""
    return latency_alerts(Thresholds.from_plan(plan), policy)


def plan_alerts(plan: Plan, policy: AlertPolicy = AlertPolicy(), endpoint_picker_replicas: int = 0) -> list[Alert]:
    """Every alert the rule file holds for this plan, in its order."""
    alerts = alert_rules(Thresholds.from_plan(plan), policy)
    return (alerts + (endpoint_picker_alerts(endpoint_picker_replicas) if endpoint_picker_replicas else [])
            + pd_alerts(plan))


def rule_groups(plan: Plan, serving_namespace: str, policy: AlertPolicy = AlertPolicy(),
                endpoint_picker_replicas: int = 0, extra_groups: tuple[dict, ...] = ()) -> list[dict]:
    """Recording rules and alerts; the endpoint-picker group only when the gateway runs one; then
    `extra_groups` (the autoscaling alerts: observability.autoscaling_alerts.autoscaling_group), checked
    with the rest."""
    groups = [
        {"name": "llm-serving.recording", "rules": recording_rules(serving_namespace)},
        {"name": "llm-serving.alerts", "rules": [a.rule() for a in alert_rules(Thresholds.from_plan(plan), policy)]},
    ]
    if plan.nodes_per_replica > 1:
        groups.append({"name": "llm-serving.multi-node", "rules": [a.rule() for a in multi_node_alerts()]})
    if endpoint_picker_replicas:
        groups.append({"name": "llm-serving.endpoint-picker",
                       "rules": [endpoint_picker_ready_rule(serving_namespace)]
                       + [a.rule() for a in endpoint_picker_alerts(endpoint_picker_replicas)]})
    groups += pd_group(plan)          # a disaggregated or speculative plan's alerts (none otherwise)
    groups += list(extra_groups)
    check_groups(groups)
    return groups


def check_groups(groups: list[dict]) -> None:
    """Every expression reads only contract series or series recorded earlier."""
    recorded: set[str] = set()
    for group in groups:
        for rule in group["rules"]:
            label = rule.get("record") or rule.get("alert")
            contract.check_expr(rule["expr"], recorded, where=f"rule {label}")
            contract.check_labels(rule["expr"], where=f"rule {label}")
            if "record" in rule:
                recorded.add(rule["record"])


def recorded_names(groups: list[dict]) -> set[str]:
    return {r["record"] for g in groups for r in g["rules"] if "record" in r}


def alert_names(groups: list[dict]) -> list[str]:
    return [r["alert"] for g in groups for r in g["rules"] if "alert" in r]


def render_rule_file(groups: list[dict]) -> str:
    """Prometheus rule-file YAML (`promtool check rules` reads it)."""
    return yaml.safe_dump({"groups": groups}, sort_keys=False, width=120)
