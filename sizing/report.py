"""A plan as plain data: the JSON the CLI prints and the stack exports, and the table rows.

Latency, in-flight, KV and utilisation figures describe one replica at the load it carries after
the worst failure-domain loss (the case the plan must hold).
"""
from __future__ import annotations

import math

from .planner import Plan


def _num(x: float | None, nd: int = 4):
    if x is None:
        return None
    if isinstance(x, float) and not math.isfinite(x):
        return None     # JSON has no infinity: an unstable figure is null
    return round(x, nd)


def _request_fields(plan: Plan) -> dict:
    req, w = plan.request, plan.request.workload
    return {
        # the model sized, as the planner resolved it: the catalog key, or `config:PATH` for a config.json
        "model": plan.replica_model.shape.model.id, "instance_type": plan.instance.id, "gpu": plan.instance.gpu.id,
        "weights": req.weights, "kv_dtype": req.kv_dtype, "profile": req.profile,
        "gpus_per_replica": plan.gpus_per_replica, "layout": plan.layout,
        "workload": {"qps": w.qps, "concurrency": w.concurrency, "input_tokens": w.input_tokens,
                     "output_tokens": w.output_tokens, "ttft_slo_s": w.ttft_slo_s, "tpot_slo_s": w.tpot_slo_s,
                     "slo_statistic": w.slo_statistic,
                     # the lengths' form and the percentiles sized for; the served limit they give
                     "lengths": w.distribution.summary(), "stated_max_model_len": w.stated_max_model_len,
                     "served_max_model_len": w.served_max_model_len,
                     "shared_prefix_tokens": w.shared_prefix_tokens, "prefix_hit_fraction": w.prefix_hit_fraction},
        # with the prefix cache the workload states and without it (absent when it states none)
        "prefix_caching": _num_tree(plan.prefix_caching),
    }


def _num_tree(d):
    """A nested dict of figures with non-finite numbers as None (JSON has no infinity)."""
    if d is None:
        return None
    return {k: _num_tree(v) if isinstance(v, dict) else (_num(v) if isinstance(v, float) else v) for k, v in d.items()}


def _latency_fields(plan: Plan) -> dict:
    ideal, real = plan.ideal, plan.real
    return {
        "load_per_replica_qps": _num(plan.load_per_replica_qps),
        "prefill_ms": _num(plan.prefill_ms),
        "prefill_share": _num(real.prefill_share),
        "prefill_saturation_qps": _num(plan.prefill_saturation_qps),
        "ttft_ms": {"ideal": _num(ideal.ttft_ms), "real": _num(real.ttft_ms), "p95": _num(real.ttft_p95_ms),
                    "at_statistic": _num(real.ttft_at_statistic_ms)},
        "tpot_ms": {"ideal": _num(ideal.tpot_ms), "real": _num(real.tpot_ms), "p95": _num(real.tpot_p95_ms),
                    "at_statistic": _num(real.tpot_at_statistic_ms)},
        "stable": real.stable,
        "unstable_reason": real.unstable_reason or None,
        "queue_ms": _num(real.queue_ms),
        "in_flight": {"ideal": _num(ideal.in_flight, 2), "real": _num(real.in_flight, 2)},
    }


def _memory_fields(plan: Plan) -> dict:
    mem, kv_gb = plan.memory, plan.real.kv_cache_gb
    return {
        "kv_cache_gb": _num(kv_gb, 2),
        "kv_budget_gb": _num(mem.kv_budget_gb, 2),
        "max_seqs_kv": mem.max_seqs_kv,
        "kv_cache_tokens": mem.kv_cache_tokens,
        "max_concurrency": _num(mem.max_concurrency, 2),
        "activation_gb": _num(mem.activation_gb, 3),
        "cuda_graph_gb": _num(mem.cuda_graph_gb, 3),
        "weights_gb": _num(mem.weights_gb, 2),
        "weights_per_gpu_gb": _num(mem.weights_per_gpu_gb, 2),
        "memory_used_gb": _num(mem.weights_gb + kv_gb, 2) if math.isfinite(kv_gb) else None,
        "memory_total_gb": _num(mem.total_gb, 2),
    }


