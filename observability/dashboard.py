"""The serving dashboard, built with grafana-foundation-sdk from the plan.

SLO lines, the sized capacity and the capacity left after losing a zone are drawn as threshold
lines whose values come from the plan: each line an alert compares with is that alert's
`threshold` (`alerts.Alert`, found by the figure it guards), and a latency panel shows the
statistic its SLO is stated at.
Panels read the recorded series of `rules.py` where one exists, so the dashboard and the alerts
show the same numbers. Each panel states its unit.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common, dashboard as dashboard_models

from sizing.planner import Plan

from . import contract
from .alerts import Alert
from .rules import (
    GATEWAY_5XX_RATIO, GATEWAY_429_RATIO, KV_POD, OFFERED_LOAD, READY_SERVICE, READY_ZONE, RECORDED_QUANTILES,
    AlertPolicy, Thresholds, gauge_series, plan_alerts, quantile_series, rate_series, slo_series,
)

# kube-prometheus-stack provisions its Prometheus data source with this uid.
DATASOURCE = dashboard_models.DataSourceRef(type_val="prometheus", uid="prometheus")
SLO_RED, PLAN_ORANGE, BASE = "red", "orange", "green"
# Grafana takes a dashboard uid of at most 40 characters (Grafana HTTP API, Dashboard API: "The uid
# can have a maximum length of 40 characters"; provisioning logs "uid too long, max 40 characters"
# and skips the dashboard). A stack name may take 88 (settings.names.MAX_STACK_NAME).
MAX_DASHBOARD_UID = 40


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    title: str
    unit: str                                  # a Grafana unit id
    queries: tuple[Query, ...]
    description: str
    lines: tuple[tuple[float, str], ...] = ()  # (value, color) drawn as dashed threshold lines
    minimum: float | None = 0
    maximum: float | None = None


def _latency(short: str, title: str, line: float | None, line_words: str, statistic: str = "p95") -> PanelSpec:
    """p95 and p50 over all replicas and p95 per zone; first the SLO's own statistic when the
    rules do not record it (a mean SLO: the mean the latency alert reads)."""
    queries = (Query(quantile_series(short, "service", 0.95), "p95 all"),
               Query(quantile_series(short, "service", 0.5), "p50 all"),
               Query(quantile_series(short, "zone", 0.95), "p95 {{zone}}"))
    recorded = {f"p{round(q * 100)}" for q in RECORDED_QUANTILES}
    if statistic not in recorded:
        queries = (Query(slo_series(short, statistic), f"{statistic} all"),) + queries
    return PanelSpec(title, "s", queries, line_words,
                     lines=((line, SLO_RED),) if line is not None else ())


def latency_panels(t: Thresholds, guard: dict[str, Alert]) -> list[PanelSpec]:
    """The SLO lines are the latency alerts' thresholds, drawn over the statistic they read."""
    ttft, tpot = guard["ttft_slo_s"], guard["tpot_slo_s"]
    at = "" if ttft.statistic == "p95" else f" at the {ttft.statistic}"     # p95: the panel's first line
    return [
        _latency("ttft", f"{ttft.statistic} time to first token", ttft.threshold,
                 f"Red line: the {ttft.threshold:g} s TTFT SLO{at} (alert {ttft.name}).", ttft.statistic),
        _latency("tpot", f"{tpot.statistic} time per output token", tpot.threshold,
                 f"vllm:request_time_per_output_token_seconds. Red line: the {tpot.threshold * 1e3:g} ms TPOT SLO{at}.",
                 tpot.statistic),
        _latency("itl", "inter-token latency", tpot.threshold,
                 "Gaps between tokens of one request; red line: the TPOT SLO."),
        _latency("queue", "queue time", ttft.threshold,
                 f"Wait before a request is scheduled; it counts towards TTFT (red line: TTFT SLO). "
                 f"The plan expects {t.queue_s * 1e3:.0f} ms on average after losing {t.lost_domain or 'nothing'}."),
        _latency("e2e", "end-to-end latency", None, "Whole request, first byte in to last token out."),
    ]


