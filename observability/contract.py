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
    labels: tuple[str, ...] = ()   # the exporter's own labels (pinned; () = not pinned yet)


# Labels the exporters put on their series, pinned to the versions above. vLLM 0.29.0: checked
# against a real /metrics capture (tests/test_metric_contract.py). DCGM exporter 4.8.x renders
# `gpu, UUID, pci_bus_id, device, modelName, hostname` (+ MIG `GPU_I_PROFILE, GPU_I_ID`):
# NVIDIA/dcgm-exporter PR #655 (merged 2026-05-12, in 4.5.1-4.8.0 and later) renamed `Hostname`
# to `hostname` in `internal/pkg/rendermetrics`; a query grouping by `Hostname` collapses every
# GPU into one series. In Kubernetes mode it adds the owning pod's `namespace, pod, container`.
VLLM_LABELS = ("model_name", "engine")
DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname", "GPU_I_PROFILE", "GPU_I_ID",
               "DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod")
# Labels every scraped series gets from Prometheus and the monitors' relabelings
# (components/monitoring.py): `zone` on vLLM series only.
SCRAPE_LABELS = ("job", "instance", "namespace", "pod", "container", "service", "endpoint")

# The `job` label each scrape sets, by source (relabelled in components/monitoring.py).
JOBS = {
    "vllm": "vllm",
    "envoy": "envoy",
    "envoy-gateway": "envoy-gateway",
    "epp": "endpoint-picker",
    "dcgm": "dcgm-exporter",
    "kube-state-metrics": "kube-state-metrics",
    "nccl-transport": "nccl-transport",
}

SERIES: tuple[Series, ...] = (
    # The multi-node leaders' transport check (deployment/nccl_transport.py): NCCL's own "Using
    # network <name>" line (NVIDIA/nccl src/init.cc, INFO(NCCL_INIT, "Using network %s", ...)).
    Series("llm_serving_nccl_network", "gauge", "nccl-transport", "1",
           "1, labelled with the network NCCL chose at start: Libfabric (aws-ofi-nccl, EFA) or Socket (TCP)",
           ("network",)),
    # vLLM (V1 engine), labels model_name, engine
    Series("vllm:time_to_first_token_seconds", "histogram", "vllm", "s", "time to first token", VLLM_LABELS),
    Series("vllm:request_time_per_output_token_seconds", "histogram", "vllm", "s",
           "time per output token, per request (the TPOT SLO)", VLLM_LABELS),
    Series("vllm:inter_token_latency_seconds", "histogram", "vllm", "s", "inter-token latency", VLLM_LABELS),
    Series("vllm:e2e_request_latency_seconds", "histogram", "vllm", "s", "end-to-end request latency", VLLM_LABELS),
    Series("vllm:request_queue_time_seconds", "histogram", "vllm", "s", "time waiting before scheduling", VLLM_LABELS),
    Series("vllm:num_requests_running", "gauge", "vllm", "requests", "requests in the running batch", VLLM_LABELS),
    Series("vllm:num_requests_waiting", "gauge", "vllm", "requests", "requests waiting to be scheduled", VLLM_LABELS),
    Series("vllm:kv_cache_usage_perc", "gauge", "vllm", "ratio 0..1", "KV-cache blocks in use", VLLM_LABELS),
    Series("vllm:prompt_tokens_total", "counter", "vllm", "tokens", "prefill tokens processed", VLLM_LABELS),
    Series("vllm:generation_tokens_total", "counter", "vllm", "tokens", "tokens generated", VLLM_LABELS),
    Series("vllm:request_success_total", "counter", "vllm", "requests", "finished requests (finished_reason)",
           VLLM_LABELS + ("finished_reason",)),
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
    # DCGM exporter (labels: DCGM_LABELS)
    Series("DCGM_FI_DEV_GPU_UTIL", "gauge", "dcgm", "percent", "GPU utilisation", DCGM_LABELS),
    Series("DCGM_FI_DEV_FB_USED", "gauge", "dcgm", "MiB", "framebuffer memory used", DCGM_LABELS),
    Series("DCGM_FI_DEV_FB_FREE", "gauge", "dcgm", "MiB", "framebuffer memory free", DCGM_LABELS),
    Series("DCGM_FI_DEV_GPU_TEMP", "gauge", "dcgm", "celsius", "GPU temperature", DCGM_LABELS),
    # kube-state-metrics (bundled with kube-prometheus-stack); pod labels allow-listed in the chart
    Series("kube_pod_status_ready", "gauge", "kube-state-metrics", "bool", "pod readiness, by condition"),
    Series("kube_pod_labels", "gauge", "kube-state-metrics", "info",
           "pod labels (label_app_kubernetes_io_name, label_llm_serving_io_role, label_llm_serving_io_zone)"),
    # kube-state-metrics v2.19.1 (chart 8.2.0, pinned by kube-prometheus-stack 88.2.0), the HPAs KEDA drives:
    # internal/store/horizontalpodautoscaler.go L149, L309, L328 (labels namespace, horizontalpodautoscaler)
    Series("kube_horizontalpodautoscaler_spec_max_replicas", "gauge", "kube-state-metrics", "replicas",
           "an HPA's maxReplicas"),
    Series("kube_horizontalpodautoscaler_status_current_replicas", "gauge", "kube-state-metrics", "replicas",
           "pods an HPA's target has now"),
    Series("kube_horizontalpodautoscaler_status_desired_replicas", "gauge", "kube-state-metrics", "replicas",
           "pods the HPA last asked for"),
)

