"""The /metrics exposition of vLLM 0.29.0 (V1 engine), as an emulated replica serves it.

Family names, types, HELP texts, label names and histogram bucket bounds are those of a real
vLLM 0.29.0 capture (`../shared/samples/vllm-metrics-0.29.0-inferstack.txt`; a test compares
every family here with it). Every series carries `engine` (`"0"`, or each engine's index where
one server fronts several: `render_engines`, which `llmserve emulate` serves) and `model_name`;
every counter and histogram has the `*_created` gauge that prometheus_client adds. The twin fills the families the
simulator can drive; the cache/prefix/multi-modal families stay at zero (no prefix caching in
the simulator), as on a server with those features idle.
"""
from __future__ import annotations

from dataclasses import dataclass

# Bucket layouts, shared by several families in vLLM's own code (vllm/v1/metrics/loggers.py).
_LATENCY_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
              240.0, 480.0, 960.0, 1920.0, 7680.0)
_TTFT_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
           20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_TOKEN_LATENCY_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                    20.0, 40.0, 80.0)
_TOKENS_1_2_5 = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0)
_ITERATION_TOKENS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0)
_PARAMS_N = (1.0, 2.0, 5.0, 10.0, 20.0)

FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
WAITING_REASONS = ("capacity", "deferred")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")


@dataclass(frozen=True)
class Family:
    name: str                         # as exposed (counters with _total)
    kind: str                         # counter | gauge | histogram
    help: str
    buckets: tuple[float, ...] = ()   # histograms: the finite upper bounds
    label: str | None = None          # one extra label beyond engine and model_name
    values: tuple[str, ...] = ()      # that label's values, in exposition order


FAMILIES: tuple[Family, ...] = (
    Family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches."),
    Family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed."),
    Family("vllm:num_requests_waiting_by_reason", "gauge",
           "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; "
           "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). "
           "Sum of all reasons equals vllm:num_requests_waiting.", label="reason", values=WAITING_REASONS),
    Family("vllm:engine_sleep_state", "gauge",
           "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
           "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
           label="sleep_state", values=SLEEP_STATES),
    Family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage."),
    Family("vllm:prefix_cache_queries_total", "counter",
           "Prefix cache queries, in terms of number of queried tokens."),
    Family("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens."),
    Family("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine."),
    Family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed."),
    Family("vllm:prompt_tokens_by_source_total", "counter", "Number of prompt tokens by source.",
           label="source", values=PROMPT_SOURCES),
    Family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed."),
    Family("vllm:request_success_total", "counter", "Count of successfully processed requests.",
           label="finished_reason", values=FINISHED_REASONS),
    Family("vllm:request_prompt_tokens", "histogram", "Number of prefill tokens processed.", _TOKENS_1_2_5),
    Family("vllm:request_generation_tokens", "histogram", "Number of generation tokens processed.", _TOKENS_1_2_5),
    Family("vllm:iteration_tokens_total", "histogram", "Histogram of number of tokens per engine_step.",
           _ITERATION_TOKENS),
    Family("vllm:request_max_num_generation_tokens", "histogram",
           "Histogram of maximum number of requested generation tokens.", _TOKENS_1_2_5),
    Family("vllm:request_params_n", "histogram", "Histogram of the n request parameter.", _PARAMS_N),
    Family("vllm:request_params_max_tokens", "histogram", "Histogram of the max_tokens request parameter.",
           _TOKENS_1_2_5),
    Family("vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.", _TTFT_S),
    Family("vllm:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.",
           _TOKEN_LATENCY_S),
    Family("vllm:request_time_per_output_token_seconds", "histogram",
           "Histogram of time_per_output_token_seconds per request.", _TOKEN_LATENCY_S),
    Family("vllm:e2e_request_latency_seconds", "histogram", "Histogram of e2e request latency in seconds.",
           _LATENCY_S),
    Family("vllm:request_queue_time_seconds", "histogram", "Histogram of time spent in WAITING phase for request.",
           _LATENCY_S),
    Family("vllm:request_inference_time_seconds", "histogram",
           "Histogram of time spent in RUNNING phase for request.", _LATENCY_S),
    Family("vllm:request_prefill_time_seconds", "histogram", "Histogram of time spent in PREFILL phase for request.",
           _LATENCY_S),
    Family("vllm:request_decode_time_seconds", "histogram", "Histogram of time spent in DECODE phase for request.",
           _LATENCY_S),
    Family("vllm:request_prefill_kv_computed_tokens", "histogram",
           "Histogram of new KV tokens computed during prefill (excluding cached tokens).", _TOKENS_1_2_5),
)


