"""Size a replica and plan replicas across zones (N+1): the reference table, the binding
constraint and the plan. `--stack NAME` takes the workload from stacks/Pulumi.NAME.yaml; any
option given as well overrides it."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import typer

from sizing.catalog import PRECISIONS, CatalogError, load_catalog
from sizing.model import SizingError, Workload
from sizing.planner import PlanRequest, Pool, plan
from sizing.profiles import load_profiles
from sizing.queueing import STATISTICS
from sizing.report import layout_label, plan_to_dict, table_rows

from . import options
from .errors import check_output_file, check_positive, fail

DEFAULT_REGION = "us-east-1"
ZONE_NAME = re.compile(r"[a-z]{2}(-gov)?-[a-z]+-\d[a-g]")
MAX_NODES_PER_ZONE = 64     # as a stack's gpuPools[].nodes: the plan lists every node


def size(
    model: Optional[str] = typer.Option(None, help="Model key, e.g. llama-3-70b."),
    gpu: Optional[str] = typer.Option(None, help="GPU key (h100-sxm, h200, b200, a100-40gb, l40s); picks its node type."),
    instance: Optional[str] = typer.Option(None, help="Instance type, e.g. p5.48xlarge (overrides --gpu)."),
    weights: Optional[str] = typer.Option(None, help="Weight precision: fp8, bf16 (fp16 = bf16-sized)."),
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
    as_json: bool = options.JSON,
    plot: Optional[Path] = typer.Option(None, help="Write a PNG: TTFT and TPOT against QPS."),
    sweep: bool = typer.Option(False, help="Rank every feasible (instance, TP, weights) by cost per 1M output tokens."),
) -> None:
    _check_before_reading(plot, nodes_per_zone)
    base, region = _base_request(stack)
    _check_numbers(qps, concurrency, slo_statistic, {
        "--qps": qps, "--concurrency": concurrency, "--input-tokens": input_tokens, "--output-tokens": output_tokens,
        "--ttft-slo": ttft_slo, "--tpot-slo": tpot_slo, "--gpu-hour-price": gpu_hour_price, "--tp": tp,
        "--nodes-per-zone": nodes_per_zone, "--replicas": replicas})
    catalog = _check_names(model, instance, gpu, profile, {"--weights": weights, "--kv-dtype": kv_dtype})
    workload = _workload(base.workload, qps, concurrency, input_tokens, output_tokens, ttft_slo, tpot_slo,
                         slo_statistic)
    instance_type = instance or (catalog.node_for_gpu(gpu).id if gpu else None)
    req = PlanRequest(
        workload=workload, model=model or base.model, weights=weights or base.weights,
        kv_dtype=kv_dtype or base.kv_dtype,
        pools=_pools(base.pools, zones, nodes_per_zone, instance_type, region),
        tp=tp if tp is not None else base.tp, replicas=replicas if replicas is not None else base.replicas,
        profile=profile or base.profile,
        gpu_hour_price=gpu_hour_price if gpu_hour_price is not None else base.gpu_hour_price,
        instance_price=base.instance_price,
    )
    if sweep:
        from .sweep_view import show_sweep
        show_sweep(req, as_json)
        return
    try:
        result = plan(req)
    except SizingError as exc:
        fail(f"{_option_label(exc, tp is not None) or _load_label(qps, concurrency, stack)}{exc}")
    _show(result, as_json, plot)


def _show(result, as_json: bool, plot: Path | None) -> None:
    """The plan as JSON or as the report, and the latency plot when asked for."""
    if plot is not None:
        from .plots import plot_latency_vs_qps
        plot_latency_vs_qps(result, plot)
    data = plan_to_dict(result)
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        _print_report(data, plot)


def _check_before_reading(plot: Path | None, nodes_per_zone: int | None) -> None:
    """What fails without reading anything: the plot's path, a node count past the limit."""
    if plot is not None:
        check_output_file("--plot", plot)
    if nodes_per_zone is not None and nodes_per_zone > MAX_NODES_PER_ZONE:
        fail(f"--nodes-per-zone: at most {MAX_NODES_PER_ZONE} nodes per zone (got {nodes_per_zone})")


def _check_numbers(qps: float | None, concurrency: int | None, slo_statistic: str | None,
                   values: dict[str, float | None]) -> None:
    if qps is not None and concurrency is not None:
        fail("--qps and --concurrency: give one (open loop) or the other (closed loop), not both")
    check_positive(values)
    if slo_statistic is not None and slo_statistic not in STATISTICS:
        fail(f"--slo-statistic: unknown statistic '{slo_statistic}'; choose one of: {', '.join(STATISTICS)}")


