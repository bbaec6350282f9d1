"""The alerts of an autoscaled fleet, from the plan's `AutoscalePolicy` (sizing.roles).

KEDA drives one HorizontalPodAutoscaler per zone, named as its Deployment (`vllm-<zone>`:
deployment/autoscaling.py sets `advanced.horizontalPodAutoscalerConfig.name`), and kube-state-metrics
v2.19.1 (the kube-state-metrics chart 8.2.0 that kube-prometheus-stack 88.2.0 pins) exports its
state: `kube_horizontalpodautoscaler_spec_max_replicas`, `..._status_current_replicas`,
`..._status_desired_replicas` (internal/store/horizontalpodautoscaler.go L149, L309, L328; labels
`namespace, horizontalpodautoscaler`, L51). Three alerts:
- scaling pinned at its ceiling while an SLO is missed: the policy's ceiling is too low for the load;
- a zone's ready replicas under its floor for longer than a replica takes to start: the floor, N+1
  by zone at the trough, is breached;
- a zone's ready replicas under what the autoscaler asks for, for longer than the planned cold start
  on a new node: scale-up is slower than the plan (node provision, image pull, model load, engine start).
"""
from __future__ import annotations

import math

from sizing.planner import Plan

from .alerts import Alert
from .rules import READY_ZONE, AlertPolicy, Thresholds, rule_groups, slo_series

HPA_MAX = "kube_horizontalpodautoscaler_spec_max_replicas"
HPA_CURRENT = "kube_horizontalpodautoscaler_status_current_replicas"
HPA_DESIRED = "kube_horizontalpodautoscaler_status_desired_replicas"


def _hpa(metric: str, namespace: str) -> str:
    """The serving HPAs' series with a `zone` label (their names are `vllm-<zone>`)."""
    return (f'max by (zone) (label_replace({metric}{{namespace="{namespace}", horizontalpodautoscaler=~"vllm-.+"}}, '
            '"zone", "$1", "horizontalpodautoscaler", "vllm-(.+)"))')


def cold_start_s(plan: Plan) -> float:
    """A replica on a new node, from nothing: the policy's cold start, else its lead."""
    policy = plan.autoscale
    return policy.cold_start.replica_on_new_node_s if policy.cold_start is not None else policy.lead_s


def minutes(seconds: float) -> str:
    return f"{max(1, math.ceil(seconds / 60))}m"


def autoscaling_alerts(plan: Plan, namespace: str, policy: AlertPolicy = AlertPolicy()) -> list[Alert]:
    t, scale = Thresholds.from_plan(plan), plan.autoscale
    start = minutes(cold_start_s(plan))
    missed = " or ".join(f"({slo_series(short, t.slo_statistic)} > {getattr(t, slo)})"
                         for short, slo in (("ttft", "ttft_slo_s"), ("tpot", "tpot_slo_s")))
    floors = {z: n for z, n in scale.floor_by_zone.items() if n > 0}
    below_floor = " or ".join(f'({READY_ZONE}{{zone="{z}"}} < {n}) or absent({READY_ZONE}{{zone="{z}"}})'
                              for z, n in floors.items())
    desired = _hpa(HPA_DESIRED, namespace)
    ready = f"({READY_ZONE} or ({desired} * 0))"      # a zone with no ready replica counts 0
    alerts = [
        Alert("LLMServingScalingPinnedAtMax",
              f"({_hpa(HPA_CURRENT, namespace)} >= {_hpa(HPA_MAX, namespace)}) and on () ({missed})",
              policy.slo_for, "critical",
              "{{ $labels.zone }} is scaled to its ceiling and an SLO is missed",
              "The autoscaler holds {{ $labels.zone }} at the policy's ceiling while the "
              f"{t.slo_statistic} TTFT or TPOT is above its SLO: the load is past the peak the plan was sized for. "
              "Raise the ceiling (the peak of workload.traffic) and the pools' nodes.",
              "ceiling_by_zone", None),
        Alert("LLMServingScaleUpSlowerThanColdStart", f"{desired} > on (zone) {ready}", start, "warning",
              "{{ $labels.zone }} has fewer ready replicas than the autoscaler asks for",
              f"The autoscaler has asked {{{{ $labels.zone }}}} for more replicas than are ready for longer than the "
              f"planned cold start of a replica on a new node ({cold_start_s(plan):.0f} s): node provision, image "
              "pull, model load or engine start takes longer than planned.", "cold_start_s", cold_start_s(plan)),
    ]
    if floors:
        alerts.insert(1, Alert(
            "LLMServingBelowAutoscalingFloor", below_floor, start, "critical",
            "a zone has fewer ready replicas than its autoscaling floor",
            "Ready serving replicas in a zone have stayed under the policy's floor (N+1 by zone at the trough: "
            + ", ".join(f"{z} {n}" for z, n in floors.items())
            + f") for longer than a replica's cold start ({cold_start_s(plan):.0f} s); losing another zone now "
            "would drop load even at the trough.", "floor_by_zone", None))
    return alerts


def autoscaling_group(plan: Plan, namespace: str, policy: AlertPolicy = AlertPolicy()) -> dict:
    """The rule group of an autoscaled fleet (`rules.rule_groups(..., extra_groups=...)`)."""
    return {"name": "llm-serving.autoscaling", "rules": [a.rule() for a in autoscaling_alerts(plan, namespace, policy)]}


# An autoscaled fleet stands under the plan's (peak) replica count whenever the load is below the
# peak: the plan's own "replicas below plan" alert would fire all night. The floor alert replaces it.
REPLACED_BY_THE_FLOOR = "LLMServingReplicasBelowPlan"


def autoscaled_rule_groups(plan: Plan, namespace: str, policy: AlertPolicy = AlertPolicy(),
                           endpoint_picker_replicas: int = 0) -> list[dict]:
    """`rules.rule_groups` for an autoscaled fleet: the autoscaling group added, the plan's replica-count
    alert left out (REPLACED_BY_THE_FLOOR)."""
    groups = rule_groups(plan, namespace, policy, endpoint_picker_replicas,
                         extra_groups=(autoscaling_group(plan, namespace, policy),))
    return [{**g, "rules": [r for r in g["rules"] if r.get("alert") != REPLACED_BY_THE_FLOOR]} for g in groups]
