"""The autoscaling policy derived from the plan: a floor that is N+1 by zone at the trough, a
ceiling that is the peak's N+1 fleet within the node pools, and scale-ups that lead the curve by
the cold start.

The metric is the one the plan sizes replicas on: requests per second, against the capacity of
one replica at the SLO statistic (`capacity_per_replica.qps`, the figure the N+1 count divides
the load by). Each zone's Deployment has its own KEDA 2.20.2 ScaledObject (components/serving.py
makes one Deployment per zone) whose trigger reads the FLEET's request rate with an
`AverageValue` threshold of (zones - 1) x the capacity per replica (less the HPA's 10% tolerance,
below): the HPA sets each zone to
ceil(fleet rate / threshold) replicas, so the zones left after losing any one carry the whole
load (N+1 by zone at every load, not only at the floor). With one zone the threshold is the
capacity itself and only the floor is N+1 by node.

Two triggers per ScaledObject, the HPA taking the larger proposal ("the HorizontalPodAutoscaler
will evaluate each metric, and propose a new scale based on that metric. The largest of the
proposed scales will be used", Kubernetes docs, HPA walkthrough, "Autoscaling on multiple
metrics"): the rate now, and the rate `lead_s` ahead by `predict_linear` over the last 10 min,
so a rising curve is met by replicas that started a cold start earlier. Scale-down waits for the
HPA's stabilization window (`behavior.scaleDown.stabilizationWindowSeconds`, default 300 s, HPA
docs "Stabilization window"), set here to at least the cold start plus the longest request a
replica drains: capacity goes only once the load has stayed low for longer than it takes to drain
a replica and bring one back.

A replica over several nodes is a LeaderWorkerSet group: its `scale` subresource counts groups
(`specReplicasPath: .spec.replicas`, kubernetes-sigs/lws v0.10.0 config/crd/bases/
leaderworkerset.x-k8s.io_leaderworkersets.yaml, lines 17907-17911), so groups scale whole.
"""
from __future__ import annotations

import math
from dataclasses import replace

from conventions import SERVING_NAMESPACE

from .coldstart import plan_cold_start
from .load_curve import LoadCurve
from .placement import PlanError, zone_slots
from .roles import AutoscalePolicy

# The HPA's default scale-down stabilization window ("For scale down: 300", the behavior schema KEDA
# 2.20.2's ScaledObject CRD embeds: kedacore/keda config/crd/bases/keda.sh_scaledobjects.yaml, lines 135-142).
HPA_SCALE_DOWN_STABILIZATION_S = 300
# "pollingInterval: 30 # Optional. Default: 30 seconds" (https://keda.sh/docs/latest/reference/scaledobject-spec/)
KEDA_POLLING_INTERVAL_S = 30
RATE_WINDOW = "2m"                     # the rate() window: 4 scrapes at the 30 s interval
PREDICT_WINDOW, PREDICT_STEP = "10m", "30s"
NODE_SCALE_DOWN_S = 600                # cluster-autoscaler --scale-down-unneeded-time default (10m)
# The HPA acts only when the metric is more than 10% off its target (kube-controller-manager
# --horizontal-pod-autoscaler-tolerance, default 0.1): the threshold is set that much below the
# capacity, so a zone scales up by the time its replicas would carry their capacity, not 10% past it.
HPA_TOLERANCE = 0.1
REDUNDANCY = {"zone": "N+1 by zone", "node": "N+1 by node", "none": "no redundancy"}
METRIC = "requests per second over the fleet (vllm:request_success_total), per replica of the zone"


def request_rate_query(namespace: str = SERVING_NAMESPACE) -> str:
    """The fleet's served requests per second (vLLM 0.29.0's counter, every vLLM pod of the namespace)."""
    return f'sum(rate(vllm:request_success_total{{namespace="{namespace}",job="vllm"}}[{RATE_WINDOW}]))'


def lead_query(lead_s: float, namespace: str = SERVING_NAMESPACE) -> str:
    """The same rate `lead_s` ahead: predict_linear over a 10-minute subquery of it."""
    return f"predict_linear(({request_rate_query(namespace)})[{PREDICT_WINDOW}:{PREDICT_STEP}], {math.ceil(lead_s)})"


