"""Latency statistics of a simulation, overall and per window around a zone failure.

Per request: TTFT (arrival to first token), TPOT (mean time per output token after the first, as
vLLM counts it), queue time (arrival to first scheduled on the replica that served it) and
end-to-end latency. Goodput is the share of requests that meet both SLOs. Windows group requests
by arrival: before the failure, during it, and after the zone is back.
"""
from __future__ import annotations

import math

from .loop import SimResult
from .workload import Request

LATENCIES = ("ttft_ms", "tpot_ms", "queue_ms", "e2e_ms")


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def distribution(values: list[float]) -> dict:
    v = sorted(values)
    if not v:
        return {"mean": None, "p50": None, "p90": None, "p95": None, "p99": None}
    return {"mean": round(sum(v) / len(v), 3), "p50": round(percentile(v, 0.50), 3),
            "p90": round(percentile(v, 0.90), 3),
            "p95": round(percentile(v, 0.95), 3), "p99": round(percentile(v, 0.99), 3)}


def latencies(r: Request) -> tuple[float, float | None, float, float]:
    """(ttft, tpot or None for one-token answers, queue, e2e), in ms."""
    ttft = r.t_first - r.arrival
    tpot = (r.t_done - r.t_first) / (r.out - 1) if r.out > 1 else None
    return 1e3 * ttft, None if tpot is None else 1e3 * tpot, 1e3 * (r.t_sched - r.arrival), 1e3 * (r.t_done - r.arrival)


def summarize(requests: list[Request], ttft_slo_s: float, tpot_slo_s: float) -> dict:
    served = [r for r in requests if not r.lost and r.t_done is not None]
    cols: dict[str, list[float]] = {k: [] for k in LATENCIES}
    good = 0
    for r in served:
        ttft, tpot, queue, e2e = latencies(r)
        cols["ttft_ms"].append(ttft)
        if tpot is not None:
            cols["tpot_ms"].append(tpot)
        cols["queue_ms"].append(queue)
        cols["e2e_ms"].append(e2e)
        if ttft <= 1e3 * ttft_slo_s and (tpot is None or tpot <= 1e3 * tpot_slo_s):
            good += 1
    out = {k: distribution(v) for k, v in cols.items()}
    out["goodput"] = round(good / len(requests), 4) if requests else None
    out["requests"] = len(requests)
    out["requests_lost"] = len(requests) - len(served)
    return out


def windows(result: SimResult) -> dict | None:
    fail = result.config.failure
    if fail is None:
        return None
    cfg = result.config
    duration = cfg.workload.duration_s
    back = fail.end_s if fail.end_s is not None else math.inf
    bounds = {"before": (0.0, fail.start_s), "during": (fail.start_s, min(back, duration))}
    if fail.end_s is not None and fail.end_s < duration:     # no "after" when it comes back past the end
        bounds["after"] = (fail.end_s, duration)
    out = {}
    for name, (lo, hi) in bounds.items():
        reqs = [r for r in result.requests if lo <= r.arrival < (back if name == "during" else hi)]
        out[name] = {"from_s": round(lo, 3), "to_s": round(hi, 3), **summarize(reqs, cfg.ttft_slo_s, cfg.tpot_slo_s)}
    return out


def replica_usage(result: SimResult) -> list[dict]:
    return replicas_usage(result.replicas)


def replicas_usage(replicas) -> list[dict]:
    rows = []
    for rep in replicas:
        rows.append({
            "name": rep.name, "zone": rep.zone,
            # busy: share of its up time spent stepping (continuous batching steps whenever any
            # sequence runs, so this saturates early; the mean batch says how full the steps are)
            "utilization": round(min(1.0, rep.busy_s / rep.up_s), 4) if rep.up_s else 0.0,
            "requests": rep.served,
            "served_qps": round(rep.served / rep.up_s, 4) if rep.up_s else 0.0,
            "prefill_share": round(rep.prefill_s / rep.busy_s, 4) if rep.busy_s else 0.0,
            "mean_running": round(rep.batch_s / rep.busy_s, 2) if rep.busy_s else 0.0,
            "up_s": round(rep.up_s, 3),
            "preemptions": rep.preemptions,
        })
    return rows


def throughput(result: SimResult) -> dict:
    """Requests and output tokens served per second from t = 0 to the last completion (a closed
    loop's or a burst's figures: no warm-up is left out)."""
    served = [r for r in result.requests if not r.lost and r.t_done is not None]
    span = result.end_s
    return {"requests_per_s": round(len(served) / span, 4) if span > 0 else None,
            "output_tokens_per_s": round(sum(r.out for r in served) / span, 2) if span > 0 else None}


