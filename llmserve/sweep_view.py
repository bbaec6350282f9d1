"""`llmserve size --sweep`: the ranked options as a table or JSON."""
from __future__ import annotations

import json
from dataclasses import asdict

from sizing.planner import PlanRequest
from sizing.sweep import sweep


def show_sweep(req: PlanRequest, as_json: bool) -> None:
    zones = len({p.zone for p in req.pools})
    options = sweep(req.workload, req.model, req.kv_dtype, zones, req.profile, req.gpu_hour_price)
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
    for col in ("#", "instance (per replica)", "TP", "weights", "capacity/replica", "binding", "replicas", "nodes",
                "nodes $/1M tok", "GPUs $/1M tok", "nodes $/h"):
        table.add_column(col, justify="right" if col not in ("instance (per replica)", "weights", "binding") else "left")
    rank = 0
    for o in options:
        if not o.feasible:
            continue
        rank += 1
        table.add_row(str(rank), o.instance if o.nodes_per_replica == 1 else f"{o.nodes_per_replica} x {o.instance}",
                      str(o.tp) if o.nodes_per_replica == 1 else f"{o.tp} x PP={o.nodes_per_replica}", o.weights, f"{o.capacity_qps:.1f} QPS", o.binding,
                      str(o.replicas), str(o.nodes), money(o.node_cost_per_million), money(o.cost_per_million),
                      money(o.node_cost_per_hour))
    console = Console(width=140)
    console.print(table)
    infeasible = [o for o in options if not o.feasible]
    if infeasible:
        console.print(f"{len(infeasible)} options do not fit, e.g. {infeasible[0].instance} TP={infeasible[0].tp} "
                      f"{infeasible[0].weights}: {infeasible[0].reason}")