def _capacity_and_layout_fields(plan: Plan) -> dict:
    return {
        "capacity_per_replica_qps": {"ideal": _num(plan.capacity_per_replica_ideal.qps),
                                     "real": _num(plan.capacity_per_replica.qps)},
        "capacity_by_constraint_qps": {k: _num(v) for k, v in plan.capacity_per_replica.by_constraint.items()},
        "utilization": _num(plan.load_per_replica_qps / plan.capacity_per_replica.qps)
        if plan.capacity_per_replica.qps else None,
        "replicas": plan.replicas,
        "replicas_by_zone": plan.replicas_by_zone,
        "nodes_per_replica": plan.nodes_per_replica,
        "gpus_used": plan.gpus_used,
        "gpus_total": plan.gpus_total,
        "nodes": [{"pool": n.pool, "zone": n.zone, "node": n.node, "replicas": n.replicas,
                   "gpus_used": n.gpus_used, "gpus_idle": n.gpus_idle,
                   **({"group": n.group} if n.group is not None else {})} for n in plan.nodes],
        "redundancy": plan.redundancy,
        "survives_failure": plan.survives_failure,
        "lost_domain": plan.lost_domain,
        "capacity_qps": _num(plan.capacity_qps),
        "capacity_after_zone_loss_qps": _num(plan.capacity_after_zone_loss_qps),
    }


def _cost_and_engine_fields(plan: Plan) -> dict:
    return {
        "gpu_hour_price": plan.gpu_hour_price,
        "cost_per_hour": _num(plan.cost_per_hour, 2),
        "cost_per_million_output_tokens": _num(plan.per_million(plan.cost_per_hour), 3),
        "node_price_per_hour": plan.node_price_per_hour,
        "node_cost_per_hour": _num(plan.node_cost_per_hour, 2),
        "node_cost_per_million_output_tokens": _num(plan.per_million(plan.node_cost_per_hour), 3),
        "binding_constraint": plan.binding_constraint,
        "fill_idle_gpus": plan.fill_idle_gpus,
        "engine_args": plan.engine_args.as_dict(),     # vLLM's arguments only (sizing.engine_args.EngineArgs)
        "checkpoint": plan.checkpoint,
        "notes": list(plan.notes),
    }


def plan_to_dict(plan: Plan) -> dict:
    """The plan's JSON, in sections (same keys, same order): request, latency, memory, capacity and
    layout, cost and engine."""
    out = {**_request_fields(plan), **_latency_fields(plan), **_memory_fields(plan),
           **_capacity_and_layout_fields(plan), **_cost_and_engine_fields(plan)}
    if plan.closed_loop is not None:
        cl = plan.closed_loop
        out["closed_loop"] = {k: _num(v) if isinstance(v, float) else v for k, v in cl.items()}
        out["output_tokens_per_s"] = _num(cl["output_tokens_per_s"] * plan.replicas_carrying, 1)
        out["requests_per_s"] = _num(cl["requests_per_s"] * plan.replicas_carrying)
        out["max_clients_per_replica"] = plan.max_clients_per_replica
    if plan.fleet is not None:
        out["fleet"] = fleet_to_dict(plan)
    if plan.speculative is not None:       # absent without speculation: the default JSON is unchanged
        from .speculative import to_dict
        out["speculative"] = to_dict(plan.speculative)
    out.update(serving_to_dict(plan))
    if plan.autoscale is not None:
        from .autoscale import autoscale_to_dict
        out["autoscale"] = autoscale_to_dict(plan)
    if plan.request.mig_profile is not None:     # replicas on MIG slices (sizing.mig): a "GPU" above is a slice
        from .mig import replicas_per_gpu
        out["mig_profile"], out["replicas_per_gpu"] = plan.request.mig_profile, replicas_per_gpu(plan)
    return out


