"""Rank every (instance, layout, GPUs per replica, weight precision) for a workload by cost per 1M
output tokens, and say why each refused option is refused (does not fit, no FP4 on this GPU, EP
not applicable to a dense model, no checkpoint at that precision, ...).

Each option gets the replicas N+1 across the given zones needs, placed evenly, on as many whole
nodes per zone as those replicas take. What a shape can do (its refusal, or its replica model,
capacity and what one replica carries) does not depend on the load, so a sweep finds it once per
shape and reuses it at every load (`_verdict`); a sweep evaluates tens of thousands of
configurations per second (`make bench`, docs/benchmarks.md).
Where a model does not fit one node of a type at any layout, that type is offered as replicas of
whole nodes (TP within a node, PP across 2 or more: `nodes_per_replica`), so "2 x p5.48xlarge per
replica" is weighed against "1 x p5en.48xlarge" in the same ranking.
"""
from __future__ import annotations

import math
from operator import attrgetter
from dataclasses import dataclass, fields

from . import parallel
from .catalog import Instance, load_catalog, resolve_model
from .checks import MAX_NODES_PER_REPLICA, candidate_tps, check_shape
from .fit import unloaded_reason
from .memory import Shape
from .model import ReplicaModel
from .profiles import Profile, get_profile
from .workload import SizingError, Workload

SWEEP_WEIGHTS = ("fp8", "bf16", "fp4")
SWEEP_ITERATIONS = 5    # capacity to 1% of its range: enough to count replicas, and 10,000+ configs/s
USEFUL_SHARE = 0.01     # a replica that carries less than this share of the load is refused, with why


# A result record, never changed once made (a refusal is shared by every load it is found at). Not
# `frozen`: a frozen dataclass sets each of its 19 fields through object.__setattr__, 5.6 us an
# option against 3 us, a fifth of a sweep's time per configuration.
@dataclass(slots=True)
class Option:
    instance: str
    gpu: str
    tp: int
    weights: str
    kv_dtype: str
    feasible: bool
    nodes_per_replica: int = 1
    layout: str = "tp"
    reason: str = ""
    capacity_per_replica_qps: float = 0.0   # one replica (a plan's capacity_qps is the fleet's)
    binding: str = ""
    replicas: int = 0
    nodes: int = 0
    gpus: int = 0
    cost_per_hour: float | None = None
    node_cost_per_hour: float | None = None
    cost_per_million: float | None = None
    node_cost_per_million: float | None = None


def evaluate(model, instance: Instance, tp: int, weights: str, kv_dtype: str, workload: Workload,
             profile: Profile, zones: int, gpu_hour_price: float | None = None, layout: str = "tp",
             nodes_per_replica: int = 1) -> Option:
    n = nodes_per_replica
    verdict = _verdict(model, instance, tp, weights, kv_dtype, layout, n, workload, profile)
    if isinstance(verdict, Option):
        return verdict
    rm, cap, per_replica = verdict
    ident = dict(instance=instance.id, gpu=instance.gpu.id, tp=tp, weights=weights, kv_dtype=kv_dtype, layout=layout,
                 nodes_per_replica=n)
    demand = workload.concurrency if workload.is_closed_loop else workload.qps
    survivors = math.ceil(demand / per_replica - 1e-9)
    if per_replica < USEFUL_SHARE * demand:
        unit = "clients" if workload.is_closed_loop else "QPS"
        return Option(feasible=False, capacity_per_replica_qps=cap.qps, binding=cap.binding, reason=(
            f"a replica carries {per_replica:.3g} {unit}, under {USEFUL_SHARE:.0%} of the {demand:g} {unit} asked "
            f"({survivors:,} replicas before N+1): not a useful option"), **ident)
    slots = instance.gpus // tp
    if zones >= 2:
        per_zone = math.ceil(survivors / (zones - 1))
        replicas = per_zone * zones
        nodes = zones * math.ceil(per_zone / slots) if n == 1 else replicas * n
    elif n > 1:                                           # N+1 by node: a node lost takes its group
        replicas = survivors + 1
        nodes = replicas * n
    else:
        nodes = math.ceil(survivors / slots) + 1          # N+1 by node
        replicas = math.ceil(survivors / (nodes - 1)) * nodes
    gpus = replicas * tp * n
    gpu_price = gpu_hour_price if gpu_hour_price is not None else (
        instance.price_per_hour / instance.gpus if instance.price_per_hour else None)
    cost = gpus * gpu_price if gpu_price is not None else None
    node_cost = nodes * instance.price_per_hour if instance.price_per_hour else None
    if workload.is_closed_loop:
        rate = rm.closed_loop(math.ceil(demand / survivors))["requests_per_s"] * survivors
    else:
        rate = demand
    mtok_per_hour = rate * workload.output_tokens * 3600 / 1e6
    return Option(
        feasible=True, capacity_per_replica_qps=cap.qps, binding=cap.binding, replicas=replicas, nodes=nodes, gpus=gpus,
        cost_per_hour=cost, node_cost_per_hour=node_cost,
        cost_per_million=cost / mtok_per_hour if cost is not None else None,
        node_cost_per_million=node_cost / mtok_per_hour if node_cost is not None else None, **ident)


