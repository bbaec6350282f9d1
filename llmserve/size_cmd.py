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
from .serving_flags import (DECODE_REPLICAS, DECODE_TP, FIELD_FLAGS, PREFILL_REPLICAS, PREFILL_TP, SERVING_MODE,
                            serving_fields)
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
    speculative: Optional[str] = typer.Option(None, "--speculative", help="Speculative decoding: eagle3, mtp, ngram or draft (with --acceptance-rate)."),
    draft_tokens: Optional[int] = typer.Option(None, "--draft-tokens", help="Drafts per step, k (default: the plan picks k for its batch)."),
    acceptance_rate: Optional[float] = typer.Option(None, "--acceptance-rate", help="Per-token acceptance measured on this workload, 0 < a < 1 (docs/speculative.md)."),
    draft_model: Optional[str] = typer.Option(None, "--draft-model", help="The drafter: a catalog model (draft) or the EAGLE-3 head's checkpoint (eagle3)."),
    serving_mode: Optional[str] = SERVING_MODE,
    prefill_replicas: Optional[int] = PREFILL_REPLICAS,
    prefill_tp: Optional[int] = PREFILL_TP,
    decode_replicas: Optional[int] = DECODE_REPLICAS,
    decode_tp: Optional[int] = DECODE_TP,
) -> None:
    from offline.collector import paused_gc

    if plot is not None:
        check_output_file("--plot", plot, ".png")
    serving = _serving(serving_mode, sweep, {"--prefill-replicas": prefill_replicas, "--prefill-tp": prefill_tp,
                                             "--decode-replicas": decode_replicas, "--decode-tp": decode_tp})
    with paused_gc():    # the settings' models, the plan and the report: see paused_gc
        loaded = load(stack, config) if stack is not None or config is not None else None
        source = loaded.source if loaded is not None else None
        req = _request(loaded, _given(), source, fit=not sweep)
        spec = _speculative_request(speculative, draft_tokens, acceptance_rate, draft_model, sweep)
        if sweep:
            from .sweep_view import show_sweep
            show_sweep(req.plan_request(), as_json, serving.get("serving_mode", "aggregated"))
            return
        _show(_plan(req, source, spec, serving), as_json, plot)


def _serving(serving_mode: str | None, sweep: bool, layout: dict) -> dict:
    """The serving-mode flags as PlanRequest fields (llmserve/serving_flags.py); the sweep plans its own layouts."""
    serving = serving_fields(serving_mode, layout)
    if sweep and "pool_layout" in serving:
        fail("--prefill-replicas: the sweep plans its own layouts; drop the layout or size without --sweep")
    return serving


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


def _plan(req, source: str | None, spec=None, serving: dict | None = None):
    import dataclasses

    from settings import sizing_problem
    from sizing.planner import plan
    from sizing.workload import SizingError

    request = req.plan_request()
    if spec is not None:
        request = dataclasses.replace(request, speculative=spec)
    try:
        return plan(dataclasses.replace(request, **(serving or {})))
    except SizingError as exc:
        if exc.field in SPECULATIVE_OPTIONS:
            fail(f"{SPECULATIVE_OPTIONS[exc.field]}: {exc}")
        if exc.field in FIELD_FLAGS and serving:   # the serving-mode flags set no settings key: name the flag
            fail(f"{FIELD_FLAGS[exc.field]}: {exc}")
        fail(named(sizing_problem(exc), _given(), source))


# The speculative request's fields and the options that set them (a SizingError names the field).
SPECULATIVE_OPTIONS = {"speculative": "--speculative", "speculative.method": "--speculative",
                       "speculative.draft_tokens": "--draft-tokens", "speculative.acceptance_rate": "--acceptance-rate",
                       "speculative.draft_model": "--draft-model"}


def _speculative_request(method, draft_tokens, acceptance_rate, draft_model, sweep: bool):
    """`--speculative ...` as the plan's SpeculativeRequest (None without it), checked before planning."""
    values = {"--draft-tokens": draft_tokens, "--acceptance-rate": acceptance_rate, "--draft-model": draft_model}
    if method is None:
        given = [name for name, value in values.items() if value is not None]
        if given:
            fail(f"{given[0]}: needs --speculative METHOD (eagle3, mtp, ngram or draft)")
        return None
    from sizing.roles import SpeculativeRequest
    from sizing.speculative import check_request
    from sizing.workload import SizingError

    if sweep:
        fail("--speculative: the sweep ranks plans without speculation; size one plan to see it")
    spec = SpeculativeRequest(method, draft_tokens, acceptance_rate, draft_model)
    try:
        check_request(spec)
    except SizingError as exc:
        fail(f"{SPECULATIVE_OPTIONS[exc.field]}: {exc}")
    return spec


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
