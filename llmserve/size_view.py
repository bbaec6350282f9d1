"""`llmserve size`'s report: the table, the binding constraint, the lengths and the plan."""
from __future__ import annotations

from pathlib import Path

from .lengths_opts import lengths_line, prefix_line


def print_report(d: dict, plot: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    from sizing.report import layout_label

    console = Console(width=110)
    w = d["workload"]
    load = f"{w['qps']:g} QPS" if w["qps"] is not None else f"{w['concurrency']} concurrent clients"
    title = (f"{d['model']} {d['weights']} (KV {d['kv_dtype']}) on {d['instance_type']}, {layout_label(d)}: "
             f"{load}, {w['input_tokens']:,} in / {w['output_tokens']:,} out, "
             f"TTFT < {w['ttft_slo_s']:g} s, TPOT <= {w['tpot_slo_s'] * 1e3:g} ms at the {w['slo_statistic']} "
             f"[profile {d['profile']}]")
    table = Table(title=title, title_justify="left")
    table.add_column("figure")
    table.add_column("ideal", justify="right")
    table.add_column("real", justify="right")
    from sizing.report import table_rows
    for row in table_rows(d):
        table.add_row(*row)
    console.print(table)
    console.print(f"Binding constraint: {d['binding_constraint']}.")
    for line in (lengths_line(w), prefix_line(d)):
        if line:
            console.print(line)
    nodes = ", ".join(f"{n['pool']}/node-{n['node']}: "
                      + (f"group {n['group']}" if "group" in n else f"{n['replicas']} replica(s)")
                      + f", {n['gpus_idle']} GPUs idle"
                      for n in d["nodes"])
    what = (" + ".join(f"{p['replicas']} {p['role']} x TP={p['tp']}" for p in d["pools"])
            if d.get("serving_mode") == "disaggregated" else f"{d['replicas']} x {layout_label(d)}")
    console.print(f"Plan: {what} replicas {d['replicas_by_zone']}; {nodes}.")
    for line in pool_lines(d):
        console.print(line)
    if d.get("unstable_reason"):
        console.print(f"Unstable at {d['load_per_replica_qps']:.3g} QPS per replica: {d['unstable_reason']}.")
    if "fleet" in d:
        console.print(fleet_line(d))
    if d.get("speculative"):
        from sizing.speculative import summary_line
        console.print(summary_line(d["speculative"]))
    for note in d["notes"]:
        console.print(f"Note: {note}.")
    if d.get("autoscale"):
        from sizing.autoscale import autoscale_line
        console.print(autoscale_line(d))
    if plot is not None:
        console.print(f"Plot written to {plot}.")


def fleet_line(d: dict) -> str:
    """`--replicas N`: that fleet, every replica up, at the load given."""
    f = d["fleet"]
    share = (f"{f['clients_per_replica']:g} clients ({f['load_per_replica_qps']:.3g} QPS) per replica"
             if f["clients_per_replica"] is not None else f"{f['load_per_replica_qps']:.3g} QPS per replica")
    if not f["stable"]:
        return f"Fleet of {f['replicas']} replicas, all up: {share}: unstable ({f['unstable_reason']})."
    stat = d["workload"]["slo_statistic"]
    return (f"Fleet of {f['replicas']} replicas, all up: {share}, {100 * (f['utilization'] or 0):.0f}% of capacity; "
            f"TTFT {stat} {f['ttft_ms']['at_statistic']:,.0f} ms, TPOT {stat} {f['tpot_ms']['at_statistic']:.1f} ms "
            f"(means {f['ttft_ms']['mean']:,.0f} / {f['tpot_ms']['mean']:.1f} ms).")


def pool_lines(d: dict) -> list[str]:
    """A disaggregated plan's pools and KV hand-off; `auto`'s choice (nothing for a plain aggregated plan)."""
    lines = [f"Serving mode: {d['serving_mode_reason']}."] if d.get("serving_mode_reason") else []
    if d.get("serving_mode") != "disaggregated":
        return lines
    for p in d["pools"]:
        lines.append(f"Pool {p['role']}: {p['replicas']} x TP={p['tp']} {p['replicas_by_zone']}, "
                     f"{p['capacity_per_replica_qps']:.2f} QPS each, {p['capacity_qps']:.1f} QPS in all, "
                     f"{p['capacity_after_zone_loss_qps']:.1f} after losing {p['lost_domain']}"
                     f"{'' if p['survives_failure'] else ' (does not carry the load)'}; {p['binding_constraint']}.")
    t = d["kv_transfer"]
    lines.append(f"KV hand-off over {t['link'].upper()}: {t['bytes_per_request'] / 1e6:,.1f} MB per mean prompt, "
                 f"{t['transfer_ms']:.1f} ms ({t['transfer_ms_at_statistic']:.1f} ms at the SLO statistic), in TTFT.")
    return lines
