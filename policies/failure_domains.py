"""Failure-domain rules: the layout survives losing a zone, or a node, whoever edits the config.

They judge the resources the program produced (node groups and their subnets, the serving
workloads with the plan's annotations, disruption budgets, the inference pool), never the stack
config, so a bug in the program is caught as surely as a bad config.
"""
from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

from pulumi_policy import Severity

from conventions import (ANNOTATION_REPLICA_CAPACITY_QPS, ANNOTATION_SERVING_ROLE, ANNOTATION_TARGET_QPS, ANNOTATION_TENSOR_PARALLEL,
                         RULE_GROUP_IN_ONE_ZONE, RULE_ZONE_HOLDS_WHOLE_GROUPS)
from .resources import (
    INFERENCE_POOL, PDB, SERVICE, WORKLOADS,
    NodeGroupView, WorkloadView, allowed_zones, as_dict, fmt, get, landing, namespace, node_groups,
    number, plural, selector_matches, serving_workloads, workload_view, worst_zone_share,
)
from .rules import Rule, stack_rule

RULES: list[Rule] = []

# Without node groups in the stack the zones are unknown; a DoNotSchedule zone spread of two or
# more replicas is then taken at its word (it spreads over every zone that has nodes).
UNKNOWN_SPREAD = ("(spread zone 1)", "(spread zone 2)")


def _gpu_groups(resources) -> list[NodeGroupView]:
    return [g for g in node_groups(resources) if g.is_gpu]


@stack_rule(
    RULES, "gpu-capacity-spans-zones",
    description="GPU node groups span at least two availability zones (node group -> subnets -> zone).",
    severity=Severity.CRITICAL,
    remediation="Add a GPU pool in a second zone (llm-serving:gpuPools, one entry per zone); a second "
                "pool or more nodes in the same zone do not survive that zone's loss.",
    tags=("failure-domains",))
def gpu_capacity_spans_zones(args, report_violation):
    groups = _gpu_groups(args.resources)
    if not groups:
        return
    for g in groups:
        if not g.zones:
            report_violation(f"GPU node group {g.name} has no subnet with a known availability zone", g.urn)
    zones = sorted({z for g in groups for z in g.zones})
    if len(zones) == 1:
        nodes = sum(g.nodes for g in groups)
        report_violation(f"all GPU capacity ({plural(len(groups), 'node group')}, {plural(nodes, 'node')}) "
                         f"sits in one zone, {zones[0]}; losing it stops serving")


@stack_rule(
    RULES, "serving-replicas-spread-across-zones",
    description="Serving replicas number at least two and are spread across zones (per-zone workloads, or a "
                "topology spread on topology.kubernetes.io/zone with DoNotSchedule).",
    severity=Severity.CRITICAL,
    remediation="Keep llm-serving:replicas at 'auto' (the planner places N+1 by zone), or give the serving "
                "Deployment a topologySpreadConstraint on topology.kubernetes.io/zone with "
                "whenUnsatisfiable: DoNotSchedule.",
    tags=("failure-domains",))
def serving_replicas_spread(args, report_violation):
    groups = node_groups(args.resources)
    serving = [w for w in serving_workloads(args.resources) if w.replicas > 0]
    if not serving:
        if _gpu_groups(args.resources):
            report_violation("the stack has GPU node groups but no serving workload (a Deployment labelled "
                             "llm-serving.io/role: serving) that the policies can judge")
        return
    total = sum(w.replicas for w in serving)
    if total < 2:
        report_violation(f"serving runs {plural(total, 'replica')}; at least 2 are needed so that losing a node or a zone "
                         "leaves one serving")
    zones: set[str] = set()
    placed = 0                           # replicas whose zone is known, or that are spread
    for w in serving:
        allowed = allowed_zones(w, groups)
        if allowed is not None and len(allowed) == 0:
            continue                     # tp-group-fits-on-node reports pods that match no node group
        if allowed is not None and len(allowed) == 1:
            zones.update(allowed)
            placed += w.replicas
        elif w.zone_spread() is not None or w.zone_anti_affinity():
            if w.replicas >= 2:
                zones.update(allowed or UNKNOWN_SPREAD)
                placed += w.replicas
        elif w.replicas >= 2:
            report_violation(f"{w.kind} {w.name} is not pinned to one zone and has no topology spread on "
                             f"topology.kubernetes.io/zone with DoNotSchedule: the scheduler may put all "
                             f"{w.replicas} replicas in one zone", w.urn)
    if total >= 2 and len(zones) == 1:
        report_violation(f"all {plural(placed, 'serving replica')} run in {zones.pop()}; spread them over at "
                         "least two zones")


