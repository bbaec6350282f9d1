"""Rules for disaggregated prefill/decode and speculative decoding, judged on the rendered workloads
alone (their `llm-serving.io/serving-role`, `kv-transfer-link` and speculative annotations, their
engine flags, their placement on node groups), never the stack config.

- `pd-pair-in-one-zone`: each prefill or decode workload is pinned to one zone, and a zone with
  either role has both, so a request's prefill and decode (the picker pairs within a zone) never
  cross zones and losing a zone takes both halves of its pairs.
- `pool-capacity-after-zone-loss`: per pool, the replicas left after its worst zone's loss carry the
  target at the SLOs; and a zone's GPUs hold both pools' pods there.
- `kv-transfer-on-planned-fabric`: the NIXL connector's transport matches the plan's link: EFA needs
  the LIBFABRIC backend, EFA devices in the pods and EFA interfaces on every node group they land
  on; NVLink needs both roles of a zone on one node (one node type, one node in the zone).
- `speculative-plan-declares-acceptance`: a workload that speculates says the per-token acceptance
  its plan counts on, a measured figure between 0 and 1.
"""
from __future__ import annotations

import json
from collections import defaultdict

from pulumi_policy import Severity

from conventions import (
    ANNOTATION_KV_LINK, ANNOTATION_REPLICA_CAPACITY_QPS, ANNOTATION_SERVING_ROLE, ANNOTATION_SPECULATIVE_ACCEPTANCE,
    ANNOTATION_TARGET_QPS, EFA_RESOURCE,
)
from .resources import (
    LAUNCH_TEMPLATE, NODE_GROUP, NodeGroupView, WorkloadView, allowed_zones, as_list, fmt, get, landing, node_groups,
    number, plural, serving_workloads,
)
from .rules import Rule, stack_rule

RULES: list[Rule] = []
PD_ROLES = ("prefill", "decode")


def pool_workloads(resources) -> list[WorkloadView]:
    """The serving workloads of a disaggregated plan's pools (with replicas)."""
    return [w for w in serving_workloads(resources)
            if w.annotations.get(ANNOTATION_SERVING_ROLE) in PD_ROLES and w.replicas > 0]


def role(w: WorkloadView) -> str:
    return w.annotations.get(ANNOTATION_SERVING_ROLE, "aggregated")


def flag_value(w: WorkloadView, flag: str) -> str | None:
    """The value after `flag` in any container's args (`--flag value` or `--flag=value`)."""
    for c in as_list(get(w.pod_spec, "containers", default=[])):
        args = [str(a) for a in as_list(get(c, "args", default=[]))]
        for i, arg in enumerate(args):
            if arg == flag and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(f"{flag}="):
                return arg.split("=", 1)[1]
    return None


def json_flag(w: WorkloadView, flag: str) -> dict | None:
    value = flag_value(w, flag)
    try:
        parsed = json.loads(value) if value is not None else None
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _one_zone(w: WorkloadView, groups) -> str | None:
    zones = allowed_zones(w, groups)
    return zones[0] if zones is not None and len(zones) == 1 else None


@stack_rule(
    RULES, "pd-pair-in-one-zone",
    description="Each prefill and decode workload of a disaggregated plan is pinned to one zone, and every zone "
                "with either role has both: a request's KV never crosses zones and a zone's loss takes whole pairs.",
    severity=Severity.CRITICAL,
    remediation="Let the planner place the pools (serving.mode: disaggregated plans both per zone) and keep the "
                "serving component's per-zone workloads: one prefill and one decode Deployment per zone.",
    tags=("failure-domains", "disaggregation"))
def pd_pair_in_one_zone(args, report_violation):
    groups = node_groups(args.resources)
    by_zone: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(PD_ROLES, 0))
    for w in pool_workloads(args.resources):
        zone = _one_zone(w, groups)
        if zone is None:
            zones = allowed_zones(w, groups)
            where = ", ".join(zones) if zones else "no known zone"
            report_violation(f"{w.kind} {w.name} ({role(w)}) is not pinned to one zone (it may run in {where}); "
                             "a prefill/decode pair must sit in one zone", w.urn)
            continue
        by_zone[zone][role(w)] += w.replicas
    for zone, counts in sorted(by_zone.items()):
        missing = [r for r in PD_ROLES if counts[r] == 0]
        if missing:
            have = next(r for r in PD_ROLES if counts[r])
            report_violation(f"{zone} runs {plural(counts[have], f'{have} replica')} and no {missing[0]} replica: its "
                             f"{have} pods would pair with another zone's")


