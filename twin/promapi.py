"""A small client of the Prometheus HTTP API (instant queries), and the fleet's series read by
`check` and `calibrate`: per replica (labels zone, pod, as the program's scrape sets them) and
for the whole service, over one window.

The standard library's http.client and pydantic: a fleet's Prometheus is reached through a
port-forward or an in-cluster URL, with no extra client to install. The server is not trusted:
connect and read timeouts and a deadline on the whole answer, a size cap, the answer validated
against the HTTP API's shape, and a figure it sends as NaN, an infinity or not a number is
*unreadable*, which `check` never counts as within the plan. A server that stops answering
part-way fails the whole read (PromError, never a missing figure), and so does one that
restarted between the first query and the last (`read_fleet`). The URL's credentials and secret
query values never reach a message (`inputs.untrusted.redact_url`).
"""
from __future__ import annotations

import base64
import http.client
import ipaddress
import math
import re
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inputs.untrusted import printable, redact_url
from observability import contract
from observability.alerts import Alert
from observability.rules import ENVOY_CLIENT_TRAFFIC, READY_ZONE, statistic_expr

CONNECT_TIMEOUT_S = 5.0      # a port-forward or an in-cluster Service answers a connect in well under 1 s
READ_TIMEOUT_S = 10.0        # between two reads: Prometheus's own query timeout is 2 min, ours are small
DEADLINE_S = 30.0            # the whole answer, however it trickles in (a 1 byte/s body stops here)
MAX_RESPONSE_BYTES = 8 * 1024 * 1024   # an instant vector for a few hundred replicas is tens of KB
MAX_SERIES = 10_000          # series in one answer; a fleet has a few hundred pods at most
_WINDOW = re.compile(r"^[1-9]\d{0,5}(ms|s|m|h)$")
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
VLLM = f'job="{contract.JOBS["vllm"]}"'
RUNTIMEINFO = "/api/v1/status/runtimeinfo"


class PromError(RuntimeError):
    """Prometheus could not be reached, refused a query, or answered what is not the HTTP API's JSON."""