def _aggregated(w: WorkloadView) -> bool:
    """Not a disaggregated plan's pool: each pool carries the whole load, pool-capacity-after-zone-loss judges it."""
    return w.annotations.get(ANNOTATION_SERVING_ROLE, "aggregated") not in ("prefill", "decode")


def _capacity_annotations(w: WorkloadView) -> tuple[float | None, float | None]:
    return number(w.annotations.get(ANNOTATION_TARGET_QPS)), number(w.annotations.get(ANNOTATION_REPLICA_CAPACITY_QPS))


def _slots(w: WorkloadView, groups, zone: str) -> int:
    """Replicas of `w` that the GPU nodes of `zone` can hold (a TP group never spans nodes; a
    group of `group_size` pods takes that many nodes of one node group)."""
    if w.gpus <= 0:
        return 0
    if w.group_size > 1:
        return sum(ng.nodes // w.group_size for ng, z in landing(w, groups)
                   if z == zone and (ng.gpus_per_node or 0) >= w.gpus)
    return sum(ng.nodes * ((ng.gpus_per_node or 0) // w.gpus) for ng, z in landing(w, groups) if z == zone)


@stack_rule(
    RULES, "capacity-after-zone-loss",
    description="After losing the zone that holds the most serving capacity, the replicas left carry the target "
                "QPS at the SLOs (plan annotations on the workloads, node groups' zones).",
    severity=Severity.CRITICAL,
    remediation="Let the planner size the stack (llm-serving:replicas: auto) and give every zone enough GPU "
                "nodes for its replicas; run `llmserve size --stack <s>` to see the N+1 plan.",
    tags=("failure-domains", "capacity"))
def capacity_after_zone_loss(args, report_violation):
    groups = node_groups(args.resources)
    serving = [w for w in serving_workloads(args.resources) if w.replicas > 0 and _aggregated(w)]
    if not serving:
        return
    target = 0.0
    per_replica: dict[str, float] = {}
    for w in serving:
        t, c = _capacity_annotations(w)
        if t is None or c is None:
            missing = " and ".join(k for k, v in ((ANNOTATION_TARGET_QPS, t), (ANNOTATION_REPLICA_CAPACITY_QPS, c)) if v is None)
            report_violation(f"{w.kind} {w.name} has no {missing} annotation; the capacity after a zone loss "
                             "cannot be checked", w.urn)
            return
        target = max(target, t)
        per_replica[w.urn] = c

    # Replicas that can run, per workload and zone; and the most a single zone's loss takes away.
    running: dict[str, dict[str, int]] = {}
    lost_if: dict[str, float] = defaultdict(float)
    short: list[str] = []
    pinned_by_zone: dict[str, list[WorkloadView]] = defaultdict(list)
    for w in serving:
        zones = allowed_zones(w, groups)
        if zones is None:
            zones = ("(unknown zone)",)
        if not zones:
            short.append(f"{w.name}: its pods match no node group")
            continue
        if len(zones) == 1:
            pinned_by_zone[zones[0]].append(w)
            continue
        spread = w.zone_spread()
        share = (worst_zone_share(w.replicas, len(zones), int(number(get(spread, "maxSkew")) or 1))
                 if spread else w.replicas)
        for z in zones:
            lost_if[z] += share * per_replica[w.urn]
        running[w.urn] = {"*": w.replicas}
    for zone, pinned in pinned_by_zone.items():
        for w in pinned:
            fits = min(w.replicas, _slots(w, groups, zone)) if groups else w.replicas
            if fits < w.replicas:
                short.append(f"{w.name}: only {fits} of {w.replicas} replicas fit on the GPU nodes of {zone}")
            running[w.urn] = {zone: fits}
            lost_if[zone] += fits * per_replica[w.urn]
    capacity = sum(n * per_replica[urn] for urn, by_zone in running.items() for n in by_zone.values())
    replicas = sum(n for by_zone in running.values() for n in by_zone.values())
    detail = f"; {'; '.join(short)}" if short else ""
    if not lost_if:
        if capacity + 1e-9 < target:
            report_violation(f"no serving replica can run: {fmt(capacity)} QPS of serving capacity against the "
                             f"{fmt(target)} QPS target{detail}")
        return
    zone = max(sorted(lost_if), key=lambda z: lost_if[z])
    left = capacity - lost_if[zone]
    if left + 1e-9 < target:
        per = sorted({fmt(c) for c in per_replica.values()})
        report_violation(
            f"losing {zone} leaves {fmt(left)} of {fmt(capacity)} QPS of serving capacity at the SLOs "
            f"({plural(replicas, 'replica')} of {'/'.join(per)} QPS), short of the {fmt(target)} QPS target{detail}")


def _disruptions_allowed(spec, covered: int) -> int:
    """What the disruption controller computes for `covered` healthy pods (percentages round up)."""
    def scaled(value) -> int:
        if isinstance(value, str) and value.endswith("%"):
            return math.ceil(covered * float(value[:-1]) / 100)
        return int(number(value) or 0)

    max_unavailable, min_available = get(spec, "maxUnavailable"), get(spec, "minAvailable")
    if max_unavailable is not None:
        return min(covered, scaled(max_unavailable))
    if min_available is None:
        min_available = 1
    return max(0, covered - scaled(min_available))


@stack_rule(
    RULES, "pdb-covers-serving",
    description="A PodDisruptionBudget covers the serving replicas and still lets a node drain.",
    severity=Severity.HIGH,
    remediation="Give the serving pods one PodDisruptionBudget across zones with maxUnavailable: 1 (the "
                "serving component derives it from the plan).",
    tags=("failure-domains",))
def pdb_covers_serving(args, report_violation):
    serving = [w for w in serving_workloads(args.resources) if w.replicas > 0]
    pdbs = [r for r in args.resources if r.resource_type == PDB]
    covered_by: dict[str, list[WorkloadView]] = defaultdict(list)
    for w in serving:
        covering = [p for p in pdbs if namespace(p.props) == w.namespace
                    and selector_matches(get(p.props, "spec", "selector"), w.pod_labels)]
        if not covering:
            report_violation(f"no PodDisruptionBudget selects the pods of {w.kind} {w.name}; a node drain or "
                             "cluster upgrade may evict every replica at once", w.urn)
        for p in covering:
            covered_by[p.urn].append(w)
    for p in pdbs:
        if p.urn not in covered_by:
            continue
        # Every pod the budget selects counts, serving or not.
        selected = [workload_view(r) for r in args.resources if r.resource_type in WORKLOADS]
        selected = [w for w in selected if w.namespace == namespace(p.props)
                    and selector_matches(get(p.props, "spec", "selector"), w.pod_labels)]
        pods = sum(w.pods for w in selected)
        allowed = _disruptions_allowed(get(p.props, "spec", default={}), pods)
        name = get(p.props, "metadata", "name", default=p.name)
        if allowed < 1:
            report_violation(f"PodDisruptionBudget {name} allows no disruption of the {plural(pods, 'pod')} it covers: "
                             "draining a node would block forever", p.urn)
        elif allowed >= pods >= 2:         # one pod: serving-replicas-spread-across-zones says why
            report_violation(f"PodDisruptionBudget {name} lets all {plural(pods, 'pod')} it covers be evicted at once; "
                             "it protects nothing", p.urn)


@stack_rule(
    RULES, "tp-group-fits-on-node",
    description="A serving pod's tensor-parallel group (its GPU request) fits on one node of the pool it runs "
                "on.",
    severity=Severity.HIGH,
    remediation="Use a tensor-parallel degree no larger than the GPUs of one node (llm-serving:model."
                "tensorParallel), or a larger instance type; make sure the serving pods select and tolerate "
                "the GPU node groups.",
    tags=("failure-domains", "capacity"))
def tp_group_fits_on_node(args, report_violation):
    groups = _gpu_groups(args.resources)
    for w in serving_workloads(args.resources):
        if w.gpus <= 0:
            report_violation(f"{w.kind} {w.name} requests no {'nvidia.com/gpu'}; vLLM would not get a GPU", w.urn)
            continue
        tp = number(w.annotations.get(ANNOTATION_TENSOR_PARALLEL))
        if tp is not None and int(tp) != w.gpus:
            report_violation(f"{w.kind} {w.name} is annotated tensor-parallel {int(tp)} but requests {w.gpus} "
                             "GPUs per pod", w.urn)
        if not groups:
            continue
        targets = {ng.name: ng for ng, _ in landing(w, groups)}
        if not targets:
            report_violation(f"the pods of {w.kind} {w.name} match no GPU node group (nodeSelector, affinity or "
                             "tolerations); they would stay Pending", w.urn)
            continue
        for ng in targets.values():
            if ng.gpus_per_node is None:
                report_violation(f"GPU node group {ng.name} has no llm-serving.io/gpus-per-node tag; the fit of "
                                 f"{w.name}'s {w.gpus}-GPU pods cannot be checked", ng.urn)
            elif w.gpus > ng.gpus_per_node:
                report_violation(f"{w.kind} {w.name} requests {w.gpus} GPUs per pod but a node of {ng.name} has "
                                 f"{ng.gpus_per_node}; a tensor-parallel group cannot span nodes", w.urn)


def _picker_workloads(pool, resources) -> list[WorkloadView]:
    ns = namespace(pool.props)
    ref = get(pool.props, "spec", "endpointPickerRef", "name")
    services = [r for r in resources if r.resource_type == SERVICE and namespace(r.props) == ns
                and get(r.props, "metadata", "name", default=r.name) == ref]
    views = [workload_view(r) for r in resources if r.resource_type in WORKLOADS]
    views = [w for w in views if w.namespace == ns]
    for svc in services:
        selector = as_dict(get(svc.props, "spec", "selector", default={}))
        if selector:
            return [w for w in views if all(w.pod_labels.get(k) == v for k, v in selector.items())]
    return [w for w in views if w.name == ref]


@stack_rule(
    RULES, "endpoint-picker-redundant",
    description="The inference endpoint picker, when used, runs at least two replicas across zones, and the "
                "pool declares what the proxy does: FailClose (Envoy AI Gateway v1.0.0 builds the picker's "
                "ext_proc filter with failure_mode_allow: false and never reads failureMode), so a picker "
                "outage is a gateway outage.",
    severity=Severity.HIGH,
    remediation="Set the InferencePool's endpointPickerRef.failureMode to FailClose (FailOpen is not honoured "
                "by AI Gateway v1.0.0) and run the picker with 2 replicas and a topology spread on "
                "topology.kubernetes.io/zone (DoNotSchedule).",
    tags=("failure-domains", "gateway"))
def endpoint_picker_redundant(args, report_violation):
    groups = node_groups(args.resources)
    for pool in (r for r in args.resources if r.resource_type == INFERENCE_POOL):
        name = get(pool.props, "metadata", "name", default=pool.name)
        ref = get(pool.props, "spec", "endpointPickerRef", default={})
        mode = get(ref, "failureMode", default="FailClose")
        if mode != "FailClose":
            report_violation(f"InferencePool {name} declares failureMode {mode}, which Envoy AI Gateway v1.0.0 does "
                             "not honour (its ext_proc filter fails closed); declare FailClose and keep the "
                             "picker redundant", pool.urn)
        pickers = _picker_workloads(pool, args.resources)
        if not pickers:
            report_violation(f"the endpoint picker {get(ref, 'name')} of InferencePool {name} is not among the "
                             "stack's typed resources; its redundancy cannot be checked", pool.urn)
            continue
        replicas = sum(w.replicas for w in pickers)
        if replicas < 2:
            report_violation(f"the endpoint picker of InferencePool {name} runs {plural(replicas, 'replica')}; run at "
                             "least 2", pickers[0].urn)
            continue
        zones: set[str] = set()
        spread = False
        for w in pickers:
            allowed = allowed_zones(w, groups)
            if allowed is not None and len(allowed) == 1:
                zones.update(allowed)
            elif w.zone_spread() is not None or w.zone_anti_affinity():
                spread = True
                zones.update(allowed or UNKNOWN_SPREAD)
        if not spread and len(zones) < 2:
            report_violation(f"the {replicas} endpoint picker replicas of InferencePool {name} are not spread "
                             "over zones (no topology spread on topology.kubernetes.io/zone with "
                             "DoNotSchedule)", pickers[0].urn)
        elif len(zones) < 2:
            report_violation(f"the endpoint picker of InferencePool {name} can only run in "
                             f"{', '.join(sorted(zones)) or 'no zone'}", pickers[0].urn)


# -- replicas that span nodes (LeaderWorkerSets) ----------------------------------------------
def _group_workloads(resources) -> list[WorkloadView]:
    return [w for w in serving_workloads(resources) if w.group_size > 1 and w.replicas > 0]


def _group_zones(w: WorkloadView, groups) -> tuple[str, ...] | None:
    """Zones a group's pods (leader and workers) may land in; None when nothing pins them."""
    worker = dataclasses.replace(w, pod_spec=w.worker_spec or w.pod_spec)
    zones = [allowed_zones(v, groups) for v in (w, worker)]
    if any(z is None for z in zones):
        return None
    return tuple(sorted(set(zones[0]) | set(zones[1])))


@stack_rule(
    RULES, RULE_GROUP_IN_ONE_ZONE,
    description="A replica that spans nodes (a LeaderWorkerSet group) has all its pods pinned to one zone: its "
                "pipeline stages never cross zones, and losing a zone loses whole groups.",
    severity=Severity.CRITICAL,
    remediation="Pin the leader and worker templates to one zone and one GPU pool (nodeSelector "
                "topology.kubernetes.io/zone and llm-serving.io/pool), one LeaderWorkerSet per replica, as the "
                "serving component does.",
    tags=("failure-domains", "multi-node"))
def replica_group_in_one_zone(args, report_violation):
    groups = node_groups(args.resources)
    for w in _group_workloads(args.resources):
        zones = _group_zones(w, groups)
        if zones is None:
            report_violation(f"{w.kind} {w.name}: its {w.group_size}-pod groups are not pinned to a zone; a group's "
                             "nodes could sit in two zones", w.urn)
        elif len(zones) > 1:
            report_violation(f"{w.kind} {w.name}: a {w.group_size}-pod group may put its nodes in {', '.join(zones)}; "
                             "a group's nodes must sit in one zone", w.urn)


@stack_rule(
    RULES, RULE_ZONE_HOLDS_WHOLE_GROUPS,
    description="Every zone with GPU nodes holds at least one whole group of the replicas that span nodes, and "
                "each GPU node group holds whole groups (a multiple of the group size), so N+1 by zone counts "
                "groups.",
    severity=Severity.CRITICAL,
    remediation="Give each zone's GPU pool a multiple of the nodes per replica (llm-serving:gpuPools[].nodes; "
                "`llmserve size --stack <s>` shows the plan's nodes per replica).",
    tags=("failure-domains", "multi-node"))
def zone_holds_whole_groups(args, report_violation):
    workloads_ = _group_workloads(args.resources)
    if not workloads_:
        return
    gpu = _gpu_groups(args.resources)
    size = max(w.group_size for w in workloads_)
    for ng in gpu:
        if ng.nodes % size:
            report_violation(f"GPU node group {ng.name} has {plural(ng.nodes, 'node')}, not a multiple of the "
                             f"{size}-node group: {ng.nodes % size} node(s) hold no whole group", ng.urn)
    for zone in sorted({z for ng in gpu for z in ng.zones}):
        whole = sum(ng.nodes // size for ng in gpu if zone in ng.zones)
        if whole == 0:
            nodes = sum(ng.nodes for ng in gpu if zone in ng.zones)
            report_violation(f"{zone} has {plural(nodes, 'GPU node')}, no whole {size}-node group: the zone serves "
                             "nothing, and losing the other zone stops serving")