def fleet_panels(plan: Plan, t: Thresholds, guard: dict[str, Alert], inference_extension: bool) -> list[PanelSpec]:
    kv, queue, replicas = guard["kv_cache_usage"], guard["in_flight_per_replica"], guard["replicas"]
    after_loss = guard.get("capacity_after_zone_loss_qps")
    capacity_lines = ((t.capacity_qps, SLO_RED),)
    if after_loss is not None:
        capacity_lines = ((after_loss.threshold, PLAN_ORANGE),) + capacity_lines
    ready_queries = (Query(READY_SERVICE, "ready, all zones"), Query(READY_ZONE, "ready {{zone}}"))
    if inference_extension:
        ready_queries += (Query("sum by (name) (inference_pool_ready_pods)", "endpoint picker: {{name}}"),)
    return [
        PanelSpec("KV-cache usage per replica", "percentunit", (Query(KV_POD, "{{zone}} {{pod}}"),),
                  f"Red line: {kv.threshold:.0%} (alert {kv.name}).", lines=((kv.threshold, SLO_RED),), maximum=1),
        PanelSpec("running and waiting requests per replica", "suffix: requests",
                  (Query(gauge_series("running", "pod"), "running {{pod}}"),
                   Query(gauge_series("waiting", "pod"), "waiting {{pod}}")),
                  f"Orange line: the {queue.threshold:g} requests in flight per replica the plan expects "
                  f"at its worst case (alert {queue.name}).", lines=((queue.threshold, PLAN_ORANGE),)),
        PanelSpec("request rate against capacity", "reqps",
                  (Query(OFFERED_LOAD, "offered at the gateway"),
                   Query(rate_series("requests", "service"), "finished by vLLM"),
                   Query(rate_series("requests", "zone"), "finished {{zone}}")),
                  f"Red line: the sized capacity, {t.capacity_qps:g} QPS. "
                  + (f"Orange line: the {after_loss.threshold:g} QPS left after losing {t.lost_domain} "
                     "(N+1)." if after_loss is not None else "The plan has no failure domain to lose."),
                  lines=capacity_lines),
        PanelSpec("tokens per second", "suffix: tokens/s",
                  (Query(rate_series("generation_tokens", "service"), "generated"),
                   Query(rate_series("prompt_tokens", "service"), "prompt (prefill)")),
                  "Throughput over all replicas."),
        PanelSpec("ready replicas per zone", "suffix: replicas", ready_queries,
                  f"Orange line: the {replicas.threshold:g} replicas the plan runs, "
                  + ", ".join(f"{n} in {z}" for z, n in plan.replicas_by_zone.items() if n) + "." + _groups(plan),
                  lines=((replicas.threshold, PLAN_ORANGE),)),
    ]


def gpu_and_gateway_panels(guard: dict[str, Alert]) -> list[PanelSpec]:
    e5xx, e429 = guard["gateway_5xx_ratio"], guard["gateway_429_ratio"]
    return [
        PanelSpec("GPU utilisation", "percent", (Query("avg by (hostname) (DCGM_FI_DEV_GPU_UTIL)", "{{hostname}}"),),
                  "Mean over the GPUs of each node (DCGM exporter).", maximum=100),
        PanelSpec("GPU memory used", "percentunit",
                  (Query("sum by (hostname) (DCGM_FI_DEV_FB_USED) / (sum by (hostname) (DCGM_FI_DEV_FB_USED) "
                         "+ sum by (hostname) (DCGM_FI_DEV_FB_FREE))", "{{hostname}}"),),
                  "Framebuffer memory in use per node; vLLM reserves most of it for the KV cache at start.",
                  maximum=1),
        PanelSpec("GPU temperature", "celsius", (Query("max by (hostname) (DCGM_FI_DEV_GPU_TEMP)", "{{hostname}}"),),
                  "Hottest GPU per node."),
        PanelSpec("gateway 429 and 5xx share", "percentunit",
                  (Query(GATEWAY_429_RATIO, "429 rate limited"), Query(GATEWAY_5XX_RATIO, "5xx")),
                  f"Orange line: {e429.threshold:.0%} rate limited ({e429.name}); "
                  f"red line: {e5xx.threshold:.0%} 5xx ({e5xx.name}).",
                  lines=((e5xx.threshold, SLO_RED), (e429.threshold, PLAN_ORANGE))),
    ]


