"""A small client of the Prometheus HTTP API (instant queries), and the fleet's series read by
`check` and `calibrate`: per replica (labels zone, pod, as the program's scrape sets them) and
for the whole service, over one window.

Only the standard library: a fleet's Prometheus is reached through a port-forward or an
in-cluster URL, with no extra client to install.
"""
from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field

from observability import contract
from observability.alerts import Alert
from observability.rules import ENVOY_CLIENT_TRAFFIC, READY_ZONE, statistic_expr

TIMEOUT_S = 15.0
_URL = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+(:\d+)?(/[^\s?#]*)?$")
_WINDOW = re.compile(r"^\d+(ms|s|m|h)$")
VLLM = f'job="{contract.JOBS["vllm"]}"'


class PromError(RuntimeError):
    """Prometheus could not be reached or refused a query."""


def check_url(url: str) -> str:
    """The base URL without a trailing slash; ValueError naming the fix when it is not one."""
    if not _URL.match(url or ""):
        raise ValueError(f"'{url}' is not an http(s) URL of a Prometheus server, e.g. http://127.0.0.1:9090")
    return url.rstrip("/")


def check_window(window: str) -> str:
    if not _WINDOW.match(window or ""):
        raise ValueError(f"'{window}' is not a Prometheus duration such as 10m, 1h or 30s")
    return window


def query(url: str, expr: str) -> list[tuple[dict, float]]:
    """An instant query at now: (labels, value) per series; NaN values are dropped."""
    data = urllib.parse.urlencode({"query": expr}).encode()
    req = urllib.request.Request(f"{url}/api/v1/query", data=data,
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            body = json.load(resp)
    except urllib.error.HTTPError as exc:
        raise PromError(f"{url} refused the query ({exc.code}): {expr}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise PromError(f"cannot reach Prometheus at {url}: {reason}") from None
    if body.get("status") != "success":
        raise PromError(f"{url}: {body.get('error', 'query failed')}: {expr}")
    out = []
    for item in body["data"]["result"]:
        value = float(item["value"][1])
        if not math.isnan(value):
            out.append((item["metric"], value))
    return out


@dataclass
class ReplicaLive:
    zone: str
    pod: str
    qps: float = 0.0
    prompt_tokens_per_s: float = 0.0
    generation_tokens_per_s: float = 0.0
    ttft_mean_s: float | None = None
    tpot_mean_s: float | None = None
    prefill_mean_s: float | None = None
    ttft_p95_s: float | None = None
    tpot_p95_s: float | None = None
    kv_usage_avg: float | None = None
    kv_usage_max: float | None = None
    running_avg: float | None = None
    waiting_avg: float | None = None

    @property
    def in_flight_avg(self) -> float | None:
        if self.running_avg is None:
            return None
        return self.running_avg + (self.waiting_avg or 0.0)


@dataclass
class FleetLive:
    window: str
    replicas: list[ReplicaLive]
    offered_qps: float | None          # at the gateway; None when no Envoy series
    ready_by_zone: dict[str, float]
    # The service's latency at each SLO's statistic, by the name of the alert that reads it.
    slo_latency_s: dict[str, float | None] = field(default_factory=dict)

    @property
    def served_qps(self) -> float:
        return sum(r.qps for r in self.replicas)

    @property
    def load_qps(self) -> float:
        return self.offered_qps if self.offered_qps is not None else self.served_qps


def _per_replica(family: str, statistic: str, w: str) -> str:
    return statistic_expr(family, statistic, w, by=("zone", "pod"), selector=VLLM)


def _per_replica_queries(w: str) -> dict[str, str]:
    ttft, tpot = "vllm:time_to_first_token_seconds", "vllm:request_time_per_output_token_seconds"
    return {
        "qps": f"sum by (zone, pod) (rate(vllm:request_success_total{{{VLLM}}}[{w}]))",
        "prompt_tokens_per_s": f"sum by (zone, pod) (rate(vllm:prompt_tokens_total{{{VLLM}}}[{w}]))",
        "generation_tokens_per_s": f"sum by (zone, pod) (rate(vllm:generation_tokens_total{{{VLLM}}}[{w}]))",
        "ttft_mean_s": _per_replica(ttft, "mean", w), "tpot_mean_s": _per_replica(tpot, "mean", w),
        "prefill_mean_s": _per_replica("vllm:request_prefill_time_seconds", "mean", w),
        "ttft_p95_s": _per_replica(ttft, "p95", w), "tpot_p95_s": _per_replica(tpot, "p95", w),
        "kv_usage_avg": f"avg by (zone, pod) (avg_over_time(vllm:kv_cache_usage_perc{{{VLLM}}}[{w}]))",
        "kv_usage_max": f"max by (zone, pod) (max_over_time(vllm:kv_cache_usage_perc{{{VLLM}}}[{w}]))",
        "running_avg": f"avg by (zone, pod) (avg_over_time(vllm:num_requests_running{{{VLLM}}}[{w}]))",
        "waiting_avg": f"avg by (zone, pod) (avg_over_time(vllm:num_requests_waiting{{{VLLM}}}[{w}]))",
    }


def read_fleet(url: str, window: str, slo_alerts: Sequence[Alert] = ()) -> FleetLive:
    """Everything `check` and `calibrate` read, over the last `window`; for each latency alert
    in `slo_alerts`, the statistic it reads (`observability.rules.statistic_expr`)."""
    reps: dict[tuple[str, str], ReplicaLive] = {}
    for field_name, expr in _per_replica_queries(window).items():
        for labels, value in query(url, expr):
            key = (labels.get("zone", ""), labels.get("pod", ""))
            rep = reps.setdefault(key, ReplicaLive(*key))
            setattr(rep, field_name, value)
    offered = query(url, f"sum (rate(envoy_http_downstream_rq_total{{{ENVOY_CLIENT_TRAFFIC}}}[{window}]))")
    ready = query(url, READY_ZONE) or query(url, f"count by (zone) (up{{{VLLM}}} == 1)")
    return FleetLive(
        window=window, replicas=sorted(reps.values(), key=lambda r: (r.zone, r.pod)),
        offered_qps=offered[0][1] if offered else None,
        ready_by_zone={labels.get("zone", ""): value for labels, value in ready},
        slo_latency_s={a.name: _first(query(url, statistic_expr(a.family, a.statistic, window, selector=VLLM)))
                       for a in slo_alerts},
    )


def _first(result: list[tuple[dict, float]]) -> float | None:
    return result[0][1] if result else None