def to_dict(result: SimResult) -> dict:
    cfg = result.config
    w = cfg.workload
    clients = w.arrivals in ("closed-loop", "burst")
    out = {
        "qps": None if clients else w.qps, "duration_s": None if w.arrivals == "burst" else w.duration_s,
        "router": cfg.router, "arrivals": w.arrivals,
        **({"clients": w.clients} if w.arrivals == "closed-loop" else {}),
        **({"burst": w.clients} if w.arrivals == "burst" else {}),
        "lengths": w.lengths, "seed": w.seed,
        "max_num_batched_tokens": cfg.max_num_batched_tokens, "max_num_seqs": cfg.max_num_seqs,
        "kv_capacity_tokens": cfg.kv_capacity_tokens,
        "slo": {"ttft_ms": 1e3 * cfg.ttft_slo_s, "tpot_ms": 1e3 * cfg.tpot_slo_s},
        **summarize(result.requests, cfg.ttft_slo_s, cfg.tpot_slo_s),
        "requests_retried": result.retried,
        "replicas": replica_usage(result),
        "simulated_until_s": round(result.end_s, 3),
        "request_overhead_ms": round(1e3 * cfg.request_overhead_s, 6),
    }
    if clients:    # measured from t = 0: the first wave's start is in the figures
        out["measured_from_s"] = 0.0
        out["throughput"] = throughput(result)
    if w.arrivals == "burst":
        out["makespan_s"] = round(result.end_s, 3)
    if cfg.failure is not None:
        f = cfg.failure
        out["failure"] = {"zone": f.zone, "start_s": f.start_s, "end_s": f.end_s,
                          **({"node": f.node} if f.node is not None else {}),
                          "replicas_lost": [r.name for r in cfg.replicas if f.hits(r)]}
        out["windows"] = windows(result)
    if cfg.spec_draft_tokens > 0:
        out["speculative"] = speculative_usage(result.replicas, cfg.spec_draft_tokens, cfg.spec_acceptance_rate)
    return out


def speculative_usage(replicas, draft_tokens: int, acceptance_rate: float) -> dict:
    """vLLM's spec-decode counters summed over the replicas, and what they give: the acceptance
    (accepted / draft tokens, as vLLM's docs compute it) and the mean acceptance length
    (1 + accepted / drafts), beside the formula's (1 - a^(k+1)) / (1 - a)."""
    drafts = sum(r.spec_drafts for r in replicas)
    draft_tokens_total = sum(r.spec_draft_tokens for r in replicas)
    accepted = sum(r.spec_accepted for r in replicas)
    a, k = acceptance_rate, draft_tokens
    return {"draft_tokens": k, "acceptance_rate": a, "num_drafts": drafts, "num_draft_tokens": draft_tokens_total,
            "num_accepted_tokens": accepted,
            "acceptance": round(accepted / draft_tokens_total, 4) if draft_tokens_total else None,
            "mean_acceptance_length": round(1 + accepted / drafts, 4) if drafts else None,
            "mean_acceptance_length_planned": round((1 - a ** (k + 1)) / (1 - a), 4)}


def disagg_to_dict(result) -> dict:
    """A disaggregated run (simulator.disagg): the request figures as `to_dict`'s, then each pool
    (its replicas, engine arguments and goodput on the SLO it owns: TTFT for prefill, TPOT for
    decode) and the KV transfer (completed and failed, what the failure policy did)."""
    cfg, w = result.config, result.config.workload
    requests = result.requests
    out = {
        "qps": w.qps, "duration_s": w.duration_s, "router": cfg.router, "arrivals": w.arrivals,
        "lengths": w.lengths, "seed": w.seed, "serving_mode": "disaggregated",
        "slo": {"ttft_ms": 1e3 * cfg.ttft_slo_s, "tpot_ms": 1e3 * cfg.tpot_slo_s},
        **summarize(requests, cfg.ttft_slo_s, cfg.tpot_slo_s),
        "requests_failed": len(result.failed),
        "requests_retried": result.retried,
        "pools": {pool.role: _pool_dict(pool, reps, requests, cfg)
                  for pool, reps in ((cfg.prefill, result.prefill), (cfg.decode, result.decode))},
        "kv_transfer": {
            "transfers": len(result.transfer_s),
            "transfer_ms": distribution([1e3 * x for x in result.transfer_s]),
            "planned_transfer_ms": round(cfg.planned_transfer_ms, 3),
            "kv_lease_s": cfg.kv_lease_s,
            "kv_load_failure_policy": cfg.kv_load_failure_policy,
            "failed_transfers": result.failed_transfers,
            "recomputed_prefills": result.recomputed_prefills,
            "kv_expired": result.kv_expired,
        },
        "simulated_until_s": round(result.end_s, 3),
    }
    if cfg.prefill_loss is not None:
        out["prefill_lost"] = {"replica": result.prefill_lost, "start_s": cfg.prefill_loss.start_s}
    if cfg.failure is not None:
        f = cfg.failure
        out["failure"] = {"zone": f.zone, "start_s": f.start_s, "end_s": f.end_s, "pools": list(cfg.failure_pools),
                          "replicas_lost": [r.name for pool in (cfg.prefill, cfg.decode) if pool.role in cfg.failure_pools
                                            for r in pool.replicas if f.hits(r)]}
    if cfg.spec_draft_tokens > 0:
        out["speculative"] = speculative_usage(result.decode, cfg.spec_draft_tokens, cfg.spec_acceptance_rate)
    return out


def _pool_dict(pool, reps, requests, cfg) -> dict:
    served = [r for r in requests if not r.lost and r.t_done is not None]
    if pool.role == "prefill":
        good = sum(1 for r in served if r.t_first - r.arrival <= cfg.ttft_slo_s)
    else:
        good = sum(1 for r in served if r.out <= 1 or (r.t_done - r.t_first) / (r.out - 1) <= cfg.tpot_slo_s)
    return {"replicas": replicas_usage(reps), "max_num_batched_tokens": pool.max_num_batched_tokens,
            "max_num_seqs": pool.max_num_seqs, "kv_capacity_tokens": pool.kv_capacity_tokens,
            "slo": "ttft" if pool.role == "prefill" else "tpot",
            "goodput": round(good / len(requests), 4) if requests else None}
