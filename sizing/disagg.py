"""Disaggregated prefill/decode serving: the pools, their N+1 by zone, and the choice against
aggregated serving (`planner._with_serving_mode` calls `with_serving_mode`).

- The roles (`sizing.disagg_pools`): a prefill replica's capacity is the requests/s whose chunked
  prefill, queue included, meets what the TTFT SLO leaves after the KV hand-off
  (`sizing.kv_transfer`) at the SLO statistic; a decode replica's is the largest load whose
  decode-only steps meet the TPOT SLO at the statistic with the batch (KV held from the transfer
  on) within its KV cache.
- The ratio: for each (prefill TP, decode TP) the fewest replicas of each role that carry the load
  (goodput per GPU: the fewest GPUs), then N+1 by zone per pool: replicas are added, one at a time
  where they raise the capacity left after the worst loss the most per GPU, until after losing any
  zone (one zone: any node) the zones left carry the load. A request's prefill and decode replicas
  are in one zone (the router pairs them there), so a zone carries min(its prefill, its decode
  capacity), and a zone holds both roles or neither.
- `auto`: both plans, the cheaper per 1M output tokens among those that survive the loss, and why.
- An explicit layout (`PoolLayout`, fleet totals) is spread evenly over the zones and evaluated:
  its capacity, what is left after the worst loss, whether that carries the load, and (FleetView)
  the figures with every replica up, as `--replicas` is for an aggregated fleet.

The plan's `replicas`, `replicas_by_zone`, `nodes` and `gpus_used` are the whole fleet's; `tp`,
`replica_model`, `capacity_per_replica` and the latency figures are the decode pool's, with TTFT
the request's whole path (prefill + hand-off + decode admission and first step).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .catalog import Instance, load_catalog, resolve_model
from .checks import candidate_tps
from .disagg_pools import DecodeRole, PrefillRole, composite_point, decode_role, prefill_role
from .kv_transfer import kv_transfer
from .memory import Shape
from .model import Capacity
from .placement import NodeSlot, PlanError, spread
from .profiles import get_profile
from .roles import KvTransfer, PoolLayout, ServingPool
from .vllm_engine import kv_block_tokens
from .workload import SizingError

MAX_ADDED = 400          # replicas N+1 may add beyond the survivors (a bound on the search)
ROLES = ("prefill", "decode")


@dataclass(frozen=True)
class Roles:
    prefill: PrefillRole
    decode: DecodeRole
    transfer: KvTransfer
    tp_p: int
    tp_d: int


@dataclass(frozen=True)
class Layout:
    """Replicas per zone of each role, placed on the zones' nodes."""
    counts: dict[str, dict[str, int]]          # role -> zone -> replicas
    nodes: tuple[NodeSlot, ...]
    on_node: tuple[tuple[str, str, int, int], ...]   # (zone, node label, prefill, decode) per node

    def total(self, role: str) -> int:
        return sum(self.counts[role].values())


# -- the hook ---------------------------------------------------------------------------------
def with_serving_mode(p, req, make_plan, agg_error: Exception | None = None):
    """The plan for `req.serving_mode` given the aggregated plan `p` (None: it failed with `agg_error`);
    `make_plan` builds the Plan from its fields (planner._disaggregated_plan)."""
    mode = req.serving_mode
    if mode not in ("aggregated", "disaggregated", "auto"):
        raise PlanError(f"unknown serving mode '{mode}'; choose one of: aggregated, disaggregated, auto", "serving_mode")
    if req.pool_layout is not None and mode == "aggregated":
        mode = "disaggregated"                 # an explicit prefill/decode layout is disaggregated
    if mode == "disaggregated":
        return plan_disaggregated(req, make_plan)
    if p is None:           # aggregated serving cannot serve it: auto has one choice
        d = plan_disaggregated(req, make_plan)
        return replace(d, serving_mode_reason=f"disaggregated: aggregated serving cannot serve this ({agg_error})")
    try:
        d = plan_disaggregated(req, make_plan)
    except SizingError as exc:
        return replace(p, serving_mode_reason=f"aggregated: disaggregated serving cannot serve this ({exc})")
    return _choose(p, d)


