"""A disaggregated run (simulator.disagg) laid on the twin's time grid, as `timeline.build` lays
an aggregated one: one `ReplicaTimeline` per prefill and per decode replica, with vLLM's gauges
(KV-cache usage counts the KV held for transfers, as vLLM's block pool does), the request
families on the decode replicas (where requests finish and the client's first token comes
from), vLLM's spec-decode counters on a speculative decode pool, and the NixlConnector's
families (`vllm_metrics.NIXL_FAMILIES`) on every replica of both pools, filled on the decode
replicas, the readers that record them: each completed transfer's time and bytes when it ends,
each failed KV load when it fails. The prefill replicas' request families stay at zero (their
one-token stages are not the client's requests).
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from types import SimpleNamespace

from simulator.disagg import DisaggConfig, DisaggResult, simulate_disaggregated

from . import vllm_metrics as vm
from .timeline import GRID_S, ReplicaTimeline, _accumulate, _add, _cumulative, _fill_requests, _observe, fill_speculative

XFER_TIME, POST_TIME, XFER_BYTES, DESCRIPTORS, FAILED, FAILED_NOTIFICATIONS = (f.name for f in vm.NIXL_FAMILIES)


@dataclass
class DisaggTimeline:
    config: DisaggConfig
    result: DisaggResult
    end_s: float
    replicas: list[ReplicaTimeline]          # prefill replicas, then decode replicas
    offered: list[float]                     # cumulative requests reaching the gateway (as `Timeline`'s)
    answered_5xx: list[float]                # lost, or failed by kv_load_failure_policy fail
    answered_2xx: list[float]

    def index(self, t: float) -> int:
        points = len(self.replicas[0].up)
        return max(0, min(int(t / GRID_S), points - 1))


def build_disaggregated(config: DisaggConfig) -> DisaggTimeline:
    samples: list[tuple[float, list[tuple[int, int, float]]]] = []

    def sample(t, pre, dec) -> None:
        samples.append((t, [(len(r.running), len(r.waiting), r.kv_used() / r.kv_cap) for r in pre + dec]))

    result = simulate_disaggregated(config, on_arrival=sample)
    points = int(math.ceil(max(config.workload.duration_s, result.end_s) / GRID_S)) + 1
    specs = list(config.prefill.replicas) + list(config.decode.replicas)
    reps = [ReplicaTimeline(s.name, s.zone, f"vllm-{s.name}-twin", [True] * points, {}, {}, families=vm.NIXL_FAMILIES)
            for s in specs]
    _fill_gauges(reps, samples, _down_windows(config, result), points)
    decode = reps[len(config.prefill.replicas):]
    _fill_requests(decode, result, points)
    _fill_requests(reps[:len(config.prefill.replicas)], SimpleNamespace(requests=[]), points)   # all at zero
    if config.spec_draft_tokens > 0:
        fill_speculative(decode, result.requests, config.spec_draft_tokens, points)
    _fill_nixl(reps, result, config, points)
    offered, fivexx, twoxx = ([0.0] * points for _ in range(3))
    for r in result.requests:
        _add(offered, r.arrival, 1.0)
        if r.lost:
            _add(fivexx, r.arrival if r.t_done is None else r.t_done, 1.0)
        elif r.t_done is not None:
            _add(twoxx, r.t_done, 1.0)
    for series in (offered, fivexx, twoxx):
        _accumulate(series)
    return DisaggTimeline(config, result, (points - 1) * GRID_S, reps, offered, fivexx, twoxx)


def _down_windows(config: DisaggConfig, result: DisaggResult) -> dict[str, tuple[float, float]]:
    """Replica name -> (down from, back at) for the zone loss per pool and the prefill replica lost."""
    out: dict[str, tuple[float, float]] = {}
    fail = config.failure
    if fail is not None:
        for pool in (config.prefill, config.decode):
            if pool.role in config.failure_pools:
                for s in pool.replicas:
                    if fail.hits(s):
                        out[s.name] = (fail.start_s, fail.end_s if fail.end_s is not None else math.inf)
    if config.prefill_loss is not None and result.prefill_lost is not None:
        out[result.prefill_lost] = (config.prefill_loss.start_s, math.inf)
    return out


def _fill_gauges(reps: list[ReplicaTimeline], samples, down: dict, points: int) -> None:
    times = [t for t, _ in samples]
    for ri, rep in enumerate(reps):
        running, waiting, kv = [0.0] * points, [0.0] * points, [0.0] * points
        lo, hi = down.get(rep.name, (math.inf, math.inf))
        for k in range(points):
            t = k * GRID_S
            j = bisect.bisect_right(times, t) - 1
            if j >= 0:
                run, wait, usage = samples[j][1][ri]
                running[k], waiting[k], kv[k] = float(run), float(wait), usage
            if lo <= t < hi:
                rep.up[k] = False
                running[k] = waiting[k] = kv[k] = 0.0
        rep.gauges = {"vllm:num_requests_running": running, "vllm:num_requests_waiting": waiting,
                      "vllm:kv_cache_usage_perc": kv}


def _fill_nixl(reps: list[ReplicaTimeline], result: DisaggResult, config: DisaggConfig, points: int) -> None:
    """vLLM's xfer time is the RDMA copy alone (NIXL's telemetry `xferDuration`): the transfer less
    its fixed per-request cost (handshake, metadata, notification)."""
    families = vm.by_name()
    index = {rep.name: rep for rep in reps}
    hist: dict[str, dict] = {rep.name: {} for rep in reps}
    failed = {rep.name: [0.0] * points for rep in reps}
    for t, name, seconds, tokens in result.transfers:
        _observe(hist[name], families[XFER_TIME], t, max(0.0, seconds - config.transfer_fixed_s), 1.0, points)
        _observe(hist[name], families[XFER_BYTES], t, tokens * config.kv_bytes_per_token, 1.0, points)
    for t, name in result.failures:
        _add(failed[name], t, 1.0)
    for name, rep in index.items():
        _accumulate(failed[name])
        rep.counters[FAILED] = failed[name]
        rep.counters[FAILED_NOTIFICATIONS] = [0.0] * points
        rep.histograms.update({fam: _cumulative(rows) for fam, rows in hist[name].items()})
