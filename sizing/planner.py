"""The planner: TP degree, replica count and node placement that survive losing a zone.

N+1 by zone: after losing the zone that holds the most replicas, the replicas left carry the
target load within the SLOs. With one zone only, the plan falls back to N+1 by node (losing the
node with the most replicas), and says so; with one node, it has no redundancy and says so.

A replica whose weights and KV do not fit one node spans `nodes_per_replica` nodes of one pool
(one zone): TP within each node, pipeline stages across them. Pools then hold whole groups
(a pool's nodes // N of them), N+1 counts groups, and losing any node of a group loses the
whole replica (vLLM's engine stops when one of its ranks does), which the plan's notes say.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from conventions import RULE_ZONE_HOLDS_WHOLE_GROUPS

from . import parallel
from .catalog import Instance, load_catalog, resolve_model
from .checks import MAX_NODES_PER_REPLICA, candidate_tps, check_shape, replica_words
from .fit import _unloaded
from .engine_args import EngineArgs, catalog_checkpoint, engine_args_for
from .memory import Memory, Shape
from .model import Capacity, Point, ReplicaModel
from .ops import EXTRAPOLATED_FROM, has_op_tables
from .placement import (NodeSlot, PlanError, Pool, place_groups, place_on_nodes, replicas_for_n_plus_one,
                        spread, zone_slots)
from .profiles import Profile, get_profile
from .workload import SizingError, Workload

if TYPE_CHECKING:       # the levers' types (sizing.roles), built only by the plans that use them
    from .roles import AutoscalePolicy, KvTransfer, PoolLayout, ServingPool, SpeculativePlan, SpeculativeRequest

BINDING_WORDS = {
    "tpot": "{stat} TPOT reaches the {tpot:.0f} ms SLO (decode steps slow as the batch grows)",
    "ttft": "{stat} TTFT, chunked prefill plus its queue, reaches the {ttft:.2f} s SLO",
    "kv": "the KV cache (or the engine's max_num_seqs) holds no more sequences in flight",
    "prefill": "prefill alone saturates the replica",
}


@dataclass(frozen=True)
class PlanRequest:
    workload: Workload
    model: str = "llama-3-70b"
    weights: str | None = None           # None: the checkpoint's own precision (catalog.default_weights)
    kv_dtype: str = "bf16"
    pools: tuple[Pool, ...] = (Pool("us-east-1a", "p5.48xlarge", 1), Pool("us-east-1b", "p5.48xlarge", 1))
    tp: int | None = None
    replicas: int | None = None          # overrides the planned count (policies then judge it)
    profile: str = "measured"
    gpu_hour_price: float | None = None  # defaults to the instance price / its GPUs
    instance_price: float | None = None  # overrides the catalog's node price
    model_config: str | None = None      # a local config.json instead of the catalog's `model`
    layout: str | None = None            # tp | dp-ep | tp-ep (sizing.parallel); None: the planner picks
    nodes_per_replica: int | None = None  # None: the fewest nodes a replica fits on
    # The levers beyond one aggregated pool at one load; each has its own module and hook below.
    serving_mode: str = "aggregated"     # aggregated | disaggregated | auto (sizing.disagg)
    pool_layout: PoolLayout | None = None   # an explicit prefill/decode layout to evaluate
    speculative: SpeculativeRequest | None = None   # sizing.speculative
    mig_profile: str | None = None       # a MIG slice per replica instead of whole GPUs (sizing.mig)
    traffic: Any = None                  # a load over time (sizing.autoscale); workload.qps is its peak

    def __post_init__(self):
        if self.weights is None:         # a pre-quantized checkpoint plans at its own precision
            from .catalog import default_weights
            object.__setattr__(self, "weights", default_weights(resolve_model(self.model, self.model_config)))


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
    replica_model: ReplicaModel          # the real model the figures come from (components read it)
    gpus_used: int
    gpus_total: int
    gpu_hour_price: float | None
    node_price_per_hour: float | None
    binding_constraint: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    fill_idle_gpus: dict | None = None
    fleet: FleetView | None = None       # replicas fixed by the request: the whole fleet at the load
    layout: str = "tp"                   # how a replica's `tp` GPUs split the model (sizing.parallel)
    prefix_caching: dict | None = None   # the plan counts on the prefix cache: the figures with and without
    nodes_per_replica: int = 1           # > 1: each replica is a group of this many nodes (PP across them)
    # Serving roles (sizing.roles). Aggregated: serving_pools is empty and the fields above are the
    # one pool (`pools_by_role` builds it). Disaggregated: the prefill and decode pools, each placed
    # N+1 by zone; then tp, replica_model and the latency fields above are the decode pool's, and
    # replicas, replicas_by_zone, nodes and gpus_used the whole fleet's.
    serving_mode: str = "aggregated"
    serving_pools: tuple[ServingPool, ...] = ()
    kv_transfer: KvTransfer | None = None
    speculative: SpeculativePlan | None = None
    autoscale: AutoscalePolicy | None = None
    serving_mode_reason: str | None = None   # `auto`: which mode it chose and why (sizing.disagg)

    @property
    def pools_by_role(self) -> dict[str, ServingPool]:
        """The plan's pools by role: {"aggregated": ...} or {"prefill": ..., "decode": ...}."""
        from .roles import aggregated_pool
        return {p.role: p for p in self.serving_pools} or {"aggregated": aggregated_pool(self)}

    @property
    def memory(self) -> Memory:
        return self.replica_model.memory

    @property
    def weights_gb(self) -> float:
        return self.replica_model.memory.weights_gb

    @property
    def prefill_model(self) -> ReplicaModel:
        """The replica that runs the prefills: the prefill pool's when disaggregated."""
        pre = self.pools_by_role.get("prefill")
        return self.replica_model if pre is None else pre.replica_model

    @property
    def prefill_ms(self) -> float:
        """One prompt's prefill, alone on an idle replica."""
        return 1e3 * self.prefill_model.prefill_alone_s

    @property
    def prefill_saturation_qps(self) -> float:
        return self.prefill_model.load_ceilings()[1]

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
        return None if self.node_price_per_hour is None else len(self.nodes) * self.node_price_per_hour

    def per_million(self, per_hour: float | None) -> float | None:
        tokens = self.output_tokens_per_hour
        return None if per_hour is None or tokens <= 0 else per_hour / (tokens / 1e6)

    @cached_property
    def engine_args(self) -> EngineArgs:
        """vLLM arguments from the plan (computed once; frozen dataclasses allow a cached property)."""
        return engine_args_for(self)

    @property
    def checkpoint(self) -> str:
        """The catalog's checkpoint for the planned weights (a stack's `model.checkpoint` overrides
        it at deploy time: deployment.serving.served_checkpoint)."""
        return catalog_checkpoint(self)

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one replica takes, over all its nodes. `tp` is the GPUs it takes on each node (under
        `dp-ep` vLLM's tensor_parallel_size is 1 and its data_parallel_size this)."""
        return self.tp * self.nodes_per_replica


@dataclass(frozen=True)
class FleetView:
    """A fixed fleet evaluated at the load given, every replica up (`--replicas N`)."""
    replicas: int
    load_per_replica_qps: float
    real: Point
    clients_per_replica: float | None = None
    closed_loop: dict | None = None


# -- planning ----------------------------------------------------------------------------------
def plan(req: PlanRequest) -> Plan:
    """The plan for `req`: the aggregated fleet, then each lever the request names, in order."""
    try:
        p = plan_aggregated(req)
    except SizingError as exc:      # disaggregated pools may serve what one aggregated pool cannot
        if req.serving_mode == "aggregated" and req.pool_layout is None:
            raise
        from .disagg import with_serving_mode
        return _with_autoscale(with_serving_mode(None, req, _disaggregated_plan, exc), req)
    p = _with_speculation(p, req)
    p = _with_serving_mode(p, req)
    return _with_autoscale(p, req)


def _with_speculation(p: Plan, req: PlanRequest) -> Plan:
    """Speculative decoding on the plan's decode steps (sizing.speculative)."""
    if req.speculative is None:
        return p
    from .speculative import speculate      # it reads the planner's types: imported here, not at the top
    model, profile = p.replica_model.shape.model, get_profile(req.profile)
    return speculate(p, req, lambda rm: plan_for_tp(req, model, p.instance, profile, p.tp, p.layout,
                                                    p.nodes_per_replica, replica_model=rm))


def _with_serving_mode(p: Plan, req: PlanRequest) -> Plan:
    """Disaggregated prefill/decode pools, or the choice between them and `p` (sizing.disagg)."""
    if req.serving_mode == "aggregated" and req.pool_layout is None:
        return p
    for field_, lever in (("speculative", req.speculative), ("mig_profile", req.mig_profile)):
        if lever is not None:    # the pools are sized on whole GPUs and plain decode steps
            raise PlanError(f"not planned together with disaggregated serving (serving mode {req.serving_mode}); "
                            "plan one of the two", field_)
    from .disagg import with_serving_mode
    return with_serving_mode(p, req, _disaggregated_plan)


def _disaggregated_plan(req: PlanRequest, instance: Instance, notes: list[str], fleet: tuple | None, **fields) -> Plan:
    """The Plan sizing.disagg fills (it does not import this module): prices as an aggregated plan's."""
    gpu_price, node_price = _prices(req, instance, notes)
    return Plan(request=req, instance=instance, gpu_hour_price=gpu_price, node_price_per_hour=node_price,
                notes=tuple(notes), fleet=FleetView(*fleet) if fleet else None, **fields)


def _with_autoscale(p: Plan, req: PlanRequest) -> Plan:
    """The fleet for the traffic's trough and the autoscaling policy between it and `p` (sizing.autoscale)."""
    if req.traffic is None:
        return p
    from .autoscale import with_autoscale
    return with_autoscale(p, req, plan_aggregated)


def plan_aggregated(req: PlanRequest) -> Plan:
    """One pool of identical replicas, N+1 by zone, at the workload's load."""
    for name, value in (("gpu_hour_price", req.gpu_hour_price), ("instance_price", req.instance_price)):
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise SizingError(f"must be a finite number greater than 0 (got {value!r})", name)
    if req.replicas is not None and not (isinstance(req.replicas, int) and req.replicas >= 1):
        raise SizingError(f"must be an integer of at least 1 (got {req.replicas!r})", "replicas")
    model = resolve_model(req.model, req.model_config)
    profile = get_profile(req.profile)
    types = {p.instance_type for p in req.pools}
    if not req.pools:
        raise PlanError("no GPU pools: give at least one (zone, instance type, nodes)")
    if len(types) > 1:
        raise PlanError(f"GPU pools mix instance types ({', '.join(sorted(types))}); use one type")
    instance = load_catalog().instance(types.pop())
    if req.mig_profile is not None:       # replicas on MIG slices, each slice planned as a GPU (sizing.mig)
        from .mig import sliced
        req, instance = sliced(req, instance, model)
    best, failures = None, []
    for layout, tp, n in _candidates(req, model, instance, profile):
        if n > 1 and best is not None and best[1].survives_failure:
            break                     # fewer nodes per replica already serve and survive
        words = replica_words(Shape(model, instance, tp, layout=layout, nodes=n))
        try:
            p = plan_for_tp(req, model, instance, profile, tp, layout, n)
        except PlanError as exc:      # fits, but the pools cannot carry the load
            failures.append((_capability(1, tp, n), str(exc), exc.field, words))
            continue
        except SizingError as exc:    # does not fit or cannot meet the SLOs at all
            failures.append((_capability(0, tp, n), str(exc), exc.field, words))
            continue
        # Fewest nodes per replica first: a group loses a whole replica to any of its nodes.
        key = (not p.survives_failure, p.nodes_per_replica, p.gpus_used, -p.capacity_after_zone_loss_qps, p.real.ttft_ms)
        if best is None or key < best[0]:
            best = (key, p)
    if best is None:
        if not failures:
            raise PlanError("no tensor-parallel degree fits")
        if req.tp in (None, instance.gpus) and all(f[2] == "weights" for f in failures):
            raise PlanError(does_not_fit(req, model, instance), "weights")
        # Report the most capable option's failure: the one a user would try to fix.
        _, msg, field_, words = max(failures)
        if "PP=" in words and all(f[2] == "weights" for f in failures if "PP=" not in f[3]):
            # Only replicas over several nodes hold the weights: say that first, and what else would.
            raise PlanError(f"{does_not_fit(req, model, instance)}. As replicas of {words}: {msg}", field_)
        if req.tp or len(failures) == 1:
            raise PlanError(msg, field_)
        # A TP the planner chose is not the user's to fix: the failure then names no TP field.
        what = "TP degree" if "PP=" not in words else "layout"
        raise PlanError(f"no {what} works; at {words}, the most capable: {msg}", None if field_ == "tp" else field_)
    return best[1]


def _candidates(req: PlanRequest, model, instance: Instance, profile: Profile) -> list[tuple[str, int, int]]:
    """(layout, GPUs per node of a replica, nodes per replica) to try: the request's, else TP at
    every degree that splits the model and, for an MoE model, data-parallel attention with EP over
    the whole node and TP attention with EP at the degrees `tp` cannot split; and only when no layout fits one node, TP over whole nodes with pipeline
    stages across 2 to MAX_NODES_PER_REPLICA of them (docs/multi-node.md)."""
    n = req.nodes_per_replica
    if n is not None and n > 1:
        return [("tp", req.tp or instance.gpus, n)]
    layouts = [req.layout] if req.layout else (["tp", "dp-ep", "tp-ep"] if model.is_moe else ["tp"])
    out = []
    for layout in layouts:
        if layout == "dp-ep":
            out.append((layout, req.tp or instance.gpus, 1))
        elif layout == "tp-ep" and not req.layout:
            # tp-ep costs what tp costs (sizing.parallel): tried only where tp cannot split the experts
            out += [(layout, tp, 1) for tp in ([req.tp] if req.tp else candidate_tps(model, instance, layout))
                    if parallel.fits_tp(model, tp)]
        else:
            out += [(layout, tp, 1) for tp in ([req.tp] if req.tp else candidate_tps(model, instance, layout))]
    if n == 1 or req.tp or req.layout not in (None, "tp") or fits_one_node(model, instance, req, profile, layouts):
        return out
    return out + [("tp", instance.gpus, k) for k in range(2, MAX_NODES_PER_REPLICA + 1)]


def fits_one_node(model, instance: Instance, req: PlanRequest, profile: Profile, layouts: list[str]) -> bool:
    """Whether the weights and one sequence's KV fit every GPU of one node, at some layout."""
    for layout in layouts:
        try:
            check_shape(Shape(model, instance, instance.gpus, req.weights, req.kv_dtype, layout), req.workload, profile)
            return True
        except SizingError:
            continue
    return False


def _capability(kind: int, tp: int, nodes: int) -> tuple:
    """Which failure to report: one that fits but lacks room (kind 1) before one that cannot run
    (0); then, where it lacks room, one node before several and the largest TP (what a user would
    scale), and where it cannot run, a replica of the fewest nodes that spans them."""
    if kind == 1:
        return (1, nodes == 1, tp if nodes == 1 else -nodes)
    return (0, nodes > 1, -nodes if nodes > 1 else tp)


def does_not_fit(req: PlanRequest, model, instance: Instance) -> str:
    """A model whose weights do not fit one node at any layout: say so, and name the cheapest
    option of the sweep (another GPU or precision; a replica over several nodes is issue 19's)."""
    from .sweep import cheapest_alternative
    profile = get_profile(req.profile)
    node_gb = instance.gpus * instance.gpu.memory_gb
    usable_gb = instance.gpus * (instance.gpu.memory_gb * profile.gpu_memory_utilization - profile.runtime_overhead_gb)
    weights_gb = model.weight_bytes(req.weights) / 1e9
    msg = (f"{model.id} does not fit one {instance.id}: {model.params_b:,.0f} B parameters are "
           f"{weights_gb:,.0f} GB of {req.weights} weights against {node_gb:,.0f} GB of GPU memory "
           f"({instance.gpus} x {instance.gpu.memory_gb:g} GB, {usable_gb:,.0f} GB of it usable), before any KV cache")
    zones = len({p.zone for p in req.pools})
    alt = cheapest_alternative(req.workload, req.model, req.kv_dtype, zones, req.profile, req.model_config)
    if alt is None:
        return msg + "; no instance in the catalog holds it on one node (a multi-node replica is needed)"
    cost = f", ${alt.node_cost_per_hour:,.2f}/h" if alt.node_cost_per_hour is not None else ""
    return (msg + f"; cheapest alternative: {alt.instance} with {alt.weights} weights, {alt.layout} over "
            f"{alt.tp} GPUs per replica ({alt.replicas} replicas on {alt.nodes} nodes{cost})")


@dataclass(frozen=True)
class _Demand:
    """What the load asks and what one replica carries: QPS (open loop) or clients (closed)."""
    per_replica: float
    demand: float
    unit: str
    survivors: int          # replicas that must be left after the worst loss

    @property
    def field(self) -> str:
        """The load's field: the one to lower when the pools cannot carry it."""
        return "workload.qps" if self.unit == "QPS" else "workload.concurrency"


@dataclass(frozen=True)
class _Loss:
    redundancy: str         # zone | node | none
    lost: str
    left: int               # replicas left after losing it
    notes: tuple[str, ...]


def plan_for_tp(req: PlanRequest, model, instance: Instance, profile: Profile, tp: int,
                layout: str = "tp", nodes_per_replica: int = 1, replica_model=ReplicaModel) -> Plan:
    """`replica_model`: the replica's model class (sizing.speculative's, with speculation)."""
    w, n = req.workload, nodes_per_replica
    shape = Shape(model, instance, tp, req.weights, req.kv_dtype, layout, nodes=n)
    checked = check_shape(shape, w, profile)
    real = replica_model(shape, w, profile, real=True, checked=checked)
    ideal = replica_model(shape, w, profile, real=False, checked=checked)
    cap, cap_ideal = real.capacity(), ideal.capacity()
    slots = zone_slots(req.pools, instance.gpus // tp, n)
    need = _demand(real, cap, w)
    words = replica_words(shape)
    counts = _replica_counts(req, slots, need, words, n)
    nodes = (place_on_nodes(counts, req.pools, tp, instance.gpus) if n == 1
             else place_groups(counts, req.pools, tp, instance.gpus, n))
    replicas = sum(counts.values())
    loss = _worst_loss(slots, counts, nodes, replicas)
    notes = list(loss.notes) + group_notes(req.pools, n, loss)
    survives = loss.left >= need.survivors and loss.redundancy != "none"
    if req.replicas is not None and not survives and loss.redundancy != "none":
        notes.append(f"replicas overridden to {req.replicas}: N+1 does not hold "
                     f"({loss.left} left after losing {loss.lost}, {need.survivors} needed)")
    # The worst case that still serves: the replicas left after the loss, or all of them when a
    # loss leaves none (no redundancy, or an override that broke N+1: the policies reject that).
    carrying = loss.left if loss.left > 0 else replicas
    closed, clients, qps_load = None, 0, need.demand / carrying
    if w.is_closed_loop:
        clients = math.ceil(need.demand / carrying)
        closed = real.closed_loop(clients)
        qps_load = closed["requests_per_s"]
    if req.weights == "fp4" and not instance.gpu.fp4_tflops:
        # vLLM 0.29.0 runs FP4 checkpoints without FP4 tensor cores as W4A16 (Marlin):
        # model_executor/layers/quantization/modelopt.py ModelOptNvFp4Config.get_min_capability 75,
        # mxfp4.py Mxfp4Config.get_min_capability 80.
        notes.append(f"no FP4 tensor cores on {instance.gpu.id}: FP4 weights run as W4A16 (4-bit reads, BF16 math)")
    if get_profile(req.profile).step_model == "ops" and not has_op_tables(instance.gpu.id):
        notes.append(f"no per-operation measurements for {instance.gpu.id}: its step is priced from the "
                     f"{EXTRAPOLATED_FROM}'s tables scaled by the datasheets (extrapolated)")
    gpu_price, node_price = _prices(req, instance, notes)
    gpus_used, gpus_total = replicas * tp * n, sum(p.nodes for p in req.pools) * instance.gpus
    fill = _fill_idle_gpus(slots, loss, replicas, tp, gpus_used, gpus_total, cap.qps, notes) if n == 1 else None
    return Plan(
        request=req, instance=instance, tp=tp, replicas=replicas, replicas_by_zone=counts,
        nodes=nodes, redundancy=loss.redundancy, survives_failure=survives, lost_domain=loss.lost,
        capacity_per_replica=cap, capacity_per_replica_ideal=cap_ideal,
        capacity_qps=replicas * cap.qps, capacity_after_zone_loss_qps=loss.left * cap.qps,
        replicas_after_loss=loss.left, load_per_replica_qps=qps_load,
        ideal=ideal.closed_point(clients) if w.is_closed_loop else ideal.at(qps_load),
        real=real.closed_point(clients, closed) if w.is_closed_loop else real.at(qps_load),
        closed_loop=closed, max_clients_per_replica=int(need.per_replica) if w.is_closed_loop else None,
        gpus_used=gpus_used, gpus_total=gpus_total, gpu_hour_price=gpu_price, node_price_per_hour=node_price,
        binding_constraint=_binding_words(cap, w, need, loss), notes=tuple(notes), fill_idle_gpus=fill,
        replica_model=real, fleet=fleet_view(real, w, replicas) if req.replicas is not None else None,
        layout=layout, nodes_per_replica=n,
        prefix_caching=_prefix_view(shape, w, profile, real, cap, clients, qps_load),
    )


def group_notes(pools: tuple[Pool, ...], n: int, loss: _Loss) -> list[str]:
    """What a replica spanning nodes means for failures and for the pools' nodes."""
    if n == 1:
        return []
    notes = [f"each replica spans {n} nodes of one pool (one zone), TP within a node and PP={n} across them "
             f"over EFA; losing any one of its nodes loses the whole replica"
             + (f" (the worst loss, {loss.lost}, takes its whole groups)" if loss.redundancy == "zone" else "")]
    for p in pools:
        if p.nodes % n:
            notes.append(f"pool {p.label}: {p.nodes % n} of its {p.nodes} node(s) hold no whole {n}-node group "
                         "and stay idle (pools hold whole groups)")
    return notes


def _prefix_view(shape: Shape, w: Workload, profile: Profile, real: ReplicaModel, cap: Capacity,
                 clients: int, qps_load: float) -> dict | None:
    """TTFT and capacity per replica with the prefix cache the workload states, and without it
    (the same replica, every prompt token computed), at the same load."""
    if not w.counts_on_prefix_cache:
        return None
    bare = ReplicaModel(shape, w.without_prefix_cache(), profile, real=True)

    def figures(rm: ReplicaModel, capacity: Capacity) -> dict:
        point = rm.closed_point(clients) if w.is_closed_loop else rm.at(qps_load)
        return {"ttft_ms": point.ttft_ms, "ttft_p95_ms": point.ttft_p95_ms, "tpot_ms": point.tpot_ms,
                "capacity_per_replica_qps": capacity.qps, "binding": capacity.binding}
    return {"cached_prompt_tokens": w.cached_prompt_tokens, "with": figures(real, cap),
            "without": figures(bare, bare.capacity())}


def _demand(real: ReplicaModel, cap: Capacity, w: Workload) -> _Demand:
    if w.is_closed_loop:
        per_replica, demand, unit = float(real.max_clients_within_slo()), float(w.concurrency), "clients"
    else:
        per_replica, demand, unit = cap.qps, float(w.qps), "QPS"
    if per_replica <= 0:
        slo, reason = _unloaded(real, w)
        raise SizingError(f"one replica cannot meet the SLOs even unloaded: {reason}", slo)
    return _Demand(per_replica, demand, unit, max(1, math.ceil(demand / per_replica - 1e-9)))


def _replica_counts(req: PlanRequest, slots: dict[str, int], need: _Demand, layout: str, n: int = 1) -> dict[str, int]:
    """Replicas per zone: the request's fixed count, N+1 by zone, or (one zone) N+1 by node."""
    total_slots = sum(slots.values())
    if req.replicas is not None:
        if req.replicas > total_slots:
            raise PlanError(f"replicas {req.replicas} exceed the {total_slots} {layout} slots of the pools", "replicas")
        return spread(req.replicas, slots)
    unit, demand, per_replica, survivors = need.unit, need.demand, need.per_replica, need.survivors
    if n > 1:
        _check_whole_groups(req.pools, slots, n)
    if len(slots) >= 2:
        counts = replicas_for_n_plus_one(survivors, slots)
        if counts is None:
            worst = max(slots.values())
            raise PlanError(
                f"after losing {max(slots, key=slots.get)}, {total_slots - worst} {layout} replica "
                f"{'slot remains' if total_slots - worst == 1 else 'slots remain'}, "
                f"carrying {(total_slots - worst) * per_replica:.1f} {unit}; {demand:g} {unit} needs {survivors} "
                f"replicas of {per_replica:.1f} {unit} each (add nodes or zones, or lower the load)", need.field)
        return counts
    # One zone: N+1 by node when there are two nodes or more (replicas round-robin over the
    # nodes, so losing the fullest node loses ceil(total / nodes) of them; a node of a group
    # loses its one replica, as if each group were one node).
    node_count = sum(p.nodes for p in req.pools) if n == 1 else total_slots
    if survivors > total_slots:
        raise PlanError(f"{demand:g} {unit} needs {survivors} {layout} replicas; the pool has {total_slots} slots",
                        need.field)
    total = survivors
    if node_count > 1:
        while total < total_slots and total - math.ceil(total / node_count) < survivors:
            total += 1
    return spread(total, slots)


def _check_whole_groups(pools: tuple[Pool, ...], slots: dict[str, int], n: int) -> None:
    """Every zone with GPU pools holds at least one whole group: else N+1 by zone cannot hold."""
    for zone, groups in slots.items():
        if groups == 0:
            nodes = ", ".join(f"{p.label}: {p.nodes}" for p in pools if p.zone == zone)
            raise PlanError(
                f"{RULE_ZONE_HOLDS_WHOLE_GROUPS}: {zone} holds no whole {n}-node replica (nodes per pool: {nodes}); "
                f"a replica spans {n} nodes of one pool, so give each zone's pool at least {n} nodes", "pools")


def _worst_loss(slots: dict[str, int], counts: dict[str, int], nodes, replicas: int) -> _Loss:
    """The failure domain whose loss leaves the fewest replicas: a zone, else a node, else none."""
    if len(slots) >= 2:
        lost = max(counts, key=lambda z: (counts[z], z))
        return _Loss("zone", lost, replicas - counts[lost], ())
    if len(nodes) >= 2:
        worst = max(nodes, key=lambda n: n.replicas)
        return _Loss("node", f"{worst.pool}/node-{worst.node}", replicas - worst.replicas,
                     ("one zone only: the plan survives losing a node, not a zone",))
    only = nodes[0]
    return _Loss("none", f"{only.pool}/node-{only.node}", 0,
                 ("one node only: no redundancy; losing it stops serving",))


def _prices(req: PlanRequest, instance: Instance, notes: list[str]) -> tuple[float | None, float | None]:
    gpu_price = req.gpu_hour_price
    node_price = req.instance_price if req.instance_price is not None else instance.price_per_hour
    if gpu_price is None and node_price is not None:
        gpu_price = node_price / instance.gpus
    if node_price is None:
        notes.append(f"{instance.id} has no price in the catalog: costs need --gpu-hour-price")
    return gpu_price, node_price


def _binding_words(cap: Capacity, w: Workload, need: _Demand, loss: _Loss) -> str:
    slo_words = BINDING_WORDS[cap.binding].format(tpot=w.tpot_slo_s * 1e3, ttft=w.ttft_slo_s, stat=w.slo_statistic)
    return (f"per replica, {slo_words} at {need.per_replica:.1f} {need.unit}; "
            + (f"N+1 by {loss.redundancy}: after losing {loss.lost}, {loss.left} replica(s) must carry "
               f"{need.demand:g} {need.unit}" if loss.redundancy != "none" else "no failure domain to lose"))


def _fill_idle_gpus(slots: dict[str, int], loss: _Loss, replicas: int, tp: int, gpus_used: int,
                    gpus_total: int, cap_qps: float, notes: list[str]) -> dict | None:
    """What filling the nodes' idle GPUs with replicas would carry (burst headroom), or None."""
    if gpus_total - gpus_used < tp:
        return None
    total_slots = sum(slots.values())
    if loss.redundancy == "zone":
        fill_left, shown_left, after = total_slots - max(slots.values()), loss.left, f"after losing {loss.lost}"
    else:
        fill_left, shown_left, after = total_slots, replicas, "in all"
    notes.append(
        f"{gpus_total - gpus_used} of {gpus_total} GPUs stay idle on the nodes; filling them "
        f"({total_slots} TP={tp} replicas) would carry {fill_left * cap_qps:.1f} QPS {after} "
        f"instead of {shown_left * cap_qps:.1f}, at no extra node cost (burst headroom)")
    return {"replicas": total_slots, "capacity_qps": total_slots * cap_qps,
            "capacity_after_zone_loss_qps": fill_left * cap_qps, "idle_gpus": gpus_total - gpus_used}


def fleet_view(real: ReplicaModel, w: Workload, replicas: int) -> FleetView:
    """Exactly `replicas` replicas, all up, sharing the load evenly (the router's aim)."""
    if w.is_closed_loop:
        share = w.concurrency / replicas
        clients = max(1, math.ceil(share))
        closed = real.closed_loop(clients)
        return FleetView(replicas, closed["requests_per_s"], real.closed_point(clients), share, closed)
    load = w.qps / replicas
    return FleetView(replicas, load, real.at(load))