def serving_to_dict(plan: Plan) -> dict:
    """The serving mode, its pools (aggregated: the one pool) and, disaggregated, the KV hand-off."""
    out = {"serving_mode": plan.serving_mode, "pools": [_pool_dict(p) for p in plan.pools_by_role.values()]}
    if plan.serving_mode_reason is not None:
        out["serving_mode_reason"] = plan.serving_mode_reason
    t = plan.kv_transfer
    if t is not None:
        out["kv_transfer"] = {"link": t.link, "bytes_per_request": round(t.bytes_per_request),
                              "bandwidth_gbps": _num(t.bandwidth_gbps, 1), "efficiency": _num(t.efficiency),
                              "fixed_ms": _num(t.fixed_ms), "transfer_ms": _num(t.transfer_ms),
                              "transfer_ms_at_statistic": _num(t.transfer_ms_at_statistic), "kv_lease_s": t.kv_lease_s}
    return out


def _pool_dict(p) -> dict:
    return {"role": p.role, "replicas": p.replicas, "tp": p.tp, "gpus_per_replica": p.gpus_per_replica,
            "replicas_by_zone": dict(p.replicas_by_zone), "capacity_per_replica_qps": _num(p.capacity_per_replica_qps),
            "capacity_qps": _num(p.capacity_qps), "capacity_after_zone_loss_qps": _num(p.capacity_after_zone_loss_qps),
            "lost_domain": p.lost_domain, "survives_failure": p.survives_failure,
            "binding_constraint": p.binding_constraint, "max_num_batched_tokens": p.max_num_batched_tokens,
            "max_num_seqs": p.max_num_seqs}


def fleet_to_dict(plan: Plan) -> dict:
    f = plan.fleet
    p = f.real
    out = {"replicas": f.replicas, "load_per_replica_qps": _num(f.load_per_replica_qps),
           "clients_per_replica": _num(f.clients_per_replica, 2),
           "ttft_ms": {"mean": _num(p.ttft_ms), "p95": _num(p.ttft_p95_ms), "at_statistic": _num(p.ttft_at_statistic_ms)},
           "tpot_ms": {"mean": _num(p.tpot_ms), "p95": _num(p.tpot_p95_ms), "at_statistic": _num(p.tpot_at_statistic_ms)},
           "in_flight": _num(p.in_flight, 2), "stable": p.stable, "unstable_reason": p.unstable_reason or None,
           "utilization": _num(f.load_per_replica_qps / plan.capacity_per_replica.qps)
           if plan.capacity_per_replica.qps else None}
    if f.closed_loop is not None:
        out["closed_loop"] = {k: _num(v) if isinstance(v, float) else v for k, v in f.closed_loop.items()}
    return out