def _choose(agg, dis):
    """The cheaper per 1M output tokens of the plans that survive the worst loss; the reason why."""
    def cost(p):
        return p.per_million(p.cost_per_hour)
    ca, cd = cost(agg), cost(dis)
    if agg.survives_failure != dis.survives_failure:
        pick = agg if agg.survives_failure else dis
        why = f"only the {pick.serving_mode} plan survives losing {pick.lost_domain}"
    elif ca is None or cd is None:
        pick = agg if agg.gpus_used <= dis.gpus_used else dis
        why = f"no price: the fewer GPUs ({agg.gpus_used} aggregated, {dis.gpus_used} disaggregated)"
    else:
        pick = dis if cd < ca else agg
        why = (f"${cd:.3f} per 1M output tokens disaggregated ({dis.gpus_used} GPUs) against ${ca:.3f} "
               f"aggregated ({agg.gpus_used} GPUs) at the {agg.request.workload.slo_statistic} SLOs")
    return replace(pick, serving_mode_reason=f"{pick.serving_mode}: {why}")


# -- planning ---------------------------------------------------------------------------------
def plan_disaggregated(req, make_plan):
    """Prefill and decode pools for `req`, planned on their own (no aggregated plan needed)."""
    w = req.workload
    if w.is_closed_loop:
        raise PlanError("disaggregated serving is planned for an open-loop load (give workload.qps, not "
                        "workload.concurrency)", "serving_mode")
    if req.nodes_per_replica not in (None, 1) or req.layout not in (None, "tp"):
        raise PlanError("disaggregated pools are planned as TP replicas on one node each", "layout")
    model = resolve_model(req.model, req.model_config)
    profile = get_profile(req.profile)
    instance = load_catalog().instance(req.pools[0].instance_type)
    lay = req.pool_layout
    if lay is not None:
        _check_layout(lay, instance)
        roles = _roles(req, model, instance, profile, lay.prefill_tp, lay.decode_tp)
        layout = _explicit_layout(req, roles, lay)
        return _build(req, roles, layout, True, make_plan)
    best, failures = None, []
    tps = [req.tp] if req.tp else candidate_tps(model, instance)
    for tp_p in tps:
        for tp_d in tps:
            try:
                roles = _roles(req, model, instance, profile, tp_p, tp_d)
                layout = _n_plus_one_layout(req, roles, instance)
            except SizingError as exc:
                failures.append((isinstance(exc, PlanError), tp_p + tp_d, str(exc), exc.field))
                continue
            gpus = layout.total("prefill") * tp_p + layout.total("decode") * tp_d
            key = (gpus, tp_p + tp_d)
            if best is None or key < best[0]:
                best = (key, roles, layout)
    if best is None:
        *_, msg, field = max(failures) if failures else (0, 0, "no tensor-parallel degree fits", "tp")
        raise PlanError(f"no disaggregated layout works; the most capable: {msg}", field)
    return _build(req, best[1], best[2], False, make_plan)


