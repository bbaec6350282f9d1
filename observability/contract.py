"""The metric contract: every series the alert rules and the dashboard may read, in one place.

Each series is pinned to the version of the exporter that emits it. A rule or panel that reads a
name outside this list, or a deprecated vLLM name, is refused (`check_expr`), because a renamed
series does not fail loudly: the panel shows "No data" and the alert never fires.

Scrape-time labels every series carries (set by the PodMonitor/ServiceMonitor relabelings in
`components/monitoring.py`): `job` (one of `JOBS`), `namespace`, `pod`, and for vLLM `zone`
(from the pod label `llm-serving.io/zone`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# -- pinned versions: in `conventions` (one place). The names below were checked against a real
# /metrics capture of vLLM `conventions.VLLM_VERSION`; those of Envoy Gateway and the inference
# extension's endpoint picker are stable across their v1 releases.
from conventions import VLLM_VERSION  # noqa: E402,F401 (the metric names are pinned to it)

KUBE_PROMETHEUS_STACK_REPO = "https://prometheus-community.github.io/helm-charts"
DCGM_EXPORTER_REPO = "https://nvidia.github.io/dcgm-exporter/helm-charts"


@dataclass(frozen=True)
class Series:
    name: str          # the family name as exposed (histograms: without _bucket/_sum/_count)
    kind: str          # counter | gauge | histogram
    source: str        # a key of JOBS
    unit: str          # what one unit of the value is
    meaning: str


# The `job` label each scrape sets, by source (relabelled in components/monitoring.py).
JOBS = {
    "vllm": "vllm",
    "envoy": "envoy",
    "envoy-gateway": "envoy-gateway",
    "epp": "endpoint-picker",
    "dcgm": "dcgm-exporter",
    "kube-state-metrics": "kube-state-metrics",
}

SERIES: tuple[Series, ...] = (
    # vLLM (V1 engine), labels model_name, engine
    Series("vllm:time_to_first_token_seconds", "histogram", "vllm", "s", "time to first token"),
    Series("vllm:request_time_per_output_token_seconds", "histogram", "vllm", "s",
           "time per output token, per request (the TPOT SLO)"),
    Series("vllm:inter_token_latency_seconds", "histogram", "vllm", "s", "inter-token latency"),
    Series("vllm:e2e_request_latency_seconds", "histogram", "vllm", "s", "end-to-end request latency"),
    Series("vllm:request_queue_time_seconds", "histogram", "vllm", "s", "time waiting before scheduling"),
    Series("vllm:num_requests_running", "gauge", "vllm", "requests", "requests in the running batch"),
    Series("vllm:num_requests_waiting", "gauge", "vllm", "requests", "requests waiting to be scheduled"),
    Series("vllm:kv_cache_usage_perc", "gauge", "vllm", "ratio 0..1", "KV-cache blocks in use"),
    Series("vllm:prompt_tokens_total", "counter", "vllm", "tokens", "prefill tokens processed"),
    Series("vllm:generation_tokens_total", "counter", "vllm", "tokens", "tokens generated"),
    Series("vllm:request_success_total", "counter", "vllm", "requests", "finished requests (finished_reason)"),
    # Envoy proxies (Envoy Gateway data plane), /stats/prometheus on port 19001
    Series("envoy_http_downstream_rq_total", "counter", "envoy", "requests",
           "requests received, per HTTP connection manager (envoy_http_conn_manager_prefix)"),
    Series("envoy_http_downstream_rq_xx", "counter", "envoy", "requests",
           "responses sent, by envoy_response_code_class"),
    # Envoy Gateway's local rate limit filter (stat_prefix http_local_rate_limiter): the 429s it sends.
    Series("envoy_http_local_rate_limiter_http_local_rate_limit_rate_limited", "counter", "envoy", "requests",
           "requests answered 429 by the per-key local rate limit"),
    # Endpoint picker (Gateway API Inference Extension)
    Series("inference_pool_ready_pods", "gauge", "epp", "pods", "ready model-server pods in the pool"),
    # DCGM exporter, labels gpu, UUID, Hostname, modelName
    Series("DCGM_FI_DEV_GPU_UTIL", "gauge", "dcgm", "percent", "GPU utilisation"),
    Series("DCGM_FI_DEV_FB_USED", "gauge", "dcgm", "MiB", "framebuffer memory used"),
    Series("DCGM_FI_DEV_FB_FREE", "gauge", "dcgm", "MiB", "framebuffer memory free"),
    Series("DCGM_FI_DEV_GPU_TEMP", "gauge", "dcgm", "celsius", "GPU temperature"),
    # kube-state-metrics (bundled with kube-prometheus-stack); pod labels allow-listed in the chart
    Series("kube_pod_status_ready", "gauge", "kube-state-metrics", "bool", "pod readiness, by condition"),
    Series("kube_pod_labels", "gauge", "kube-state-metrics", "info",
           "pod labels (label_app_kubernetes_io_name, label_llm_serving_io_role, label_llm_serving_io_zone)"),
)

# Renamed or removed vLLM series, with what replaced them (None: removed, no replacement).
DEPRECATED: dict[str, str | None] = {
    "vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc",
    "vllm:time_per_output_token_seconds": "vllm:inter_token_latency_seconds",
    "vllm:num_requests_swapped": None,
    "vllm:gpu_prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "vllm:gpu_prefix_cache_hits": "vllm:prefix_cache_hits_total",
}
DEPRECATED_PREFIXES = ("vllm:gpu_prefix_cache_",)

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def exposed_names() -> set[str]:
    """Every name a query may select: histogram families expand to their three series."""
    out = set()
    for s in SERIES:
        if s.kind == "histogram":
            out.update(s.name + suffix for suffix in HISTOGRAM_SUFFIXES)
        else:
            out.add(s.name)
    return out


# -- reading names out of PromQL ----------------------------------------------------------------
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
             "unless", "offset", "inf", "nan", "atan2"}
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_BRACES = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_:])\d+(\.\d+)?([eE][+-]?\d+)?")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def series_in(expr: str) -> set[str]:
    """The metric (or recorded series) names a PromQL expression selects.

    Strips strings, label matchers, ranges, grouping label lists and numbers, then keeps the
    identifiers that are not function calls or keywords. Enough for the rules and panels here,
    which a test keeps to plain PromQL.
    """
    text = _STRING.sub('""', expr)
    text = _BRACES.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    names = set()
    for m in _IDENT.finditer(text):
        word = m.group(0)
        rest = text[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in _KEYWORDS or word.startswith("$"):
            continue
        names.add(word)
    return names


def deprecated_reason(name: str) -> str | None:
    base = name
    for suffix in HISTOGRAM_SUFFIXES:
        if base.endswith(suffix) and base[: -len(suffix)] in DEPRECATED:
            base = base[: -len(suffix)]
    if base in DEPRECATED:
        new = DEPRECATED[base]
        return f"{name} is deprecated in vLLM" + (f"; use {new}" if new else " and removed")
    if base.startswith(DEPRECATED_PREFIXES):
        return f"{name} is deprecated in vLLM; use the vllm:prefix_cache_* counters"
    return None


class ContractError(ValueError):
    pass


def check_expr(expr: str, recorded: set[str] = frozenset(), where: str = "expression") -> None:
    """Raise ContractError naming the first series `expr` reads that the contract does not allow.

    `recorded` holds the names of recording rules, which later rules and panels may read.
    """
    allowed = exposed_names() | set(recorded)
    for name in sorted(series_in(expr)):
        reason = deprecated_reason(name)
        if reason:
            raise ContractError(f"{where}: {reason}")
        if name not in allowed:
            raise ContractError(f"{where}: {name} is not in the metric contract (observability/contract.py)")