def table_rows(d: dict) -> list[tuple[str, str, str]]:
    """The reference table's rows: (figure, ideal, real)."""
    def f(x, fmt="{:.1f}"):
        return "unstable" if x is None else fmt.format(x)
    cost = d["cost_per_hour"]
    rows = [
        (f"prefill time per {d['workload']['input_tokens']:,}-token prompt", f(d["prefill_ms"], "{:.0f} ms"), ""),
        (f"prefill share of the replica at {d['load_per_replica_qps']:.3g} QPS", "", f(100 * d["prefill_share"], "{:.0f}%")
         if d["prefill_share"] is not None else "unstable"),
        ("QPS at which prefill alone saturates the replica", f(d["prefill_saturation_qps"]), ""),
        ("TTFT mean (with queueing)", f(d["ttft_ms"]["ideal"], "{:.0f} ms"), f(d["ttft_ms"]["real"], "{:.0f} ms")),
        ("TTFT p95 (Poisson arrivals)", "", f(d["ttft_ms"]["p95"], "{:.0f} ms")),
        ("TPOT mean", f(d["tpot_ms"]["ideal"], "{:.1f} ms"), f(d["tpot_ms"]["real"], "{:.1f} ms")),
        ("TPOT p95 (Poisson arrivals)", "", f(d["tpot_ms"]["p95"], "{:.1f} ms")),
        ("sequences in flight (Little's law)", f(d["in_flight"]["ideal"], "{:.0f}"), f(d["in_flight"]["real"], "{:.0f}")),
        (f"KV cache at that point (of {d['kv_budget_gb']:.0f} GB: {d['kv_cache_tokens']:,} tokens, {d['max_seqs_kv']} sequences)",
         "", f(d["kv_cache_gb"], "{:.1f} GB")),
        (f"memory used of the replica's {d['memory_total_gb']:.0f} GB (weights {d['weights_gb']:.1f} GB + KV)", "",
         f(d["memory_used_gb"], "{:.0f} GB")),
        (f"capacity per replica: QPS at the {d['workload']['slo_statistic']} SLOs (binding: {_binding_key(d)})",
         f(d["capacity_per_replica_qps"]["ideal"]), f(d["capacity_per_replica_qps"]["real"])),
        (f"utilisation of one replica at {d['load_per_replica_qps']:.3g} QPS", "",
         f(100 * d["utilization"], "{:.0f}%") if d["utilization"] is not None else "n/a"),
        (f"replicas (N+1 by {d['redundancy']}), {layout_label(d)}", "", str(d["replicas"])),
        ("capacity with all replicas / after losing " + (d["lost_domain"] or "nothing"), "",
         f"{d['capacity_qps']:.1f} / {d['capacity_after_zone_loss_qps']:.1f} QPS"),
        (f"cost at ${d['gpu_hour_price']:.2f} per GPU-hour ({d['gpus_used']} GPUs)" if d["gpu_hour_price"] else "cost (GPUs used)",
         "", "n/a" if cost is None else f"${cost:,.2f}/h"),
        ("cost per 1M output tokens (GPUs used)", "", "n/a" if d["cost_per_million_output_tokens"] is None
         else f"${d['cost_per_million_output_tokens']:.2f}"),
        (f"whole nodes ({len(d['nodes'])} x {d['instance_type']}) per hour / per 1M output tokens", "",
         "n/a" if d["node_cost_per_hour"] is None else
         f"${d['node_cost_per_hour']:,.2f}/h / ${d['node_cost_per_million_output_tokens']:.2f}"),
    ]
    if "mig_profile" in d:       # the GPUs counted above are MIG slices
        rows.append(("MIG slice per replica (GPUs above are slices) / replicas per GPU", "",
                     f"{d['mig_profile']} / {d['replicas_per_gpu']}"))
    if "requests_per_s" in d:
        rows.append(("closed loop: requests/s, output tokens/s (after a loss)", "",
                     f"{d['requests_per_s']:.2f} req/s, {d['output_tokens_per_s']:,.0f} tok/s"))
    return rows


def _binding_key(d: dict) -> str:
    caps = d["capacity_by_constraint_qps"]
    return min(caps, key=lambda k: caps[k] if caps[k] is not None else math.inf)


LAYOUT_LABELS = {"tp": "TP", "dp-ep": "DP+EP", "tp-ep": "TP+EP"}


def layout_label(d: dict) -> str:
    """"TP=8", "DP+EP=8", "TP+EP=8", or "TP=8 x PP=2 (2 nodes)" for replicas that span nodes (the plan's JSON)."""
    n = d.get("nodes_per_replica", 1)
    one = f"{LAYOUT_LABELS.get(d.get('layout', 'tp'), 'TP')}={d['gpus_per_replica'] // n}"
    return one if n == 1 else f"{one} x PP={n} ({n} nodes)"
