"""Autoscaling as deployment data: one KEDA ScaledObject per zone's serving Deployment and each GPU
node group's bounds, from the plan's `AutoscalePolicy` (sizing.roles) when `serving.autoscaling.enabled`.

Pure Python (no Pulumi): components/serving.py renders the ScaledObjects, components/gpu_node_pool.py
the node groups' scaling bounds, components/cluster_autoscaler.py the node autoscaler.

How the policy becomes a ScaledObject (docs/autoscaling-deploy.md):
- the trigger is the policy's query, a fleet total (what the whole fleet must carry), through KEDA's
  prometheus scaler with `metricType: AverageValue`: the HPA asks ceil(value / threshold) replicas.
  Each zone's threshold is the policy's `zone_threshold`, `target_per_replica x (zones - 1)` less the
  HPA's 10% tolerance: every zone alone carries its share of the load after any other zone is lost,
  which is N+1 by zone (one zone: the target itself; the floor keeps the node's +1). A second
  trigger, the policy's `lead_query`, asks for the rate predicted one cold start ahead;
- `minReplicaCount` is the zone's floor (N+1 by zone at the trough), `maxReplicaCount` its ceiling;
  the Deployments and node groups are created at the plan's peak fleet (what every other guard
  judges) and scale down from there;
- scale-down waits `scale_down_stabilization_s` (the HPA's behavior.scaleDown.stabilizationWindowSeconds)
  and then removes one pod per drain grace period, so each replica drains (deployment.drain) before
  the next goes; scale-up takes effect at once.
A replica that spans nodes (a LeaderWorkerSet per group) is refused: see `autoscaling_problems`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from conventions import ANNOTATION_FLOOR_QPS, ANNOTATION_ZONE, PROJECT
from settings import StackSettings
from sizing.planner import Plan

from .drain import DrainTiming

FALLBACK_FAILURES = 3
POLLING_INTERVAL_S = 15          # KEDA's default is 30 s; a replica costs minutes, the query seconds


@dataclass(frozen=True)
class ZoneScaling:
    """One zone's ScaledObject."""
    zone: str
    target: str                  # the Deployment it scales
    floor: int
    ceiling: int
    metric: str                  # what the query measures (words, from the policy)
    query: str
    threshold: float             # per replica: the policy's zone threshold, (zones - 1) x its target less the HPA tolerance
    scale_down_stabilization_s: int
    scale_down_period_s: int     # one pod per period: a replica's drain grace
    floor_qps: float | None = None   # the trough's load the floor carries after losing a zone (the policy's)
    lead_query: str = ""         # the same rate lead_s ahead (the policy's): scale-up leads the curve by the cold start

    @property
    def annotations(self) -> dict[str, str]:
        """What the autoscaling-floor policy reads from the ScaledObject alone."""
        return {ANNOTATION_ZONE: self.zone,
                **({ANNOTATION_FLOOR_QPS: str(round(self.floor_qps, 4))} if self.floor_qps is not None else {})}


@dataclass(frozen=True)
class NodeBounds:
    """A GPU node group's scaling bounds: the cluster autoscaler moves its desired size between them."""
    min_nodes: int
    max_nodes: int