def panel_specs(plan: Plan, policy: AlertPolicy = AlertPolicy(), inference_extension: bool = True) -> list[PanelSpec]:
    t = Thresholds.from_plan(plan)
    guard = {a.guards: a for a in plan_alerts(plan, policy)}      # each alert by the figure it guards
    return latency_panels(t, guard) + fleet_panels(plan, t, guard, inference_extension) + gpu_and_gateway_panels(guard)


def _panel(spec: PanelSpec) -> timeseries.Panel:
    steps = [dashboard_models.Threshold(value=None, color=BASE)]
    steps += [dashboard_models.Threshold(value=v, color=c) for v, c in sorted(spec.lines)]
    panel = (timeseries.Panel().title(spec.title).description(spec.description).unit(spec.unit)
             .datasource(DATASOURCE).span(12).height(8)
             .thresholds(dashboard_builders.ThresholdsConfig()
                         .mode(dashboard_models.ThresholdsMode.ABSOLUTE).steps(steps))
             .thresholds_style(common_builders.GraphThresholdsStyleConfig().mode(
                 common.GraphTresholdsStyleMode.DASHED if spec.lines else common.GraphTresholdsStyleMode.OFF))
             .legend(common_builders.VizLegendOptions().display_mode(common.LegendDisplayMode.LIST)
                     .placement(common.LegendPlacement.BOTTOM).show_legend(True)))
    if spec.minimum is not None:
        panel = panel.min(spec.minimum)
    if spec.maximum is not None:
        panel = panel.max(spec.maximum)
    for i, q in enumerate(spec.queries):
        panel = panel.with_target(prometheus.Dataquery().expr(q.expr).legend_format(q.legend).ref_id(chr(ord("A") + i)))
    return panel


def dashboard_uid(stack: str) -> str:
    """`llm-serving-<stack>`; past 40 characters, cut and ended with 8 hex digits of the stack
    name's SHA-256, so two long stack names still get two dashboards."""
    uid = f"llm-serving-{stack}"
    if len(uid) <= MAX_DASHBOARD_UID:
        return uid
    return f"{uid[:MAX_DASHBOARD_UID - 9]}-{hashlib.sha256(stack.encode()).hexdigest()[:8]}"


def build_dashboard(plan: Plan, stack: str, recorded: set[str], policy: AlertPolicy = AlertPolicy(),
                    inference_extension: bool = True) -> dict:
    """The dashboard as Grafana JSON (a dict). `recorded`: the rule names panels may read."""
    specs = panel_specs(plan, policy, inference_extension)
    board = (dashboard_builders.Dashboard(f"LLM serving: {stack}").uid(dashboard_uid(stack))
             .tags(["llm-serving", stack]).refresh("30s").time("now-6h", "now").timezone("utc")
             .description(f"{plan.request.model} on {plan.replicas} x {_layout(plan)} {plan.instance.id} replicas; "
                          "lines come from the sizing plan."))
    for spec in specs:
        for q in spec.queries:
            contract.check_expr(q.expr, recorded, where=f"panel '{spec.title}'")
            contract.check_labels(q.expr, q.legend, where=f"panel '{spec.title}'")
        board = board.with_panel(_panel(spec))
    return json.loads(json.dumps(board.build(), cls=JSONEncoder))


def dashboard_json(board: dict) -> str:
    return json.dumps(board, indent=2, sort_keys=True) + "\n"


def _layout(plan: Plan) -> str:
    n = plan.nodes_per_replica
    return f"TP={plan.tp}" if n == 1 else f"TP={plan.tp} x PP={n} ({n}-node)"


def _groups(plan: Plan) -> str:
    """What "ready" means when a replica is a group of nodes."""
    if plan.nodes_per_replica == 1:
        return ""
    return (f" A replica is a group of {plan.nodes_per_replica} nodes: a ready group is its ready leader "
            "(ready only while every rank runs), so this counts groups, not pods.")