def check_url(url: str) -> str:
    """The base URL without a trailing slash; ValueError naming the fix (credentials redacted)."""
    shown = redact_url(url or "")[:200]
    example = "e.g. http://127.0.0.1:9090"
    try:
        parts = urllib.parse.urlsplit(url or "")
        port = parts.port          # ValueError for a port out of 0-65535 or not a number
    except ValueError as exc:
        raise ValueError(f"'{shown}' is not a URL ({printable(exc, 80)}); {example}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"'{shown}' is not an http(s) URL of a Prometheus server, {example}")
    if port == 0:
        raise ValueError(f"'{shown}': port 0 is not a server's port; {example}")
    host = parts.hostname
    if "[" in parts.netloc.rpartition("@")[2]:      # an IPv6 literal, [::1]
        try:
            ipaddress.IPv6Address(host.split("%")[0])
        except ValueError:
            raise ValueError(f"'{shown}': [{printable(host, 60)}] is not an IPv6 address; {example}") from None
    elif not _HOST.match(host) or len(host) > 253:
        raise ValueError(f"'{shown}': '{printable(host, 60)}' is not a host name or address; {example}")
    if parts.query or parts.fragment or any(c.isspace() for c in parts.path):
        raise ValueError(f"'{shown}' has a query, fragment or space; give the server's base URL, {example}")
    return url.rstrip("/")


def check_window(window: str) -> str:
    if not _WINDOW.match(window or ""):
        raise ValueError(f"'{printable(window, 40)}' is not a Prometheus duration such as 10m, 1h or 30s")
    return window


# -- the HTTP API's answer to an instant query (prometheus/prometheus web/api/v1/api.go, v3) ----------
class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


class _Sample(_Answer):
    metric: dict[str, str]
    value: tuple[float, str]             # [unix time, the sample as text: "1.5", "NaN", "+Inf"]


class _Vector(_Answer):
    resultType: Literal["vector"]
    result: list[_Sample] = Field(max_length=MAX_SERIES)


class _Response(_Answer):
    status: Literal["success", "error"]
    data: _Vector | None = None
    error: str | None = None


class _Runtime(_Answer):
    startTime: str = Field(min_length=1, max_length=64)     # RFC 3339, e.g. 2026-01-05T10:00:00.123Z


class _RuntimeInfo(_Answer):
    status: Literal["success"]
    data: _Runtime


def _abort(conn: http.client.HTTPConnection) -> None:
    """The deadline passed: shut the socket, which wakes a read blocked on a trickling server."""
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _read_body(resp: http.client.HTTPResponse, started: float) -> bytes:
    length = resp.getheader("Content-Length")
    if length and length.isdigit() and int(length) > MAX_RESPONSE_BYTES:
        raise PromError(f"an answer of {int(length):,} bytes; at most {MAX_RESPONSE_BYTES:,} are read")
    chunks, total = [], 0
    while True:
        chunk = resp.read1(65536)       # at most one read of the socket: the deadline is checked between
        if not chunk:
            if time.monotonic() - started >= DEADLINE_S:    # the timer shut the socket: a cut-off answer
                raise TimeoutError
            return b"".join(chunks)
        total += len(chunk)
        if total > MAX_RESPONSE_BYTES:
            raise PromError(f"an answer over {MAX_RESPONSE_BYTES:,} bytes; at most that is read")
        if time.monotonic() - started > DEADLINE_S:
            raise TimeoutError
        chunks.append(chunk)


def _send(url: str, path: str, form: dict | None) -> tuple[int, bytes]:
    """(status, body) of a POST of `form` (a GET without one), within CONNECT/READ timeouts,
    DEADLINE_S in all and MAX_RESPONSE_BYTES."""
    parts = urllib.parse.urlsplit(url)
    headers = {"Accept": "application/json"}
    if form is not None:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username) + ":" + urllib.parse.unquote(parts.password or "")
        headers["Authorization"] = "Basic " + base64.b64encode(user.encode()).decode()
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=CONNECT_TIMEOUT_S,
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=CONNECT_TIMEOUT_S)
    started = time.monotonic()
    timer = threading.Timer(DEADLINE_S, _abort, (conn,))
    timer.daemon = True
    timer.start()
    try:
        conn.connect()
        conn.sock.settimeout(READ_TIMEOUT_S)
        conn.request("GET" if form is None else "POST", (parts.path.rstrip("/") or "") + path,
                     body=None if form is None else urllib.parse.urlencode(form), headers=headers)
        resp = conn.getresponse()
        return resp.status, _read_body(resp, started)
    finally:
        timer.cancel()
        conn.close()


def _call(url: str, path: str, form: dict | None = None) -> tuple[int, bytes]:
    """`_send`, with every way it fails as one PromError naming the server (credentials redacted)."""
    shown = redact_url(url)
    started = time.monotonic()
    try:
        return _send(url, path, form)
    except PromError as exc:
        raise PromError(f"{shown}: {exc}") from None
    except (TimeoutError, socket.timeout):
        raise PromError(f"{shown}: no full answer within {DEADLINE_S:g} s (connect {CONNECT_TIMEOUT_S:g} s, "
                        f"{READ_TIMEOUT_S:g} s between reads); is it a Prometheus?") from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if time.monotonic() - started >= DEADLINE_S:
            raise PromError(f"{shown}: no full answer within {DEADLINE_S:g} s; is it a Prometheus?") from None
        reason = printable(getattr(exc, "strerror", None) or exc or exc.__class__.__name__, 120)
        raise PromError(f"cannot reach Prometheus at {shown}: {reason}") from None


