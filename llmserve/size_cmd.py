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
from .errors import check_output_file, fail, writing
from .size_flags import FLAGS, named, request_body
from .stack_arg import load


def size(
    model: Optional[str] = typer.Option(None, help="Model key or Hugging Face id, e.g. llama-3-70b, deepseek-ai/DeepSeek-R1."),
    model_config: Optional[str] = typer.Option(None, "--model-config", help="A local config.json to size (--model: its name)."),
    layout: Optional[str] = typer.Option(None, help="tp, dp-ep (data-parallel attention + expert parallelism; MoE) or tp-ep (TP attention + expert parallelism; MoE)."),
    gpu: Optional[str] = typer.Option(None, help="GPU key (h100-sxm, h200, b200, a100-40gb, l40s); picks its node type."),
    instance: Optional[str] = typer.Option(None, help="Instance type, e.g. p5.48xlarge (overrides --gpu)."),
    weights: Optional[str] = typer.Option(None, help="Weight precision: fp8, bf16 (fp16 = bf16-sized), fp4."),
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help="KV-cache precision: fp8, bf16."),
    tp: Optional[int] = typer.Option(None, help="Tensor-parallel degree (default: the planner picks)."),
    qps: Optional[float] = typer.Option(None, help="Open-loop load, requests per second."),
    concurrency: Optional[int] = typer.Option(None, help="Closed-loop load: concurrent clients."),
    input_tokens: Optional[str] = typer.Option(None, "--input-tokens", help="Prompt tokens: 1000, or p50=800,p95=3000,max=7000."),
    output_tokens: Optional[str] = typer.Option(None, "--output-tokens", help="Output tokens: 300, or p50=250,p95=700,max=1000."),
    lengths: Optional[Path] = typer.Option(None, help="Observed lengths: CSV or JSONL, input_tokens and output_tokens per request."),
    max_model_len: Optional[int] = typer.Option(None, "--max-model-len", help="Longest request served (default: from the lengths)."),
    shared_prefix_tokens: Optional[int] = typer.Option(None, "--shared-prefix-tokens", help="Prompt tokens all requests share."),
    prefix_hit_fraction: Optional[float] = typer.Option(None, "--prefix-hit-fraction", help="Share of prompt tokens cached."),
    ttft_slo: Optional[float] = typer.Option(None, "--ttft-slo", help="TTFT SLO in seconds (at --slo-statistic)."),
    tpot_slo: Optional[float] = typer.Option(None, "--tpot-slo", help="TPOT SLO in seconds (at --slo-statistic)."),
    slo_statistic: Optional[str] = typer.Option(None, "--slo-statistic",
                                                help="mean, p50, p90, p95 or p99: the SLOs hold at this statistic "
                                                     "(default: the stack's, else p95)."),
    replicas: Optional[int] = typer.Option(None, help="Evaluate exactly this many replicas at the load (no planning)."),
    profile: Optional[str] = typer.Option(None, help="Efficiency profile: seed, calibrated or measured."),
    gpu_hour_price: Optional[float] = typer.Option(None, "--gpu-hour-price", help="$ per GPU-hour (default: instance price / GPUs)."),
    zones: Optional[str] = typer.Option(None, help="Zones: a count (2) or names (us-east-1a,us-east-1b); one node each."),
    nodes_per_zone: Optional[int] = typer.Option(None, "--nodes-per-zone", help="Nodes per zone with --zones."),
    mig: Optional[str] = typer.Option(None, help="A MIG slice per replica, e.g. 3g.40gb (docs/mig.md)."),
    stack: Optional[str] = typer.Option(None, help="Take the workload, model and pools from stacks/Pulumi.STACK.yaml."),
    config: Optional[Path] = options.CONFIG,
    as_json: bool = options.JSON,
    plot: Optional[Path] = typer.Option(None, help="Write a PNG: TTFT and TPOT against QPS."),
    sweep: bool = typer.Option(False, help="Rank every (instance, layout, GPUs, weights) by cost per 1M output tokens."),
) -> None:
    from offline.collector import paused_gc

    if plot is not None:
        check_output_file("--plot", plot, ".png")
    with paused_gc():    # the settings' models, the plan and the report: see paused_gc
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
    from sizing.planner import plan
    from sizing.workload import SizingError

    try:
        return plan(req.plan_request())
    except SizingError as exc:
        fail(named(sizing_problem(exc), _given(), source))


def _show(result, as_json: bool, plot: Path | None) -> None:
    """The plan as JSON or as the report, and the latency plot when asked for."""
    from sizing.report import plan_to_dict
    if plot is not None:
        from .plots import plot_latency_vs_qps
        with writing("--plot", plot):
            plot_latency_vs_qps(result, plot)
    data = plan_to_dict(result)
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        from .size_view import print_report
        print_report(data, plot)


def register(app: typer.Typer) -> None:
    app.command("size", help=__doc__)(size)
