"""The planner: TP degree, replica count and node placement that survive losing a zone.

N+1 by zone: after losing the zone that holds the most replicas, the replicas left carry the
target load within the SLOs. With one zone only, the plan falls back to N+1 by node (losing the
node with the most replicas), and says so; with one node, it has no redundancy and says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from .catalog import Instance, load_catalog
from .model import Capacity, Point, ReplicaModel, Shape, SizingError, Workload, check_shape
from .profiles import Profile, get_profile

BINDING_WORDS = {
    "tpot": "mean TPOT reaches the {tpot:.0f} ms SLO (decode steps slow as the batch grows)",
    "ttft": "mean TTFT, prefill plus its queue, reaches the {ttft:.2f} s SLO",
    "kv": "the KV cache (or the engine's max_num_seqs) holds no more sequences in flight",
    "prefill": "prefill alone saturates the replica",
}


@dataclass(frozen=True)
class Pool:
    zone: str
    instance_type: str
    nodes: int
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or f"{self.zone}-{self.instance_type.split('.')[0]}"


@dataclass(frozen=True)
class NodeSlot:
    pool: str
    zone: str
    node: int            # index of the node within its pool
    replicas: int
    gpus_used: int
    gpus_idle: int


@dataclass(frozen=True)
class PlanRequest:
    workload: Workload
    model: str = "llama-3-70b"
    weights: str = "fp8"
    kv_dtype: str = "bf16"
    pools: tuple[Pool, ...] = (Pool("us-east-1a", "p5.48xlarge", 1), Pool("us-east-1b", "p5.48xlarge", 1))
    tp: int | None = None
    replicas: int | None = None          # overrides the planned count (policies then judge it)
    profile: str = "reference"
    gpu_hour_price: float | None = None  # defaults to the instance price / its GPUs
    instance_price: float | None = None  # overrides the catalog's node price


@dataclass(frozen=True)
class Plan:
    request: PlanRequest
    instance: Instance
    tp: int
    replicas: int
    replicas_by_zone: dict[str, int]
    nodes: tuple[NodeSlot, ...]
    redundancy: str                      # zone | node | none
    survives_failure: bool
    lost_domain: str                     # the zone (or node) whose loss is the worst case
    capacity_per_replica: Capacity       # real
    capacity_per_replica_ideal: Capacity
    capacity_qps: float                  # all replicas
    capacity_after_zone_loss_qps: float
    replicas_after_loss: int
    load_per_replica_qps: float          # after the worst loss
    ideal: Point                         # one replica at that load
    real: Point
    closed_loop: dict | None
    max_clients_per_replica: int | None
    gpus_used: int
    gpus_total: int
    gpu_hour_price: float | None
    node_price: float | None
    binding_constraint: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    fill_idle: dict | None = None

    @property
    def replicas_carrying(self) -> int:
        """Replicas that carry the load in the worst case that still serves (see plan_for_tp)."""
        return self.replicas_after_loss or self.replicas

    # costs -------------------------------------------------------------------------------
    @property
    def output_tokens_per_hour(self) -> float:
        w = self.request.workload
        if w.is_closed_loop:  # the clients' throughput, on the replicas left after a loss
            rate = (self.closed_loop or {}).get("requests_per_s", 0.0) * self.replicas_carrying
        else:
            rate = w.qps
        return rate * w.output_tokens * 3600

    @property
    def cost_per_hour(self) -> float | None:
        return None if self.gpu_hour_price is None else self.gpus_used * self.gpu_hour_price

    @property
    def node_cost_per_hour(self) -> float | None:
        return None if self.node_price is None else len(self.nodes) * self.node_price

    def per_million(self, per_hour: float | None) -> float | None:
        tokens = self.output_tokens_per_hour
        return None if per_hour is None or tokens <= 0 else per_hour / (tokens / 1e6)

    @cached_property
    def model_args(self) -> dict:
        """vLLM arguments from the plan (computed once; frozen dataclasses allow a cached property)."""
        return engine_args(self)


def engine_args(plan: Plan) -> dict:
    """vLLM arguments derived from the plan (the serving component passes them as they are)."""
    req, w = plan.request, plan.request.workload
    model = load_catalog().model(req.model)
    profile = get_profile(req.profile)
    rm = ReplicaModel(Shape(model, plan.instance, plan.tp, req.weights, req.kv_dtype), w, profile, True)
    max_len = w.input_tokens + w.output_tokens
    max_seqs = rm.memory.max_seqs
    # The chunked-prefill budget keeps one step that carries a prefill chunk within the TPOT SLO
    # at the planned batch: chunk tokens cost their share of the prefill time each.
    per_token = rm.ttft0_s / w.input_tokens
    step = rm.step_s(plan.real.in_flight if math.isfinite(plan.real.in_flight) else max_seqs)
    chunk = max(512, int((w.tpot_slo_s - step) / per_token) // 256 * 256) if per_token > 0 else 2048
    return {
        "tensor_parallel_size": plan.tp,
        "max_model_len": max_len,
        "max_num_seqs": max_seqs,
        "max_num_batched_tokens": chunk + max_seqs,
        "gpu_memory_utilization": profile.gpu_memory_utilization,
        "kv_cache_dtype": "fp8" if req.kv_dtype == "fp8" else "auto",
        "weights": req.weights,
        "checkpoint": model.checkpoints.get(req.weights if req.weights in model.checkpoints else "bf16"),
    }


class PlanError(SizingError):
    """No layout satisfies the request; the message says which constraint fails."""


# -- placement ---------------------------------------------------------------------------------
def zone_slots(pools: tuple[Pool, ...], slots_per_node: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in pools:
        out[p.zone] = out.get(p.zone, 0) + p.nodes * slots_per_node
    return out


def spread(total: int, slots: dict[str, int]) -> dict[str, int]:
    """Water-fill `total` replicas over zones: as even as their free slots allow."""
    counts = {z: 0 for z in slots}
    for _ in range(total):
        free = [z for z in slots if counts[z] < slots[z]]
        if not free:
            raise PlanError("more replicas than GPU slots")
        z = min(free, key=lambda z: (counts[z], -slots[z], z))
        counts[z] += 1
    return counts


def replicas_for_n_plus_one(survivors: int, slots: dict[str, int]) -> dict[str, int] | None:
    """Fewest replicas, spread over zones, that leave `survivors` after losing any one zone."""
    if len(slots) < 2:
        return None
    for total in range(survivors, sum(slots.values()) + 1):
        counts = spread(total, slots)
        if total - max(counts.values()) >= survivors:
            return counts
    return None


def place_on_nodes(counts: dict[str, int], pools: tuple[Pool, ...], tp: int, gpus_per_node: int) -> tuple[NodeSlot, ...]:
    """Within each zone, round-robin its replicas over its nodes; a TP group stays on one node."""
    nodes: list[list] = []
    for p in pools:
        for i in range(p.nodes):
            nodes.append([p, i, 0])
    for zone, count in counts.items():
        in_zone = [n for n in nodes if n[0].zone == zone]
        for k in range(count):
            target = min(in_zone, key=lambda n: n[2])
            if (target[2] + 1) * tp > gpus_per_node:
                raise PlanError(f"zone {zone} has no room for another TP={tp} replica")
            target[2] += 1
    return tuple(NodeSlot(pool=p.label, zone=p.zone, node=i, replicas=r, gpus_used=r * tp,
                          gpus_idle=gpus_per_node - r * tp) for p, i, r in nodes)


# -- planning ----------------------------------------------------------------------------------
def unloaded_reason(rm: ReplicaModel, w: Workload) -> str:
    """Why a replica misses the SLOs with no load at all, in plain words."""
    if rm.ttft0_s >= w.ttft_slo_s:
        return (f"prefill of a {w.input_tokens:,}-token prompt takes {rm.ttft0_s:.2f} s, "
                f"above the {w.ttft_slo_s:g} s TTFT SLO")
    if rm.step_s(1) >= w.tpot_slo_s:
        return (f"one decode step takes {rm.step_s(1) * 1e3:.1f} ms with a single sequence, "
                f"above the {w.tpot_slo_s * 1e3:g} ms TPOT SLO")
    return "the KV cache cannot hold the batch the SLOs need"


def candidate_tps(model, instance: Instance) -> list[int]:
    return [tp for tp in (1, 2, 4, 8, 16) if tp <= instance.gpus and model.heads % tp == 0]


def plan(req: PlanRequest) -> Plan:
    catalog = load_catalog()
    model = catalog.model(req.model)
    profile = get_profile(req.profile)
    types = {p.instance_type for p in req.pools}
    if not req.pools:
        raise PlanError("no GPU pools: give at least one (zone, instance type, nodes)")
    if len(types) > 1:
        raise PlanError(f"GPU pools mix instance types ({', '.join(sorted(types))}); use one type")
    instance = catalog.instance(types.pop())
    tps = [req.tp] if req.tp else candidate_tps(model, instance)
    best, failures = None, []
    for tp in tps:
        try:
            p = plan_for_tp(req, model, instance, profile, tp)
        except PlanError as exc:      # fits, but the pools cannot carry the load
            failures.append((1, tp, str(exc), exc.option))
            continue
        except SizingError as exc:    # does not fit or cannot meet the SLOs at all
            failures.append((0, tp, str(exc), exc.option))
            continue
        key = (not p.survives_failure, p.gpus_used, -p.capacity_after_zone_loss_qps, p.real.ttft_ms)
        if best is None or key < best[0]:
            best = (key, p)
    if best is None:
        if not failures:
            raise PlanError("no tensor-parallel degree fits")
        # Report the most capable option's failure: the one a user would try to fix.
        _, tp, msg, option = max(failures)
        raise PlanError(msg if req.tp else f"no TP degree works; at TP={tp}, the most capable: {msg}", option)
    return best[1]


def plan_for_tp(req: PlanRequest, model, instance: Instance, profile: Profile, tp: int) -> Plan:
    w = req.workload
    shape = Shape(model, instance, tp, req.weights, req.kv_dtype)
    check_shape(shape, w, profile)
    real = ReplicaModel(shape, w, profile, real=True)
    ideal = ReplicaModel(shape, w, profile, real=False)
    cap, cap_ideal = real.capacity(), ideal.capacity()
    per_node = instance.gpus // tp
    slots = zone_slots(req.pools, per_node)
    total_slots = sum(slots.values())
    slo_words = BINDING_WORDS[cap.binding].format(tpot=w.tpot_slo_s * 1e3, ttft=w.ttft_slo_s)

    # What one replica can carry: QPS (open loop) or clients (closed loop).
    if w.is_closed_loop:
        per_replica = real.max_clients_within_slo()
        demand, unit = float(w.concurrency), "clients"
    else:
        per_replica = cap.qps
        demand, unit = float(w.qps), "QPS"
    if per_replica <= 0:
        raise SizingError(f"one replica cannot meet the SLOs even unloaded: {unloaded_reason(real, w)}",
                          option="SLOs")
    survivors = max(1, math.ceil(demand / per_replica - 1e-9))

    notes: list[str] = []
    if req.replicas is not None:
        counts = spread(min(req.replicas, total_slots), slots)
        if req.replicas > total_slots:
            raise PlanError(f"replicas {req.replicas} exceed the {total_slots} TP={tp} slots of the pools")
    elif len(slots) >= 2:
        counts = replicas_for_n_plus_one(survivors, slots)
        if counts is None:
            worst = max(slots.values())
            raise PlanError(
                f"after losing {max(slots, key=slots.get)}, {total_slots - worst} TP={tp} replica "
                f"{'slot remains' if total_slots - worst == 1 else 'slots remain'}, "
                f"carrying {(total_slots - worst) * per_replica:.1f} {unit}; {demand:g} {unit} needs {survivors} "
                f"replicas of {per_replica:.1f} {unit} each (add nodes or zones, or lower the load)")
    else:
        # One zone: N+1 by node when there are two nodes or more (replicas round-robin over the
        # nodes, so losing the fullest node loses ceil(total / nodes) of them).
        node_count = sum(p.nodes for p in req.pools)
        if survivors > total_slots:
            raise PlanError(f"{demand:g} {unit} needs {survivors} TP={tp} replicas; the pool has {total_slots} slots")
        total = survivors
        if node_count > 1:
            while total < total_slots and total - math.ceil(total / node_count) < survivors:
                total += 1
        counts = spread(total, slots)
    nodes = place_on_nodes(counts, req.pools, tp, instance.gpus)
    replicas = sum(counts.values())

    if len(slots) >= 2:
        redundancy = "zone"
        lost = max(counts, key=lambda z: (counts[z], z))
        lost_replicas = counts[lost]
    elif len(nodes) >= 2:
        redundancy = "node"
        worst = max(nodes, key=lambda n: n.replicas)
        lost, lost_replicas = f"{worst.pool}/node-{worst.node}", worst.replicas
        notes.append("one zone only: the plan survives losing a node, not a zone")
    else:
        only = nodes[0]
        redundancy, lost, lost_replicas = "none", f"{only.pool}/node-{only.node}", replicas
        notes.append("one node only: no redundancy; losing it stops serving")
    left = replicas - lost_replicas
    survives = left >= survivors and redundancy != "none"
    if req.replicas is not None and not survives and redundancy != "none":
        notes.append(f"replicas overridden to {req.replicas}: N+1 does not hold "
                     f"({left} left after losing {lost}, {survivors} needed)")
    # The worst case that still serves: the replicas left after the loss, or all of them when a
    # loss leaves none (no redundancy, or an override that broke N+1: the policies reject that).
    carrying = left if left > 0 else replicas
    load = demand / carrying
    closed = None
    if w.is_closed_loop:
        clients = math.ceil(demand / carrying)
        closed = real.closed_loop(clients)
        qps_load = closed["requests_per_s"]
    else:
        qps_load = load
    gpu_price = req.gpu_hour_price
    node_price = req.instance_price if req.instance_price is not None else instance.price_per_hour
    if gpu_price is None and node_price is not None:
        gpu_price = node_price / instance.gpus
    if node_price is None:
        notes.append(f"{instance.id} has no price in the catalog: costs need --gpu-hour-price")

    binding = (f"per replica, {slo_words} at {per_replica:.1f} {unit}; "
               + (f"N+1 by {redundancy}: after losing {lost}, {left} replica(s) must carry "
                  f"{demand:g} {unit}" if redundancy != "none" else "no failure domain to lose"))
    gpus_used = replicas * tp
    gpus_total = sum(p.nodes for p in req.pools) * instance.gpus
    fill = None
    if gpus_total - gpus_used >= tp:
        all_counts = dict(slots)
        fill_left = total_slots - max(all_counts.values()) if len(slots) >= 2 else total_slots
        fill = {
            "replicas": total_slots,
            "capacity_qps": total_slots * cap.qps,
            "capacity_after_zone_loss_qps": fill_left * cap.qps,
            "idle_gpus": gpus_total - gpus_used,
        }
        after = f"after losing {lost}" if redundancy == "zone" else "in all"
        if redundancy != "zone":
            fill_left, shown_left = total_slots, replicas
        else:
            shown_left = left
        fill["capacity_after_zone_loss_qps"] = fill_left * cap.qps
        notes.append(
            f"{gpus_total - gpus_used} of {gpus_total} GPUs stay idle on the nodes; filling them "
            f"({total_slots} TP={tp} replicas) would carry {fill_left * cap.qps:.1f} QPS {after} "
            f"instead of {shown_left * cap.qps:.1f}, at no extra node cost (burst headroom)")
    return Plan(
        request=req, instance=instance, tp=tp, replicas=replicas, replicas_by_zone=counts,
        nodes=nodes, redundancy=redundancy, survives_failure=survives, lost_domain=lost,
        capacity_per_replica=cap, capacity_per_replica_ideal=cap_ideal,
        capacity_qps=replicas * cap.qps, capacity_after_zone_loss_qps=left * cap.qps, replicas_after_loss=left,
        load_per_replica_qps=qps_load, ideal=ideal.at(qps_load), real=real.at(qps_load),
        closed_loop=closed, max_clients_per_replica=per_replica if w.is_closed_loop else None,
        gpus_used=gpus_used, gpus_total=gpus_total, gpu_hour_price=gpu_price, node_price=node_price,
        binding_constraint=binding, notes=tuple(notes), fill_idle=fill,
    )
