"""`llmserve size --sweep`: the ranked options as a table or JSON."""
from __future__ import annotations

import json
from dataclasses import asdict

from sizing.planner import PlanRequest
from sizing.sweep import sweep


def show_sweep(req: PlanRequest, as_json: bool, serving_mode: str = "aggregated") -> None:
    zones = len({p.zone for p in req.pools})
    options = sweep(req.workload, req.model, req.kv_dtype, zones, req.profile, req.gpu_hour_price, req.model_config)
    if serving_mode != "aggregated":      # auto ranks both; disaggregated ranks its own options only
        options = ranked_with_disaggregated(req, options, keep_aggregated=serving_mode == "auto")
    if as_json:
        print(json.dumps({"zones": zones, "options": [asdict(o) for o in options]}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    def money(x):
        return "n/a" if x is None else f"${x:,.2f}"

    w = req.workload
    load = f"{w.qps:g} QPS" if w.qps is not None else f"{w.concurrency} clients"
    table = Table(title=f"{req.model}, {load}, N+1 across {zones} zone(s), ranked by whole-node cost per 1M output tokens",
                  title_justify="left")
    for col in ("#", "instance (per replica)", "layout", "GPUs", "weights", "capacity/replica", "binding", "replicas",
                "nodes", "nodes $/1M tok", "GPUs $/1M tok", "nodes $/h"):
        table.add_column(col, justify="right" if col not in ("instance (per replica)", "layout", "weights", "binding")
                         else "left")
    rank = 0
    for o in options:
        if not o.feasible:
            continue
        rank += 1
        group = o.nodes_per_replica > 1
        table.add_row(str(rank), f"{o.nodes_per_replica} x {o.instance}" if group else o.instance,
                      f"tp x pp={o.nodes_per_replica}" if group else o.layout,
                      f"{o.tp} x {o.nodes_per_replica}" if group else str(o.tp), o.weights, f"{o.capacity_per_replica_qps:.1f} QPS",
                      o.binding,
                      str(o.replicas), str(o.nodes), money(o.node_cost_per_million), money(o.cost_per_million),
                      money(o.node_cost_per_hour))
    console = Console(width=140)
    console.print(table)
    infeasible = [o for o in options if not o.feasible]
    if infeasible:
        console.print(f"{len(infeasible)} options refused:")
        for o in infeasible:
            console.print(f"  {o.instance} {o.layout} over {o.tp} GPUs, {o.weights}: {o.reason}")


def ranked_with_disaggregated(req: PlanRequest, options: list, keep_aggregated: bool) -> list:
    """The disaggregated options (sizing.disagg.sweep_options) ranked with the aggregated ones, as
    sizing.sweep ranks: feasible first, then whole-node cost, then GPU cost per 1M output tokens."""
    import math

    from sizing.disagg import sweep_options
    from sizing.planner import plan
    both = (options if keep_aggregated else []) + sweep_options(req, plan, options)
    inf = math.inf
    return sorted(both, key=lambda o: (not o.feasible,
                                       o.node_cost_per_million if o.node_cost_per_million is not None else inf,
                                       o.cost_per_million if o.cost_per_million is not None else inf))