# The families a speculative replica and a disaggregated (NixlConnector) replica add, served only by
# those replicas (`render(..., extra=...)`); the aggregated capture has none of them, so their
# names, types, HELP texts and buckets are vLLM's sources' (stored copies of vllm-project/vllm, not
# checked at the v0.29.0 tag): vllm/v1/spec_decode/metrics.py `SpecDecodingProm` (its
# `vllm:spec_decode_num_accepted_tokens_per_pos` is not served: the simulator keeps no
# per-position count) and vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py
# `NixlPromMetrics` (the reader, a decode replica, records the transfers).
SPEC_DECODE_FAMILIES: tuple[Family, ...] = (
    Family("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts."),
    Family("vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens."),
    Family("vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens."),
)
_NIXL_TIME_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
NIXL_FAMILIES: tuple[Family, ...] = (
    Family("vllm:nixl_xfer_time_seconds", "histogram", "Histogram of transfer duration for NIXL KV Cache transfers.",
           _NIXL_TIME_S[1:]),
    Family("vllm:nixl_post_time_seconds", "histogram", "Histogram of transfer post time for NIXL KV Cache transfers.",
           _NIXL_TIME_S),
    Family("vllm:nixl_bytes_transferred", "histogram", "Histogram of bytes transferred per NIXL KV Cache transfers.",
           tuple(float(2 ** (10 + i)) for i in range(1, 25, 2))),
    Family("vllm:nixl_num_descriptors", "histogram", "Histogram of number of descriptors per NIXL  KV Cache transfers.",
           (10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 200.0, 400.0, 1000.0, 2000.0, 4000.0, 10000.0, 20000.0, 50000.0)),
    Family("vllm:nixl_num_failed_transfers_total", "counter", "Number of failed NIXL KV Cache transfers."),
    Family("vllm:nixl_num_failed_notifications_total", "counter", "Number of failed NIXL KV Cache notifications."),
)


def by_name() -> dict[str, Family]:
    return {f.name: f for f in FAMILIES + SPEC_DECODE_FAMILIES + NIXL_FAMILIES}


def _created_name(f: Family) -> str:
    return (f.name.removesuffix("_total") if f.kind == "counter" else f.name) + "_created"


def _fmt(x: float) -> str:
    """prometheus_client's float format: repr, with +Inf spelt out."""
    if x == float("inf"):
        return "+Inf"
    return repr(float(x))


def _labels(base: dict, **extra: str) -> str:
    """Label pairs in name order, as prometheus_client writes them."""
    pairs = sorted({**base, **extra}.items())
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}"


@dataclass
class Histogram:
    """Cumulative bucket counts (one per finite bound, then +Inf), sum and count."""
    counts: list[float]
    total: float
    count: float


def render(model_name: str, values: dict, created_s: float, extra: tuple[Family, ...] = ()) -> str:
    """The text exposition of one engine (`engine="0"`). `values` maps a family name to a number
    (plain families), to {label value: number} (families with a label), or to a Histogram.
    Missing families are 0. `extra`: families served after vLLM's own (a speculative or a
    disaggregated replica's)."""
    return render_engines(model_name, [("0", values, created_s)], extra)


def render_engines(model_name: str, engines: list[tuple[str, dict, float]], extra: tuple[Family, ...] = ()) -> str:
    """The exposition of several engines behind one server, as vLLM serves its data-parallel
    ranks: each family's HELP and TYPE once, then every engine's series, told apart by the
    `engine` label. `engines` holds (engine label, values as in `render`, created time)."""
    lines: list[str] = []
    for f in FAMILIES + tuple(extra):
        lines += [f"# HELP {f.name} {f.help}", f"# TYPE {f.name} {f.kind}"]
        for engine, values, _ in engines:
            lines += _samples(f, {"engine": engine, "model_name": model_name}, values.get(f.name))
        if f.kind in ("counter", "histogram"):
            created = _created_name(f)
            lines += [f"# HELP {created} {f.help}", f"# TYPE {created} gauge"]
            for engine, _, created_s in engines:
                base = {"engine": engine, "model_name": model_name}
                if f.label and f.kind == "counter":
                    lines += [f"{created}{_labels(base, **{f.label: lv})} {_fmt(created_s)}" for lv in f.values]
                else:
                    lines.append(f"{created}{_labels(base)} {_fmt(created_s)}")
    return "\n".join(lines) + "\n"


def _samples(f: Family, base: dict, v) -> list[str]:
    """One engine's sample lines of family f."""
    if f.kind == "histogram":
        h = v if isinstance(v, Histogram) else Histogram([0.0] * (len(f.buckets) + 1), 0.0, 0.0)
        lines = [f"{f.name}_bucket{_labels(base, le=_fmt(bound))} {_fmt(c)}"
                 for bound, c in zip(f.buckets + (float("inf"),), h.counts)]
        return lines + [f"{f.name}_count{_labels(base)} {_fmt(h.count)}", f"{f.name}_sum{_labels(base)} {_fmt(h.total)}"]
    if f.label:
        per = v if isinstance(v, dict) else {}
        return [f"{f.name}{_labels(base, **{f.label: lv})} {_fmt(per.get(lv, 0.0))}" for lv in f.values]
    return [f"{f.name}{_labels(base)} {_fmt(v or 0.0)}"]