# vLLM series only a speculative or disaggregated plan's replicas expose, so only those plans'
# rules read them (observability/pd_alerts.py); not in the aggregated capture, so checked against
# vLLM's sources (stored copies of vllm-project/vllm, not at the v0.29.0 tag):
# - vllm/v1/spec_decode/metrics.py `SpecDecodingProm`: counters vllm:spec_decode_num_drafts,
#   vllm:spec_decode_num_draft_tokens, vllm:spec_decode_num_accepted_tokens (prometheus_client
#   exposes counters with `_total`), registered only when a speculative config is set;
# - vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py `NixlPromMetrics`: histograms
#   vllm:nixl_xfer_time_seconds (per-transfer RDMA copy), vllm:nixl_bytes_transferred, counters
#   vllm:nixl_num_failed_transfers, vllm:nixl_num_failed_notifications; recorded by the reader, the
#   decode replica (`NixlConnectorWorker`: `xfer_stats.record_transfer`, `record_failed_transfer`).
PD_SERIES: tuple[Series, ...] = (
    Series("vllm:spec_decode_num_drafts_total", "counter", "vllm", "drafts",
           "speculative steps, per sequence", VLLM_LABELS),
    Series("vllm:spec_decode_num_draft_tokens_total", "counter", "vllm", "tokens", "draft tokens proposed",
           VLLM_LABELS),
    Series("vllm:spec_decode_num_accepted_tokens_total", "counter", "vllm", "tokens", "draft tokens accepted",
           VLLM_LABELS),
    Series("vllm:nixl_xfer_time_seconds", "histogram", "vllm", "s", "one KV transfer's RDMA copy (NIXL)",
           VLLM_LABELS),
    Series("vllm:nixl_bytes_transferred", "histogram", "vllm", "bytes", "one KV transfer's bytes (NIXL)",
           VLLM_LABELS),
    Series("vllm:nixl_num_failed_transfers_total", "counter", "vllm", "transfers", "failed NIXL KV transfers",
           VLLM_LABELS),
    Series("vllm:nixl_num_failed_notifications_total", "counter", "vllm", "notifications",
           "failed NIXL notifications", VLLM_LABELS),
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
    for s in SERIES + PD_SERIES:
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


_GROUP_LABELS = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
_MATCHER_LABELS = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_LEGEND_LABELS = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def labels_in(expr: str, legend: str = "") -> set[str]:
    """Labels an expression groups by or matches on, and a legend shows."""
    found = {label.strip() for group in _GROUP_LABELS.findall(expr) for label in group.split(",") if label.strip()}
    for braces in _BRACES.findall(_STRING.sub('""', expr)):
        found.update(_MATCHER_LABELS.findall(braces))
    found.update(_LEGEND_LABELS.findall(legend))
    return found


def check_labels(expr: str, legend: str = "", where: str = "expression") -> None:
    """Raise ContractError when an expression over pinned exporter series groups by, matches on
    or shows a label those series do not carry (a renamed label fails as silently as a renamed
    series: every series collapses into one)."""
    series = [_series_by_name().get(_family(n)) for n in series_in(expr)]
    pinned = [s for s in series if s is not None and s.labels]
    if not pinned or len(pinned) != len(series):
        return                                  # recorded series or unpinned ones: not judged here
    allowed = set(SCRAPE_LABELS) | {"le", "zone"} | {label for s in pinned for label in s.labels}
    unknown = sorted(labels_in(expr, legend) - allowed)
    if unknown:
        exporters = ", ".join(sorted({s.source for s in pinned}))
        raise ContractError(f"{where}: label {', '.join(unknown)} is not on the {exporters} series it reads "
                            f"(observability/contract.py pins their labels)")


def _series_by_name() -> dict[str, Series]:
    return {s.name: s for s in SERIES + PD_SERIES}


def _family(name: str) -> str:
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in _series_by_name():
            return name[: -len(suffix)]
    return name


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