def _pool_capacity(pool: list[WorkloadView], groups, report_violation, name: str) -> None:
    from .failure_domains import _slots      # the aggregated rule's fit of replicas on a zone's nodes
    target = max((number(w.annotations.get(ANNOTATION_TARGET_QPS)) or 0.0) for w in pool)
    running: dict[str, float] = defaultdict(float)
    short = []
    for w in pool:
        per_replica = number(w.annotations.get(ANNOTATION_REPLICA_CAPACITY_QPS))
        zone = _one_zone(w, groups)
        if per_replica is None or zone is None:
            report_violation(f"{w.kind} {w.name} has no {ANNOTATION_REPLICA_CAPACITY_QPS} annotation or no one zone; "
                             f"the {name} pool's capacity after a zone loss cannot be checked", w.urn)
            return
        fits = min(w.replicas, _slots(w, groups, zone)) if groups else w.replicas
        if fits < w.replicas:
            short.append(f"{w.name}: only {fits} of {w.replicas} fit on the GPU nodes of {zone}")
        running[zone] += fits * per_replica
    capacity = sum(running.values())
    worst = max(sorted(running), key=lambda z: running[z])
    left = capacity - running[worst]
    if left + 1e-9 < target:
        detail = f"; {'; '.join(short)}" if short else ""
        report_violation(f"losing {worst} leaves the {name} pool {fmt(left)} of {fmt(capacity)} QPS at the SLOs, short "
                         f"of the {fmt(target)} QPS target{detail}")


@stack_rule(
    RULES, "pool-capacity-after-zone-loss",
    description="Each pool of a disaggregated plan (prefill, decode) carries the target QPS after losing its worst "
                "zone, and each zone's GPU nodes hold both pools' pods there.",
    severity=Severity.CRITICAL,
    remediation="Let the planner size the pools (serving.mode: disaggregated, N+1 by zone per pool) and give each "
                "zone enough GPU nodes for both pools; `llmserve size --stack <s>` shows the pools per zone.",
    tags=("failure-domains", "capacity", "disaggregation"))
def pool_capacity_after_zone_loss(args, report_violation):
    groups = node_groups(args.resources)
    workloads = pool_workloads(args.resources)
    for name in PD_ROLES:
        pool = [w for w in workloads if role(w) == name]
        if pool:
            _pool_capacity(pool, groups, report_violation, name)
    gpus_needed: dict[str, int] = defaultdict(int)
    for w in workloads:
        zone = _one_zone(w, groups)
        if zone is not None:
            gpus_needed[zone] += w.pods * w.gpus
    for zone, needed in sorted(gpus_needed.items()):
        have = sum(ng.nodes * (ng.gpus_per_node or 0) for ng in groups if ng.is_gpu and zone in ng.zones)
        if groups and needed > have:
            report_violation(f"the prefill and decode pods of {zone} take {needed} GPUs; its GPU nodes have {have}")


# -- the transfer's fabric ------------------------------------------------------------------------
def _efa_node_groups(resources) -> set[str]:
    """Node groups (by URN) whose launch template gives their nodes EFA interfaces."""
    templates = {r.urn: r for r in resources if r.resource_type == LAUNCH_TEMPLATE}
    out = set()
    for ng in (r for r in resources if r.resource_type == NODE_GROUP):
        deps = (ng.property_dependencies or {}).get("launchTemplate", []) or ng.dependencies or []
        for dep in deps:
            urn = getattr(dep, "urn", dep)
            lt = templates.get(urn)
            if lt is not None and any(get(i, "interfaceType") == "efa"
                                      for i in as_list(get(lt.props, "networkInterfaces", default=[]))):
                out.add(ng.urn)
    return out


def _requests_efa(w: WorkloadView) -> bool:
    return any((number(get(c, "resources", part, EFA_RESOURCE)) or 0) > 0
               for c in as_list(get(w.pod_spec, "containers", default=[])) for part in ("limits", "requests"))


def _check_efa(w: WorkloadView, backends: list, groups: list[NodeGroupView], efa_groups: set[str], report) -> None:
    if "LIBFABRIC" not in backends:
        report(f"{w.kind} {w.name}: the plan's KV link is efa but NIXL's backends are {backends}; set "
               "kv_connector_extra_config.backends to [\"LIBFABRIC\"]", w.urn)
    if not _requests_efa(w):
        report(f"{w.kind} {w.name}: the plan's KV link is efa but its pods request no {EFA_RESOURCE}", w.urn)
    plain = sorted({ng.name for ng, _ in landing(w, groups) if ng.urn not in efa_groups})
    if plain:
        report(f"{w.kind} {w.name}: the plan's KV link is efa but it may run on node groups without EFA "
               f"interfaces: {', '.join(plain)}", w.urn)