def query(url: str, expr: str) -> list[tuple[dict, float]]:
    """An instant query at now: (labels, value) per series. Values are floats as Prometheus sent
    them, NaN and infinities included (the caller decides what an unreadable figure means)."""
    shown = redact_url(url)
    status, body = _call(url, "/api/v1/query", {"query": expr})
    try:
        answer = _Response.model_validate_json(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "the answer"
        raise PromError(f"{shown} did not answer as the Prometheus HTTP API does (HTTP {status}; {where}: "
                        f"{printable(err['msg'], 100)}); is the URL a Prometheus?") from None
    if answer.status != "success" or answer.data is None:
        raise PromError(f"{shown} refused the query (HTTP {status}: {printable(answer.error or 'no error given', 200)})")
    return [(s.metric, _number(s.value[1])) for s in answer.data.result]


def start_time(url: str) -> str:
    """When the Prometheus at `url` started, as its /api/v1/status/runtimeinfo says (Prometheus
    2.14 and later): the same instant for as long as the server runs, another after a restart."""
    shown = redact_url(url)
    status, body = _call(url, RUNTIMEINFO)
    try:
        return printable(_RuntimeInfo.model_validate_json(body).data.startTime, 64)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "the answer"
        raise PromError(f"{shown} did not answer {RUNTIMEINFO} as Prometheus does (HTTP {status}; {where}: "
                        f"{printable(err['msg'], 100)}): without its start time a restart while it is read "
                        "cannot be told") from None


def _number(text: str) -> float:
    """Prometheus's text of a sample ("1.5", "NaN", "+Inf"); what is not a number reads as NaN (unknown)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


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
    unreadable: list[str] = field(default_factory=list)    # figures Prometheus sent as NaN, inf or text

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


RATES = ("qps", "prompt_tokens_per_s", "generation_tokens_per_s")    # a rate is never NaN: 0 when idle


def _reading(value: float, what: str, unreadable: list[str], nan_is_none: bool = True) -> float | None:
    """A finite, non-negative value; NaN is None where Prometheus means "no requests" (0/0), and
    anything else (an infinity, NaN for a rate, a negative figure, text) is listed as unreadable."""
    if math.isfinite(value) and value >= 0:
        return value
    if math.isnan(value) and nan_is_none:
        return None
    unreadable.append(f"{what} = {value}")
    return None


def read_fleet(url: str, window: str, slo_alerts: Sequence[Alert] = ()) -> FleetLive:
    """Everything `check` and `calibrate` read, over the last `window`; for each latency alert
    in `slo_alerts`, the statistic it reads (`observability.rules.statistic_expr`).

    Between the server's start time read before the first query and after the last: a
    Prometheus that restarted in between (or another answering at its address) gave figures
    from two runs of a server, one of which missed scrapes and lost its rule state (and, without
    persistent storage, its whole head), so they are refused rather than judged."""
    before = start_time(url)
    live = _read_fleet(url, window, slo_alerts)
    after = start_time(url)
    if after != before:
        raise PromError(f"{redact_url(url)} restarted while it was read (it had started at {before}, and now says "
                        f"{after}): its answers span two runs of the server, so nothing is judged")
    return live


def _read_fleet(url: str, window: str, slo_alerts: Sequence[Alert]) -> FleetLive:
    reps: dict[tuple[str, str], ReplicaLive] = {}
    bad: list[str] = []
    for field_name, expr in _per_replica_queries(window).items():
        for labels, value in query(url, expr):
            key = (printable(labels.get("zone", ""), 80), printable(labels.get("pod", ""), 120))
            rep = reps.setdefault(key, ReplicaLive(*key))
            reading = _reading(value, f"{'/'.join(key)} {field_name}", bad, nan_is_none=field_name not in RATES)
            if reading is not None:
                setattr(rep, field_name, reading)
    offered = query(url, f"sum (rate(envoy_http_downstream_rq_total{{{ENVOY_CLIENT_TRAFFIC}}}[{window}]))")
    ready = query(url, READY_ZONE) or query(url, f"count by (zone) (up{{{VLLM}}} == 1)")
    ready_by_zone = {}
    for labels, value in ready:
        reading = _reading(value, f"ready replicas in {labels.get('zone', '')}", bad, nan_is_none=False)
        if reading is not None:
            ready_by_zone[printable(labels.get("zone", ""), 80)] = reading
    return FleetLive(
        window=window, replicas=sorted(reps.values(), key=lambda r: (r.zone, r.pod)),
        offered_qps=_reading(offered[0][1], "offered load", bad, nan_is_none=False) if offered else None,
        ready_by_zone=ready_by_zone, unreadable=bad,
        slo_latency_s={a.name: _first(query(url, statistic_expr(a.family, a.statistic, window, selector=VLLM)),
                                      f"{a.statistic} of {a.family} ({a.name})", bad)
                       for a in slo_alerts},
    )


def _first(result: list[tuple[dict, float]], what: str, unreadable: list[str]) -> float | None:
    return _reading(result[0][1], what, unreadable) if result else None