def autoscaling_problems(plan: Plan, settings: StackSettings) -> list[str]:
    """`serving.autoscaling.enabled` where the program could not act on it, refused with the reason."""
    if not settings.serving.autoscaling.enabled:
        return []
    key = f"{PROJECT}:serving.autoscaling.enabled"
    if plan.autoscale is None:
        return [f"{key}: the plan has no autoscaling policy (a load over time, workload.traffic, gives it); "
                "give the traffic or set enabled: false"]
    if plan.nodes_per_replica > 1:
        # A LeaderWorkerSet has the scale subresource (.spec.replicas, CRD leaderworkerset.x-k8s.io v0.10.0),
        # so KEDA could scale whole groups, but this program pins each group to the nodes the plan placed it
        # on, one set per group (replicas: 1): scaling a set would add groups on nodes no plan placed.
        return [f"{key}: the plan's replicas are groups of {plan.nodes_per_replica} nodes, one LeaderWorkerSet each "
                "pinned to its own nodes; the program scales no whole groups, so it would scale nothing; "
                "set enabled: false"]
    if settings.serving.burstScaling:
        return [f"{key}: serving.burstScaling scales the same Deployments with its own ScaledObject, and KEDA "
                "takes one ScaledObject per workload; set burstScaling: false (autoscaling bounds the fleet itself)"]
    problems = []
    for zone, ceiling in plan.autoscale.ceiling_by_zone.items():
        slots = sum(p.nodes for p in plan.request.pools if p.zone == zone) * (plan.instance.gpus // plan.tp)
        floor = plan.autoscale.floor_by_zone.get(zone, 0)
        if ceiling > slots:
            problems.append(f"{key}: the policy's ceiling in {zone} is {ceiling} replicas, more than the {slots} its GPU "
                            "pools hold; give the zone's pools more nodes (the node groups never grow past them)")
        if floor > ceiling:
            problems.append(f"{key}: the policy's floor in {zone} ({floor}) is above its ceiling ({ceiling})")
    return problems


def zone_scalings(plan: Plan, settings: StackSettings, drain: DrainTiming) -> tuple[ZoneScaling, ...]:
    """One per zone with a ceiling, in the plan's zone order; () when autoscaling is off."""
    policy = plan.autoscale
    if not settings.serving.autoscaling.enabled or policy is None:
        return ()
    zones = [z for z in plan.replicas_by_zone if policy.ceiling_by_zone.get(z, 0) > 0]
    share = max(1, len(zones) - 1)
    return tuple(ZoneScaling(
        zone=z, target=f"vllm-{z}", floor=policy.floor_by_zone.get(z, 0), ceiling=policy.ceiling_by_zone[z],
        metric=policy.metric, query=policy.query, threshold=policy.zone_threshold or policy.target_per_replica * share,
        scale_down_stabilization_s=math.ceil(policy.scale_down_stabilization_s),
        scale_down_period_s=drain.grace_period_s, floor_qps=policy.floor_qps, lead_query=policy.lead_query)
        for z in zones)


def scaled_object_spec(zs: ZoneScaling, prometheus_url: str) -> dict:
    """The ScaledObject's spec (keda.sh/v1alpha1, KEDA 2.20.2: crds/keda/keda.sh_scaledobjects.yaml)."""
    return {
        "scaleTargetRef": {"name": zs.target},
        "pollingInterval": POLLING_INTERVAL_S,
        "minReplicaCount": zs.floor, "maxReplicaCount": zs.ceiling,
        # The HPA named as its Deployment: the autoscaling alerts find each zone's by that name.
        "advanced": {"horizontalPodAutoscalerConfig": {"name": zs.target, "behavior": {
            "scaleDown": {"stabilizationWindowSeconds": zs.scale_down_stabilization_s,
                          "policies": [{"type": "Pods", "value": 1, "periodSeconds": zs.scale_down_period_s}]},
            "scaleUp": {"stabilizationWindowSeconds": 0}}}},
        # The query failing (Prometheus down) 3 polls in a row: hold the ceiling, never the floor (KEDA's
        # fallback; it takes AverageValue triggers only).
        "fallback": {"failureThreshold": FALLBACK_FAILURES, "replicas": zs.ceiling},
        # The HPA takes the largest of its metrics: the rate now, and (when the policy has one) the rate
        # predicted lead_s ahead, so a replica starts a cold start before the load reaches it.
        "triggers": [{"type": "prometheus", "metricType": "AverageValue",
                      "metadata": {"serverAddress": prometheus_url, "query": query,
                                   "threshold": f"{zs.threshold:.6g}"}}
                     for query in (zs.query, zs.lead_query) if query],
    }


def node_bounds(plan: Plan, settings: StackSettings) -> tuple[NodeBounds | None, ...]:
    """Per pool (the plan's order): from the nodes the zone's floor needs to those its ceiling needs
    (at most the pool's nodes); None where the pool does not scale: autoscaling off, or capacity held
    by a Capacity Block or an On-Demand Capacity Reservation (paid whether a node runs or not, and a
    block launches no instance beyond its own count: docs/autoscaling-deploy.md). Held nodes always
    run, so they carry a zone's floor and ceiling first."""
    policy = plan.autoscale
    if not settings.serving.autoscaling.enabled or policy is None:
        return tuple(None for _ in plan.request.pools)
    pools = tuple(zip(plan.request.pools, settings.gpuPools))
    held = [ps.capacityBlock is not None or ps.capacityReservationId is not None for _, ps in pools]
    floor = _nodes_for(policy.floor_by_zone, pools, held, plan.instance.gpus // plan.tp)
    ceiling = _nodes_for(policy.ceiling_by_zone, pools, held, plan.instance.gpus // plan.tp)
    return tuple(None if h else NodeBounds(min_nodes=lo, max_nodes=max(lo, hi, 1))
                 for h, lo, hi in zip(held, floor, ceiling))


def _nodes_for(replicas_by_zone: dict[str, int], pools, held: list[bool], per_node: int) -> list[int]:
    """Nodes each pool needs to hold `replicas_by_zone`, held pools' nodes counted first."""
    left = dict(replicas_by_zone)
    for (pool, _), is_held in zip(pools, held):
        if is_held:
            left[pool.zone] = max(0, left.get(pool.zone, 0) - pool.nodes * per_node)
    out = []
    for (pool, _), is_held in zip(pools, held):
        need = pool.nodes if is_held else min(pool.nodes, math.ceil(left.get(pool.zone, 0) / per_node))
        if not is_held:
            left[pool.zone] = max(0, left.get(pool.zone, 0) - need * per_node)
        out.append(need)
    return out