def _check_layout(lay: PoolLayout, instance: Instance) -> None:
    for name in ("prefill_replicas", "prefill_tp", "decode_replicas", "decode_tp"):
        v = getattr(lay, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise PlanError(f"must be an integer of at least 1 (got {v!r})", f"pool_layout.{name}")
    for name in ("prefill_tp", "decode_tp"):
        if getattr(lay, name) > instance.gpus:
            raise PlanError(f"a replica stays on one node: at most {instance.gpus} GPUs "
                            f"(got {getattr(lay, name)})", f"pool_layout.{name}")


def _roles(req, model, instance: Instance, profile, tp_p: int, tp_d: int, link: str = "efa", real: bool = True) -> Roles:
    """Both roles at these TPs. The hand-off is priced over `link` (EFA unless the caller knows
    each zone's pairs share one node: the slower link, so the pools are not sized short)."""
    w = req.workload
    shape_p = Shape(model, instance, tp_p, req.weights, req.kv_dtype)
    shape_d = Shape(model, instance, tp_d, req.weights, req.kv_dtype)
    transfer = _transfer(shape_d, tp_p, link, w, profile)
    explicit = req.pool_layout is not None      # a TP the user gave is the layout's field to fix
    try:
        pre = prefill_role(shape_p, w, profile, transfer, real)
    except SizingError as exc:
        field = "pool_layout.prefill_tp" if explicit and exc.field == "tp" else exc.field
        raise type(exc)(f"prefill TP={tp_p}: {exc}", field) from None
    try:
        dec = decode_role(shape_d, w, profile, transfer, real)
    except SizingError as exc:
        field = "pool_layout.decode_tp" if explicit and exc.field == "tp" else exc.field
        raise type(exc)(f"decode TP={tp_d}: {exc}", field) from None
    if pre.capacity.qps <= 0 or dec.capacity.qps <= 0:
        which = "prefill" if pre.capacity.qps <= 0 else "decode"
        slo = "workload.ttft_slo_s" if which == "prefill" else "workload.tpot_slo_s"
        raise SizingError(f"one {which} replica (TP={tp_p if which == 'prefill' else tp_d}) cannot meet the SLOs "
                          "even unloaded", slo)
    return Roles(pre, dec, transfer, tp_p, tp_d)


def _transfer(shape_d: Shape, tp_p: int, link: str, w, profile) -> KvTransfer:
    from .queueing import QUANTILES
    q = QUANTILES.get(w.slo_statistic)
    cached = w.cached_prompt_tokens        # a prefix in the decode's own cache is not sent
    mean = max(1, w.input_tokens - cached)
    at_stat = mean if q is None or w.lengths is None else max(1, w.lengths.input_quantile(q) - cached)
    return kv_transfer(shape_d, tp_p, link, mean, at_stat, kv_block_tokens(shape_d, profile.block_tokens))


def _zones(req) -> list[str]:
    return list(dict.fromkeys(p.zone for p in req.pools))


def _n_plus_one_layout(req, roles: Roles, instance: Instance) -> Layout:
    """The fewest replicas per role, then replicas added where they raise the worst-loss capacity
    most per GPU, until it carries the load (or no replica fits: PlanError)."""
    demand, zones = float(req.workload.qps), _zones(req)
    cap = {"prefill": roles.prefill.capacity.qps, "decode": roles.decode.capacity.qps}
    tp = {"prefill": roles.tp_p, "decode": roles.tp_d}
    free = {z: 10 ** 6 for z in zones}
    counts = {r: spread(max(1, math.ceil(demand / cap[r] - 1e-9)), free) for r in ROLES}
    _pair_zones(counts)
    layout = _place(req, counts, tp, instance)
    for _ in range(MAX_ADDED):
        left, _lost = _worst_loss(layout, cap)
        if left >= demand - 1e-9:      # one node: no domain to lose, the load alone (the notes say so)
            return layout
        base, best = _loss_profile(layout, cap), None
        # one replica of a role, or a pair of both, in one zone: where the worst loss gains most per
        # GPU (then all the loss cases together: a zone short of both roles gains only from a pair)
        for add in (("prefill",), ("decode",), ROLES):
            for z in zones:
                trial = {r: dict(c) for r, c in counts.items()}
                for role in add:
                    trial[role][z] += 1
                _pair_zones(trial)
                try:
                    placed = _place(req, trial, tp, instance)
                except PlanError:
                    continue
                gpus = sum(tp[r] * (sum(trial[r].values()) - sum(counts[r].values())) for r in ROLES)
                gain = tuple((a - b) / gpus for a, b in zip(_loss_profile(placed, cap), base))
                if best is None or gain > best[0]:
                    best = (gain, trial, placed)
        if best is None:
            break
        counts, layout = best[1], best[2]
    left, lost = _worst_loss(layout, cap)
    gpus = sum(p.nodes for p in req.pools) * instance.gpus
    raise PlanError(
        f"the pools' {gpus} GPUs hold no prefill TP={roles.tp_p} / decode TP={roles.tp_d} layout that carries "
        f"{demand:g} QPS after losing {lost} ({left:.1f} QPS left; a prefill replica carries {cap['prefill']:.2f}, "
        f"a decode replica {cap['decode']:.2f}): add nodes or zones, or lower the load", "workload.qps")


def _pair_zones(counts: dict[str, dict[str, int]]) -> None:
    """A zone holds both roles or neither: a request's pair stays in its zone."""
    for z in counts["prefill"]:
        for role, other in (("prefill", "decode"), ("decode", "prefill")):
            if counts[role][z] > 0 and counts[other][z] == 0:
                counts[other][z] = 1


def _explicit_layout(req, roles: Roles, lay: PoolLayout) -> Layout:
    free = {z: 10 ** 6 for z in _zones(req)}
    counts = {"prefill": spread(lay.prefill_replicas, free), "decode": spread(lay.decode_replicas, free)}
    instance = load_catalog().instance(req.pools[0].instance_type)
    return _place(req, counts, {"prefill": roles.tp_p, "decode": roles.tp_d}, instance)


def _place(req, counts: dict[str, dict[str, int]], tp: dict[str, int], instance: Instance) -> Layout:
    """Each zone's replicas on its nodes, the larger TP first. One zone: each on the node with the
    most free GPUs that holds it (spread: losing a node loses few); several zones (a zone is the
    domain lost): on the fullest node that holds it (packed: fewer nodes, and a zone's pairs may
    share one node's NVLink)."""
    nodes, on_node = [], []
    spread_nodes = len(counts["prefill"]) == 1
    for zone in counts["prefill"]:
        slots = [[p, i, instance.gpus, 0, 0] for p in req.pools if p.zone == zone for i in range(p.nodes)]
        for role in sorted(ROLES, key=lambda r: -tp[r]):
            for _ in range(counts[role][zone]):
                fits = [s for s in slots if s[2] >= tp[role]]
                if not fits:
                    raise PlanError(f"zone {zone} has no room for another {role} replica of TP={tp[role]}", "pools")
                s = max(fits, key=lambda s: s[2]) if spread_nodes else min(fits, key=lambda s: s[2])
                s[2] -= tp[role]
                s[3 if role == "prefill" else 4] += 1
        for p, i, left, n_p, n_d in slots:
            nodes.append(NodeSlot(pool=p.label, zone=zone, node=i, replicas=n_p + n_d,
                                  gpus_used=instance.gpus - left, gpus_idle=left))
            on_node.append((zone, f"{p.label}/node-{i}", n_p, n_d))
    return Layout({r: dict(c) for r, c in counts.items()}, tuple(nodes), tuple(on_node))


def _zone_capacity(n_p: int, n_d: int, cap: dict[str, float]) -> float:
    return min(n_p * cap["prefill"], n_d * cap["decode"])


def _worst_loss(layout: Layout, cap: dict[str, float]) -> tuple[float, str]:
    """(QPS the zones left carry, the domain lost) for the worst zone (one zone: node) loss."""
    zones = list(layout.counts["prefill"])
    if len(zones) > 1:
        cases = [(z, {y: (layout.counts["prefill"][y], layout.counts["decode"][y]) for y in zones if y != z})
                 for z in zones]
    elif len(layout.on_node) > 1:
        z = zones[0]
        cases = [(label, {z: (layout.counts["prefill"][z] - n_p, layout.counts["decode"][z] - n_d)})
                 for _, label, n_p, n_d in layout.on_node]
    else:
        z = zones[0]
        return _zone_capacity(layout.counts["prefill"][z], layout.counts["decode"][z], cap), "nothing"
    worst = min(cases, key=lambda c: (sum(_zone_capacity(a, b, cap) for a, b in c[1].values()), c[0]))
    return sum(_zone_capacity(a, b, cap) for a, b in worst[1].values()), worst[0]


def _loss_profile(layout: Layout, cap: dict[str, float]) -> tuple[float, float]:
    """(the worst loss's capacity left, the sum over every loss case): the search's objective."""
    zones = list(layout.counts["prefill"])
    if len(zones) < 2:
        return _worst_loss(layout, cap)[0], _fleet_capacity(layout, cap)
    total = sum(_zone_capacity(layout.counts["prefill"][y], layout.counts["decode"][y], cap)
                for z in zones for y in zones if y != z)
    return _worst_loss(layout, cap)[0], total


def _fleet_capacity(layout: Layout, cap: dict[str, float]) -> float:
    return sum(_zone_capacity(layout.counts["prefill"][z], layout.counts["decode"][z], cap)
               for z in layout.counts["prefill"])


def _link(layout: Layout) -> str:
    """NVLink when each zone's replicas all sit on one node (every pair then shares it), else EFA."""
    for zone in layout.counts["prefill"]:
        used = [n for n in layout.on_node if n[0] == zone and n[2] + n[3] > 0]
        if len(used) > 1:
            return "efa"
    return "nvlink"


# -- the plan ---------------------------------------------------------------------------------
ROLE_BINDING = {
    ("prefill", "ttft"): "{stat} TTFT of its chunked prefill, queue included, reaches the {budget:.3f} s the SLO "
                         "leaves after the hand-off",
    ("prefill", "prefill"): "prefill saturates the replica",
    ("prefill", "kv"): "its KV cache holds no more prompts in flight (prefill + transfer)",
    ("prefill", "server"): "the API server's CPU time per request",
    ("decode", "tpot"): "{stat} TPOT of its decode-only steps reaches the {tpot:.0f} ms SLO",
    ("decode", "kv"): "its KV cache (or max_num_seqs) holds no more sequences (held from the transfer on)",
}


def _build(req, roles: Roles, layout: Layout, explicit: bool, make_plan):
    w, demand = req.workload, float(req.workload.qps)
    link = _link(layout)
    if link != roles.transfer.link:        # sized over EFA (the slower); the pairs share a node
        shape = roles.decode.model.shape
        roles = _roles(req, shape.model, shape.instance, get_profile(req.profile), roles.tp_p, roles.tp_d, link)
    pre, dec, transfer = roles.prefill, roles.decode, roles.transfer
    cap = {"prefill": pre.capacity.qps, "decode": dec.capacity.qps}
    left, lost = _worst_loss(layout, cap)
    zones = list(layout.counts["prefill"])
    redundancy = "zone" if len(zones) > 1 else ("node" if len(layout.on_node) > 1 else "none")
    lost_by_role = _lost_replicas(layout, lost, redundancy)
    survives = left >= demand - 1e-9 and redundancy != "none"
    totals = {r: layout.total(r) for r in ROLES}
    carrying = {r: (totals[r] - lost_by_role[r]) or totals[r] for r in ROLES}
    real = composite_point(pre, dec, transfer, demand / carrying["prefill"], demand / carrying["decode"])
    model, instance = dec.model.shape.model, dec.model.shape.instance
    try:                        # the roofline at face value (the profile's factors off), same pools
        flat = _roles(req, model, instance, get_profile(req.profile), roles.tp_p, roles.tp_d, link, real=False)
        ideal, ideal_cap = composite_point(flat.prefill, flat.decode, transfer, demand / carrying["prefill"],
                                           demand / carrying["decode"]), flat.decode.capacity
    except SizingError:
        ideal, ideal_cap = real, dec.capacity
    pools = tuple(_pool(r, roles, layout, cap, lost, lost_by_role, demand, w) for r in ROLES)
    fleet = None
    if explicit:
        up = composite_point(pre, dec, transfer, demand / totals["prefill"], demand / totals["decode"])
        fleet = (totals["prefill"] + totals["decode"], demand / totals["decode"], up)
    notes = _notes(roles, layout, link, redundancy, lost, left, demand, survives, explicit)
    gpus_used = totals["prefill"] * roles.tp_p + totals["decode"] * roles.tp_d
    by_zone = {z: layout.counts["prefill"][z] + layout.counts["decode"][z] for z in zones}
    binding = (f"prefill: {pools[0].binding_constraint}; decode: {pools[1].binding_constraint}; N+1 by {redundancy}: "
               f"after losing {lost}, the pools left carry {left:.1f} of {demand:g} QPS"
               if redundancy != "none" else "no failure domain to lose")
    return make_plan(
        req, instance, notes, fleet, tp=roles.tp_d, replicas=sum(totals.values()), replicas_by_zone=by_zone,
        nodes=layout.nodes, redundancy=redundancy, survives_failure=survives, lost_domain=lost,
        capacity_per_replica=dec.capacity, capacity_per_replica_ideal=ideal_cap,
        capacity_qps=_fleet_capacity(layout, cap), capacity_after_zone_loss_qps=left,
        replicas_after_loss=sum(totals.values()) - sum(lost_by_role.values()),
        load_per_replica_qps=demand / carrying["decode"], ideal=ideal, real=real, closed_loop=None,
        max_clients_per_replica=None, replica_model=dec.model, gpus_used=gpus_used,
        gpus_total=sum(p.nodes for p in req.pools) * instance.gpus, binding_constraint=binding,
        serving_mode="disaggregated", serving_pools=pools, kv_transfer=transfer)


def _lost_replicas(layout: Layout, lost: str, redundancy: str) -> dict[str, int]:
    if redundancy == "zone":
        return {r: layout.counts[r][lost] for r in ROLES}
    if redundancy == "node":
        n = next(n for n in layout.on_node if n[1] == lost)
        return {"prefill": n[2], "decode": n[3]}
    return {r: 0 for r in ROLES}


def _pool(role: str, roles: Roles, layout: Layout, cap: dict, lost: str, lost_by_role: dict, demand: float,
          w) -> ServingPool:
    r = roles.prefill if role == "prefill" else roles.decode
    n = layout.total(role)
    after = (n - lost_by_role[role]) * cap[role]
    words = ROLE_BINDING.get((role, r.capacity.binding), r.capacity.binding).format(
        stat=w.slo_statistic, tpot=1e3 * w.tpot_slo_s, budget=getattr(r, "ttft_budget_s", 0.0))
    return ServingPool(
        role=role, replicas=n, tp=roles.tp_p if role == "prefill" else roles.tp_d,
        replicas_by_zone=dict(layout.counts[role]), capacity_per_replica_qps=cap[role], capacity_qps=n * cap[role],
        capacity_after_zone_loss_qps=after, lost_domain=lost, survives_failure=after >= demand - 1e-9,
        binding_constraint=f"per replica, {words} at {cap[role]:.2f} QPS", replica_model=r.model,
        max_num_batched_tokens=r.model.batched_tokens, max_num_seqs=r.model.memory.max_seqs)


def _notes(roles: Roles, layout: Layout, link: str, redundancy: str, lost: str, left: float, demand: float,
           survives: bool, explicit: bool) -> list[str]:
    t = roles.transfer
    notes = [f"KV hand-off over {link.upper()}: {t.bytes_per_request / 1e6:,.1f} MB per mean prompt at "
             f"{t.efficiency:.0%} of {t.bandwidth_gbps:,.0f} Gbit/s, {t.transfer_ms:.1f} ms "
             f"({t.transfer_ms_at_statistic:.1f} ms at the SLO statistic's prompt), in every request's TTFT",
             f"the prefill replica holds a request's KV until the decode has read it (the transfer), at most "
             f"vLLM's kv_lease_duration ({t.kv_lease_s:g} s) if the decode side is lost"]
    if link == "nvlink":
        notes.append("each zone's prefill and decode replicas share one node: the hand-off runs over NVLink "
                     "(the pools were sized over EFA, the slower link)")
    if explicit and not survives and redundancy != "none":
        notes.append(f"explicit layout: N+1 does not hold (after losing {lost}, the pools carry {left:.1f} of "
                     f"{demand:g} QPS)")
    if redundancy == "none":
        notes.append("one node only: no redundancy; losing it stops serving")
    elif redundancy == "node":
        notes.append("one zone only: the plan survives losing a node, not a zone")
    return notes


# -- the sweep ----------------------------------------------------------------------------------
def sweep_options(req, plan_fn, aggregated: list) -> list:
    """Disaggregated options for `size --sweep --serving-mode auto|disaggregated`: per instance and
    weight precision, the pools `plan_fn` (planner.plan) plans on the fewest nodes per zone the
    aggregated option of that type took (and one more), as `sizing.sweep.Option` rows whose layout
    names both pools. Ranked with the aggregated ones by the caller."""
    from .placement import Pool
    from .sweep import SWEEP_WEIGHTS, Option
    zones = _zones(req)
    out = []
    for inst in load_catalog().instances.values():
        for weights in SWEEP_WEIGHTS:
            took = [o.nodes for o in aggregated if o.feasible and o.instance == inst.id and o.weights == weights]
            start = max(1, math.ceil(min(took) / len(zones))) if took else 1
            option, why = None, ""
            for per_zone in (start, start + 1) if took else (1, 2, 4):
                trial = replace(req, pools=tuple(Pool(z, inst.id, per_zone) for z in zones), weights=weights,
                                tp=None, replicas=None, layout=None, nodes_per_replica=None,
                                serving_mode="disaggregated", pool_layout=None)
                try:
                    option = _sweep_option(plan_fn(trial), Option)
                    break
                except SizingError as exc:
                    why = str(exc)
            out.append(option or Option(instance=inst.id, gpu=inst.gpu.id, tp=0, weights=weights,
                                        kv_dtype=req.kv_dtype, feasible=False, layout="prefill/decode", reason=why))
    return out


def _sweep_option(p, option_type):
    pre, dec = p.pools_by_role["prefill"], p.pools_by_role["decode"]
    nodes = sum(1 for n in p.nodes if n.replicas > 0)
    node_cost = nodes * p.node_price_per_hour if p.node_price_per_hour is not None else None
    return option_type(
        instance=p.instance.id, gpu=p.instance.gpu.id, tp=dec.tp, weights=p.request.weights, kv_dtype=p.request.kv_dtype,
        feasible=p.survives_failure, layout=f"prefill {pre.replicas} x TP={pre.tp} + decode {dec.replicas} x TP={dec.tp}",
        reason="" if p.survives_failure else "no layout survives the worst loss",
        capacity_per_replica_qps=dec.capacity_per_replica_qps, binding=p.capacity_per_replica.binding,
        replicas=p.replicas, nodes=nodes, gpus=p.gpus_used, cost_per_hour=p.cost_per_hour, node_cost_per_hour=node_cost,
        cost_per_million=p.per_million(p.cost_per_hour), node_cost_per_million=p.per_million(node_cost))
