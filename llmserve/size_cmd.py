"""Size a replica and plan replicas across zones (N+1): the reference table, the binding
constraint and the plan. `--stack NAME` takes the workload from stacks/Pulumi.NAME.yaml; any
option given as well overrides it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import click
import typer

from . import options
from .errors import check_output_file, fail
from .size_flags import FLAGS, named, request_body
from .stack_arg import load


def size(
    model: Optional[str] = typer.Option(None, help="Model key or Hugging Face id, e.g. llama-3-70b, deepseek-ai/DeepSeek-R1."),
    model_config: Optional[str] = typer.Option(None, "--model-config", help="A local config.json to size (--model: its name)."),
    layout: Optional[str] = typer.Option(None, help="tp, or dp-ep (data-parallel attention + expert parallelism; MoE)."),
    gpu: Optional[str] = typer.Option(None, help="GPU key (h100-sxm, h200, b200, a100-40gb, l40s); picks its node type."),
    instance: Optional[str] = typer.Option(None, help="Instance type, e.g. p5.48xlarge (overrides --gpu)."),
    weights: Optional[str] = typer.Option(None, help="Weight precision: fp8, bf16 (fp16 = bf16-sized), fp4."),
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help="KV-cache precision: fp8, bf16."),
    tp: Optional[int] = typer.Option(None, help="Tensor-parallel degree (default: the planner picks)."),
    qps: Optional[float] = typer.Option(None, help="Open-loop load, requests per second."),
    concurrency: Optional[int] = typer.Option(None, help="Closed-loop load: concurrent clients."),
    input_tokens: Optional[int] = typer.Option(None, "--input-tokens", help="Prompt tokens per request."),
    output_tokens: Optional[int] = typer.Option(None, "--output-tokens", help="Output tokens per request."),
    ttft_slo: Optional[float] = typer.Option(None, "--ttft-slo", help="TTFT SLO in seconds (at --slo-statistic)."),
    tpot_slo: Optional[float] = typer.Option(None, "--tpot-slo", help="TPOT SLO in seconds (at --slo-statistic)."),
    slo_statistic: Optional[str] = typer.Option(None, "--slo-statistic",
                                                help="mean, p50, p90, p95 or p99: the SLOs hold at this statistic "
                                                     "(default: the stack's, else p95)."),
    replicas: Optional[int] = typer.Option(None, help="Evaluate exactly this many replicas at the load (no planning)."),
    profile: Optional[str] = typer.Option(None, help="Efficiency profile: reference or calibrated."),
    gpu_hour_price: Optional[float] = typer.Option(None, "--gpu-hour-price", help="$ per GPU-hour (default: instance price / GPUs)."),
    zones: Optional[str] = typer.Option(None, help="Zones: a count (2) or names (us-east-1a,us-east-1b); one node each."),
    nodes_per_zone: Optional[int] = typer.Option(None, "--nodes-per-zone", help="Nodes per zone with --zones."),
    stack: Optional[str] = typer.Option(None, help="Take the workload, model and pools from stacks/Pulumi.STACK.yaml."),
    config: Optional[Path] = options.CONFIG,
    as_json: bool = options.JSON,
    plot: Optional[Path] = typer.Option(None, help="Write a PNG: TTFT and TPOT against QPS."),
    sweep: bool = typer.Option(False, help="Rank every (instance, layout, GPUs, weights) by cost per 1M output tokens."),
) -> None:
    if plot is not None:
        check_output_file("--plot", plot, ".png")
    loaded = load(stack, config) if stack is not None or config is not None else None
    source = loaded.source if loaded is not None else None
    req = _request(loaded, _given(), source, fit=not sweep)
    if sweep:
        from .sweep_view import show_sweep
        show_sweep(req.plan_request(), as_json)
        return
    _show(_plan(req, source), as_json, plot)


def _given() -> dict:
    """The flags of size_flags.FLAGS the user gave, by the name they typed, in typer's order."""
    ctx = click.get_current_context()
    return {p.opts[0]: ctx.params[p.name] for p in ctx.command.params
            if p.opts[0] in FLAGS and ctx.params[p.name] is not None}


def _request(loaded, given: dict, source: str | None, fit: bool = True):
    """The stack's plan request (or the reference one) with the flags given, through the
    settings' validation; a problem names the flag, or the stack key when the stack set it."""
    from settings import SettingsError, request_from_body
    from settings.schema import REFERENCE_REQUEST

    base = REFERENCE_REQUEST if loaded is None else loaded.settings.request_body()
    body, problems = request_body(base, given, reference=loaded is None)
    if problems:
        fail("; ".join(problems))
    try:
        return request_from_body(body, fit)
    except SettingsError as exc:     # dict.fromkeys: a pool flag sets every pool, one line says it
        fail("; ".join(dict.fromkeys(named(p, given, source) for p in exc.problems)))


def _plan(req, source: str | None):
    from settings import sizing_problem
    from sizing.model import SizingError
    from sizing.planner import plan

    try:
        return plan(req.plan_request())
    except SizingError as exc:
        fail(named(sizing_problem(exc), _given(), source))


def _show(result, as_json: bool, plot: Path | None) -> None:
    """The plan as JSON or as the report, and the latency plot when asked for."""
    from sizing.report import plan_to_dict
    if plot is not None:
        from .plots import plot_latency_vs_qps
        plot_latency_vs_qps(result, plot)
    data = plan_to_dict(result)
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        _print_report(data, plot)


def _print_report(d: dict, plot: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    from sizing.report import layout_label, table_rows

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
    for row in table_rows(d):
        table.add_row(*row)
    console.print(table)
    console.print(f"Binding constraint: {d['binding_constraint']}.")
    nodes = ", ".join(f"{n['pool']}/node-{n['node']}: "
                      + (f"group {n['group']}" if "group" in n else f"{n['replicas']} replica(s)")
                      + f", {n['gpus_idle']} GPUs idle" for n in d["nodes"])
    console.print(f"Plan: {d['replicas']} x {layout_label(d)} replicas {d['replicas_by_zone']}; {nodes}.")
    if d.get("unstable_reason"):
        console.print(f"Unstable at {d['load_per_replica_qps']:.3g} QPS per replica: {d['unstable_reason']}.")
    if "fleet" in d:
        console.print(_fleet_line(d))
    for note in d["notes"]:
        console.print(f"Note: {note}.")
    if plot is not None:
        console.print(f"Plot written to {plot}.")


def _fleet_line(d: dict) -> str:
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