# What a shape can do does not depend on the load offered to it (only on the workload's lengths,
# SLOs, statistic and, closed loop, its clients): a sweep over loads checks each shape, builds its
# replica model and searches its capacity once. Keyed by identity (a model holds dicts and is not
# hashable; a lengths table is costly to hash); each entry keeps its objects alive, so no id is
# reused while its key is here. Bounded: cleared when full.
_VERDICTS: dict = {}
_VERDICTS_MAX = 4096
_LOAD_FREE = attrgetter(*(f.name for f in fields(Workload) if f.name not in ("qps", "lengths")))


def clear_cache() -> None:
    _VERDICTS.clear()


def _verdict(model, instance: Instance, tp: int, weights: str, kv_dtype: str, layout: str, nodes: int,
             workload: Workload, profile: Profile):
    """The shape's refusal (an Option: frozen, the same at every load), or (replica model,
    capacity, what one replica carries: QPS, or clients closed loop)."""
    key = (id(model), id(instance), tp, weights, kv_dtype, layout, nodes, id(profile), id(workload.lengths),
           _LOAD_FREE(workload))
    hit = _VERDICTS.get(key)
    if hit is not None:
        return hit[0]
    shape = Shape(model, instance, tp, weights, kv_dtype, layout, nodes=nodes)
    verdict = _shape_verdict(shape, workload, profile)
    if isinstance(verdict, str):
        verdict = Option(instance=instance.id, gpu=instance.gpu.id, tp=tp, weights=weights, kv_dtype=kv_dtype,
                         feasible=False, nodes_per_replica=nodes, layout=layout, reason=verdict)
    if len(_VERDICTS) >= _VERDICTS_MAX:
        _VERDICTS.clear()
    _VERDICTS[key] = (verdict, shape, profile, workload.lengths)
    return verdict


def _shape_verdict(shape: Shape, workload: Workload, profile: Profile):
    try:
        checked = check_shape(shape, workload, profile)
    except SizingError as exc:
        return str(exc)
    rm = ReplicaModel(shape, workload, profile, real=True, checked=checked)
    cap = rm.capacity(detail=False, iterations=SWEEP_ITERATIONS)
    per_replica = rm.max_clients_within_slo() if workload.is_closed_loop else cap.qps
    if per_replica <= 0:
        return f"cannot meet the SLOs even unloaded: {unloaded_reason(rm, workload)}"
    return rm, cap, per_replica


def sweep(workload: Workload, model_id: str, kv_dtype: str, zones: int, profile_name: str = "measured",
          gpu_hour_price: float | None = None, model_config: str | None = None) -> list[Option]:
    catalog = load_catalog()
    model = resolve_model(model_id, model_config)
    profile = get_profile(profile_name)
    options = [
        evaluate(model, inst, tp, weights, kv_dtype, workload, profile, zones, gpu_hour_price, layout)
        for inst in catalog.instances.values()
        for layout, tp in layouts(model, inst)
        for weights in SWEEP_WEIGHTS
    ]
    options += [
        evaluate(model, inst, inst.gpus, weights, kv_dtype, workload, profile, zones, gpu_hour_price, "tp", n)
        for inst in catalog.instances.values()
        for weights in SWEEP_WEIGHTS
        for n in node_groups(model, inst, weights, kv_dtype, workload, profile)
    ]
    inf = math.inf
    return sorted(options, key=lambda o: (not o.feasible,
                                          o.node_cost_per_million if o.node_cost_per_million is not None else inf,
                                          o.cost_per_million if o.cost_per_million is not None else inf))


def layouts(model, instance: Instance) -> list[tuple[str, int]]:
    """(layout, GPUs per replica): TP at every degree that splits the model, and over the whole
    node data-parallel attention with EP and TP attention with EP (both evaluated for a dense model
    too, to say why not)."""
    return [("tp", tp) for tp in candidate_tps(model, instance)] + [("dp-ep", instance.gpus), ("tp-ep", instance.gpus)]


def node_groups(model, instance: Instance, weights: str, kv_dtype: str, workload: Workload,
                profile: Profile) -> list[int]:
    """[the fewest whole nodes (2 to MAX_NODES_PER_REPLICA) whose TP x PP replica holds the model]
    where no layout of one node of this type holds it at these weights, else []."""
    for layout in parallel.LAYOUTS:
        try:
            check_shape(Shape(model, instance, instance.gpus, weights, kv_dtype, layout), workload, profile)
            return []
        except SizingError:
            continue
    for n in range(2, MAX_NODES_PER_REPLICA + 1):
        try:
            check_shape(Shape(model, instance, instance.gpus, weights, kv_dtype, nodes=n), workload, profile)
            return [n]
        except SizingError:
            continue
    return []


def cheapest_alternative(workload: Workload, model_id: str, kv_dtype: str, zones: int, profile_name: str,
                         model_config: str | None = None) -> Option | None:
    """The cheapest feasible option of the sweep (by node cost, then GPU cost), or None."""
    best = [o for o in sweep(workload, model_id, kv_dtype, zones, profile_name, None, model_config) if o.feasible]
    return best[0] if best else None