def _check_names(model: str | None, instance: str | None, gpu: str | None, profile: str | None,
                 precisions: dict[str, str | None]):
    """The catalog, once every name given is known to it (else one error naming the option)."""
    catalog = load_catalog()
    try:
        if model is not None:
            catalog.model(model)
        if instance is not None:
            catalog.instance(instance)
        if gpu is not None:
            catalog.gpu(gpu)
        if profile is not None and profile not in load_profiles():
            raise CatalogError(f"unknown profile '{profile}'; choose one of: {', '.join(load_profiles())}")
    except CatalogError as exc:
        option = ("--model" if model is not None and model not in catalog.models else
                  "--instance" if instance is not None and instance not in catalog.instances else
                  "--gpu" if gpu is not None and gpu not in catalog.gpus else "--profile")
        fail(f"{option}: {exc}")
    for option, value in precisions.items():
        if value is not None and value not in PRECISIONS:
            fail(f"{option}: unknown precision '{value}'; choose one of: {', '.join(PRECISIONS)}")
    return catalog


def _workload(base: Workload, qps, concurrency, input_tokens, output_tokens, ttft_slo, tpot_slo,
              slo_statistic) -> Workload:
    """The stack's (or the reference) workload with the options given; a load option replaces both loads."""
    load_given = qps is not None or concurrency is not None
    try:
        return Workload(
            input_tokens=input_tokens or base.input_tokens,
            output_tokens=output_tokens or base.output_tokens,
            ttft_slo_s=ttft_slo or base.ttft_slo_s,
            tpot_slo_s=tpot_slo or base.tpot_slo_s,
            qps=qps if load_given else base.qps,
            concurrency=concurrency if load_given else base.concurrency,
            slo_statistic=slo_statistic or base.slo_statistic,
        )
    except SizingError as exc:      # the message names the option already
        fail(str(exc))


def _load_label(qps, concurrency, stack: str | None) -> str:
    """A plan that cannot carry the load names the load it was given (the fix is less load or more
    nodes or zones, which the message says)."""
    if qps is not None:
        return "--qps: "
    if concurrency is not None:
        return "--concurrency: "
    return f"--stack {stack}: " if stack is not None else "reference workload: "


def _option_label(exc: SizingError, tp_given: bool) -> str:
    """The prefix naming the option a sizing error concerns; --tp only when the user gave it
    (a TP the planner chose is not the user's to fix)."""
    if exc.option is None or (exc.option == "--tp" and not tp_given) or str(exc).startswith(f"{exc.option}:"):
        return ""
    return f"{exc.option}: "


def _base_request(stack: str | None) -> tuple[PlanRequest, str | None]:
    """The request to start from and the stack's region (None without a stack)."""
    if stack is None:
        return PlanRequest(workload=Workload()), None
    from offline.stack import StackError, load_settings
    try:
        settings = load_settings(stack)
        return settings.plan_request(), settings.region
    except StackError as exc:
        fail(str(exc))
    except SizingError as exc:      # a figure the sizing refuses (nan, inf) in the stack's workload
        fail(f"--stack {stack}: workload: {exc}")


def _pools(base: tuple[Pool, ...], zones: str | None, nodes: int | None, instance_type: str | None,
           region: str | None) -> tuple[Pool, ...]:
    if zones is None and nodes is None and instance_type is None:
        return base
    itype = instance_type or base[0].instance_type
    if zones is None:
        names = list(dict.fromkeys(p.zone for p in base))
    elif zones.isdigit():
        count = int(zones)
        if not 1 <= count <= 6:
            fail(f"--zones: give 1 to 6 zones (got {count})")
        names = [f"{region or DEFAULT_REGION}{chr(ord('a') + i)}" for i in range(count)]
    else:
        names = [z.strip() for z in zones.split(",") if z.strip()]
        if not names:
            fail("--zones: give a count (2) or zone names (us-east-1a,us-east-1b)")
        if len(set(names)) != len(names):
            fail(f"--zones: a zone is listed twice in '{zones}'")
        _check_zones(names, region)
    if nodes is None:
        per_zone = {z: sum(p.nodes for p in base if p.zone == z) or 1 for z in names}
    else:
        per_zone = {z: nodes for z in names}
    return tuple(Pool(z, itype, per_zone[z]) for z in names)


def _check_zones(names: list[str], region: str | None) -> None:
    """Zone names of one region: the stack's when a stack is given."""
    bad = [z for z in names if not ZONE_NAME.fullmatch(z)]
    if bad:
        fail(f"--zones: '{bad[0][:40]}' is not a zone name; use names such as us-east-1a")
    regions = sorted({z[:-1] for z in names})
    if region is not None and regions != [region]:
        fail(f"--zones: {', '.join(names)} are not all zones of the stack's region {region}; use e.g. {region}a")
    if len(regions) > 1:
        fail(f"--zones: zones of several regions ({', '.join(regions)}); a plan lives in one region")


def _print_report(d: dict, plot: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

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
