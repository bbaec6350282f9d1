"""What each emulated engine counts, live, and the /metrics text of the whole fleet.

The families, HELP texts and buckets are the twin's (`twin.vllm_metrics`, held equal to a real
vLLM 0.29.0 capture by tests/test_twin_exposition.py); the per-request observations at a request's
end are the twin's too (`twin.timeline.request_observations`). One server fronts every replica, so
each replica is one `engine` label value (its index), as vLLM labels its data-parallel engines.
A replica that is down serves no series; when it is back its counters start again from zero, as a
new pod's do. Counted live: time to first token and prompt tokens at the first token, generation
tokens as they are sent, preemptions from the engine; `iteration_tokens_total` stays empty, as in
the twin (no per-step record).
"""
from __future__ import annotations

import bisect

from twin import vllm_metrics as vm
from twin.timeline import request_observations

FAMILIES = vm.by_name()
HISTOGRAMS = [f for f in vm.FAMILIES if f.kind == "histogram"]


class EngineMetrics:
    """One engine's counters and histograms since it (re)started at `created_s` (Unix time)."""

    def __init__(self, created_s: float):
        self.created_s = created_s
        self.prompt_tokens = self.generation_tokens = self.succeeded = 0.0
        self._buckets = {f.name: [0.0] * (len(f.buckets) + 1) for f in HISTOGRAMS}
        self._sums = {f.name: 0.0 for f in HISTOGRAMS}

    def observe(self, name: str, value: float, weight: float = 1.0) -> None:
        family = FAMILIES[name]
        self._buckets[name][bisect.bisect_left(family.buckets, value)] += weight    # le is inclusive
        self._sums[name] += value * weight

    def first_token(self, r) -> None:
        """A request's prefill is done and its first token out (times in engine seconds)."""
        self.prompt_tokens += r.prompt
        self.observe("vllm:time_to_first_token_seconds", r.t_first - r.arrival)

    def finished(self, r) -> None:
        self.succeeded += 1
        for name, pairs in request_observations(r).items():
            for value, weight in pairs:
                self.observe(name, value, weight)

    def values(self, running: int, waiting: int, kv_usage: float, preemptions: int) -> dict:
        """The input of `twin.vllm_metrics.render_engines` for this engine now."""
        out: dict = {
            "vllm:num_requests_running": float(running), "vllm:num_requests_waiting": float(waiting),
            "vllm:num_requests_waiting_by_reason": {"capacity": float(waiting), "deferred": 0.0},
            "vllm:engine_sleep_state": {"awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0},
            "vllm:kv_cache_usage_perc": kv_usage,
            "vllm:num_preemptions_total": float(preemptions),
            "vllm:prompt_tokens_total": self.prompt_tokens,
            "vllm:prompt_tokens_by_source_total": {"local_compute": self.prompt_tokens},
            "vllm:generation_tokens_total": self.generation_tokens,
            "vllm:request_success_total": {"length": self.succeeded},
        }
        for f in HISTOGRAMS:
            cumulative, total = [], 0.0
            for c in self._buckets[f.name]:
                total += c
                cumulative.append(total)
            out[f.name] = vm.Histogram(cumulative, self._sums[f.name], total)
        return out
