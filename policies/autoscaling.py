"""Autoscaling rules: the fleet KEDA may shrink to still survives losing a zone.

They judge the ScaledObjects the program produced against the serving Deployments they scale (the
plan's annotations on both: deployment/autoscaling.py), never the stack config.
"""
from __future__ import annotations

from collections import defaultdict

from pulumi_policy import Severity

from conventions import ANNOTATION_FLOOR_QPS, ANNOTATION_REPLICA_CAPACITY_QPS, ANNOTATION_ZONE
from .resources import allowed_zones, fmt, get, namespace, node_groups, number, plural, serving_workloads
from .rules import Rule, stack_rule

RULES: list[Rule] = []
SCALED_OBJECT = "kubernetes:keda.sh/v1alpha1:ScaledObject"
KEDA_DEFAULT_MIN_REPLICAS = 0      # ScaledObject spec.minReplicaCount when unset (KEDA 2.20 docs, "ScaledObject spec")


def _floors(resources) -> tuple[dict[str, int], dict[str, float], list[float], list]:
    """Per zone: the floor (minReplicaCount) and its capacity; the floor loads stated; the ScaledObjects."""
    serving = {(w.namespace, w.name): w for w in serving_workloads(resources) if w.kind == "Deployment"}
    groups = node_groups(resources)
    floor: dict[str, int] = defaultdict(int)
    capacity: dict[str, float] = defaultdict(float)
    loads, scaled = [], []
    for r in resources:
        if r.resource_type != SCALED_OBJECT:
            continue
        w = serving.get((namespace(r.props), get(r.props, "spec", "scaleTargetRef", "name")))
        if w is None:
            continue                  # not a serving workload's
        zones = allowed_zones(w, groups) or ()
        zone = w.annotations.get(ANNOTATION_ZONE) or (zones[0] if len(zones) == 1 else w.name)
        n = int(number(get(r.props, "spec", "minReplicaCount")) or KEDA_DEFAULT_MIN_REPLICAS)
        floor[zone] += n
        capacity[zone] += n * (number(w.annotations.get(ANNOTATION_REPLICA_CAPACITY_QPS)) or 0.0)
        load = number(get(r.props, "metadata", "annotations", ANNOTATION_FLOOR_QPS))
        if load is not None:
            loads.append(load)
        scaled.append(r)
    return floor, capacity, loads, scaled


@stack_rule(
    RULES, "autoscaling-floor-n-plus-one-by-zone",
    description="The autoscaled serving fleet's floor (the ScaledObjects' minReplicaCount) survives losing the "
                "zone that holds the most of it: the replicas left carry the trough's load (llm-serving.io/"
                "floor-qps) at the SLOs, and at least one replica is left.",
    severity=Severity.CRITICAL,
    remediation="Keep the plan's autoscaling floor (N+1 by zone at the trough, `llmserve size --stack <s>`); "
                "a floor of one replica in one zone only does not survive that zone's loss.",
    tags=("failure-domains", "autoscaling"))
def autoscaling_floor_n_plus_one(args, report_violation):
    floor, capacity, loads, scaled = _floors(args.resources)
    if not scaled:
        return
    worst = max(sorted(capacity), key=lambda z: (capacity[z], floor[z]))
    left, left_replicas = sum(capacity.values()) - capacity[worst], sum(floor.values()) - floor[worst]
    load = max(loads, default=None)
    if left_replicas < 1:
        report_violation(f"the autoscaling floor ({', '.join(f'{z}: {floor[z]}' for z in sorted(floor))}) leaves "
                         f"no replica after losing {worst}: scaled down, the fleet does not survive a zone loss",
                         scaled[0].urn)
    elif load is not None and left + 1e-9 < load:
        report_violation(f"losing {worst} at the autoscaling floor leaves {plural(left_replicas, 'replica')} carrying "
                         f"{fmt(left)} QPS, short of the trough's {fmt(load)} QPS the floor is sized for",
                         scaled[0].urn)