def longest_request_s(plan) -> float:
    """The longest request a replica drains at the SLOs (deployment.drain.longest_request_s)."""
    w = plan.request.workload
    return w.ttft_slo_s + plan.engine_args.max_model_len * w.tpot_slo_s


def nodes_for(replicas: int, tp: int, gpus_per_node: int, nodes_per_replica: int) -> int:
    """Nodes a zone needs up for this many replicas."""
    if nodes_per_replica > 1:
        return replicas * nodes_per_replica
    return math.ceil(replicas / max(1, gpus_per_node // tp))


def with_autoscale(p, req, plan_aggregated):
    """`p` (planned at the peak) with the policy between the traffic's trough and its peak."""
    curve = req.traffic
    if not isinstance(curve, LoadCurve):
        raise PlanError("expected a load curve (sizing.load_curve.LoadCurve)", "traffic")
    w = req.workload
    if w.is_closed_loop:
        raise PlanError("a load over time is a request rate: give workload.qps (or leave it to the curve's peak), "
                        "not concurrency", "traffic")
    if w.qps < curve.peak_qps * (1 - 1e-9):
        raise PlanError(f"{w.qps:g} QPS is below the traffic's peak of {curve.peak_qps:g}: the plan is the fleet "
                        "for the peak; raise it or leave it unset", "workload.qps")
    if p.serving_pools:
        raise PlanError("autoscaling a disaggregated plan is not planned by this version: its prefill and decode "
                        "pools scale on different figures", "traffic")
    trough = plan_aggregated(replace(req, workload=replace(w, qps=curve.trough_qps), tp=p.tp, layout=p.layout,
                                     nodes_per_replica=p.nodes_per_replica, replicas=None, traffic=None))
    return replace(p, autoscale=policy_for(p, trough, curve))


def policy_for(p, trough, curve: LoadCurve) -> AutoscalePolicy:
    """The policy: floor from the trough's plan, ceiling from the peak's, lead from the cold start."""
    zones = sorted(p.replicas_by_zone)
    gpus = p.instance.gpus
    cap = p.capacity_per_replica.qps
    threshold = (cap * (len(zones) - 1) if len(zones) > 1 else cap) / (1 + HPA_TOLERANCE)
    slots = zone_slots(p.request.pools, gpus // p.tp, p.nodes_per_replica)
    floor = {z: trough.replicas_by_zone.get(z, 0) for z in zones}
    peak_need = math.ceil(curve.peak_qps / threshold - 1e-9)
    ceiling = {z: min(slots.get(z, 0), max(p.replicas_by_zone[z], peak_need, floor[z])) for z in zones}
    nodes = {z: (nodes_for(floor[z], p.tp, gpus, p.nodes_per_replica), nodes_for(ceiling[z], p.tp, gpus, p.nodes_per_replica))
             for z in zones}
    cold = plan_cold_start(p)
    adds_nodes = any(hi > lo for lo, hi in nodes.values())
    lead = cold.replica_on_new_node_s if adds_nodes else cold.replica_on_warm_node_s
    notes = [f"floor: the plan for the trough ({REDUNDANCY[trough.redundancy]}), {curve.trough_qps:g} QPS "
             f"({trough.replicas} replicas {dict(sorted(trough.replicas_by_zone.items()))})",
             f"ceiling: the peak's plan, {curve.peak_qps:g} QPS ({dict(sorted(ceiling.items()))}), within the pools' "
             f"{dict(sorted(slots.items()))} replica slots",
             "scale-ups " + ("add nodes: they lead by a replica's cold start on a new node" if adds_nodes else
                             "fit the floor's nodes: they lead by a replica's cold start on a warm node")]
    if any(ceiling[z] < peak_need for z in zones):
        notes.append(f"the pools hold fewer than the {peak_need} replicas per zone that keep N+1 by zone at the peak")
    if p.nodes_per_replica > 1:
        notes.append(f"each replica is a group of {p.nodes_per_replica} nodes: KEDA scales LeaderWorkerSet groups "
                     "whole through its scale subresource, which needs one LeaderWorkerSet per zone counting its "
                     "groups (the deployment makes one per replica)")
    return AutoscalePolicy(
        metric=METRIC, query=request_rate_query(), target_per_replica=round(cap, 4),
        floor_by_zone=floor, ceiling_by_zone=ceiling, lead_s=lead,
        scale_down_stabilization_s=float(max(HPA_SCALE_DOWN_STABILIZATION_S, math.ceil(lead + longest_request_s(p)))),
        cold_start=cold, notes=tuple(notes),
        lead_query=lead_query(lead), zone_threshold=round(threshold, 4), floor_qps=curve.trough_qps,
        peak_qps=curve.peak_qps, peak_at_s=curve.peak_at_s, trough_qps=curve.trough_qps,
        trough_at_s=curve.trough_at_s, trough_replicas=trough.replicas, floor_redundancy=trough.redundancy,
        nodes_floor_by_zone={z: lo for z, (lo, _) in nodes.items()},
        nodes_ceiling_by_zone={z: hi for z, (_, hi) in nodes.items()},
        scales="groups" if p.nodes_per_replica > 1 else "replicas",
        polling_interval_s=KEDA_POLLING_INTERVAL_S, node_scale_down_s=NODE_SCALE_DOWN_S)


def autoscale_to_dict(plan) -> dict:
    """The plan's `autoscale` JSON: the peak's and the trough's fleets, the policy, the cold start."""
    a = plan.autoscale
    gpus = plan.gpus_per_replica
    cold = a.cold_start
    return {
        "peak": {"qps": a.peak_qps, "at_s": a.peak_at_s, "replicas": sum(a.ceiling_by_zone.values()),
                 "replicas_by_zone": dict(a.ceiling_by_zone), "gpus": gpus * sum(a.ceiling_by_zone.values()),
                 "nodes_by_zone": dict(a.nodes_ceiling_by_zone)},
        "trough": {"qps": a.trough_qps, "at_s": a.trough_at_s, "replicas": a.trough_replicas,
                   "redundancy": a.floor_redundancy,
                   "replicas_by_zone": dict(a.floor_by_zone), "gpus": gpus * a.trough_replicas,
                   "nodes_by_zone": dict(a.nodes_floor_by_zone)},
        "metric": a.metric, "query": a.query, "lead_query": a.lead_query,
        "target_per_replica": a.target_per_replica, "zone_threshold": a.zone_threshold,
        "floor_by_zone": dict(a.floor_by_zone), "ceiling_by_zone": dict(a.ceiling_by_zone), "scales": a.scales,
        "lead_s": a.lead_s, "scale_down_stabilization_s": a.scale_down_stabilization_s,
        "polling_interval_s": a.polling_interval_s, "node_scale_down_s": a.node_scale_down_s,
        "cold_start": None if cold is None else {
            "replica_on_new_node_s": round(cold.replica_on_new_node_s, 1),
            "replica_on_warm_node_s": round(cold.replica_on_warm_node_s, 1),
            "terms": [{"name": t.name, "seconds": t.seconds, "source": t.source} for t in cold.terms]},
        "notes": list(a.notes),
    }


def autoscale_line(d: dict) -> str | None:
    """`size`'s one line on the policy, from the plan's JSON (None without traffic)."""
    a = d.get("autoscale")
    if a is None:
        return None
    peak, trough = a["peak"], a["trough"]
    return (f"Autoscaling: trough {trough['qps']:g} QPS -> {trough['replicas']} replicas {trough['replicas_by_zone']} "
            f"(the floor, {REDUNDANCY[trough['redundancy']]}); peak {peak['qps']:g} QPS -> {peak['replicas']} {peak['replicas_by_zone']} "
            f"(the ceiling); a replica starts in {a['cold_start']['replica_on_warm_node_s']:g} s on a warm node, "
            f"{a['cold_start']['replica_on_new_node_s']:g} s on a new one; scale-ups lead by {a['lead_s']:g} s, "
            f"scale-downs wait {a['scale_down_stabilization_s']:g} s.")