def _check_nvlink(pool: list[WorkloadView], groups: list[NodeGroupView], report) -> None:
    by_zone: dict[str, list[WorkloadView]] = defaultdict(list)
    for w in pool:
        zone = _one_zone(w, groups)
        if zone is not None:
            by_zone[zone].append(w)
    for zone, members in sorted(by_zone.items()):
        landed = {ng.urn: ng for w in members for ng, z in landing(w, groups) if z == zone}
        types = sorted({t for ng in landed.values() for t in ng.instance_types})
        nodes = sum(ng.nodes for ng in landed.values())
        if len(types) > 1 or nodes > 1:
            report(f"the plan's KV link is nvlink, but the prefill and decode pods of {zone} may land on "
                   f"{plural(nodes, 'node')} ({', '.join(types) or 'unknown type'}): a pair over NVLink needs both "
                   "on one node; plan the link as efa or give the zone one node")


@stack_rule(
    RULES, "kv-transfer-on-planned-fabric",
    description="Prefill and decode workloads move KV over the link their plan priced: efa needs NIXL's LIBFABRIC "
                "backend, EFA devices in the pods and EFA interfaces on their node groups; nvlink needs both roles "
                "of a zone on one node.",
    severity=Severity.CRITICAL,
    remediation="Let the serving component render the pools from the plan (it sets the backend, the EFA devices "
                "and turns EFA on for the GPU pools when the plan's link is efa); for nvlink keep one GPU node "
                "per zone, or plan the link as efa.",
    tags=("disaggregation", "network"))
def kv_transfer_on_planned_fabric(args, report_violation):
    groups = node_groups(args.resources)
    efa_groups = _efa_node_groups(args.resources)
    nvlink = []
    for w in pool_workloads(args.resources):
        link = w.annotations.get(ANNOTATION_KV_LINK)
        config = json_flag(w, "--kv-transfer-config")
        if config is None:
            report_violation(f"{w.kind} {w.name} ({role(w)}) has no --kv-transfer-config JSON: it cannot hand KV to "
                             "its pair", w.urn)
            continue
        backends = as_list(get(config, "kv_connector_extra_config", "backends", default=["UCX"]))
        if link == "efa":
            _check_efa(w, backends, groups, efa_groups, report_violation)
        elif link == "nvlink":
            nvlink.append(w)
        else:
            report_violation(f"{w.kind} {w.name} has no {ANNOTATION_KV_LINK} annotation (nvlink or efa, the plan's "
                             f"link; got {link!r}); its fabric cannot be checked", w.urn)
    _check_nvlink(nvlink, groups, report_violation)


@stack_rule(
    RULES, "speculative-plan-declares-acceptance",
    description="A serving workload that runs speculative decoding (--speculative-config) declares the per-token "
                "acceptance its plan counts on, a measured figure in (0, 1): the gain depends on it.",
    severity=Severity.HIGH,
    remediation="Set serving.speculative.acceptanceRate to the acceptance measured on this workload "
                "(vllm:spec_decode_num_accepted_tokens / vllm:spec_decode_num_draft_tokens) and let the serving "
                "component annotate the workload.",
    tags=("speculative",))
def speculative_plan_declares_acceptance(args, report_violation):
    for w in serving_workloads(args.resources):
        if flag_value(w, "--speculative-config") is None:
            continue
        config = json_flag(w, "--speculative-config")
        if config is None or (number(config.get("num_speculative_tokens")) or 0) < 1:
            report_violation(f"{w.kind} {w.name}: --speculative-config is not a JSON object with "
                             "num_speculative_tokens of at least 1", w.urn)
        acceptance = number(w.annotations.get(ANNOTATION_SPECULATIVE_ACCEPTANCE))
        if acceptance is None or not 0 < acceptance < 1:
            shown = w.annotations.get(ANNOTATION_SPECULATIVE_ACCEPTANCE)
            report_violation(f"{w.kind} {w.name} speculates but declares no acceptance in (0, 1) "
                             f"({ANNOTATION_SPECULATIVE_ACCEPTANCE}: {shown!r}); the plan's TPOT gain depends on it",
                             w.urn)
